// Package memstore is Funnel's in-memory store: sharded, exact under
// contention, and free of allocations when deciding for a key it already
// holds.
//
// Per key it keeps one int64, the theoretical arrival time. A key whose TAT
// has passed is the same as an absent key, so such keys are forgotten: on
// access, by a background sweep (one goroutine per store, never one per key),
// and first when the store is full and must evict. Memory therefore follows
// the keys that are active now.
package memstore

import (
	"context"
	"hash/maphash"
	"math/bits"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

var _ funnel.Store = (*Store)(nil)

// Options configure a Store. The zero value is a good default.
type Options struct {
	// Now returns the current time in nanoseconds since the Unix epoch. Nil
	// means the real clock, read monotonically: wall-clock steps after the
	// store starts do not move it. Tests pass a fake clock here.
	Now func() int64
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Zero means 16 per CPU, at least 64.
	Shards int
	// MaxKeys bounds the number of keys held; zero means no bound. When a new
	// key arrives at a full shard, keys whose bucket is already full again are
	// dropped first; otherwise, of a sample of keys, the one whose TAT is
	// nearest to now (the least harmful to forget) is evicted. The bound is
	// split evenly between shards, so the store never holds more than MaxKeys.
	MaxKeys int
	// SweepInterval is how often a background goroutine drops keys whose TAT
	// has passed. Zero means one second; a negative value disables the sweep
	// (keys are then dropped only on access, by Sweep, or by eviction).
	SweepInterval time.Duration
}

// evictionSample is how many keys a full shard looks at to choose a victim.
const evictionSample = 8

// Store is an in-memory funnel.Store. It is safe for concurrent use. Build
// one with New and stop its sweep with Close.
type Store struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	now    func() int64 // nil: the monotonic real clock below
	start  time.Time
	base   int64
	perCap int // keys per shard; 0 means unbounded
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

type shard struct {
	mu      sync.Mutex
	tats    map[string]int64 // key -> theoretical arrival time
	peak    int              // largest len(tats) since the map was last rebuilt
	evicted uint64
	expired uint64
	_       [48]byte // keep neighbouring shards' locks on separate cache lines
}

// New returns a Store configured by opts. Call Close when done with it.
func New(opts Options) *Store {
	n := opts.Shards
	if n <= 0 {
		n = 16 * runtime.GOMAXPROCS(0)
		if n < 64 {
			n = 64
		}
	}
	if opts.MaxKeys > 0 && n > opts.MaxKeys {
		n = opts.MaxKeys
	}
	n = 1 << bits.Len(uint(n-1)) // round up to a power of two
	if opts.MaxKeys > 0 && n > opts.MaxKeys {
		n >>= 1
	}
	s := &Store{
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		seed:   maphash.MakeSeed(),
		now:    opts.Now,
		start:  time.Now(),
		done:   make(chan struct{}),
	}
	s.base = s.start.UnixNano()
	if opts.MaxKeys > 0 {
		s.perCap = opts.MaxKeys / n
	}
	for i := range s.shards {
		s.shards[i].tats = make(map[string]int64)
	}
	every := opts.SweepInterval
	if every == 0 {
		every = time.Second
	}
	if every > 0 {
		s.wg.Add(1)
		go s.sweepEvery(every)
	}
	return s
}

// Close stops the background sweep. The store keeps answering after Close.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.done) })
	s.wg.Wait()
	return nil
}

