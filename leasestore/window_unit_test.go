package leasestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/leasestore"
)

// wone is a leasing store over a memory store, both on one clock, with a
// window limit.
type wone struct {
	t   *testing.T
	c   *clock
	m   funnel.Store
	s   *leasestore.Store
	lim funnel.Checked
}

// second is a Unix time on a whole second (and a whole day: it is a
// midnight UTC).
const second = 1_800_057_600_000_000_000

func newWOne(t *testing.T, l funnel.Limit, opts leasestore.Options) *wone {
	lim, err := l.Check()
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{}
	c.t.Store(second)
	m := newMem(t, c)
	opts.Now = c.now
	opts.NoPrefetch = true
	s := leasestore.New(&timed{Store: m, c: c, rtt: func() (int64, int64) { return 0, 0 }, last: map[string]int64{}}, opts)
	t.Cleanup(func() { s.Close() })
	return &wone{t, c, m, s, lim}
}

func (o *wone) do(s funnel.Store, kind funnel.OpKind, q int64) funnel.Result {
	o.t.Helper()
	res := make([]funnel.Result, 1)
	if err := s.Do(context.Background(), []funnel.Op{{Kind: kind, Key: "k", N: q, Limit: o.lim}}, res); err != nil {
		o.t.Fatal(err)
	}
	return res[0]
}

func (o *wone) take(q int64) funnel.Result { return o.do(o.s, funnel.OpTake, q) }

// shared is the units the shared store counts in the key's window now.
func (o *wone) shared() int64 {
	return o.lim.Count - o.do(o.m, funnel.OpTake, 0).Remaining
}

// held is the units the store holds.
func (o *wone) held() int64 {
	st := o.s.Stats()
	return st.Leased - (st.Spent - st.Direct) - st.Forfeited - st.GivenBack
}

func (o *wone) at(d time.Duration) { o.c.t.Store(second + int64(d)) }

var fixed100 = funnel.Limit{Algorithm: funnel.FixedWindow, Count: 100, Period: time.Second}

func TestWindowColdThenLeases(t *testing.T) {
	o := newWOne(t, fixed100, leasestore.Options{})
	for i := range 7 {
		if r := o.take(1); !r.Allowed || r.Remaining != int64(99-i) || r.Limit != 100 {
			t.Fatalf("cold decision %d: %+v", i, r)
		}
	}
	if st := o.s.Stats(); st.Direct != 7 || st.Calls != 0 {
		t.Fatalf("a cold key leased: %+v", st)
	}
	// Warm: the 8th decision leases 8 units (its decisions in a lifetime).
	if r := o.take(1); !r.Allowed || r.Remaining != 92 || r.ResetAfter != time.Second {
		t.Fatalf("first lease: %+v", r)
	}
	if o.held() != 7 || o.shared() != 15 {
		t.Fatalf("held %d, shared count %d: %+v", o.held(), o.shared(), o.s.Stats())
	}
	// Leases double when spent out, never above a quarter of the count.
	for range 60 {
		o.take(1)
	}
	if st := o.s.Stats(); st.Calls > 5 || st.Leased-o.held() != 61 {
		t.Fatalf("61 decisions: %+v, %d held", st, o.held())
	}
}

// A lease ends with its window: what it holds then is forfeited, never
// refunded into the next window.
func TestWindowLeaseEndsWithItsWindow(t *testing.T) {
	o := newWOne(t, fixed100, leasestore.Options{Lifetime: 500 * time.Millisecond})
	o.at(900 * time.Millisecond)
	for range 8 {
		o.take(1)
	}
	held, st := o.held(), o.s.Stats()
	if held != 7 {
		t.Fatalf("held %d: %+v", held, st)
	}
	o.at(time.Second - 1) // the lease is still there
	if o.take(1); o.s.Stats().Calls != st.Calls {
		t.Fatalf("a call within the window: %+v", o.s.Stats())
	}
	o.at(time.Second) // the window has rolled: the 6 units left are forfeited
	if r := o.take(1); !r.Allowed {
		t.Fatalf("the next window: %+v", r)
	}
	st2 := o.s.Stats()
	if st2.Forfeited != 6 || st2.GivenBack != 0 || st2.Calls != st.Calls+1 {
		t.Fatalf("after the roll: %+v", st2)
	}
	if got, want := o.shared(), st2.Leased-st.Leased; got != want {
		t.Fatalf("the new window counts %d, want the new lease's %d", got, want)
	}
}

