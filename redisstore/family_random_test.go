package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/storetest"
	"github.com/redis/go-redis/v9"
)

// familyLimits are the limits the random sequences draw from: every
// algorithm of family.lua, each with small counts (so that refusals are
// frequent) and periods that do and do not divide a second, the leaky
// bucket's three delay modes, calendar days in a zone off UTC by a
// non-whole hour, bans on all but concurrency, two logs without a ban whose
// periods differ (a log empty under one is live under the other), and
// concurrency limits that queue (a burst, with and without a default unit
// delay).
var familyLimits = []funnel.Limit{
	{Algorithm: funnel.GCRA, Count: 10, Period: time.Second, Burst: 4},
	{Algorithm: funnel.GCRA, Count: 2, Period: time.Second},
	{Algorithm: funnel.GCRA, Count: 3, Period: 700*time.Millisecond + 3, Burst: 1, Ban: 2 * time.Second},
	{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 4},
	{Algorithm: funnel.LeakyBucket, Count: 7, Period: time.Second, Burst: 5, DelayUnits: 2},
	{Algorithm: funnel.LeakyBucket, Count: 4, Period: 900 * time.Millisecond, Burst: 3, DelayUnits: funnel.NoDelay, Ban: 700 * time.Millisecond},
	{Algorithm: funnel.FixedWindow, Count: 3, Period: time.Second},
	{Algorithm: funnel.FixedWindow, Count: 5, Period: 250 * time.Millisecond, Ban: 900 * time.Millisecond},
	{Algorithm: funnel.FixedWindow, Count: 4, Calendar: funnel.Daily, Location: kolkata},
	{Algorithm: funnel.SlidingWindow, Count: 4, Period: time.Second},
	{Algorithm: funnel.SlidingWindow, Count: 7, Period: 300 * time.Millisecond, Ban: 2 * time.Second},
	{Algorithm: funnel.SlidingLog, Count: 3, Period: time.Second},
	{Algorithm: funnel.SlidingLog, Count: 5, Period: 200 * time.Millisecond, Ban: time.Second},
	{Algorithm: funnel.SlidingLog, Count: 4, Period: 3 * time.Second},
	{Algorithm: funnel.Concurrency, Count: 2, Period: time.Second},
	{Algorithm: funnel.Concurrency, Count: 3, Period: 450 * time.Millisecond},
	{Algorithm: funnel.Concurrency, Count: 2, Period: time.Second, Burst: 3, UnitDelay: 70*time.Millisecond + 3},
	{Algorithm: funnel.Concurrency, Count: 1, Period: 450 * time.Millisecond, Burst: 2},
	{Algorithm: funnel.Concurrency, Count: 1, Period: 2 * time.Second, Burst: 4, UnitDelay: 300 * time.Millisecond},
}

// concLimits are familyLimits' concurrency limits, and one of a count
// that holds more leases than a key read whole in TestFamilyConcurrencyReads.
var concLimits = append(slices.Clone(familyLimits[len(familyLimits)-5:]),
	funnel.Limit{Algorithm: funnel.Concurrency, Count: 6, Period: 700 * time.Millisecond})

// familyRun drives one random sequence through two stores on one clock.
type familyRun struct {
	t     *testing.T
	r     *rand.Rand
	ctx   context.Context
	clock *atomic.Int64
	redis *redisstore.Store
	// alt, when set, is a second Redis store on the same keys, which each
	// call goes through half of the time instead of redis.
	alt    *redisstore.Store
	client *redis.Client
	prefix string
	mem    *memstore.Store
	keys   []string
	limits []funnel.Checked // the limit of each key
	where  string           // the seed and sequence, for messages
	steps  []string         // what was done so far, for messages
	counts map[string]int   // outcomes, to check that the sequences cover them
	made   []made           // the reservations admitted so far
	back   time.Duration    // when positive, the clock is at times stepped back by up to this
	// from, when set, is the limits the keys take, in place of
	// familyLimits.
	from []funnel.Limit
}

// limit returns one of the limits the keys may take, at random.
func (f *familyRun) limit() funnel.Checked {
	from := f.from
	if from == nil {
		from = familyLimits
	}
	return f.check(from[f.r.IntN(len(from))])
}

// made is a reservation admitted, that a settle may name.
type made struct {
	key, id  string
	estimate int64
}

