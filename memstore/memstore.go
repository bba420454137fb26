// Package memstore is Funnel's in-memory store: sharded, exact under
// contention, and free of allocations when deciding for a key it already
// holds.
//
// Per key it keeps one int64, the theoretical arrival time, in one small
// allocation with the key's bytes. Deciding for a key the store holds takes
// no lock: the TAT is updated by compare-and-swap. A key whose TAT has passed
// is the same as an absent key, so such keys are forgotten: by a background
// sweep (one goroutine per store, never one per key), and first when the
// store is full and must evict. Tables shrink when keys go, so memory follows
// the keys that are active now.
package memstore

import (
	"context"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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
	// SweepInterval is how often a background goroutine drops keys whose
	// TAT passed at least one interval ago (their bucket has been full that
	// long). Zero means one second; a negative value disables the sweep
	// (keys are then dropped only by Sweep, Reset or eviction).
	SweepInterval time.Duration
}

// evictionSample is how many keys a full shard looks at to choose a victim.
const evictionSample = 8

// Store is an in-memory funnel.Store. It is safe for concurrent use. Build
// one with New and stop its sweep with Close.
type Store struct {
	shards []shard
	shift  uint // shard index = hash >> shift
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
	table   atomic.Pointer[table]
	mu      sync.Mutex // serialises the writers of table and the fields below
	live    int        // keys held
	tombs   int        // tombstones in table
	evicted uint64
	expired uint64
	_       [64]byte // keep neighbouring shards' locks on separate cache lines
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
		shift:  uint(64 - bits.Len(uint(n-1))),
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
		s.shards[i].table.Store(newTable(minSlots))
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

// hash returns key's hash: never 0 (an empty slot), the shard from its top
// bits and the slot from its bottom bits.
func (s *Store) hash(key string) (uint64, *shard) {
	h := maphash.String(s.seed, key)
	if h == 0 {
		h = 1
	}
	if len(s.shards) == 1 {
		return h, &s.shards[0]
	}
	return h, &s.shards[h>>s.shift]
}

// Throttle applies a request for quantity units of key under p at the
// store's current time. It never blocks on I/O and ignores ctx. The key may
// alias a buffer the caller reuses: the store copies a key it keeps.
func (s *Store) Throttle(_ context.Context, key string, p gcra.Params, quantity int64) (funnel.Result, error) {
	now := s.Now()
	h, sh := s.hash(key)
	if e := sh.table.Load().find(h, key); e != nil {
		// decideOn, inlined by hand on this hot path.
		for {
			tat := e.tat.Load()
			if tat == dead {
				break // deleted meanwhile: decide under the lock
			}
			newTAT, r, err := gcra.Decide(now, tat, p, quantity)
			if err != nil {
				return funnel.Result{}, err
			}
			if !r.Allowed || quantity == 0 || e.tat.CompareAndSwap(tat, newTAT) {
				return funnel.ResultOf(p, r), nil
			}
		}
	}
	return s.throttleLocked(sh, h, key, now, p, quantity)
}

// decideOn applies the decision to entry e. It reports false, having
// changed nothing, when e has been deleted meanwhile.
func decideOn(e *entry, now int64, p gcra.Params, quantity int64) (funnel.Result, error, bool) {
	for {
		tat := e.tat.Load()
		if tat == dead {
			return funnel.Result{}, nil, false
		}
		newTAT, r, err := gcra.Decide(now, tat, p, quantity)
		if err != nil {
			return funnel.Result{}, err, true
		}
		// Refusals and peeks change nothing; a charge must land on the TAT
		// it was computed from, or be computed again.
		if !r.Allowed || quantity == 0 || e.tat.CompareAndSwap(tat, newTAT) {
			return funnel.ResultOf(p, r), nil, true
		}
	}
}

// throttleLocked decides for a key that was not found without the lock.
func (s *Store) throttleLocked(sh *shard, h uint64, key string, now int64, p gcra.Params, quantity int64) (funnel.Result, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.table.Load().find(h, key); e != nil {
		// Deletions hold the lock, so e is live until we return.
		r, err, _ := decideOn(e, now, p, quantity)
		return r, err
	}
	newTAT, r, err := gcra.Decide(now, 0, p, quantity)
	if err != nil {
		return funnel.Result{}, err
	}
	if r.Allowed && newTAT > now {
		sh.insert(h, newEntry(key, newTAT), now, s.perCap)
	}
	return funnel.ResultOf(p, r), nil
}

// insert adds e, whose key is absent. The caller holds the lock.
func (sh *shard) insert(h uint64, e *entry, now int64, perCap int) {
	if perCap > 0 && sh.live >= perCap {
		sh.makeRoom(now)
	}
	t := sh.table.Load()
	if used := sh.live + sh.tombs + 1; used*4 > len(t.slots)*3 {
		t = sh.rebuild(sh.live + 1)
	}
	if !t.put(h, e) {
		sh.tombs--
	}
	sh.live++
}

// rebuild replaces the table by one sized for n keys (at most half full),
// holding the live entries and no tombstones. The caller holds the lock.
func (sh *shard) rebuild(n int) *table {
	size := minSlots
	for size < 2*n {
		size *= 2
	}
	old := sh.table.Load()
	t := newTable(size)
	for i := range old.slots {
		s := &old.slots[i]
		if e := s.e.Load(); e != nil {
			t.put(s.hash.Load(), e)
		}
	}
	sh.table.Store(t)
	sh.tombs = 0
	return t
}

// remove deletes the entry in slot s if its TAT is still tat (any TAT when
// tat is dead), and returns the TAT it had and whether it was removed. The
// caller holds the lock.
func (sh *shard) remove(s *slot, tat int64) (int64, bool) {
	e := s.e.Load()
	if tat == dead {
		tat = e.tat.Swap(dead)
	} else if !e.tat.CompareAndSwap(tat, dead) {
		return e.tat.Load(), false
	}
	s.e.Store(nil)
	sh.live--
	sh.tombs++
	return tat, true
}

// makeRoom frees at least one place in a full shard: it drops the keys of a
// sample whose TAT has passed, or else the sampled key whose TAT is nearest
// to now. The caller holds the lock.
func (sh *shard) makeRoom(now int64) {
	t := sh.table.Load()
	start := uint64(cheaprand()) & t.mask
	var victim *slot
	var min int64
	seen, dropped := 0, false
	for i, n := start, 0; n <= int(t.mask) && seen < evictionSample; i, n = (i+1)&t.mask, n+1 {
		s := &t.slots[i]
		e := s.e.Load()
		if e == nil {
			continue
		}
		seen++
		tat := e.tat.Load()
		if tat <= now {
			if _, ok := sh.remove(s, tat); ok {
				sh.expired++
				dropped = true
			}
		} else if victim == nil || tat < min {
			victim, min = s, tat
		}
	}
	if !dropped && victim != nil {
		// If a concurrent charge moved its TAT, evict it all the same: the
		// bound on keys is firm.
		sh.remove(victim, dead)
		sh.evicted++
	}
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
	h, sh := s.hash(key)
	e := sh.table.Load().find(h, key)
	if e == nil {
		return 0, false
	}
	tat := e.tat.Load()
	if tat <= now { // dead is below any now
		return 0, false
	}
	return tat, true
}

// Reset forgets key and reports whether it held state. It never fails.
func (s *Store) Reset(_ context.Context, key string) (bool, error) {
	now := s.Now()
	h, sh := s.hash(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sl := sh.table.Load().findSlot(h, key)
	if sl == nil {
		return false, nil
	}
	tat, _ := sh.remove(sl, dead)
	return tat > now, nil
}

// Sweep drops every key whose TAT has passed and returns how many it dropped.
// A table left mostly empty is rebuilt smaller, so that memory is given back
// after a burst of keys. The background sweep calls Sweep; it is exported
// for tests and for callers that disable the background sweep.
func (s *Store) Sweep() int {
	return s.sweepBefore(s.Now())
}

// sweepBefore drops every key whose TAT is at or before t.
func (s *Store) sweepBefore(t int64) int {
	total := 0
	for i := range s.shards {
		total += s.shards[i].sweep(t)
	}
	return total
}

func (sh *shard) sweep(now int64) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.table.Load()
	n := 0
	for i := range t.slots {
		s := &t.slots[i]
		e := s.e.Load()
		if e == nil {
			continue
		}
		if tat := e.tat.Load(); tat <= now {
			if _, ok := sh.remove(s, tat); ok {
				n++
			}
		}
	}
	sh.expired += uint64(n)
	if len(t.slots) > minSlots && (sh.live*8 < len(t.slots) || sh.tombs*4 > len(t.slots)) {
		sh.rebuild(sh.live)
	}
	return n
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
			// Keep keys whose bucket filled up only within the last interval:
			// a key used about once an interval would otherwise be dropped
			// and allocated again every time.
			s.sweepBefore(s.Now() - int64(every))
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
	// Bytes estimates the memory held by the keys: their tables and entries.
	Bytes int64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.live
		st.Expired += sh.expired
		st.Evicted += sh.evicted
		t := sh.table.Load()
		st.Bytes += int64(len(t.slots)) * int64(unsafe.Sizeof(slot{}))
		for j := range t.slots {
			if e := t.slots[j].e.Load(); e != nil {
				st.Bytes += int64(e.size())
			}
		}
		sh.mu.Unlock()
	}
	return st
}

// Len returns the number of keys held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.live
		sh.mu.Unlock()
	}
	return n
}

// cheaprand returns a pseudo-random number, for choosing where to sample.
func cheaprand() uint32 { return uint32(rand.Uint64()) }

// NonBlocking reports that the store's operations never wait on I/O or on a
// lock held across I/O, so a server may call it from an event loop that
// serves many connections on one thread (see resp.NonBlockingStore).
func (s *Store) NonBlocking() bool { return true }
