package redisstore_test

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/redisstore"
)

// parityStep is one op of a fixed sequence run through both stores at an
// offset from the sequence's start (offsets may go back: a clock stepped
// back), and the RetryAfter the stores must answer (unchecked when
// negative).
type parityStep struct {
	at    time.Duration
	op    funnel.Op
	retry time.Duration
}

// runParity runs steps through the Redis store and memstore on one clock
// and checks that they answer alike and leave the same state (as
// TestFamilyAgainstMemstore checks), and that they answer each step's
// RetryAfter.
func runParity(t *testing.T, keys []string, steps []parityStep) {
	t.Helper()
	srv := redistest.StartServer(t)
	var clock atomic.Int64
	start := storetestDay0 + int64(10*time.Hour)
	clock.Store(start)
	mem := memstore.New(memstore.Options{Now: clock.Load, SweepInterval: -1})
	defer mem.Close()
	f := &familyRun{
		t:      t,
		r:      rand.New(rand.NewPCG(1, 1)),
		ctx:    context.Background(),
		clock:  &clock,
		redis:  redisstore.New(srv.Client(), redisstore.Options{Now: clock.Load, Prefix: "parity:", Timeout: 20 * time.Second}),
		mem:    mem,
		keys:   keys,
		where:  t.Name(),
		counts: map[string]int{},
	}
	for i, s := range steps {
		clock.Store(start + int64(s.at))
		f.note("Do %s", describeOps([]funnel.Op{s.op}))
		got := make([]funnel.Result, 1)
		want := make([]funnel.Result, 1)
		gerr := f.redis.Do(f.ctx, []funnel.Op{s.op}, got)
		werr := f.mem.Do(f.ctx, []funnel.Op{s.op}, want)
		f.compare("Do", got, gerr, want, werr)
		if s.retry >= 0 && want[0].RetryAfter != s.retry {
			t.Errorf("step %d: RetryAfter %v, want %v (%+v)", i+1, want[0].RetryAfter, s.retry, want[0])
		}
		f.compareState()
	}
}

// TestBannedLogWaitsForItsOwnRetry checks that a sliding log refused under
// its ban answers the later of the ban's end and the log's own RetryAfter
// (funnel.Limit.Ban): Redis answered the ban's alone.
func TestBannedLogWaitsForItsOwnRetry(t *testing.T) {
	l := funnel.Limit{Algorithm: funnel.SlidingLog, Count: 1, Period: 3 * time.Second, Ban: time.Second}
	c, err := l.Check()
	if err != nil {
		t.Fatal(err)
	}
	take := funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: c, N: 1}
	peek := funnel.Op{Kind: funnel.OpPeek, Key: "log", Limit: c, N: 1}
	runParity(t, []string{"log"}, []parityStep{
		{0, take, 0},
		{100 * time.Millisecond, take, 2900 * time.Millisecond}, // refused: the ban starts, 1 s
		{500 * time.Millisecond, take, 2500 * time.Millisecond}, // banned, the log's wait is longer
		{600 * time.Millisecond, peek, 2400 * time.Millisecond}, // a peek alike
		{2 * time.Second, take, time.Second},                    // the ban has ended
	})
}

// TestFixedRefundKeepsTheWindow checks that a refund to a fixed window
// under another limit of the algorithm keeps the state's window (Redis
// relabelled it to the refund's window, which the limit that wrote it then
// read as an earlier window's, empty), and that a refund of 0 changes
// nothing (the state's expiry neither, and a state that another limit
// reads as an earlier window's is not dropped).
func TestFixedRefundKeepsTheWindow(t *testing.T) {
	short, err := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 5, Period: 250 * time.Millisecond}.Check()
	if err != nil {
		t.Fatal(err)
	}
	long, err := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 3, Period: time.Second}.Check()
	if err != nil {
		t.Fatal(err)
	}
	op := func(kind funnel.OpKind, c funnel.Checked, n int64) funnel.Op {
		return funnel.Op{Kind: kind, Key: "fw", Limit: c, N: n}
	}
	ms := time.Millisecond
	runParity(t, []string{"fw"}, []parityStep{
		{500 * ms, op(funnel.OpTake, short, 2), 0},
		{600 * ms, op(funnel.OpRefund, long, 0), 0}, // the state stays [500, 750) ms's, to 750 ms
		{700 * ms, op(funnel.OpTake, short, 3), 0},  // 2 + 3: 5
		{710 * ms, op(funnel.OpTake, short, 1), 40 * ms},
		{720 * ms, op(funnel.OpRefund, long, 1), -1}, // 4 left in [500, 750) ms
		{730 * ms, op(funnel.OpTake, short, 2), 20 * ms},
		{1000 * ms, op(funnel.OpTake, long, 2), 0},
		{1600 * ms, op(funnel.OpRefund, short, 0), 0}, // an earlier window's to this limit: kept
		{1700 * ms, op(funnel.OpTake, long, 2), 300 * ms},
	})
}