// TestFamilyAgainstMemstore runs many random sequences of the limiter
// family (every algorithm, random quantities, refunds, lease acquires and
// releases, several limits at once, bans, Throttle on shared funnel keys,
// Reset, Unban, a key reused under another algorithm, reservations and
// their settles) at random instants of an injected clock, through the
// Redis store's Do, Reserve and Settle (family.lua) and through memstore, which runs package algo's decisions, and checks that every
// result and every error agree, and that the state agrees after each step:
// each key's TTL, and the list of bans.
func TestFamilyAgainstMemstore(t *testing.T) {
	t.Parallel()
	counts := runFamily(t, 2026, 160, 70, func(*familyRun) {})
	for _, what := range []string{
		"allowed gcra", "refused gcra", "allowed leaky_bucket", "refused leaky_bucket",
		"allowed fixed_window", "refused fixed_window", "allowed sliding_window", "refused sliding_window",
		"allowed sliding_log", "refused sliding_log", "allowed concurrency", "refused concurrency",
		"banned", "refund", "release held", "release not held", "all-or-nothing refused", "all-or-nothing allowed",
		"delayed concurrency", "release latency", "latency not held",
		"wrong type", "throttle", "charge within", "charge into debt", "peek n allowed", "peek n refused",
		"reserve allowed", "reserve refused", "reserve id in use", "settle unknown", "settle again",
		"settle below", "settle above", "settle at",
	} {
		if counts[what] < 10 {
			t.Errorf("the sequences do not cover %q well: %d times", what, counts[what])
		}
	}
}

// TestFamilyClockStepsBack runs the random sequences of
// TestFamilyAgainstMemstore with the clock stepped back now and then, by up
// to 2 s, and checks that the stores agree: both follow the family's rules
// for a clock stepped back (a state of a later window counts as the
// current one's, a TAT ahead of now limits more; an op that writes nothing
// leaves an ended state as it is, which then reads live again; a write
// that leaves a funnel's TAT at now forgets it). Seeds 1 to 6 found the
// differences that TestClockBack* check.
func TestFamilyClockStepsBack(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 6; seed++ {
		runFamily(t, seed, 40, 70, func(f *familyRun) { f.back = 2 * time.Second })
	}
}

// rs returns the Redis store a call goes through: redis, or alt half of
// the time when it is set.
func (f *familyRun) rs() *redisstore.Store {
	if f.alt != nil && f.r.IntN(2) == 0 {
		return f.alt
	}
	return f.redis
}

// TestFamilyConcurrencyReads runs TestFamilyAgainstMemstore's sequences,
// on concurrency limits only, with conc.lua reading a concurrency key a
// command per number it needs (whole only without leases), whole up to 2
// leases (so that keys cross from one read to the other), with the clock
// stepped back now and then, and through one of two stores at random, one
// of each read.
func TestFamilyConcurrencyReads(t *testing.T) {
	t.Parallel()
	for i, mode := range []struct {
		name  string
		read  int
		back  time.Duration
		mixed bool
	}{{"by command", 0, 0, false}, {"whole up to 2", 2, 2 * time.Second, false}, {"mixed", 0, 0, true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			counts := runFamily(t, 4040+uint64(i), 80, 70, func(f *familyRun) {
				if mode.mixed {
					f.alt = redisstore.New(f.client, redisstore.Options{Now: f.clock.Load, Prefix: f.prefix, Timeout: 20 * time.Second})
				}
				f.back = mode.back
				f.from = concLimits
				redisstore.SetConcRead(f.redis, mode.read)
			})
			for _, what := range []string{"allowed concurrency", "refused concurrency", "release held", "release not held",
				"delayed concurrency", "release latency", "latency not held"} {
				if counts[what] < 10 {
					t.Errorf("the sequences do not cover %q well: %d times", what, counts[what])
				}
			}
		})
	}
}

// TestFamilyLogFormats runs TestFamilyAgainstMemstore's sequences with
// the sliding logs in each of Redis's formats: every log in a sorted set
// (as older versions wrote them); logs of a count up to 4 packed and
// larger ones in sorted sets, so that a key whose limit changes among the
// logs' counts of 3, 4 and 5 turns from one into the other; and each call
// through one of two stores at random, one that packs logs and one that
// never does (a fleet upgraded while it runs).
func TestFamilyLogFormats(t *testing.T) {
	t.Parallel()
	for i, mode := range []struct {
		name  string
		pack  int
		mixed bool
	}{{"sorted sets", 0, false}, {"packed up to 4", 4, false}, {"mixed", 0, true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			counts := runFamily(t, 3030+uint64(i), 80, 70, func(f *familyRun) {
				if mode.mixed {
					f.alt = redisstore.New(f.client, redisstore.Options{Now: f.clock.Load, Prefix: f.prefix, Timeout: 20 * time.Second})
				}
				redisstore.SetLogPack(f.redis, mode.pack)
			})
			for _, what := range []string{"allowed sliding_log", "refused sliding_log", "refund", "reserve allowed", "settle below"} {
				if counts[what] < 10 {
					t.Errorf("the sequences do not cover %q well: %d times", what, counts[what])
				}
			}
		})
	}
}

