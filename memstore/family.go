package memstore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/gcra"
)

// kind is the kind of state a key holds. The funnel and the leaky bucket
// share theirs: the TAT, kept in the shard's table. The others are kept in
// the shard's map of family states.
type kind uint8

const (
	kindTAT kind = iota
	kindFixed
	kindSliding
	kindLog
	kindConc
	kindCmd // Redis's GCRA command (gcracmd.go)
	numKinds
)

var kindNames = [numKinds]string{"funnel (gcra or leaky_bucket)", "fixed_window", "sliding_window", "sliding_log", "concurrency", "GCRA command"}

// errWrongType[k] is the error of an op on a key that holds state of kind k.
var errWrongType = func() (errs [numKinds]error) {
	for k := range errs {
		errs[k] = fmt.Errorf("%w (it holds %s state)", funnel.ErrWrongType, kindNames[k])
	}
	return errs
}()

// kindOf returns the kind of state algorithm a keeps.
func kindOf(a funnel.Algorithm) (kind, bool) {
	switch a {
	case funnel.GCRA, funnel.LeakyBucket:
		return kindTAT, true
	case funnel.FixedWindow:
		return kindFixed, true
	case funnel.SlidingWindow:
		return kindSliding, true
	case funnel.SlidingLog:
		return kindLog, true
	case funnel.Concurrency:
		return kindConc, true
	}
	return 0, false
}

// fstate is the state of a key under a window algorithm or concurrency. It
// is read and written only under its shard's lock.
type fstate struct {
	kind kind
	// expires is when the state is empty (ns since the Unix epoch): from then
	// on the key reads as absent, and the sweep may drop it.
	expires int64
	a, b, c int64        // fixed: Start, N; sliding: Start, Prev, Cur (ms); concurrency: unit delay (ns)
	times   []int64      // sliding log (ms)
	leases  []algo.Lease // concurrency
	ids     []byte       // concurrency: the arena of the leases' ids (keepID)
}

// pending is one op of a Do call while the call holds its shards' locks.
type pending struct {
	op   *funnel.Op
	sh   *shard
	h    uint64
	kind kind
	e    *entry  // the key's TAT entry, held at locked; nil when absent
	old  int64   // e's TAT before the call (0 when absent)
	tat  int64   // the TAT after the op
	fs   *fstate // the key's family state; nil when absent
	live bool    // fs holds state at now (otherwise it reads as empty)
	add  bool    // under a bound, the op adds its key (see reserve)
	cut  bool    // the op would add its key, but the bound is smaller than the call
	st   fstate  // the family state after the op
	ban  int64   // time left in the key's ban, when positive
	// give, for the refund of a settle (reserve.go), gives back only what
	// the key still counts of the units taken at the millisecond at (of a
	// funnel's, those before tatAt, the TAT the take left).
	give  bool
	at    int64
	tatAt int64
}

// Do applies ops at the store's current time and writes their results into
// res, as funnel.Store says. It never blocks on I/O and ignores ctx.
//
// One op on a funnel or leaky bucket key that the store holds, under a
// limit without a ban, is decided without a lock. Every other call locks
// the shards of its keys (each once, in a global order) for the length of
// the call; see the package documentation for how several keys are charged
// atomically.
func (s *Store) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	if len(ops) == 1 && len(res) > 0 {
		if op := &ops[0]; op.Kind == funnel.OpTake && op.Limit.Algorithm == funnel.GCRA && op.Limit.Ban == 0 && op.Limit.GCRA.Interval > 0 {
			// The commonest decision, first and on its own path.
			r, err := s.TakeFunnel(ctx, op.Key, op.Limit.GCRA, op.N)
			if err != nil {
				res[0] = funnel.Result{}
				return err
			}
			res[0] = funnel.ResultOf(op.Limit.GCRA, r)
			return nil
		}
	}
	if err := funnel.CheckOps(ops, res); err != nil {
		return err
	}
	switch len(ops) {
	case 0:
		return nil
	case 1:
	default:
		return s.doMany(ops, res)
	}
	op := &ops[0]
	k, _ := kindOf(op.Limit.Algorithm)
	var err error
	h, sh := s.hash(op.Key)
	if k == kindTAT && (op.Kind == funnel.OpTake || op.Kind == funnel.OpCharge) && op.Limit.Ban == 0 {
		// An entry in the table means the key holds no family state, so
		// there is no type to check; and the limit looks for no ban.
		if e := sh.table.Load().find(h, op.Key); e != nil {
			if done, err := takeTAT(e, s.Now(), op, &res[0]); done {
				return err
			}
		}
	}
	held := [1]*shard{sh}
	for {
		one := [1]pending{{op: op, sh: sh, h: h, kind: k}}
		sh.mu.Lock()
		now := s.Now()
		err = s.apply(now, one[:], res, held[:])
		sh.mu.Unlock()
		if err != errNoRoom {
			return err
		}
		if err := s.evictAnywhere(now, 1); err != nil {
			return err
		}
	}
}

