// Package memstore is Funnel's in-memory store: sharded, exact under
// contention, and free of allocations when deciding for a key it already
// holds. It runs the whole limiter family (funnel.Store).
//
// Per funnel key (GCRA, and the leaky bucket, which shares its state) it
// keeps one int64, the theoretical arrival time, in one small allocation
// with the key's bytes. Deciding for a key the store holds takes no lock:
// the TAT is updated by compare-and-swap. A key whose TAT has passed is the
// same as an absent key, so such keys are forgotten: by a background sweep
// (one goroutine per store, never one per key), and first when the store
// is full and must evict. Tables shrink when keys go, so memory follows the
// keys that are active now.
//
// # The other algorithms
//
// Keys of the fixed and sliding windows, the sliding log and concurrency
// keep a richer state (window counts, a log of timestamps, leases) in a map
// per shard, read and written under the shard's lock, with the instant at
// which the state is empty: from then on the key reads as absent, the sweep
// drops it, and it counts against MaxKeys like a funnel key until then.
//
// A key holds one kind of state at a time. Both kinds live in the key's
// shard and are created only under its lock, which first looks for the
// other kind: a live state of another algorithm is an error that wraps
// funnel.ErrWrongType (and changes nothing); an empty one is dropped. So a
// key the table holds has no family state, and the lock-free paths, which
// only ever see the table, need not look.
//
// # Several keys at once
//
// Do locks the shards of its keys, each once, in address order, so that
// two calls that share shards cannot deadlock, and holds them for the whole
// call. The family states are then its alone. A funnel key's TAT is also
// changed by the lock-free paths (Throttle, and Do of one funnel op under a
// limit without a ban), so Do swaps it for a locked sentinel before it
// decides: a lock-free path that meets the sentinel goes to the shard's
// lock, and so waits for the call to end. Only then does Do decide every
// op, and either store every new state or put every TAT back as it was. No
// decision ever sees a partial charge, and no call waits for anything but
// shard locks taken in one order.
//
// # Bans
//
// A refusal under a limit with a Ban records the key's ban, in a map per
// shard beside the keys, until it ends. Ops under limits with a Ban look
// for it before every decision; Throttle, and limits without a Ban, do not
// (see funnel.Limit). Bans lists them, Unban lifts one, the sweep drops
// those that have ended; Reset forgets a key's state but not its ban. Bans
// are not counted against MaxKeys: evicting one would lift it.
//
// # Reservations
//
// A reservation (Reserve, Settle) is a record in its key's shard, beside
// the key's state, read and written under the shard's lock: a settle
// gives back or charges the difference and marks the record settled in
// one step. The sweep drops it when its TTL ends. Reservations are not
// counted against MaxKeys. A pending one holds at least a unit of its
// key's limit, so the limits bound the pending ones; a settled one holds
// nothing (a settle below the estimate gives units back) but is kept until
// its TTL ends, so that a second settle says Again: their number is bounded
// by the settles made within a TTL (a caller that reserves and settles at 0
// in a loop keeps one record per settle for one TTL), and by
// Options.MaxReservations, which drops settled ones first.
//
// # Snapshots
//
// WriteSnapshot writes the live states of every algorithm, the bans and
// the reservations to an io.Writer without stopping decisions;
// ReadSnapshot restores them into a new store, so that a restart does not
// hand every key a fresh burst, nor forget a reservation.
// Making the file durable is the caller's part: write to a temporary file
// in the same directory, fsync it, rename it over the old snapshot and
// fsync the directory (funnel serve does).
//
// The format, version 2. Integers in the header and the block frames are
// big-endian; the fields of records are varints (encoding/binary's Uvarint
// for counts and lengths, Varint for signed numbers). A snapshot is a
// header, blocks, and nothing after the block that holds the end record.
//
//	header (32 bytes)
//	  0  magic "FUNLSNAP"
//	  8  uint16 format version (2; version 1 is the same without clock records)
//	 10  uint16 flags (0)
//	 12  int64  wall-clock time of the write, ns since the Unix epoch
//	 20  uint64 keys held when the write began (a hint: the end record counts)
//	 28  uint32 CRC-32C (Castagnoli) of bytes 0 to 27
//	block
//	  0  uint32 payload length n (1 to 64 MiB)
//	  4  uint32 CRC-32C of the length's 4 bytes and the payload
//	  8  payload: n bytes of whole records
//
// A record is a kind byte, a version byte (of that kind's fields, so that a
// kind can gain fields while readers keep reading its older versions), and
// its fields. Every record but the end record starts with its key (a length
// and the bytes) and the time its state empties, then the kind's own
// fields:
//
//	kind 1 funnel or leaky bucket  instant: the TAT
//	kind 2 fixed window            window end; window start; count
//	kind 3 sliding window          window end; window start; previous count; current count
//	kind 4 sliding log             instant: state empty; n; n times, each from the one before (the first from the write's ms)
//	kind 5 concurrency             instant: state empty; n; n leases: id (length, bytes), expiry (from the write's ms)
//	kind 6 ban                     instant: the ban's end
//	kind 7 GCRA command            instant: state empty; the TAT in µs, after the write's time in µs
//	kind 8 clock                   boot id (length, bytes); time since the boot, ns (uvarint): the
//	                               first record, when the writer knew its boot (see Options.Boot)
//	kind 9 reservation             instant: the end of its TTL; id (length, bytes); estimate;
//	                               its ms (after the header's for windows, else after the write's);
//	                               settled (1) or pending (0); actual; limit (length, bytes:
//	                               funnel.EncodeLimit); version 2: instant: a funnel's TAT
//	                               after the take (0 for the windows)
//	kind 0 end                     number of key records; number of ban records
//
// Instants are nanoseconds after the store's time at the write, so a
// snapshot is read the same whatever clock the store that wrote it ran on:
// as wall-clock times, they are the header's time plus the instant. Times in
// milliseconds (log entries, lease expiries) are milliseconds after the
// write's. Window starts and ends name windows of the wall clock (aligned
// to the epoch or the calendar): they are milliseconds after the header's
// time, in ms, and are restored unchanged (but from a snapshot from the
// future, see ReadSnapshot). States and bans that are empty at the
// write are not written. A key may have two records (it was dropped and
// added again while its shard was read): the later one holds its newer
// state, and is the one restored. The end record is the last record of
// the last block: a snapshot cut at a block boundary lacks it, one cut
// elsewhere lacks bytes, and a changed bit fails a checksum.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
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
	// MaxKeys bounds the number of keys held, of every algorithm, by the
	// store as a whole; zero means no bound. Bans are not counted. The store
	// holds up to exactly MaxKeys keys and evicts only when a new key
	// arrives while it holds MaxKeys. It then looks at a sample of the keys
	// of the new key's shard (or, when that shard holds none, of another
	// shard): keys whose state is already empty (a bucket full again) are
	// dropped first; otherwise the one whose state empties first (for a
	// funnel, the TAT nearest to now: the least harmful to forget) is
	// evicted.
	MaxKeys int
	// MaxReservations bounds the reservations held (Reserve), pending or
	// settled, per shard: MaxReservations/Shards, rounded up. Zero means
	// the bound of MaxKeys when it is set, else none (only their TTLs bound
	// them). A reserve in a full shard first drops the reservations whose
	// TTL has ended, then the settled one that ends first (a later settle
	// of it answers funnel.ErrUnknownReservation, and changes nothing); a
	// shard full of pending ones refuses it (ErrReservationsFull).
	MaxReservations int
	// Boot returns the identity of the machine's current boot and the time
	// since it began, on a clock that wall-clock steps do not move: a
	// snapshot records them, so that a restore on the same boot knows how
	// much time passed since the write whatever the wall clock did (see
	// ReadSnapshot). Nil means Linux's boot id and CLOCK_BOOTTIME (none
	// elsewhere); with Now set, nil means none. ok is false when there is
	// no such evidence.
	Boot func() (id string, sinceBoot time.Duration, ok bool)
	// RestoreMaxElapsed bounds the time that ReadSnapshot counts as passed
	// since a snapshot was written when it cannot prove it (another boot, a
	// snapshot without the evidence, or none available): the wall clock
	// may have been stepped forward, which would refill every key and end
	// bans and leases early. Zero means DefaultRestoreMaxElapsed; a
	// negative value, no bound.
	RestoreMaxElapsed time.Duration
	// SweepInterval is how often a background goroutine drops keys whose
	// state has been empty for at least one interval (for a funnel, whose
	// TAT passed that long ago), and bans that have ended. Zero means one second; a negative value disables the sweep
	// (keys are then dropped only by Sweep, Reset or eviction).
	SweepInterval time.Duration
}