// runFamily runs sequences random sequences of steps steps from seed
// through the Redis store and memstore (see TestFamilyAgainstMemstore),
// each set by opt, and returns the outcomes counted.
func runFamily(t *testing.T, seed uint64, sequences, steps int, opt func(*familyRun)) map[string]int {
	srv := redistest.StartServer(t)
	client := srv.Client()
	counts := map[string]int{}
	for sq := 0; sq < sequences; sq++ {
		var clock atomic.Int64
		clock.Store(storetestDay0 + rand.New(rand.NewPCG(seed, uint64(sq))).Int64N(int64(24*time.Hour)))
		mem := memstore.New(memstore.Options{Now: clock.Load, SweepInterval: -1})
		f := &familyRun{
			t:      t,
			r:      rand.New(rand.NewPCG(seed, 1000+uint64(sq))),
			ctx:    context.Background(),
			clock:  &clock,
			redis:  redisstore.New(client, redisstore.Options{Now: clock.Load, Prefix: fmt.Sprintf("fam%d.%d:", seed, sq), Timeout: 20 * time.Second}),
			client: client,
			prefix: fmt.Sprintf("fam%d.%d:", seed, sq),
			mem:    mem,
			where:  fmt.Sprintf("seed %d, sequence %d", seed, sq),
			counts: counts,
		}
		opt(f)
		for i := range 1 + f.r.IntN(3) {
			f.keys = append(f.keys, fmt.Sprintf("{s%d}%c", sq, 'a'+i))
			f.limits = append(f.limits, f.limit())
		}
		for range steps {
			f.step()
		}
		mem.Close()
	}
	t.Logf("seed %d: %v", seed, counts)
	return counts
}

// storetestDay0 is a Monday midnight UTC in 2026, as storetest's Day0.
const storetestDay0 int64 = 1_795_392_000_000_000_000

func (f *familyRun) check(l funnel.Limit) funnel.Checked {
	c, err := l.Check()
	if err != nil {
		f.t.Fatalf("%v: %v", l, err)
	}
	return c
}

// advance moves the clock: mostly by a fraction of a second, at times to
// the nanosecond before or at a millisecond or window boundary, or at the
// end of a ban or a key's state (or a millisecond or a nanosecond before),
// now and then by hours (past every state, and across calendar days).
func (f *familyRun) advance() {
	now := f.clock.Load()
	if f.back > 0 && f.r.IntN(8) == 0 {
		// a clock stepped back
		f.clock.Store(now - 1 - f.r.Int64N(int64(f.back)))
		return
	}
	switch f.r.IntN(10) {
	case 0: // stay
	case 1: // one nanosecond
		now++
	case 2: // to a millisecond, or the nanosecond before it
		now += int64(time.Millisecond) - now%int64(time.Millisecond) - f.r.Int64N(2)
	case 3: // to a 50 ms boundary (the periods' common steps), give or take a ns
		step := int64(50 * time.Millisecond)
		now += step - now%step + f.r.Int64N(3) - 1
	case 4:
		// to the end of a ban or of a key's state, or just before it
		var ends []int64
		if bans, err := f.mem.Bans(f.ctx); err == nil {
			for _, b := range bans {
				ends = append(ends, b.Until.UnixNano())
			}
		}
		for _, key := range f.keys {
			if ttl, ok, err := f.mem.TTL(f.ctx, key); err == nil && ok {
				ends = append(ends, now+int64(ttl))
			}
		}
		if len(ends) > 0 {
			now = ends[f.r.IntN(len(ends))] - []int64{int64(time.Millisecond), 1, 0, 0}[f.r.IntN(4)]
			break
		}
		fallthrough
	case 5:
		if f.r.IntN(8) == 0 {
			now += f.r.Int64N(int64(30 * time.Hour))
			break
		}
		fallthrough
	default:
		now += f.r.Int64N(int64(600 * time.Millisecond))
	}
	f.clock.Store(now)
}