// doMany applies several ops, which must all be OpTake (CheckOps has
// passed them), all-or-nothing.
func (s *Store) doMany(ops []funnel.Op, res []funnel.Result) error {
	var buf [8]pending
	ps := buf[:0]
	if len(ops) > len(buf) {
		ps = make([]pending, 0, len(ops))
	}
	for i := range ops {
		op := &ops[i]
		k, _ := kindOf(op.Limit.Algorithm)
		h, sh := s.hash(op.Key)
		ps = append(ps, pending{op: op, sh: sh, h: h, kind: k})
	}
	// Lock each shard once, in address order (the shards are one array):
	// calls that share shards lock them in the same order, so they cannot
	// deadlock.
	var lb [8]*shard
	locks := lb[:0]
	for i := range ps {
		locks = append(locks, ps[i].sh)
	}
	slices.SortFunc(locks, func(a, b *shard) int {
		return cmp.Compare(uintptr(unsafe.Pointer(a)), uintptr(unsafe.Pointer(b)))
	})
	locks = slices.Compact(locks)
	for {
		for _, sh := range locks {
			sh.mu.Lock()
		}
		now := s.Now()
		err := s.apply(now, ps, res, locks)
		for _, sh := range locks {
			sh.mu.Unlock()
		}
		if err != errNoRoom {
			return err
		}
		var adds int64
		for i := range ps {
			p := &ps[i]
			if p.add {
				adds++
			}
			*p = pending{op: p.op, sh: p.sh, h: p.h, kind: p.kind}
		}
		if err := s.evictAnywhere(now, adds); err != nil {
			return err
		}
	}
}

// takeTAT decides a funnel or leaky bucket take (or applies a charge) on
// entry e without the lock, by compare-and-swap, as Throttle does. It reports false, having changed
// nothing, when e is locked by a call that holds its shard's lock, or
// deleted: the op must then be applied under the lock.
func takeTAT(e *entry, now int64, op *funnel.Op, r *funnel.Result) (bool, error) {
	for {
		tat := e.tat.Load()
		if tat <= locked {
			return false, nil
		}
		newTAT, res, err := decideTAT(now, tat, op)
		if err != nil {
			return true, err
		}
		if (!res.Allowed && op.Kind == funnel.OpTake) || op.N == 0 || e.tat.CompareAndSwap(tat, newTAT) {
			*r = res
			return true, nil
		}
	}
}

// decideTAT applies a take (or a charge) of a funnel or leaky bucket to a
// TAT.
func decideTAT(now, tat int64, op *funnel.Op) (int64, funnel.Result, error) {
	p := op.Limit.GCRA
	if op.Kind == funnel.OpCharge {
		newTAT, r, err := gcra.Charge(now, tat, p, op.N)
		return newTAT, funnel.ResultOf(p, r), err
	}
	if op.Limit.Algorithm == funnel.LeakyBucket {
		newTAT, r, err := algo.LeakyDecide(now, tat, p, op.Limit.DelayUnits, op.N)
		return newTAT, funnel.ResultOfAlgo(p.Limit, r), err
	}
	// Decide, without its call to DecideNoRemaining.
	newTAT, r, err := gcra.DecideNoRemaining(now, tat, p, op.N)
	if err == nil {
		r.Remaining = p.Remaining(r.ResetAfter)
	}
	return newTAT, funnel.ResultOf(p, r), err
}