// With Options.WindowRefunds, the unspent units of a lease that ends by
// its lifetime go back with the next call, while at least a lifetime of
// their window is left; later they are forfeited.
func TestWindowRefund(t *testing.T) {
	o := newWOne(t, fixed100, leasestore.Options{Lifetime: 100 * time.Millisecond, WindowRefunds: true})
	for range 8 {
		o.take(1)
	}
	if o.held() != 7 || o.shared() != 15 {
		t.Fatalf("held %d, shared %d", o.held(), o.shared())
	}
	o.at(150 * time.Millisecond) // ended by its lifetime; 850 ms of the window left
	o.take(1)
	st := o.s.Stats()
	if st.GivenBack != 7 || st.Forfeited != 0 {
		t.Fatalf("no refund: %+v", st)
	}
	// 7 spent in the store, 2 from leases, and the new lease (halved to
	// 4) holds 3.
	if got := o.shared(); got != 7+2+o.held() || o.held() != 3 {
		t.Fatalf("shared %d, held %d", got, o.held())
	}
	o.at(950 * time.Millisecond) // ended, and less than a lifetime is left
	o.take(1)
	st2 := o.s.Stats()
	if st2.GivenBack != 7 || st2.Forfeited != 3 {
		t.Fatalf("a refund near the window's end: %+v", st2)
	}
}

// A sliding window's lease ends with the current window, not with the
// ResetAfter of its take (a period later).
func TestSlidingLeaseEndsWithItsWindow(t *testing.T) {
	o := newWOne(t, funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 100, Period: time.Second},
		leasestore.Options{Lifetime: 5 * time.Second})
	o.at(500 * time.Millisecond)
	for range 8 {
		o.take(1)
	}
	calls := o.s.Stats().Calls
	o.at(time.Second - 1)
	o.take(1)
	o.at(time.Second)
	o.take(1)
	if st := o.s.Stats(); st.Calls != calls+1 || st.Forfeited != 6 {
		t.Fatalf("at the window's end: %+v", st)
	}
}

// A calendar day's lease ends at midnight.
func TestCalendarLeaseEndsAtMidnight(t *testing.T) {
	o := newWOne(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1000, Calendar: funnel.Daily},
		leasestore.Options{Lifetime: 5 * time.Second})
	o.at(-time.Second)
	for range 8 {
		o.take(1)
	}
	o.at(-1)
	o.take(1)
	calls := o.s.Stats().Calls
	o.at(0)
	if r := o.take(1); !r.Allowed || r.Remaining != 999 {
		t.Fatalf("after midnight: %+v", r)
	}
	if st := o.s.Stats(); st.Calls != calls+1 || st.Forfeited != 6 {
		t.Fatalf("after midnight: %+v", st)
	}
}

// A take is never refused while the window has room: a refused lease of
// more units than the request needs is asked again for what is left.
func TestWindowAsksForWhatIsLeft(t *testing.T) {
	o := newWOne(t, fixed100, leasestore.Options{})
	for range 15 {
		o.take(1) // 7 in the store, a lease of 8 spent, the next of 16 asked
	}
	for o.held() > 0 {
		o.take(1)
	}
	o.do(o.m, funnel.OpTake, 100-o.shared()-1) // another node: 1 unit left
	calls := o.s.Stats().Calls
	if r := o.take(1); !r.Allowed {
		t.Fatalf("refused with a unit left: %+v", r)
	}
	if st := o.s.Stats(); st.Calls != calls+1 || o.shared() != 100 {
		t.Fatalf("%+v, shared %d", st, o.shared())
	}
}