// TestClockBackPeekForgetsAnEmptyFunnel checks that a peek at a funnel
// whose state is empty at now (its TAT reached) forgets it in memstore as
// Redis deletes its key (a peek writes, as redis-cell's does, and a TAT at
// now is an absent key's state): memstore kept the TAT, which limited the
// key again after the clock was stepped back.
func TestClockBackPeekForgetsAnEmptyFunnel(t *testing.T) {
	c, err := funnel.Limit{Algorithm: funnel.GCRA, Count: 10, Period: time.Second}.Check()
	if err != nil {
		t.Fatal(err)
	}
	take := funnel.Op{Kind: funnel.OpTake, Key: "g", Limit: c, N: 1}
	peek := funnel.Op{Kind: funnel.OpTake, Key: "g", Limit: c}
	ms := time.Millisecond
	runParity(t, []string{"g"}, []parityStep{
		{0, take, 0},
		{ms, take, 99 * ms},
		{100 * ms, peek, 0}, // the TAT is now: empty
		{40 * ms, take, 0},
		{40 * ms, peek, 0}, // a live TAT: kept
		{60 * ms, take, 80 * ms},
		{300 * ms, peek, 0},
		{250 * ms, take, 0},
	})
}

// TestClockBackRefundKeepsAnEmptyState checks that a refund to a funnel
// whose state is empty at now leaves it as it is, as Redis leaves its key:
// memstore forgot it, and admitted a fresh burst once the clock was
// stepped back.
func TestClockBackRefundKeepsAnEmptyState(t *testing.T) {
	c, err := funnel.Limit{Algorithm: funnel.GCRA, Count: 10, Period: time.Second}.Check()
	if err != nil {
		t.Fatal(err)
	}
	take := funnel.Op{Kind: funnel.OpTake, Key: "g", Limit: c, N: 1}
	refund := funnel.Op{Kind: funnel.OpRefund, Key: "g", Limit: c, N: 1}
	ms := time.Millisecond
	runParity(t, []string{"g"}, []parityStep{
		{0, take, 0},
		{150 * ms, refund, 0}, // the TAT, 100 ms, is past
		{50 * ms, take, 50 * ms},
	})
}

// TestClockBackThrottleRefundForgets checks that a funnel's refund (a
// negative quantity) that leaves the TAT at now forgets the state in
// memstore as Redis deletes its key (a TAT at now is an absent key's
// state): memstore kept the TAT at now, which limited the key again once
// the clock was stepped back.
func TestClockBackThrottleRefundForgets(t *testing.T) {
	c, err := funnel.Limit{Algorithm: funnel.GCRA, Count: 10, Period: time.Second}.Check()
	if err != nil {
		t.Fatal(err)
	}
	take := funnel.Op{Kind: funnel.OpTake, Key: "g", Limit: c, N: 1}
	back := funnel.Op{Kind: funnel.OpTake, Key: "g", Limit: c, N: -1}
	ms := time.Millisecond
	runParity(t, []string{"g"}, []parityStep{
		{0, take, 0},
		{50 * ms, back, 0}, // past an empty bucket: the TAT would be now
		{20 * ms, take, 0},
		{200 * ms, back, 0}, // on a state empty already
		{150 * ms, take, 0},
	})
}