// apply applies the ops of ps at now. The caller holds the locks of the
// shards held, which are those of ps, each once. It returns errNoRoom,
// having changed nothing, when the call adds keys to a full store and finds
// none to evict without waiting for a lock: the caller lets its locks go,
// calls evictAnywhere and applies ps again.
func (s *Store) apply(now int64, ps []pending, res []funnel.Result, held []*shard) error {
	for i := range ps {
		if err := ps[i].resolve(now); err != nil {
			unlockTATs(ps[:i])
			return err
		}
	}
	switch ps[0].op.Kind { // alone in its call but for a take
	case funnel.OpRefund:
		return ps[0].refund(now, &res[0])
	case funnel.OpPeek:
		err := ps[0].decide(now, &res[0], false)
		ps[0].probe(now, &res[0])
		return err
	}
	many := len(ps) > 1
	all := true
	for i := range ps {
		if err := ps[i].decide(now, &res[i], many); err != nil {
			unlockTATs(ps)
			return err
		}
		// A charge is applied whether the key is over its limit or not.
		all = all && (res[i].Allowed || ps[i].op.Kind == funnel.OpCharge)
	}
	if !all {
		for i := range ps {
			ps[i].refuse(now, &res[i], many)
		}
		return nil
	}
	// Places for the new keys before anything is stored, so that a call
	// that cannot have them can still let its locks go and try again.
	var evict int64
	if s.max > 0 {
		var err error
		if evict, err = s.reserve(now, ps, held); err != nil {
			unlockTATs(ps)
			return err
		}
	}
	for i := range ps {
		ps[i].commit(now)
		if ps[i].op.Kind == funnel.OpCharge {
			ps[i].chargeBan(now, &res[i])
		}
	}
	// Evictions after the commit, and new keys last: making room may evict
	// any key of the shards held, and every existing key has its final
	// state by now.
	if evict > 0 {
		s.evictHeld(now, ps, held, evict)
	}
	for i := range ps {
		s.insertNew(now, &ps[i])
	}
	return nil
}

// reserve marks the ops of ps that add their key and takes their places
// under the bound (see places); it returns errNoRoom when it cannot. A
// call that adds more keys than the bound adds only the keys whose states
// empty last (see cut), and fails with ErrFull if it would have to cut a
// concurrency limit. The store is bounded.
func (s *Store) reserve(now int64, ps []pending, held []*shard) (evict int64, err error) {
	var n, pins int64
	for i := range ps {
		p := &ps[i]
		if p.add = p.adds(now); p.add {
			n++
		}
		if p.kind == kindConc && p.fs != nil && p.fs.kind != kindConc {
			pins++ // an empty state of another kind, about to hold leases
		}
	}
	if n > s.max {
		if n = s.cut(ps, n); n > s.max {
			return 0, ErrFull
		}
	}
	evict, ok := s.places(now, n, held, pins)
	if !ok {
		return 0, errNoRoom
	}
	return evict, nil
}

// adds reports whether p's op adds its key: a take of units on a key the
// store does not hold, admitted.
func (p *pending) adds(now int64) bool {
	switch {
	case p.op.N == 0:
		return false
	case p.kind == kindTAT:
		return p.e == nil && p.tat > now
	}
	return p.fs == nil
}

// cut unmarks the n-max ops of ps that would add the keys whose states
// empty first, when a call adds more keys than the bound: those keys count
// as evicted at once. Concurrency limits are never cut (their leases would
// be lost): it returns max, or more when it would have to cut one.
func (s *Store) cut(ps []pending, n int64) int64 {
	for ; n > s.max; n-- {
		var first *pending
		for i := range ps {
			if p := &ps[i]; p.add && p.kind != kindConc && (first == nil || p.end() < first.end()) {
				first = p
			}
		}
		if first == nil {
			return n
		}
		first.add, first.cut = false, true
	}
	return n
}

// end is the instant at which the state that p's op leaves is empty.
func (p *pending) end() int64 {
	if p.kind == kindTAT {
		return p.tat
	}
	return p.st.expires
}

// evictHeld evicts n keys from the shards held, for the keys that ps add:
// from each new key's shard first, then from any. The places of the keys
// evicted pass to the new keys; any beyond n (makeRoom drops every empty
// state of its sample) are given back. The caller holds the locks of held,
// which hold n keys at least (see places).
func (s *Store) evictHeld(now int64, ps []pending, held []*shard, n int64) {
	for i := 0; i < len(ps) && n > 0; i++ {
		if p := &ps[i]; p.add {
			n -= p.sh.evict(now)
		}
	}
	for _, sh := range held {
		for n > 0 && sh.held() > 0 {
			f := sh.evict(now)
			if f == 0 {
				break // places counted only keys it may evict: not reached
			}
			n -= f
		}
	}
	s.release(-n)
}

// unlockTATs gives the TAT entries of ps back their TAT, unchanged.
func unlockTATs(ps []pending) {
	for i := range ps {
		if e := ps[i].e; e != nil {
			e.tat.Store(ps[i].old)
		}
	}
}