// step advances the clock, applies one random operation to both stores and
// compares what they answer and the state they leave.
func (f *familyRun) step() {
	f.advance()
	i := f.r.IntN(len(f.keys))
	key, c := f.keys[i], f.limits[i]
	switch x := f.r.IntN(30); {
	case x < 9:
		f.do(f.take(key, c))
	case x < 13:
		f.do(f.refund(key, c))
	case x < 15 && len(f.keys) > 1:
		// Several limits at once, all or nothing, in a random order.
		var ops []funnel.Op
		for _, j := range f.r.Perm(len(f.keys))[:2+f.r.IntN(len(f.keys)-1)] {
			ops = append(ops, f.take(f.keys[j], f.limits[j]))
		}
		f.do(ops...)
	case x == 15:
		// The key under another limit: another algorithm's state is an error
		// while live, and reads as absent once empty.
		other := f.limit()
		if f.r.IntN(2) == 0 {
			f.limits[i] = other // from now on
		}
		f.do(f.take(key, other))
	case x == 16 && (c.Algorithm == funnel.GCRA || c.Algorithm == funnel.LeakyBucket):
		q := f.r.Int64N(c.GCRA.Limit+2) - f.r.Int64N(2)*(c.GCRA.Limit+1)
		f.note("Throttle %q %d", key, q)
		got, gerr := storetest.Throttle(f.ctx, f.rs(), key, c.GCRA, q)
		want, werr := storetest.Throttle(f.ctx, f.mem, key, c.GCRA, q)
		f.compare("Throttle", []funnel.Result{got}, gerr, []funnel.Result{want}, werr)
		f.counts["throttle"]++
	case x == 17:
		f.note("Reset %q", key)
		got, gerr := f.rs().Reset(f.ctx, key)
		want, werr := f.mem.Reset(f.ctx, key)
		if got != want || !sameError(gerr, werr) {
			f.fail("Reset: Redis %v, %v; memstore %v, %v", got, gerr, want, werr)
		}
	case x == 18:
		f.note("Unban %q", key)
		got, gerr := f.rs().Unban(f.ctx, key)
		want, werr := f.mem.Unban(f.ctx, key)
		if got != want || !sameError(gerr, werr) {
			f.fail("Unban: Redis %v, %v; memstore %v, %v", got, gerr, want, werr)
		}
	case x == 20 || x == 21:
		f.do(f.charge(key, c))
	case x == 22:
		// A peek of n units, at times above the limit (or of leases: an
		// error).
		f.do(funnel.Op{Kind: funnel.OpPeek, Key: key, Limit: c, N: f.r.Int64N(c.Capacity() + 2)})
	case x == 24 || x == 25:
		f.reserve(key, c)
	case x >= 26 && x <= 29:
		f.settle(key)
	default:
		f.do(funnel.Op{Kind: funnel.OpTake, Key: key, Limit: c}) // a peek
	}
	f.compareState()
}

// take returns a take of a random quantity, mostly within the count; for
// concurrency, an acquire of one of a few lease ids (at times 0 or 2 units).
func (f *familyRun) take(key string, c funnel.Checked) funnel.Op {
	op := funnel.Op{Kind: funnel.OpTake, Key: key, Limit: c}
	if c.Algorithm == funnel.Concurrency {
		op.N = []int64{1, 1, 1, 1, 1, 0, 2}[f.r.IntN(7)]
		op.Lease = string(rune('p' + f.r.IntN(6)))
		return op
	}
	count := c.Count
	if c.Algorithm == funnel.GCRA || c.Algorithm == funnel.LeakyBucket {
		count = c.GCRA.Limit
	}
	op.N = 1
	if f.r.IntN(3) == 0 {
		op.N = f.r.Int64N(count + 2)
	}
	return op
}

// charge returns a charge of a random quantity: mostly within a few
// limits, at times far above (a debt of hours), or a fixed window's or a
// sliding window's count near its bound.
func (f *familyRun) charge(key string, c funnel.Checked) funnel.Op {
	op := funnel.Op{Kind: funnel.OpCharge, Key: key, Limit: c, N: f.r.Int64N(3*c.Capacity() + 2)}
	switch f.r.IntN(12) {
	case 0:
		op.N = f.r.Int64N(1 << 20)
	case 1:
		op.N = algo.MaxCount - f.r.Int64N(3)
	}
	return op
}