// DefaultRestoreMaxElapsed is the default of Options.RestoreMaxElapsed: a
// restart on another machine, or after a reboot, counts at most this much
// time as passed since the snapshot.
const DefaultRestoreMaxElapsed = 10 * time.Minute

// evictionSample is how many keys a full shard looks at to choose a victim.
const evictionSample = 8

// Store is an in-memory funnel.Store. It is safe for concurrent use. Build
// one with New and stop its sweep with Close.
type Store struct {
	shards []shard
	shift  uint         // shard index = hash >> shift
	seed   uintptr      // of hash
	now    func() int64 // nil: the monotonic real clock below
	start  time.Time
	base   int64
	max    int64 // MaxKeys; 0 means unbounded
	resCap int   // reservations per shard (MaxReservations); 0 means unbounded
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	_      [64]byte // keep the count below off the cache line of the fields above
	// keys counts, when the store is bounded, the keys held by every shard
	// and the places taken for keys about to be added (see places). It
	// never exceeds max: a place is taken by compare-and-swap, or passed on
	// from a key evicted for it.
	keys atomic.Int64

	// Read by snapshots only: Options.Boot, and Options.RestoreMaxElapsed
	// (<= 0: no bound).
	boot       func() (string, time.Duration, bool)
	restoreMax time.Duration
}