// resolve finds p's key's state, checks its type, and locks its TAT entry.
// A state of another kind that is empty at now is dropped (it reads as
// absent); a live one is ErrWrongType.
func (p *pending) resolve(now int64) error {
	sh, key := p.sh, p.op.Key
	if p.kind == kindTAT {
		if fs := sh.fam[key]; fs != nil {
			if fs.expires > now {
				return errWrongType[fs.kind]
			}
			sh.deleteFam(key, fs)
			sh.expired++
			sh.release(1)
		}
		if e := sh.table.Load().find(p.h, key); e != nil {
			// Deletions hold the lock, so e is live; only the lock-free
			// paths may change its TAT, and they wait once it is locked.
			for {
				tat := e.tat.Load()
				if e.tat.CompareAndSwap(tat, locked) {
					p.e, p.old = e, tat
					break
				}
			}
		}
		return nil
	}
	if sl := sh.table.Load().findSlot(p.h, key); sl != nil {
		e := sl.e.Load()
		for {
			tat := e.tat.Load()
			if tat > now {
				return errWrongType[kindTAT]
			}
			if _, ok := sh.remove(sl, tat); ok {
				sh.expired++
				sh.release(1)
				break
			}
			// A lock-free Throttle charged it meanwhile: look again.
		}
	}
	if fs := sh.fam[key]; fs != nil {
		if fs.expires > now {
			if fs.kind != p.kind {
				return errWrongType[fs.kind]
			}
			p.live = true
		}
		p.fs = fs
	}
	p.st.kind = p.kind
	return nil
}

// The state of p's key before the op, as each algorithm reads it.

func (p *pending) fixed() algo.Fixed {
	if !p.live {
		return algo.Fixed{}
	}
	return algo.Fixed{Start: p.fs.a, N: p.fs.b}
}

func (p *pending) sliding() algo.Sliding {
	if !p.live {
		return algo.Sliding{}
	}
	return algo.Sliding{Start: p.fs.a, Prev: p.fs.b, Cur: p.fs.c}
}

func (p *pending) times() []int64 {
	switch {
	case p.live:
		return p.fs.times
	case p.fs != nil && p.fs.kind == kindLog:
		return p.fs.times[:0] // reuse the space of an empty log
	}
	return nil
}

// unit returns the unit delay of p's concurrency key, 0 when it has none.
func (p *pending) unit() int64 {
	if p.live {
		return p.fs.a
	}
	return 0
}

func (p *pending) leases() []algo.Lease {
	switch {
	case p.live:
		return p.fs.leases
	case p.fs != nil && p.fs.kind == kindConc:
		return p.fs.leases[:0]
	}
	return nil
}

// decide computes p's take into *r and p's new state, changing nothing
// stored (but the leases of a lone acquire, see refuse). many says the call
// has several ops.
func (p *pending) decide(now int64, r *funnel.Result, many bool) error {
	op := p.op
	if op.Limit.Ban > 0 {
		if until, ok := p.sh.bans[op.Key]; ok && until > now {
			p.ban = until - now
		}
	}
	w := op.Limit.Window
	var ar algo.Result
	var err error
	switch {
	case op.Kind == funnel.OpCharge:
		ar, err = p.charge(now, r)
	case p.kind == kindTAT:
		p.tat, *r, err = decideTAT(now, p.old, op)
	case p.kind == kindFixed:
		var st algo.Fixed
		st, ar, err = algo.FixedDecide(now, p.fixed(), w.Count, op.Limit.Span(now), op.N)
		p.st.a, p.st.b = st.Start, st.N
	case p.kind == kindSliding:
		var st algo.Sliding
		st, ar, err = algo.SlidingDecide(now, p.sliding(), w, op.N)
		p.st.a, p.st.b, p.st.c = st.Start, st.Prev, st.Cur
	case p.kind == kindLog && op.Kind == funnel.OpPeek:
		ar, err = algo.LogProbe(now, p.times(), w, op.N)
	case p.kind == kindLog:
		// The entries of the stored log are never modified; those of an
		// ended one are overwritten only by a call that cannot be refused
		// (refused, the state stays, and reads live again after a clock
		// stepped back).
		times := p.times()
		if !p.live && (many || op.Limit.Ban > 0) {
			times = nil
		}
		p.st.times, ar, err = algo.LogDecide(now, times, w, op.N)
	case p.kind == kindConc:
		leases := p.leases()
		if p.fs != nil && (many || op.Limit.Ban > 0) {
			// A grant rewrites the leases in place (an ended state's
			// too); keep the stored ones intact while the call may still
			// be refused.
			leases = append(make([]algo.Lease, 0, len(leases)+1), leases...)
		}
		cp := op.Limit.Conc(p.unit())
		p.st.a = cp.Delay // the key's unit delay from now on
		p.st.leases, ar, err = algo.Acquire(now, leases, cp, op.Lease, op.N)
	}
	if err != nil {
		return err
	}
	if p.kind != kindTAT {
		*r = funnel.ResultOfAlgo(p.op.Limit.Capacity(), ar)
		p.st.expires = expiresAt(now, ar.ResetAfter)
	}
	if p.ban > 0 {
		own := r.RetryAfter
		if r.Allowed && op.Kind != funnel.OpCharge {
			*r = p.peek(now)
			own = 0
		}
		r.Allowed, r.Banned, r.Remaining, r.Delay = false, true, 0, 0
		r.RetryAfter = max(time.Duration(p.ban), own)
	}
	return nil
}