// refund returns a refund of a random quantity (at times past an empty
// state); for concurrency, a release, as Limiter.Release sends it or with
// the whole limit, half the time with a latency (at times out of range).
func (f *familyRun) refund(key string, c funnel.Checked) funnel.Op {
	op := funnel.Op{Kind: funnel.OpRefund, Key: key, Limit: c}
	if c.Algorithm == funnel.Concurrency {
		op.Lease = string(rune('p' + f.r.IntN(6)))
		if f.r.IntN(2) == 0 {
			op.Limit = funnel.Checked{Limit: funnel.Limit{Algorithm: funnel.Concurrency}}
		}
		switch f.r.IntN(8) {
		case 0, 1, 2:
			op.Latency = time.Duration(f.r.Int64N(int64(500 * time.Millisecond)))
		case 3:
			op.Latency = []time.Duration{1, algo.MaxUnitDelay, -1, algo.MaxUnitDelay + 1}[f.r.IntN(4)]
		}
		return op
	}
	op.N = f.r.Int64N(c.Count + 3)
	return op
}

// reserve makes a reservation of a random estimate (at times above the
// limit) under one of a few ids (at times one in use), with a TTL of a
// few milliseconds to a minute, or a bad one.
func (f *familyRun) reserve(key string, c funnel.Checked) {
	est := f.r.Int64N(c.Capacity()+1) + 1
	if f.r.IntN(10) == 0 {
		est = f.r.Int64N(3) - 1 // 0 and -1: bad
	}
	id := "r" + strconv.Itoa(f.r.IntN(4))
	ttl := []time.Duration{time.Minute, time.Minute, time.Minute, 400 * time.Millisecond, 2 * time.Millisecond, time.Second + 1}[f.r.IntN(6)]
	f.note("Reserve %q %d as %q for %v under %v", key, est, id, ttl, c.Limit)
	got, gerr := f.rs().Reserve(f.ctx, key, c, est, id, ttl)
	want, werr := f.mem.Reserve(f.ctx, key, c, est, id, ttl)
	f.compare("Reserve", []funnel.Result{got}, gerr, []funnel.Result{want}, werr)
	switch {
	case errors.Is(werr, funnel.ErrInvalidLimit) && c.Algorithm != funnel.Concurrency && est > 0 && ttl%time.Millisecond == 0:
		f.counts["reserve id in use"]++
	case werr == nil && want.Allowed && !want.Fallback:
		f.counts["reserve allowed"]++
		f.made = append(f.made, made{key, id, est})
	case werr == nil:
		f.counts["reserve refused"]++
	}
}

// settle settles a reservation made before (perhaps settled, or ended)
// or one of the key's few ids (or another key's), at a random actual
// amount: below, at or above the estimate, at times far above (a debt that
// does not fit) or negative.
func (f *familyRun) settle(key string) {
	id := "r" + strconv.Itoa(f.r.IntN(4))
	if f.r.IntN(10) == 0 {
		key = f.keys[f.r.IntN(len(f.keys))] // perhaps another key's
	}
	actual := f.r.Int64N(12)
	if len(f.made) > 0 && f.r.IntN(8) > 0 {
		m := f.made[len(f.made)-1-f.r.IntN(min(len(f.made), 3))]
		key, id = m.key, m.id
		actual = max(m.estimate+[]int64{0, 0, -1, -2, -3, -m.estimate, 1, 3}[f.r.IntN(8)], 0)
	}
	switch f.r.IntN(12) {
	case 0:
		actual = -1
	case 1:
		actual = math.MaxInt64 - f.r.Int64N(3)
	case 2:
		actual = f.r.Int64N(1 << 20)
	}
	f.note("Settle %q %q at %d", key, id, actual)
	got, gerr := f.rs().Settle(f.ctx, key, id, actual)
	want, werr := f.mem.Settle(f.ctx, key, id, actual)
	if !sameError(gerr, werr) || got != want {
		f.fail("Settle:\n Redis    %+v, %v\n memstore %+v, %v", got, gerr, want, werr)
	}
	switch {
	case errors.Is(werr, funnel.ErrUnknownReservation):
		f.counts["settle unknown"]++
	case werr != nil:
	case want.Again:
		f.counts["settle again"]++
	case want.Actual < want.Estimate:
		f.counts["settle below"]++
	case want.Actual > want.Estimate:
		f.counts["settle above"]++
	default:
		f.counts["settle at"]++
	}
}