type shard struct {
	table   atomic.Pointer[table]
	mu      sync.Mutex // serialises the writers of table and the fields below
	live    int        // keys held in table
	tombs   int        // tombstones in table
	evicted uint64
	expired uint64
	fam     map[string]*fstate // keys of the other algorithms (family.go)
	conc    int                // states of fam that are concurrency limits (never evicted while they hold leases)
	famPeak int                // the most keys fam held since it was made
	bans    map[string]int64   // banned keys: the instant each ban ends
	banPeak int
	keys    *atomic.Int64            // the store's count of keys when bounded, else nil
	resv    map[resvKey]*reservation // reservations of the shard's keys (reserve.go)
	resPeak int
	// Keep neighbouring shards' locks on separate cache lines (a shard is
	// 144 bytes, its table and lock at the same offsets as before keys).
	_ [32]byte
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
	// No more shards than keys: a full store evicts from the new key's
	// shard, which should hold a sample to choose from.
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
		seed:   newSeed(),
		now:    opts.Now,
		start:  time.Now(),
		done:   make(chan struct{}),
	}
	s.base = s.start.UnixNano()
	s.boot, s.restoreMax = opts.Boot, opts.RestoreMaxElapsed
	if s.boot == nil && s.now == nil {
		s.boot = systemBoot
	}
	if s.restoreMax == 0 {
		s.restoreMax = DefaultRestoreMaxElapsed
	}
	if opts.MaxKeys > 0 {
		s.max = int64(opts.MaxKeys)
	}
	r := opts.MaxReservations
	if r == 0 {
		r = opts.MaxKeys
	}
	if r > 0 {
		s.resCap = (r + n - 1) / n
	}
	for i := range s.shards {
		s.shards[i].table.Store(newTable(minSlots))
		if s.max > 0 {
			s.shards[i].keys = &s.keys
		}
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

// TakeFunnel decides a take of quantity units of key (a negative quantity
// gives units back) under the funnel p without a ban, at the store's
// current time, exactly as Do decides that op (a quantity whose cost
// overflows is an error that wraps funnel.ErrInvalidQuantity), and answers
// the decision, of which funnel.ResultOf(p, r) is Do's result: the
// Limiter's path for the commonest decision (funnel.FunnelTaker), and Do's,
// lock-free when the key is in the table. The key may alias a buffer the
// caller reuses: the store copies a key it keeps. A key that holds the
// state of another algorithm than the funnel's is an error that wraps
// funnel.ErrWrongType. It does not look for bans.
func (s *Store) TakeFunnel(_ context.Context, key string, p gcra.Params, quantity int64) (res gcra.Result, err error) {
	// Now and hash, inlined by hand: this is the path of every decision.
	var now int64
	if s.now == nil {
		now = s.base + int64(time.Since(s.start))
	} else {
		now = s.now()
	}
	h := uint64(memhash(unsafe.Pointer(unsafe.StringData(key)), s.seed, uintptr(len(key))))
	if h == 0 {
		h = 1
	}
	sh := &s.shards[h>>s.shift]
	if p.Interval > 0 && quantity > 0 {
		// A take of units (peeks and refunds, which may write an empty
		// state, go to decideOn).
		if e := sh.table.Load().find(h, key); e != nil {
			if tat := e.tat.Load(); tat > locked {
				// One unit admitted, inlined (a charge that loses its
				// compare-and-swap is decided again, below); any other
				// decision in full.
				if quantity == 1 {
					if newTAT, resetAfter, ok := gcra.AdmitOne(now, tat, p); ok {
						if e.tat.CompareAndSwap(tat, newTAT) {
							return gcra.Result{Allowed: true, Remaining: p.Remaining(resetAfter), ResetAfter: resetAfter}, nil
						}
						return s.takeFunnelSlow(sh, h, key, now, p, quantity)
					}
				}
				newTAT, r, derr := gcra.DecideNoRemaining(now, tat, p, quantity)
				// Refusals change nothing; a charge must land on the TAT
				// it was computed from. Remaining's division comes after
				// the compare-and-swap, which would wait for it.
				if derr == nil && (!r.Allowed || e.tat.CompareAndSwap(tat, newTAT)) {
					res.Allowed, res.RetryAfter, res.ResetAfter = r.Allowed, r.RetryAfter, r.ResetAfter
					res.Remaining = p.Remaining(r.ResetAfter)
					return res, nil
				}
			}
		}
	}
	return s.takeFunnelSlow(sh, h, key, now, p, quantity)
}

// takeFunnelSlow is TakeFunnel for all but a take of units (a quantity
// above 0) on a key found, live and decided at the first try: peeks and
// refunds, bad parameters, a decision's error, a charge that lost
// its compare-and-swap to another (it is decided again), a key held by a Do
// call or deleted meanwhile, and a key the table does not hold.
func (s *Store) takeFunnelSlow(sh *shard, h uint64, key string, now int64, p gcra.Params, quantity int64) (gcra.Result, error) {
	r, err := s.decideFunnel(sh, h, key, now, p, quantity)
	return gcra.Result{Allowed: r.Allowed, Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}, err
}

// decideFunnel is takeFunnelSlow with Do's result.
func (s *Store) decideFunnel(sh *shard, h uint64, key string, now int64, p gcra.Params, quantity int64) (funnel.Result, error) {
	if p.Interval <= 0 {
		return funnel.Result{}, fmt.Errorf("%w: funnel parameters %+v not computed by Limit.Check", funnel.ErrInvalidLimit, p)
	}
	if e := sh.table.Load().find(h, key); e != nil {
		if r, err, ok := decideOn(e, now, p, quantity); ok {
			if err != nil {
				return funnel.Result{}, quantityErr(quantity, err)
			}
			return r, nil
		}
	}
	r, err := s.throttleLocked(sh, h, key, now, p, quantity)
	for err == errNoRoom {
		if err = s.evictAnywhere(now, 1); err == nil {
			r, err = s.throttleLocked(sh, h, key, now, p, quantity)
		}
	}
	if err != nil {
		return funnel.Result{}, quantityErr(quantity, err)
	}
	return r, nil
}

// quantityErr wraps gcra.ErrOverflow, the error of a quantity whose cost
// overflows, in funnel.ErrInvalidQuantity, as the Limiter does.
func quantityErr(quantity int64, err error) error {
	if err == gcra.ErrOverflow {
		return fmt.Errorf("%w %d: %w", funnel.ErrInvalidQuantity, quantity, err)
	}
	return err
}

// decideOn applies the decision to entry e. It reports false, having
// changed nothing, when e has been deleted meanwhile.
func decideOn(e *entry, now int64, p gcra.Params, quantity int64) (funnel.Result, error, bool) {
	for {
		tat := e.tat.Load()
		if tat <= locked {
			return funnel.Result{}, nil, false
		}
		newTAT, r, err := gcra.Decide(now, tat, p, quantity)
		if err != nil {
			return funnel.Result{}, err, true
		}
		// Refusals and peeks of a live TAT change nothing; a charge must
		// land on the TAT it was computed from, or be computed again.
		if !r.Allowed || (quantity == 0 && tat > now) || e.tat.CompareAndSwap(tat, forget(newTAT, now)) {
			return funnel.ResultOf(p, r), nil, true
		}
	}
}

// forget returns the TAT to store for tat, written at now: 0 (an empty
// state, which the sweep drops) for a TAT at or before now, which a refund
// (a negative quantity) or a peek of an empty state writes, as Redis
// deletes a key whose TAT a write leaves at now (redis-cell writes a peek,
// with a TTL of 0). Kept, it would limit the key again after a clock
// stepped back, where Redis's key is gone.
func forget(tat, now int64) int64 {
	if tat <= now {
		return 0
	}
	return tat
}

// throttleLocked decides for a key that was not found without the lock. It
// returns errNoRoom, having changed nothing, when the key is new, the store
// is full and the shard holds no key to evict for it: the caller then
// calls evictAnywhere and tries again.
func (s *Store) throttleLocked(sh *shard, h uint64, key string, now int64, p gcra.Params, quantity int64) (funnel.Result, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.table.Load().find(h, key); e != nil {
		// Deletions hold the lock, so e is live until we return.
		r, err, _ := decideOn(e, now, p, quantity)
		return r, err
	}
	if fs := sh.fam[key]; fs != nil {
		if fs.expires > now {
			return funnel.Result{}, errWrongType[fs.kind]
		}
		sh.deleteFam(key, fs)
		sh.expired++
		sh.release(1)
	}
	newTAT, r, err := gcra.Decide(now, 0, p, quantity)
	if err != nil {
		return funnel.Result{}, err
	}
	if r.Allowed && newTAT > now {
		if s.max > 0 {
			held := [1]*shard{sh}
			evict, ok := s.places(now, 1, held[:], 0)
			if !ok {
				return funnel.Result{}, errNoRoom
			}
			if evict > 0 {
				s.release(sh.evict(now) - evict)
			}
		}
		sh.insert(h, newEntry(key, newTAT))
	}
	return funnel.ResultOf(p, r), nil
}

// errNoRoom says that a call must let its locks go and make room for its
// new keys in other shards before it tries again.
var errNoRoom = errors.New("memstore: no room in the shards held")

// places makes sure that n new keys, about to be added under the locks of
// the shards held (each once), fit under the bound. It takes free places
// first; then it counts on evicting keys of the held shards, and returns
// how many the caller must evict from them (each eviction passes its place
// to a new key, see evictHeld); when they hold too few, it evicts from other
// shards whose locks it can take without waiting. It reports false, holding
// no place, when even that is not enough: the caller must then let its
// locks go, call evictAnywhere and try again. An unbounded store always has
// room. The caller holds the locks of held and n <= max. Only keys that
// eviction may drop are counted on (see evict), less pins: the states of
// held that the call makes concurrency limits.
func (s *Store) places(now int64, n int64, held []*shard, pins int64) (evict int64, ok bool) {
	if s.max == 0 || n == 0 {
		return 0, true
	}
	have := s.takeFree(n)
	if have == n {
		return 0, true
	}
	inHeld := -pins
	for _, sh := range held {
		inHeld += int64(sh.evictable())
	}
	if n-have <= inHeld {
		return n - have, true
	}
	have += s.evictOthers(now, held, n-have-inHeld)
	if have >= n {
		s.release(have - n)
		return 0, true
	}
	if n-have <= inHeld {
		return n - have, true
	}
	s.release(have)
	return 0, false
}

// takeFree takes up to n free places under the bound and returns how many
// it took.
func (s *Store) takeFree(n int64) int64 {
	for {
		c := s.keys.Load()
		take := min(s.max-c, n)
		if take <= 0 {
			return 0
		}
		if s.keys.CompareAndSwap(c, c+take) {
			return take
		}
	}
}

// release gives back n places: keys dropped, or places taken and not used.
func (s *Store) release(n int64) {
	if n > 0 {
		s.keys.Add(-n)
	}
}

// release gives back the places of n keys dropped from sh. The caller holds
// the lock.
func (sh *shard) release(n int) {
	if sh.keys != nil && n > 0 {
		sh.keys.Add(-int64(n))
	}
}

// held returns the number of keys sh holds. The caller holds the lock.
func (sh *shard) held() int { return sh.live + len(sh.fam) }

// evictOthers frees up to n places by evicting from shards other than held
// whose locks are free, and returns how many it freed (perhaps more than
// n). It never waits for a lock, so it may be called under any.
func (s *Store) evictOthers(now int64, held []*shard, n int64) int64 {
	var freed int64
	start := int(cheaprand())
	for i := range s.shards {
		if freed >= n {
			break
		}
		sh := &s.shards[(start+i)&(len(s.shards)-1)]
		if slices.Contains(held, sh) || !sh.mu.TryLock() {
			continue
		}
		for freed < n && sh.held() > 0 {
			f := sh.evict(now)
			if f == 0 {
				break
			}
			freed += f
		}
		sh.mu.Unlock()
	}
	return freed
}

// evictAnywhere makes room for n new keys, one shard at a time, while the
// store has fewer than n free places. The caller holds no lock. The places
// it frees are given back: the caller takes them, or another caller does,
// when it tries again. It returns ErrFull when the keys that it could not
// evict (concurrency limits that hold leases) leave no room for n keys.
func (s *Store) evictAnywhere(now int64, n int64) error {
	if testHookEvictAnywhere != nil {
		testHookEvictAnywhere()
	}
	start := int(cheaprand())
	var kept int64
	for i := range s.shards {
		if s.max-s.keys.Load() >= n {
			return nil
		}
		sh := &s.shards[(start+i)&(len(s.shards)-1)]
		sh.mu.Lock()
		for sh.held() > 0 && s.max-s.keys.Load() < n {
			f := sh.evict(now)
			if f == 0 {
				break
			}
			s.release(f)
		}
		kept += int64(sh.held())
		sh.mu.Unlock()
	}
	if s.max-s.keys.Load() >= n {
		return nil
	}
	if kept+n > s.max {
		return ErrFull
	}
	// Every place is taken by a call about to add its key: let it.
	runtime.Gosched()
	return nil
}

// ErrFull is the error of a decision that would add a key to a store that
// holds MaxKeys keys and may evict none of them: each is a concurrency
// limit that holds leases, which eviction would free. It wraps
// funnel.ErrUnavailable: the store cannot decide, and changed nothing.
var ErrFull = fmt.Errorf("memstore: %w: the store holds MaxKeys keys, each a concurrency limit holding leases (never evicted); a new key is refused", funnel.ErrUnavailable)

// testHookEvictAnywhere, when set by a test, is called when a call has let
// its locks go to make room elsewhere.
var testHookEvictAnywhere func()

// insert adds e, whose key is absent and has its place under the bound.
// The caller holds the lock.
func (sh *shard) insert(h uint64, e *entry) {
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

// evict frees at least one place in sh, unless it holds no key it may
// evict, and returns how many it freed: the places of the keys dropped,
// which pass to the caller. The caller holds the lock.
//
// A concurrency limit that holds leases is never evicted: forgetting it
// would free its leases, and admit more at once than the limit. A shard
// that holds only those frees nothing.
func (sh *shard) evict(now int64) int64 {
	for sh.held() > 0 {
		// makeRoom frees nothing when each key of its sample whose state
		// was empty was charged meanwhile (those are candidates now), or
		// when its sample holds only concurrency limits with leases: then
		// it looks at every key.
		if n := sh.makeRoom(now, evictionSample); n > 0 {
			return int64(n)
		}
		if n := sh.makeRoom(now, math.MaxInt); n > 0 {
			return int64(n)
		}
		if sh.live == 0 && len(sh.fam) == sh.conc {
			return 0
		}
	}
	return 0
}

// evictable returns how many keys of sh eviction may drop at least: all but
// the concurrency limits. The caller holds the lock.
func (sh *shard) evictable() int { return sh.live + len(sh.fam) - sh.conc }

// makeRoom drops the keys of a sample whose state is empty at now, or else
// the sampled key whose state empties first (a TAT nearest to now: the
// least harmful to forget), but never a concurrency limit that holds
// leases, and returns how many keys it dropped. The sample takes sample
// keys of the table and as many of the family states. The caller holds the
// lock, and gets the places of the keys dropped.
func (sh *shard) makeRoom(now int64, sample int) int {
	t := sh.table.Load()
	start := uint64(cheaprand()) & t.mask
	var victim *slot
	var famVictim string
	var min int64
	found, dropped := false, 0
	seen := 0
	for i, n := start, 0; n <= int(t.mask) && seen < sample; i, n = (i+1)&t.mask, n+1 {
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
				dropped++
			}
		} else if !found || tat < min {
			victim, min, found = s, tat, true
		}
	}
	// Map iteration starts at a random place: the first states are a sample.
	seen = 0
	for k, fs := range sh.fam {
		if seen == sample {
			break
		}
		seen++
		if fs.expires <= now {
			sh.deleteFam(k, fs)
			sh.expired++
			dropped++
		} else if fs.kind != kindConc && (!found || fs.expires < min) {
			victim, famVictim, min, found = nil, k, fs.expires, true
		}
	}
	switch {
	case dropped > 0 || !found:
		return dropped
	case victim != nil:
		// If a concurrent charge moved its TAT, evict it all the same: the
		// bound on keys is firm.
		sh.remove(victim, dead)
	default:
		sh.deleteFam(famVictim, sh.fam[famVictim])
	}
	sh.evicted++
	return 1
}