// charge computes p's charge (an OpCharge): p's new state, and its result
// into *r for a TAT, or returned for the others.
func (p *pending) charge(now int64, r *funnel.Result) (algo.Result, error) {
	op := p.op
	w := op.Limit.Window
	var ar algo.Result
	var err error
	switch p.kind {
	case kindTAT:
		var g gcra.Result
		p.tat, g, err = gcra.Charge(now, p.old, op.Limit.GCRA, op.N)
		*r = funnel.ResultOf(op.Limit.GCRA, g)
	case kindFixed:
		var st algo.Fixed
		st, ar, err = algo.FixedCharge(now, p.fixed(), w.Count, op.Limit.Span(now), op.N)
		p.st.a, p.st.b = st.Start, st.N
	case kindSliding:
		var st algo.Sliding
		st, ar, err = algo.SlidingCharge(now, p.sliding(), w, op.N)
		p.st.a, p.st.b, p.st.c = st.Start, st.Prev, st.Cur
	case kindLog:
		// The entries of the stored log are never modified.
		p.st.times, ar, err = algo.LogCharge(now, p.times(), w, op.N)
	}
	return ar, err
}

// chargeBan starts the ban of a charge that left its key over a limit with
// a Ban, unless one is under way; the charge is applied.
func (p *pending) chargeBan(now int64, r *funnel.Result) {
	if p.ban > 0 || r.Allowed || p.op.N == 0 || p.op.Limit.Ban <= 0 {
		return
	}
	until := now + int64(p.op.Limit.Ban)
	if until < now {
		until = math.MaxInt64
	}
	p.sh.banUntil(p.op.Key, until)
	r.Banned, r.Remaining = true, 0
	r.RetryAfter = max(r.RetryAfter, p.op.Limit.Ban)
}

// probe ends an OpPeek, which decide decided as a take: nothing is stored
// and no ban starts; an admitted peek reports the state as it stays, with
// the Delay the take would get.
func (p *pending) probe(now int64, r *funnel.Result) {
	if p.e != nil {
		p.e.tat.Store(p.old)
	}
	if r.Allowed {
		d := r.Delay
		*r = p.peek(now)
		r.Delay = d
	}
}

// peek returns the result of a peek at p's key's state as it was before the
// call: what an admitted op reports when it is not charged.
func (p *pending) peek(now int64) funnel.Result {
	op := p.op
	w := op.Limit.Window
	var ar algo.Result
	switch p.kind {
	case kindTAT:
		_, g, _ := gcra.Decide(now, p.old, op.Limit.GCRA, 0)
		return funnel.ResultOf(op.Limit.GCRA, g)
	case kindFixed:
		_, ar, _ = algo.FixedDecide(now, p.fixed(), w.Count, op.Limit.Span(now), 0)
	case kindSliding:
		_, ar, _ = algo.SlidingDecide(now, p.sliding(), w, 0)
	case kindLog:
		_, ar, _ = algo.LogDecide(now, p.times(), w, 0)
	case kindConc:
		var leases []algo.Lease
		if p.live {
			leases = p.fs.leases
		}
		ar = peekLeases(now, leases, op.Limit.Conc(p.unit()))
	}
	return funnel.ResultOfAlgo(p.op.Limit.Capacity(), ar)
}

// peekLeases is a peek at a concurrency key: it reads leases without
// dropping the expired ones in place, and reports the delay a new lease
// would get.
func peekLeases(now int64, leases []algo.Lease, p algo.ConcParams) algo.Result {
	_, r, _ := algo.Acquire(now, leases, p, "", 0) // a peek changes nothing
	return r
}