// TestClockBackRefusedCallKeepsAnEndedState checks that a call refused on
// one key leaves the ended state of another as it was (memstore reused the
// space of an ended log, or of ended leases, for the call's new entries,
// which overwrote them: once the clock was stepped back, the state read
// live again with the refused call's entry in it).
func TestClockBackRefusedCallKeepsAnEndedState(t *testing.T) {
	logLimit, err := funnel.Limit{Algorithm: funnel.SlidingLog, Count: 2, Period: time.Second}.Check()
	if err != nil {
		t.Fatal(err)
	}
	conc, err := funnel.Limit{Algorithm: funnel.Concurrency, Count: 1, Period: time.Second}.Check()
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1, Period: time.Minute}.Check()
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"{k}log", "{k}conc", "{k}fixed"}
	ms := time.Millisecond
	srv := redistest.StartServer(t)
	var clock atomic.Int64
	start := storetestDay0 + int64(10*time.Hour)
	mem := memstore.New(memstore.Options{Now: clock.Load, SweepInterval: -1})
	defer mem.Close()
	f := &familyRun{t: t, r: rand.New(rand.NewPCG(1, 1)), ctx: context.Background(), clock: &clock,
		redis: redisstore.New(srv.Client(), redisstore.Options{Now: clock.Load, Prefix: "ended:", Timeout: 20 * time.Second}),
		mem:   mem, keys: keys, where: t.Name(), counts: map[string]int{}}
	at := func(d time.Duration, ops ...funnel.Op) []funnel.Result {
		clock.Store(start + int64(d))
		f.note("Do %s", describeOps(ops))
		got := make([]funnel.Result, len(ops))
		want := make([]funnel.Result, len(ops))
		gerr := f.redis.Do(f.ctx, ops, got)
		werr := f.mem.Do(f.ctx, ops, want)
		f.compare("Do", got, gerr, want, werr)
		f.compareState()
		return want
	}
	at(0, funnel.Op{Kind: funnel.OpTake, Key: keys[0], Limit: logLimit, N: 1})
	at(0, funnel.Op{Kind: funnel.OpTake, Key: keys[1], Limit: conc, N: 1, Lease: "a"})
	at(0, funnel.Op{Kind: funnel.OpTake, Key: keys[2], Limit: fixed, N: 1})
	// Both states have ended; the fixed window refuses the call.
	at(1500*ms,
		funnel.Op{Kind: funnel.OpTake, Key: keys[0], Limit: logLimit, N: 1},
		funnel.Op{Kind: funnel.OpTake, Key: keys[1], Limit: conc, N: 1, Lease: "b"},
		funnel.Op{Kind: funnel.OpTake, Key: keys[2], Limit: fixed, N: 1})
	// The clock stepped back: the log's entry at 0 and the lease a count.
	if r := at(500*ms, funnel.Op{Kind: funnel.OpTake, Key: keys[0], Limit: logLimit, N: 2}); r[0].RetryAfter != 500*ms {
		t.Errorf("the log: %+v, want a RetryAfter of 500ms", r[0])
	}
	if r := at(500*ms, funnel.Op{Kind: funnel.OpTake, Key: keys[1], Limit: conc, N: 1, Lease: "c"}); r[0].RetryAfter != 500*ms {
		t.Errorf("the leases: %+v, want a RetryAfter of 500ms", r[0])
	}
}

// TestClockBackPeekKeepsExpiredLeases checks that a peek at a concurrency
// key, or a refused acquire, leaves its expired leases as memstore leaves
// them (algo.Acquire: nothing is stored): Redis dropped them, and after
// the clock was stepped back they no longer counted.
func TestClockBackPeekKeepsExpiredLeases(t *testing.T) {
	check := func(l funnel.Limit) funnel.Checked {
		c, err := l.Check()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	two := check(funnel.Limit{Algorithm: funnel.Concurrency, Count: 2, Period: time.Second})
	one := check(funnel.Limit{Algorithm: funnel.Concurrency, Count: 1, Period: time.Second})
	long := check(funnel.Limit{Algorithm: funnel.Concurrency, Count: 2, Period: 3 * time.Second})
	acquire := func(key string, c funnel.Checked, id string) funnel.Op {
		return funnel.Op{Kind: funnel.OpTake, Key: key, Limit: c, N: 1, Lease: id}
	}
	ms := time.Millisecond
	runParity(t, []string{"peek", "refused"}, []parityStep{
		{0, acquire("peek", two, "a"), 0},
		{600 * ms, acquire("peek", two, "b"), 0},
		{1200 * ms, funnel.Op{Kind: funnel.OpTake, Key: "peek", Limit: two, Lease: "x"}, 0}, // a has expired
		{500 * ms, acquire("peek", two, "c"), 500 * ms},                                     // a counts again
		{0, acquire("refused", long, "a"), 0},
		{100 * ms, acquire("refused", two, "b"), 0},
		{1500 * ms, acquire("refused", one, "c"), 1500 * ms}, // b has expired
		{1000 * ms, acquire("refused", two, "d"), 100 * ms},  // b counts again
	})
}

// TestClockBackAnotherAlgorithmsEndedState checks that an op under a
// funnel drops another algorithm's ended state (and an op under another
// algorithm a funnel's), whatever the op, as memstore drops it, and that a
// refund to an ended log leaves it as it is: Redis kept the first two
// until a write, and deleted the log on a refund, and after the clock was
// stepped back answered WRONGTYPE, or counted another log, where memstore
// did not.
func TestClockBackAnotherAlgorithmsEndedState(t *testing.T) {
	check := func(l funnel.Limit) funnel.Checked {
		c, err := l.Check()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	sliding := check(funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 4, Period: 100 * time.Millisecond})
	leaky := check(funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second})
	fixed := check(funnel.Limit{Algorithm: funnel.FixedWindow, Count: 5, Period: time.Second})
	log := check(funnel.Limit{Algorithm: funnel.SlidingLog, Count: 2, Period: time.Second})
	op := func(kind funnel.OpKind, key string, c funnel.Checked, n int64) funnel.Op {
		return funnel.Op{Kind: kind, Key: key, Limit: c, N: n}
	}
	ms := time.Millisecond
	runParity(t, []string{"s", "t", "o"}, []parityStep{
		{0, op(funnel.OpTake, "s", sliding, 1), 0},
		{300 * ms, op(funnel.OpRefund, "s", leaky, 1), -1}, // the window's state has ended
		{100 * ms, op(funnel.OpTake, "s", leaky, 1), 0},
		{0, op(funnel.OpTake, "t", leaky, 1), 0},
		{500 * ms, op(funnel.OpRefund, "t", fixed, 1), -1}, // the TAT is past
		{50 * ms, op(funnel.OpTake, "t", fixed, 1), 0},
		{0, op(funnel.OpTake, "o", log, 2), 0},
		{1500 * ms, op(funnel.OpRefund, "o", log, 1), -1}, // the log has ended
		{500 * ms, op(funnel.OpTake, "o", log, 1), 500 * ms},
	})
}