// TTL returns the time until key holds no state (for a funnel, until its
// bucket is full again), and false when the key holds no state. It never
// fails.
func (s *Store) TTL(_ context.Context, key string) (time.Duration, bool, error) {
	now := s.Now()
	end, ok := s.endAt(key, now)
	if !ok {
		return 0, false, nil
	}
	return time.Duration(end - now), true, nil
}

// TAT returns key's theoretical arrival time and true, or 0 and false when
// the key holds no funnel state at the store's current time.
func (s *Store) TAT(key string) (int64, bool) {
	now := s.Now()
	h, sh := s.hash(key)
	if e := sh.table.Load().find(h, key); e != nil {
		if tat := e.tat.Load(); tat > locked {
			if tat <= now {
				return 0, false
			}
			return tat, true
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.table.Load().find(h, key); e != nil {
		if tat := e.tat.Load(); tat > now {
			return tat, true
		}
	}
	return 0, false
}

// endAt returns the instant at which key's state is empty, if it holds
// state at now.
func (s *Store) endAt(key string, now int64) (int64, bool) {
	h, sh := s.hash(key)
	if e := sh.table.Load().find(h, key); e != nil {
		// A key in the table holds no family state.
		if tat := e.tat.Load(); tat > locked {
			return tat, tat > now
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.table.Load().find(h, key); e != nil {
		tat := e.tat.Load()
		return tat, tat > now
	}
	if fs := sh.fam[key]; fs != nil {
		return fs.expires, fs.expires > now
	}
	return 0, false
}

// Reset forgets key's state, whatever its algorithm, and reports whether it
// held state. It does not lift a ban (Unban does). It never fails.
func (s *Store) Reset(_ context.Context, key string) (bool, error) {
	now := s.Now()
	h, sh := s.hash(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sl := sh.table.Load().findSlot(h, key); sl != nil {
		tat, _ := sh.remove(sl, dead)
		sh.release(1)
		return tat > now, nil
	}
	if fs := sh.fam[key]; fs != nil {
		sh.deleteFam(key, fs)
		sh.release(1)
		return fs.expires > now, nil
	}
	return false, nil
}

// Sweep drops every key whose state is empty (for a funnel, whose TAT has
// passed) and every ban that has ended, and returns how many keys it
// dropped. A table or map left mostly empty is rebuilt smaller, so that
// memory is given back after a burst of keys. The background sweep calls
// Sweep; it is exported for tests and for callers that disable the
// background sweep.
func (s *Store) Sweep() int {
	return s.sweepBefore(s.Now())
}

// sweepBefore drops every key whose state is empty at t, and the bans that
// end at or before t.
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
	for k, fs := range sh.fam {
		if fs.expires <= now {
			sh.deleteFam(k, fs)
			n++
		}
	}
	for k, until := range sh.bans {
		if until <= now {
			delete(sh.bans, k)
		}
	}
	for k, rv := range sh.resv {
		if rv.expires <= now {
			delete(sh.resv, k)
		}
	}
	sh.fam, sh.famPeak = shrink(sh.fam, sh.famPeak)
	sh.bans, sh.banPeak = shrink(sh.bans, sh.banPeak)
	sh.resv, sh.resPeak = shrink(sh.resv, sh.resPeak)
	sh.expired += uint64(n)
	sh.release(n)
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
	// Keys is the number of keys held, of every algorithm, including any
	// whose state is empty but that have not been dropped yet.
	Keys int
	// Bans is the number of bans held, including any that have ended but
	// have not been dropped yet.
	Bans int
	// Reservations is the number of reservations held (Reserve), settled
	// or not, including any whose TTL has ended but that have not been
	// dropped yet.
	Reservations int
	// Expired counts keys dropped because their state was empty.
	Expired uint64
	// Evicted counts keys dropped to respect MaxKeys while still limited.
	Evicted uint64
	// Bytes estimates the memory held by the keys: their tables, entries
	// and family states.
	Bytes int64
}

// Evictions returns the number of keys evicted to respect MaxKeys while
// still limited (Stats.Evicted), at the cost of one lock per shard.
func (s *Store) Evictions() uint64 {
	var n uint64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.evicted
		sh.mu.Unlock()
	}
	return n
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.live + len(sh.fam)
		st.Bans += len(sh.bans)
		st.Reservations += len(sh.resv)
		st.Expired += sh.expired
		st.Evicted += sh.evicted
		t := sh.table.Load()
		st.Bytes += int64(len(t.slots)) * int64(unsafe.Sizeof(slot{}))
		for j := range t.slots {
			if e := t.slots[j].e.Load(); e != nil {
				st.Bytes += int64(e.size())
			}
		}
		for k, fs := range sh.fam {
			st.Bytes += fs.size(k)
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
		n += sh.live + len(sh.fam)
		sh.mu.Unlock()
	}
	return n
}

// cheaprand returns a pseudo-random number, for choosing where to sample.
func cheaprand() uint32 { return uint32(rand.Uint64()) }

// Keys returns the number of keys the store holds (Len) and true: the
// store is a funnel.KeyCounter.
func (s *Store) Keys() (int, bool) { return s.Len(), true }

// NonBlocking reports that the store's operations never wait on I/O or on a
// lock held across I/O, so a server may call it from an event loop that
// serves many connections on one thread (see resp.NonBlockingStore).
func (s *Store) NonBlocking() bool { return true }