// refuse ends a call that was refused: nothing is charged, refusals start
// the bans of their limits, and the ops that were admitted alone report the
// state as it stays.
func (p *pending) refuse(now int64, r *funnel.Result, many bool) {
	if p.e != nil {
		p.e.tat.Store(p.old)
	}
	if p.kind == kindConc && p.live && !many && p.op.Limit.Ban == 0 {
		// A lone acquire decided on the stored leases; whatever it left in
		// them is what must be stored (the live leases are unchanged).
		p.fs.leases = p.st.leases
	}
	switch {
	case p.ban > 0:
	case r.Allowed:
		*r = p.peek(now)
	case p.op.N > 0 && p.op.Limit.Ban > 0:
		until := now + int64(p.op.Limit.Ban)
		if until < now {
			until = math.MaxInt64
		}
		p.sh.banUntil(p.op.Key, until)
		r.Banned, r.Remaining = true, 0
		r.RetryAfter = max(r.RetryAfter, p.op.Limit.Ban)
	}
}

// commit stores p's new state; every op of the call was admitted.
func (p *pending) commit(now int64) {
	switch {
	case p.kind == kindTAT:
		if p.e != nil {
			tat := p.tat
			if p.op.N == 0 {
				// A peek stores nothing, as in Redis: gcra.Decide's TAT
				// of a peek on an empty key is now, which a clock
				// stepped back later would read as a live state.
				tat = p.old
			}
			p.e.tat.Store(tat) // also unlocks it
		}
	case p.fs == nil:
		// a new key: see insertNew
	case p.op.N == 0:
		if p.kind == kindConc && p.live {
			p.fs.leases = p.st.leases
		}
	default:
		p.st.ids = p.fs.ids // the arena of the ids held, and to come
		p.sh.setFam(p.fs, p.st)
		if p.kind == kindConc {
			p.fs.keepID(p.op.Lease)
		}
	}
}

// insertNew adds p's key, when p adds it; its place under the bound is
// taken.
func (s *Store) insertNew(now int64, p *pending) {
	switch {
	case p.cut:
		p.sh.evicted++
	case !p.adds(now):
	case p.kind == kindTAT:
		p.sh.insert(p.h, newEntry(p.op.Key, p.tat))
	default:
		fs := new(fstate)
		*fs = p.st
		if p.kind == kindConc {
			fs.keepID(p.op.Lease)
		}
		p.sh.insertFam(p.op.Key, fs)
	}
}

// keepID makes the id of the lease just granted the state's own, if it is
// still the caller's string (which may alias a buffer the caller reuses):
// it is copied into the state's arena, ids, and the lease's ID points there.
// The arena is filled from its start again when this lease is the only one
// held, and replaced (the ids already in it keep the old one alive) when it
// is full, by one twice the size of the ids held: a key whose leases come
// and go allocates nothing once its arena has grown, and one that holds n
// leases at a time allocates about once every n grants.
func (fs *fstate) keepID(id string) {
	if len(id) == 0 {
		return
	}
	for i := range fs.leases {
		l := &fs.leases[i]
		if l.ID != id || unsafe.StringData(l.ID) != unsafe.StringData(id) {
			continue
		}
		if len(fs.leases) == 1 {
			fs.ids = fs.ids[:0] // no other id lives in the arena
		}
		if len(fs.ids)+len(id) > cap(fs.ids) {
			held := 0
			for _, o := range fs.leases {
				held += len(o.ID)
			}
			fs.ids = make([]byte, 0, max(64, 2*held))
		}
		off := len(fs.ids)
		fs.ids = append(fs.ids, id...)
		l.ID = unsafe.String(&fs.ids[off], len(id))
	}
}