// A refusal is remembered until its RetryAfter (the window's end): no
// call before then; a Reset through the store forgets it.
func TestWindowRefusedFromMemory(t *testing.T) {
	o := newWOne(t, fixed100, leasestore.Options{})
	o.at(400 * time.Millisecond)
	n := 0
	for o.take(1).Allowed {
		n++
	}
	if n != 100 {
		t.Fatalf("admitted %d", n)
	}
	st := o.s.Stats()
	o.at(700 * time.Millisecond)
	r := o.take(2)
	if st2 := o.s.Stats(); r.Allowed || r.RetryAfter != 300*time.Millisecond || st2.Calls != st.Calls || st2.Direct != st.Direct || st2.LocalRefusals != st.LocalRefusals+1 {
		t.Fatalf("%+v %+v", r, st2)
	}
	o.at(time.Second)
	if r := o.take(1); !r.Allowed {
		t.Fatalf("the next window: %+v", r)
	}
	for o.take(1).Allowed {
	}
	if _, err := o.s.Reset(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if r := o.take(1); !r.Allowed {
		t.Fatalf("after Reset: %+v", r)
	}
}

// Window limits with a ban, sliding logs and takes above the count go to
// the store as they are.
func TestWindowNotLeased(t *testing.T) {
	for _, l := range []funnel.Limit{
		{Algorithm: funnel.FixedWindow, Count: 100, Period: time.Second, Ban: time.Minute},
		{Algorithm: funnel.SlidingLog, Count: 100, Period: time.Second},
	} {
		o := newWOne(t, l, leasestore.Options{})
		for range 20 {
			o.take(1)
		}
		if st := o.s.Stats(); st.Decisions != 0 || o.shared() != 20 {
			t.Fatalf("%v: %+v, shared %d", l, st, o.shared())
		}
		if r := o.take(101); r.Allowed || r.RetryAfter != funnel.Never || o.s.Stats().Decisions != 0 {
			t.Fatalf("%v: 101 units: %+v", l, r)
		}
	}
}

// By default a window's unspent units are forfeited, never refunded: a
// refund that ran after its window ended would give them to the next one.
func TestWindowForfeitsByDefault(t *testing.T) {
	o := newWOne(t, fixed100, leasestore.Options{Lifetime: 100 * time.Millisecond})
	for range 8 {
		o.take(1)
	}
	held := o.held()
	o.at(150 * time.Millisecond)
	o.take(1)
	if st := o.s.Stats(); st.GivenBack != 0 || st.Forfeited != held {
		t.Fatalf("held %d: %+v, want them forfeited", held, st)
	}
}

// wresetting is a window store that resets its key through store s
// while one take is in the store, after the take counted its units.
type wresetting struct {
	*timed
	s   *leasestore.Store
	arm bool
}

func (w *wresetting) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	err := w.timed.Do(ctx, ops, res)
	if w.arm && err == nil && ops[0].Kind == funnel.OpTake && ops[0].N > 1 && res[0].Allowed {
		w.arm = false
		if _, err := w.s.Reset(ctx, ops[0].Key); err != nil {
			return err
		}
	}
	return err
}

// A Reset through the store while a window's take is in flight: the
// units it took before the reset are forfeited, so that right after the
// reset the window admits its count, 100, and not those units on top.
func TestResetDuringWindowTake(t *testing.T) {
	for _, race := range []bool{false, true} {
		c := &clock{}
		c.t.Store(second)
		lim, err := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 100, Period: time.Second}.Check()
		if err != nil {
			t.Fatal(err)
		}
		b := &wresetting{timed: &timed{Store: newMem(t, c), c: c, rtt: func() (int64, int64) { return 0, 0 }, last: map[string]int64{}}}
		s := leasestore.New(b, leasestore.Options{Now: c.now, NoPrefetch: true})
		if race {
			leasestore.ResetRace(s)
		}
		b.s = s
		take := func() bool {
			res := make([]funnel.Result, 1)
			if err := s.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: "k", N: 1, Limit: lim}}, res); err != nil {
				t.Fatal(err)
			}
			return res[0].Allowed
		}
		for range 8 {
			take() // cold: decided in the store, one unit each
		}
		b.arm = true
		for b.arm && take() {
		}
		if b.arm {
			t.Fatal("no take was reset")
		}
		n := 1 // the decision during whose take the reset came
		for take() {
			n++
		}
		switch {
		case !race && n != 100:
			t.Fatalf("after the reset: %d admitted in the window, want its count, 100; %+v", n, s.Stats())
		case race && n <= 100:
			t.Fatalf("the race kept no units: %d admitted", n)
		}
		t.Logf("race kept %v: %d admitted after the reset; %+v", race, n, s.Stats())
		s.Close()
	}
}