// do applies ops to both stores and compares the results and errors.
func (f *familyRun) do(ops ...funnel.Op) {
	f.note("Do %s", describeOps(ops))
	got := make([]funnel.Result, len(ops))
	want := make([]funnel.Result, len(ops))
	gerr := f.rs().Do(f.ctx, ops, got)
	werr := f.mem.Do(f.ctx, ops, want)
	f.compare("Do", got, gerr, want, werr)
	f.count(ops, want, werr)
}

func (f *familyRun) compare(what string, got []funnel.Result, gerr error, want []funnel.Result, werr error) {
	if !sameError(gerr, werr) {
		f.fail("%s: Redis's error %v, memstore's %v", what, gerr, werr)
	}
	if werr != nil {
		return
	}
	for i := range want {
		if got[i] != want[i] {
			f.fail("%s: result %d\n Redis    %+v\n memstore %+v", what, i, got[i], want[i])
		}
	}
}

// compareState compares each key's TTL and the bans.
func (f *familyRun) compareState() {
	for _, key := range f.keys {
		got, gok, gerr := f.rs().TTL(f.ctx, key)
		want, wok, werr := f.mem.TTL(f.ctx, key)
		if got != want || gok != wok || !sameError(gerr, werr) {
			f.fail("TTL of %q: Redis %v, %v, %v; memstore %v, %v, %v", key, got, gok, gerr, want, wok, werr)
		}
	}
	got, gerr := f.rs().Bans(f.ctx)
	want, werr := f.mem.Bans(f.ctx)
	if gerr != nil || werr != nil {
		f.fail("Bans: %v, %v", gerr, werr)
	}
	if !slices.EqualFunc(got, want, func(a, b funnel.Ban) bool { return a.Key == b.Key && a.Until.Equal(b.Until) }) {
		f.fail("Bans: Redis %v; memstore %v", got, want)
	}
}

// count records the outcomes of a Do call.
func (f *familyRun) count(ops []funnel.Op, res []funnel.Result, err error) {
	switch {
	case errors.Is(err, funnel.ErrWrongType):
		f.counts["wrong type"]++
		return
	case errors.Is(err, funnel.ErrLeaseNotHeld):
		f.counts["latency not held"]++
		return
	case err != nil:
		return
	}
	if len(ops) > 1 {
		refused := slices.ContainsFunc(res[:len(ops)], func(r funnel.Result) bool { return !r.Allowed })
		f.counts[map[bool]string{true: "all-or-nothing refused", false: "all-or-nothing allowed"}[refused]]++
	}
	for i, op := range ops {
		r := res[i]
		switch {
		case op.Kind == funnel.OpRefund && op.Limit.Algorithm == funnel.Concurrency:
			f.counts[map[bool]string{true: "release held", false: "release not held"}[r.Allowed]]++
			if r.Allowed && op.Latency > 0 {
				f.counts["release latency"]++
			}
		case op.N > 0 && r.Allowed && r.Delay > 0 && op.Limit.Algorithm == funnel.Concurrency:
			f.counts["delayed concurrency"]++
		case op.Kind == funnel.OpRefund:
			f.counts["refund"]++
		case op.Kind == funnel.OpCharge:
			f.counts[map[bool]string{true: "charge within", false: "charge into debt"}[r.Allowed]]++
		case op.Kind == funnel.OpPeek:
			f.counts[map[bool]string{true: "peek n allowed", false: "peek n refused"}[r.Allowed]]++
		case r.Banned:
			f.counts["banned"]++
		case op.N > 0:
			f.counts[map[bool]string{true: "allowed ", false: "refused "}[r.Allowed]+op.Limit.Algorithm.String()]++
		}
	}
}

// sameError reports whether two errors are alike: both nil, or both of the
// same kind.
func sameError(a, b error) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	for _, kind := range []error{funnel.ErrWrongType, funnel.ErrInvalidQuantity, funnel.ErrInvalidLimit, gcra.ErrOverflow, algo.ErrOverflow, funnel.ErrDuplicateKey, funnel.ErrLeaseNotHeld, funnel.ErrUnknownReservation} {
		if errors.Is(a, kind) != errors.Is(b, kind) {
			return false
		}
	}
	return true
}

// note records a step, for the message of a failure.
func (f *familyRun) note(format string, args ...any) {
	f.steps = append(f.steps, fmt.Sprintf("at %d: ", f.clock.Load()-storetestDay0)+fmt.Sprintf(format, args...))
}

// fail reports the last steps of the sequence and stops the test.
func (f *familyRun) fail(format string, args ...any) {
	f.t.Helper()
	last := f.steps[max(0, len(f.steps)-40):]
	f.t.Fatalf("%s, step %d: %s\nlast steps (ns after Day0):\n  %s", f.where, len(f.steps), fmt.Sprintf(format, args...),
		strings.Join(last, "\n  "))
}