// refund applies an OpRefund (alone in its call) and stores the result. Its
// only error, a latency reported for a lease not held, changes nothing.
func (p *pending) refund(now int64, r *funnel.Result) error {
	op := p.op
	w := op.Limit.Window
	var ar algo.Result
	switch p.kind {
	case kindTAT:
		g := op.Limit.GCRA
		tat := p.old
		if p.e != nil {
			if p.give {
				tat, _ = algo.FunnelGiveBack(now, p.old, g, p.tatAt, op.N)
			} else {
				tat, _ = algo.Refund(now, p.old, g, op.N)
			}
			p.e.tat.Store(tat) // an empty TAT reads as absent; the sweep drops it
		}
		_, gr, _ := gcra.Decide(now, tat, g, 0)
		*r = funnel.ResultOf(g, gr)
		// A refund is Allowed (funnel.Store), even where the state it
		// leaves is beyond this limit's tolerance (charged under a larger
		// one) and a peek would be refused.
		r.Allowed = true
		return nil
	case kindFixed:
		span := op.Limit.Span(now)
		var st algo.Fixed
		if p.give {
			st = algo.FixedGiveBack(p.fixed(), span, p.at, op.N)
			if st == p.fixed() {
				// nothing given back: the state stays, with its expiry
				_, ar, _ = algo.FixedDecide(now, st, w.Count, span, 0)
				return p.given(ar, r)
			}
		} else if op.N <= 0 {
			// A refund of 0 changes nothing: the state stays, with its
			// window and its expiry (under another limit, one that this
			// limit reads as an earlier window's, empty, is still live
			// under the limit that wrote it), as Redis leaves it.
			_, ar, _ = algo.FixedDecide(now, p.fixed(), w.Count, span, 0)
			return p.given(ar, r)
		} else {
			st = algo.FixedRefund(p.fixed(), span, op.N)
		}
		p.st.a, p.st.b = st.Start, st.N
		_, ar, _ = algo.FixedDecide(now, st, w.Count, span, 0)
		if p.give && st.N > 0 && p.live {
			// A give-back keeps the state's window, and its end (that
			// of the limit that wrote it), as Redis keeps them.
			*r = funnel.ResultOfAlgo(p.op.Limit.Capacity(), ar)
			r.Allowed = true
			p.st.expires = p.fs.expires
			p.st.ids = p.fs.ids
			*p.fs = p.st
			return nil
		}
	case kindSliding:
		var st algo.Sliding
		if p.give {
			st = algo.SlidingGiveBack(now, p.sliding(), w, p.at, op.N)
			if st == p.sliding() {
				// nothing given back: the state stays, with its expiry
				_, ar, _ = algo.SlidingDecide(now, st, w, 0)
				return p.given(ar, r)
			}
		} else {
			st = algo.SlidingRefund(now, p.sliding(), w, op.N)
		}
		p.st.a, p.st.b, p.st.c = st.Start, st.Prev, st.Cur
		_, ar, _ = algo.SlidingDecide(now, st, w, 0)
	case kindLog:
		if p.give {
			old := p.times()
			var last int64 // the newest entry's ms, before the give-back
			if len(old) > 0 {
				last = old[len(old)-1]
			}
			p.st.times = algo.LogGiveBack(now, old, w, p.at, op.N)
			if len(p.st.times) == len(old) {
				// nothing given back: the log stays, with its expiry
				_, ar, _ = algo.LogDecide(now, old, w, 0)
				return p.given(ar, r)
			}
			if p.live && len(p.st.times) > 0 {
				// The log keeps the period of the limit that wrote it
				// last (its expiry is its newest entry's plus that
				// period), as Redis keeps its marker.
				_, ar, _ = algo.LogDecide(now, p.st.times, w, 0)
				*r = funnel.ResultOfAlgo(p.op.Limit.Capacity(), ar)
				r.Allowed = true
				p.st.expires = p.fs.expires - last*int64(time.Millisecond) + p.st.times[len(p.st.times)-1]*int64(time.Millisecond)
				p.st.ids = p.fs.ids
				*p.fs = p.st
				return nil
			}
		} else {
			p.st.times = algo.LogRefund(now, p.times(), w, op.N)
		}
		_, ar, _ = algo.LogDecide(now, p.st.times, w, 0)
	case kindConc:
		unit := p.unit()
		if op.Latency > 0 {
			if !p.live || !algo.Holds(now, p.fs.leases, op.Lease) {
				return fmt.Errorf("%w: lease %q of key %q", funnel.ErrLeaseNotHeld, op.Lease, op.Key)
			}
			unit = algo.Leave(unit, int64(op.Latency))
		}
		var held bool
		p.st.leases, held = algo.Release(now, p.leases(), op.Lease)
		p.st.a = unit
		ar = peekLeases(now, p.st.leases, op.Limit.Conc(unit))
		ar.Allowed, ar.Delay = held, 0
	}
	*r = funnel.ResultOfAlgo(p.op.Limit.Capacity(), ar)
	if p.kind != kindConc {
		r.Allowed = true
	}
	if p.fs == nil || !p.live {
		return nil // nothing to give back
	}
	// An emptied state stays until the sweep, reading as absent, so that a
	// key used again soon (a lease taken and released) reuses it.
	p.st.expires = expiresAt(now, ar.ResetAfter)
	p.st.ids = p.fs.ids // the arena of the ids held, and to come
	*p.fs = p.st
	return nil
}