// TestClockBackLatencyNotHeldChangesNothing checks that a release with a
// latency of a lease not held, an error, leaves the expired leases as they
// are, as memstore does: Redis dropped them, and after the clock was
// stepped back they no longer counted.
func TestClockBackLatencyNotHeldChangesNothing(t *testing.T) {
	c, err := funnel.Limit{Algorithm: funnel.Concurrency, Count: 2, Period: time.Second}.Check()
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	srv := redistest.StartServer(t)
	var clock atomic.Int64
	start := storetestDay0 + int64(10*time.Hour)
	mem := memstore.New(memstore.Options{Now: clock.Load, SweepInterval: -1})
	defer mem.Close()
	f := &familyRun{t: t, r: rand.New(rand.NewPCG(1, 1)), ctx: context.Background(), clock: &clock,
		redis: redisstore.New(srv.Client(), redisstore.Options{Now: clock.Load, Prefix: "latency:", Timeout: 20 * time.Second}),
		mem:   mem, keys: []string{"c"}, where: t.Name(), counts: map[string]int{}}
	for _, s := range []struct {
		at    time.Duration
		id    string
		n     int64
		kind  funnel.OpKind
		retry time.Duration
	}{
		{0, "a", 1, funnel.OpTake, 0},
		{600 * ms, "b", 1, funnel.OpTake, 0},
		{1200 * ms, "x", 0, funnel.OpRefund, -1}, // a has expired; x is not held: an error
		{500 * ms, "c", 1, funnel.OpTake, 500 * ms},
	} {
		clock.Store(start + int64(s.at))
		op := funnel.Op{Kind: s.kind, Key: "c", Limit: c, N: s.n, Lease: s.id}
		if s.kind == funnel.OpRefund {
			op.Latency = 10 * ms
		}
		f.note("Do %s", describeOps([]funnel.Op{op}))
		got := make([]funnel.Result, 1)
		want := make([]funnel.Result, 1)
		gerr := f.redis.Do(f.ctx, []funnel.Op{op}, got)
		werr := f.mem.Do(f.ctx, []funnel.Op{op}, want)
		f.compare("Do", got, gerr, want, werr)
		if s.retry >= 0 && want[0].RetryAfter != s.retry {
			t.Errorf("%v: RetryAfter %v, want %v", s.at, want[0].RetryAfter, s.retry)
		}
		f.compareState()
	}
}

// TestClockBackLogNumbersAfterTheNewest checks that the entries a sliding
// log records at a millisecond that holds some already are numbered after
// the newest of them: where a charge's oldest entries of the millisecond
// had been dropped (its newest count+1 kept) and newer entries refunded
// after the clock was stepped back, Redis numbered a new entry as one it
// still held, and recorded nothing.
func TestClockBackLogNumbersAfterTheNewest(t *testing.T) {
	c, err := funnel.Limit{Algorithm: funnel.SlidingLog, Count: 3, Period: time.Second}.Check()
	if err != nil {
		t.Fatal(err)
	}
	op := func(kind funnel.OpKind, n int64) funnel.Op {
		return funnel.Op{Kind: kind, Key: "log", Limit: c, N: n}
	}
	ms := time.Millisecond
	runParity(t, []string{"log"}, []parityStep{
		{0, op(funnel.OpCharge, 7), -1},        // 4 entries at 0 ms, numbered 1 to 4
		{500 * ms, op(funnel.OpCharge, 2), -1}, // 2 at 500 ms; 1 and 2 at 0 ms dropped
		{600 * ms, op(funnel.OpRefund, 2), -1}, // 3 and 4 at 0 ms left
		{-200 * ms, op(funnel.OpTake, 1), 0},   // at 0 ms, the newest: 5
		{-100 * ms, op(funnel.OpTake, 1), 1100 * ms},
	})
}