func describeOps(ops []funnel.Op) string {
	s := ""
	for i, op := range ops {
		if i > 0 {
			s += "; "
		}
		verb := [...]string{funnel.OpTake: "take", funnel.OpRefund: "refund", funnel.OpCharge: "charge", funnel.OpPeek: "peek"}[op.Kind]
		s += fmt.Sprintf("%s %d of %q under %v", verb, op.N, op.Key, op.Limit.Limit)
		if op.Lease != "" {
			s += fmt.Sprintf(" lease %q", op.Lease)
		}
		if op.Latency != 0 {
			s += fmt.Sprintf(" latency %d", op.Latency)
		}
	}
	return s
}

// TestConcurrencyExpiryCoversEveryLease checks that a concurrency key does
// not expire before the latest of its leases when an acquire under a
// shorter period renews it (a limit whose period was shortened): the
// key's expiry follows the latest lease, not the new one; and that a key
// of one lease expires with it. Both on a test clock (whose expiries carry
// a slack of 10 minutes) and on Redis's own.
func TestConcurrencyExpiryCoversEveryLease(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client()
	var clock atomic.Int64
	clock.Store(storetestDay0)
	ctx := context.Background()
	long := funnel.Limit{Algorithm: funnel.Concurrency, Count: 5, Period: 10 * time.Second}
	short := funnel.Limit{Algorithm: funnel.Concurrency, Count: 5, Period: time.Second}
	for _, st := range []struct {
		name  string
		opts  redisstore.Options
		slack time.Duration
	}{
		{"test clock", redisstore.Options{Now: clock.Load, Prefix: "exp:"}, 10 * time.Minute},
		{"Redis's clock", redisstore.Options{Prefix: "exp:"}, 0},
	} {
		lim := funnel.New(redisstore.New(client, st.opts))
		pttl := func(key string) time.Duration {
			t.Helper()
			d, err := client.PTTL(ctx, "exp:"+key).Result()
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		for _, c := range []struct {
			name  string
			first funnel.Limit
		}{{"long then short", long}, {"short then long", short}} {
			key := strings.ReplaceAll(st.name+" "+c.name, " ", "-")
			_, r, err := lim.Acquire(ctx, key, c.first)
			if err != nil || !r.Allowed {
				t.Fatalf("%s, %s: first acquire: %+v, %v", st.name, c.name, r, err)
			}
			// the result, from the script's own now (Redis's, in µs, or the
			// injected one)
			if want := c.first.Period; r.ResetAfter < want-time.Millisecond || r.ResetAfter > want {
				t.Errorf("%s, %s: the first acquire resets after %v, want %v", st.name, c.name, r.ResetAfter, want)
			}
			if want, d := c.first.Period+st.slack, pttl(key); d < want-time.Second || d > want {
				t.Errorf("%s, %s: the key of one lease expires in %v, want %v", st.name, c.name, d, want)
			}
			second := long
			if c.first == long {
				second = short
			}
			_, r, err = lim.Acquire(ctx, key, second)
			if err != nil || !r.Allowed {
				t.Fatalf("%s, %s: second acquire: %+v, %v", st.name, c.name, r, err)
			}
			if want := 10 * time.Second; r.ResetAfter < want-time.Second || r.ResetAfter > want {
				t.Errorf("%s, %s: the second acquire resets after %v, want the latest lease's %v", st.name, c.name, r.ResetAfter, want)
			}
			if want, d := 10*time.Second+st.slack, pttl(key); d < want-time.Second || d > want {
				t.Errorf("%s, %s: the key expires in %v, want the latest lease's %v", st.name, c.name, d, want)
			}
		}
	}
}

// TestBanKeyExpiresWithTheBan checks that the key of a ban that a refusal
// starts expires when the ban ends, rounded up to the millisecond (plus the
// test clock's slack), on every algorithm whose limits take a ban.
func TestBanKeyExpiresWithTheBan(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client()
	var clock atomic.Int64
	clock.Store(storetestDay0)
	lim := funnel.New(redisstore.New(client, redisstore.Options{Now: clock.Load, Prefix: "banexp:"}))
	ctx := context.Background()
	ban := 1500*time.Millisecond + 1
	for _, l := range []funnel.Limit{
		{Algorithm: funnel.GCRA, Count: 1, Period: time.Second, Ban: ban},
		{Algorithm: funnel.LeakyBucket, Count: 1, Period: time.Second, Ban: ban},
		{Algorithm: funnel.FixedWindow, Count: 1, Period: time.Second, Ban: ban},
		{Algorithm: funnel.SlidingWindow, Count: 1, Period: time.Second, Ban: ban},
		{Algorithm: funnel.SlidingLog, Count: 1, Period: time.Second, Ban: ban},
	} {
		key := l.Algorithm.String()
		for i, want := range []bool{true, false} {
			if r, err := lim.Allow(ctx, key, l); err != nil || r.Allowed != want {
				t.Fatalf("%v: take %d: %+v, %v; want allowed %v", l.Algorithm, i+1, r, err, want)
			}
		}
		bans, err := client.Keys(ctx, "*banexp:ban:"+key).Result()
		if err != nil || len(bans) != 1 {
			t.Fatalf("%v: ban keys %q, %v", l.Algorithm, bans, err)
		}
		pttl, err := client.PTTL(ctx, bans[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		if want := 1501*time.Millisecond + 10*time.Minute; pttl > want || pttl < want-time.Second {
			t.Errorf("%v: the ban's key expires in %v, want %v", l.Algorithm, pttl, want)
		}
	}
}

// TestReservationsAgainstMemstore runs random sequences of reserves,
// settles, takes and charges on keys of every algorithm but concurrency,
// at times under another limit of the key's algorithm (more reservations than TestFamilyAgainstMemstore draws, on keys with
// hash tags, braces that make none, and bytes that are not text) through
// the Redis store and memstore, and checks that they agree as
// TestFamilyAgainstMemstore does.
func TestReservationsAgainstMemstore(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	client := srv.Client()
	const seed, sequences, steps = 2027, 120, 60
	var limits []funnel.Limit
	for _, l := range familyLimits {
		if l.Algorithm != funnel.Concurrency {
			limits = append(limits, l)
		}
	}
	counts := map[string]int{}
	for sq := 0; sq < sequences; sq++ {
		var clock atomic.Int64
		clock.Store(storetestDay0 + rand.New(rand.NewPCG(seed, uint64(sq))).Int64N(int64(24*time.Hour)))
		mem := memstore.New(memstore.Options{Now: clock.Load, SweepInterval: -1})
		f := &familyRun{
			t:      t,
			r:      rand.New(rand.NewPCG(seed, 1000+uint64(sq))),
			ctx:    context.Background(),
			clock:  &clock,
			redis:  redisstore.New(client, redisstore.Options{Now: clock.Load, Prefix: "rsv" + strconv.Itoa(sq) + ":", Timeout: 20 * time.Second}),
			mem:    mem,
			where:  fmt.Sprintf("seed %d, sequence %d", seed, sq),
			counts: counts,
		}
		for i := range 1 + f.r.IntN(3) {
			form := []string{"{s%d}%c", "s%d\x00{}%c\xff", "%[2]c{s%[1]d}{x}\r\n", "s%d}{%c"}[f.r.IntN(4)]
			f.keys = append(f.keys, fmt.Sprintf(form, sq, 'a'+i))
			f.limits = append(f.limits, f.check(limits[f.r.IntN(len(limits))]))
		}
		for range steps {
			f.advance()
			i := f.r.IntN(len(f.keys))
			key, c := f.keys[i], f.limits[i]
			switch x := f.r.IntN(11); {
			case x < 3:
				f.do(f.take(key, c))
			case x == 3:
				f.do(f.charge(key, c))
			case x == 10:
				// The key under another limit of its algorithm (another
				// period, count or ban), from now on at times: the
				// reservations made keep theirs.
				var same []funnel.Limit
				for _, l := range limits {
					if l.Algorithm == c.Algorithm && l != c.Limit {
						same = append(same, l)
					}
				}
				if len(same) > 0 {
					c = f.check(same[f.r.IntN(len(same))])
					if f.r.IntN(2) == 0 {
						f.limits[i] = c
					}
				}
				f.do(f.take(key, c))
			case x < 7:
				f.reserve(key, c)
			default:
				f.settle(key)
			}
			f.compareState()
		}
		mem.Close()
	}
	t.Logf("seed %d: %v", seed, counts)
	for _, what := range []string{"reserve allowed", "reserve refused", "settle below", "settle above", "settle again", "settle unknown"} {
		if counts[what] < 10 {
			t.Errorf("the sequences do not cover %q well: %d times", what, counts[what])
		}
	}
}
