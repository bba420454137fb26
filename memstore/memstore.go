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
	idx     map[string]uint32 // key -> slot in tats
	tats    []int64
	free    []uint32
	peak    int // largest len(idx) since the map was last rebuilt
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
		s.shards[i].idx = make(map[string]uint32)
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
	i, ok := sh.idx[key]
	var tat int64
	if ok {
		tat = sh.tats[i]
	}
	newTAT, r, err := gcra.Decide(now, tat, p, quantity)
	if err == nil && r.Allowed {
		switch {
		case ok:
			sh.tats[i] = newTAT
		case newTAT > now:
			sh.insert(key, newTAT, now, s.perCap)
		}
	}
	sh.mu.Unlock()
	if err != nil {
		return funnel.Result{}, err
	}
	return funnel.ResultOf(p, r), nil
}

// TAT returns key's theoretical arrival time and true, or 0 and false when
// the key holds no state at the store's current time.
func (s *Store) TAT(key string) (int64, bool) {
	now := s.Now()
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.idx[key]
	if !ok || sh.tats[i] <= now {
		return 0, false
	}
	return sh.tats[i], true
}

// insert adds key, which is not in the shard. The caller holds the lock.
func (sh *shard) insert(key string, tat, now int64, perCap int) {
	if perCap > 0 && len(sh.idx) >= perCap {
		sh.makeRoom(now)
	}
	var i uint32
	if n := len(sh.free); n > 0 {
		i = sh.free[n-1]
		sh.free = sh.free[:n-1]
		sh.tats[i] = tat
	} else {
		i = uint32(len(sh.tats))
		sh.tats = append(sh.tats, tat)
	}
	// The caller's string may alias a larger buffer (a network read, say):
	// keep a copy of just the key.
	sh.idx[strings.Clone(key)] = i
	if len(sh.idx) > sh.peak {
		sh.peak = len(sh.idx)
	}
}

// makeRoom frees at least one slot in a full shard: it drops the expired keys
// of a sample, or else the sampled key whose TAT is nearest to now.
func (sh *shard) makeRoom(now int64) {
	victim, min, seen, dropped := "", int64(0), 0, false
	for k, i := range sh.idx { // map iteration starts at a random place
		if t := sh.tats[i]; t <= now {
			sh.remove(k, i)
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
		sh.remove(victim, sh.idx[victim])
		sh.evicted++
	}
}

func (sh *shard) remove(key string, i uint32) {
	delete(sh.idx, key)
	sh.free = append(sh.free, i)
}

// Reset forgets key.
func (s *Store) Reset(_ context.Context, key string) error {
	sh := s.shard(key)
	sh.mu.Lock()
	if i, ok := sh.idx[key]; ok {
		sh.remove(key, i)
	}
	sh.mu.Unlock()
	return nil
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
	for k, i := range sh.idx {
		if sh.tats[i] <= now {
			sh.remove(k, i)
			n++
		}
	}
	sh.expired += uint64(n)
	if sh.peak >= 1024 && len(sh.idx) <= sh.peak/4 {
		sh.rebuild()
	}
	return n
}

// rebuild copies the shard into right-sized structures (Go maps never shrink).
func (sh *shard) rebuild() {
	idx := make(map[string]uint32, len(sh.idx))
	tats := make([]int64, 0, len(sh.idx))
	for k, i := range sh.idx {
		idx[k] = uint32(len(tats))
		tats = append(tats, sh.tats[i])
	}
	sh.idx, sh.tats, sh.free, sh.peak = idx, tats, nil, len(idx)
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
		st.Keys += len(sh.idx)
		st.Expired += sh.expired
		st.Evicted += sh.evicted
		sh.mu.Unlock()
	}
	return st
}