// Now returns the store's current time in nanoseconds since the Unix epoch.
func (s *Store) Now() int64 {
	if s.now != nil {
		return s.now()
	}
	return s.base + int64(time.Since(s.start))
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

// Throttle applies a request for quantity units of key under p at the
// store's current time. It never blocks on I/O and ignores ctx.
func (s *Store) Throttle(_ context.Context, key string, p gcra.Params, quantity int64) (funnel.Result, error) {
	now := s.Now()
	sh := s.shard(key)
	sh.mu.Lock()
	tat, ok := sh.tats[key]
	newTAT, r, err := gcra.Decide(now, tat, p, quantity)
	if err == nil && r.Allowed && newTAT != tat {
		if ok {
			sh.tats[key] = newTAT
		} else if newTAT > now {
			sh.insert(key, newTAT, now, s.perCap)
		}
	}
	sh.mu.Unlock()
	if err != nil {
		return funnel.Result{}, err
	}
	return funnel.ResultOf(p, r), nil
}

// TTL returns the time until key's bucket is full again, and false when the
// key holds no state. It never fails.
func (s *Store) TTL(_ context.Context, key string) (time.Duration, bool, error) {
	now := s.Now()
	tat, ok := s.tatAt(key, now)
	if !ok {
		return 0, false, nil
	}
	return time.Duration(tat - now), true, nil
}

// TAT returns key's theoretical arrival time and true, or 0 and false when
// the key holds no state at the store's current time.
func (s *Store) TAT(key string) (int64, bool) {
	return s.tatAt(key, s.Now())
}

func (s *Store) tatAt(key string, now int64) (int64, bool) {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tat, ok := sh.tats[key]
	if !ok || tat <= now {
		return 0, false
	}
	return tat, true
}

// insert adds key, which is not in the shard. The caller holds the lock.
func (sh *shard) insert(key string, tat, now int64, perCap int) {
	if perCap > 0 && len(sh.tats) >= perCap {
		sh.makeRoom(now)
	}
	// The caller's string may alias a larger buffer (a network read, say):
	// keep a copy of just the key.
	sh.tats[strings.Clone(key)] = tat
	if len(sh.tats) > sh.peak {
		sh.peak = len(sh.tats)
	}
}

// makeRoom frees at least one slot in a full shard: it drops the expired keys
// of a sample, or else the sampled key whose TAT is nearest to now.
func (sh *shard) makeRoom(now int64) {
	victim, min, seen, dropped := "", int64(0), 0, false
	for k, t := range sh.tats { // map iteration starts at a random place
		if t <= now {
			delete(sh.tats, k)
			sh.expired++
			dropped = true
		} else if victim == "" || t < min {
			victim, min = k, t
		}
		if seen++; seen == evictionSample {
			break
		}
	}
	if !dropped && victim != "" {
		delete(sh.tats, victim)
		sh.evicted++
	}
}

// Reset forgets key and reports whether it held state. It never fails.
func (s *Store) Reset(_ context.Context, key string) (bool, error) {
	now := s.Now()
	sh := s.shard(key)
	sh.mu.Lock()
	tat, ok := sh.tats[key]
	delete(sh.tats, key)
	sh.mu.Unlock()
	return ok && tat > now, nil
}

// Sweep drops every key whose TAT has passed and returns how many it dropped.
// A shard that has shrunk to a quarter of its peak is rebuilt, so that memory
// is given back after a burst of keys. The background sweep calls Sweep; it
// is exported for tests and for callers that disable the background sweep.
func (s *Store) Sweep() int {
	now := s.Now()
	total := 0
	for i := range s.shards {
		total += s.shards[i].sweep(now)
	}
	return total
}

func (sh *shard) sweep(now int64) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	for k, t := range sh.tats {
		if t <= now {
			delete(sh.tats, k)
			n++
		}
	}
	sh.expired += uint64(n)
	if sh.peak >= 1024 && len(sh.tats) <= sh.peak/4 {
		sh.rebuild()
	}
	return n
}

// rebuild copies the shard into right-sized structures (Go maps never shrink).
func (sh *shard) rebuild() {
	tats := make(map[string]int64, len(sh.tats))
	for k, t := range sh.tats {
		tats[k] = t
	}
	sh.tats, sh.peak = tats, len(tats)
}

func (s *Store) sweepEvery(every time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Stats are counters of a Store.
type Stats struct {
	// Keys is the number of keys held, including any whose TAT has passed
	// but that have not been dropped yet.
	Keys int
	// Expired counts keys dropped because their TAT had passed.
	Expired uint64
	// Evicted counts keys dropped to respect MaxKeys while still limited.
	Evicted uint64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += len(sh.tats)
		st.Expired += sh.expired
		st.Evicted += sh.evicted
		sh.mu.Unlock()
	}
	return st
}