// given ends the give-back of a settle that gave nothing back: the key's
// state stays as it is (a later window's keeps its own expiry), and *r is
// ar, a peek at it.
func (p *pending) given(ar algo.Result, r *funnel.Result) error {
	*r = funnel.ResultOfAlgo(p.op.Limit.Capacity(), ar)
	r.Allowed = true
	return nil
}

// banUntil bans key until the instant until (ns), unless it is banned for
// longer already. The caller holds the lock.
func (sh *shard) banUntil(key string, until int64) {
	if old, ok := sh.bans[key]; ok {
		sh.bans[key] = max(old, until)
		return
	}
	if sh.bans == nil {
		sh.bans = make(map[string]int64)
	}
	sh.bans[strings.Clone(key)] = until
	sh.banPeak = max(sh.banPeak, len(sh.bans))
}

// insertFam adds the family state of key, which is absent and has its place
// under the bound. The caller holds the lock.
func (sh *shard) insertFam(key string, fs *fstate) {
	if sh.fam == nil {
		sh.fam = make(map[string]*fstate)
	}
	sh.fam[strings.Clone(key)] = fs
	sh.famPeak = max(sh.famPeak, len(sh.fam))
	if fs.kind == kindConc {
		sh.conc++
	}
}

// deleteFam drops the family state fs of key. The caller holds the lock.
func (sh *shard) deleteFam(key string, fs *fstate) {
	delete(sh.fam, key)
	if fs.kind == kindConc {
		sh.conc--
	}
}

// setFam replaces the family state fs by st, which may be of another kind
// (fs was then empty). The caller holds the lock.
func (sh *shard) setFam(fs *fstate, st fstate) {
	if fs.kind != st.kind {
		if fs.kind == kindConc {
			sh.conc--
		}
		if st.kind == kindConc {
			sh.conc++
		}
	}
	*fs = st
}

// Bans lists the keys banned now, sorted by key. It never fails.
func (s *Store) Bans(context.Context) ([]funnel.Ban, error) {
	now := s.Now()
	var out []funnel.Ban
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, until := range sh.bans {
			if until > now {
				out = append(out, funnel.Ban{Key: k, Until: time.Unix(0, until)})
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b funnel.Ban) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Unban lifts key's ban and reports whether it was banned. It never fails.
func (s *Store) Unban(_ context.Context, key string) (bool, error) {
	now := s.Now()
	_, sh := s.hash(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	until, ok := sh.bans[key]
	if !ok {
		return false, nil
	}
	delete(sh.bans, key)
	return until > now, nil
}

// shrink returns m, or a copy of it sized for what it holds when it holds
// far less than it once did (a Go map never shrinks), and its new peak.
func shrink[K comparable, V any](m map[K]V, peak int) (map[K]V, int) {
	switch n := len(m); {
	case n == 0:
		return nil, 0
	case peak >= 64 && n*8 < peak:
		c := make(map[K]V, n)
		for k, v := range m {
			c[k] = v
		}
		return c, n
	}
	return m, peak
}

// size estimates the memory held by a family state and its key.
func (fs *fstate) size(key string) int64 {
	const mapEntry = int64(unsafe.Sizeof("") + unsafe.Sizeof((*fstate)(nil)) + 8)
	n := mapEntry + int64(unsafe.Sizeof(*fs)) + int64(len(key))
	n += int64(cap(fs.times)) * 8
	n += int64(cap(fs.leases)) * int64(unsafe.Sizeof(algo.Lease{}))
	n += int64(cap(fs.ids))
	for _, l := range fs.leases {
		if !fs.inArena(l.ID) {
			n += int64(len(l.ID))
		}
	}
	return n
}

// inArena reports whether id lies in the state's current arena of ids.
func (fs *fstate) inArena(id string) bool {
	if len(id) == 0 || cap(fs.ids) == 0 {
		return false
	}
	p, base := uintptr(unsafe.Pointer(unsafe.StringData(id))), uintptr(unsafe.Pointer(unsafe.SliceData(fs.ids)))
	return p >= base && p < base+uintptr(cap(fs.ids))
}

// expiresAt is when a family state that is empty after reset is: now+reset,
// or 0 for a state that is empty now, so that a clock stepped back later
// does not read it as live again (Redis deletes such a key).
func expiresAt(now int64, reset time.Duration) int64 {
	if reset <= 0 {
		return 0
	}
	return now + int64(reset)
}
