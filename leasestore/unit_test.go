package leasestore_test

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/leasestore"
	"github.com/funnelrl/funnel/redisstore"
)

// one is a store over the model on its own clock, with limit p.
type one struct {
	t *testing.T
	c *clock
	m *model
	s *leasestore.Store
	p gcra.Params
}

func newOne(t *testing.T, p gcra.Params, opts leasestore.Options) *one {
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000)
	m := newModel(c)
	opts.Now = c.now
	opts.NoPrefetch = true // one lease call at a time, in the decision
	s := leasestore.New(m, opts)
	t.Cleanup(func() { s.Close() })
	return &one{t, c, m, s, p}
}

func (o *one) take(key string, q int64) funnel.Result {
	o.t.Helper()
	res := make([]funnel.Result, 1)
	err := o.s.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: key, N: q, Limit: funnel.Checked{GCRA: o.p}}}, res)
	if err != nil {
		o.t.Fatal(err)
	}
	return res[0]
}

func (o *one) tat(key string) int64 {
	o.m.mu.Lock()
	defer o.m.mu.Unlock()
	return o.m.tats[key]
}

// p100 is 100 per second with a burst of 100: T = 10 ms, tolerance 1 s;
// leased under 800 ms (80 units), leases of at most 20.
func p100(t *testing.T) gcra.Params { return mkParams(t, 99, 100, time.Second) }

func TestReduced(t *testing.T) {
	p := p100(t)
	r, ok := leasestore.Reduced(p, 200*time.Millisecond)
	if !ok || r.Tolerance != 800*int64(time.Millisecond) || r.Limit != 80 || r.Burst != 79 || r.Interval != p.Interval {
		t.Fatalf("Reduced = %+v, %v", r, ok)
	}
	// A lifetime over half the tolerance: the key's lifetime is (τ−T)/2,
	// 495 ms, and the reduced tolerance 505 ms, at least T.
	if lk := leasestore.KeyLifetime(p, 600*time.Millisecond); lk != 495*time.Millisecond {
		t.Fatalf("KeyLifetime = %v", lk)
	}
	if r, ok := leasestore.Reduced(p, 600*time.Millisecond); !ok || r.Tolerance != 505*int64(time.Millisecond) || r.Limit != 50 {
		t.Fatalf("Reduced(600 ms) = %+v, %v", r, ok)
	}
	// 20,000/s with a burst of 500 (tolerance 25.05 ms): leased for
	// 12.5 ms, under 12.55 ms (251 units at once, then 20,000/s).
	smooth := mkParams(t, 500, 20000, time.Second)
	if r, ok := leasestore.Reduced(smooth, 200*time.Millisecond); !ok || r.Tolerance != 12_550_000 || r.Limit != 251 ||
		leasestore.KeyLifetime(smooth, 200*time.Millisecond) != 12_500_000 {
		t.Fatalf("a smooth limit: %+v, %v", r, ok)
	}
	// Burst 0 leaves no tolerance to give up; burst 10 at 20,000/s would
	// live 250 µs, under MinLifetime.
	for _, q := range []gcra.Params{mkParams(t, 0, 100, time.Second), mkParams(t, 10, 20000, time.Second)} {
		if _, ok := leasestore.Reduced(q, 200*time.Millisecond); ok || leasestore.KeyLifetime(q, 200*time.Millisecond) != 0 {
			t.Fatalf("%+v is leased", q)
		}
	}
	if _, ok := leasestore.Reduced(mkParams(t, 100, 1, 24*time.Hour), time.Second); ok {
		t.Fatal("a tolerance above gcra.MaxLeaseTolerance is leased")
	}
	// Every leased limit keeps a reduced tolerance of at least T.
	rnd := rand.New(rand.NewPCG(5, 6))
	for range 10000 {
		q := mkParams(t, rnd.Int64N(100), 1+rnd.Int64N(100000), time.Second)
		l := time.Duration(rnd.Int64N(int64(time.Second)))
		if r, ok := leasestore.Reduced(q, l); ok && (r.Tolerance < r.Interval || r.Limit < 1 || 2*(q.Tolerance-r.Tolerance) > q.Tolerance-q.Interval) {
			t.Fatalf("%+v under %v: %+v", q, l, r)
		}
	}
}

func TestColdKeyDecidesInTheStoreThenLeases(t *testing.T) {
	o := newOne(t, p100(t), leasestore.Options{})
	// A cold key: a plain decision in the store, under the reduced burst.
	if r := o.take("k", 1); !r.Allowed || r.Limit != 80 || r.Remaining != 79 {
		t.Fatalf("first: %+v", r)
	}
	if st := o.s.Stats(); st.Calls != 0 || st.Direct != 1 || st.Leased != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Warm (8 decisions in a lifetime), it leases; leases double as they
	// are spent out, up to 20 units.
	for range 60 {
		if r := o.take("k", 1); !r.Allowed {
			t.Fatalf("refused within the burst: %+v", r)
		}
	}
	st := o.s.Stats()
	if st.Calls > 12 || st.Spent != 61 {
		t.Fatalf("61 decisions took %d calls: %+v", st.Calls, st)
	}
	t.Logf("61 decisions: %+v", st)
	// Never more than the reduced burst in one instant: 80 units.
	n := 61
	for o.take("k", 1).Allowed {
		n++
	}
	if n != 80 {
		t.Fatalf("admitted %d at one instant, want the reduced burst, 80", n)
	}
}

func TestLeaseEndsAtItsLifetime(t *testing.T) {
	// Leases of at most 10 units (R·L); a cold decision, then leases of
	// 2+4+8 units spent, then one of a lease of 10: 9 held, the TAT 250 ms
	// ahead.
	o := newOne(t, p100(t), leasestore.Options{Lifetime: 100 * time.Millisecond})
	for range 16 {
		o.take("k", 1)
	}
	st := o.s.Stats()
	held, end := st.Leased-(st.Spent-st.Direct), o.tat("k")
	if held != 9 || end != o.c.now()+250*int64(time.Millisecond) {
		t.Fatalf("held %d, TAT %d ahead: %+v", held, end-o.c.now(), st)
	}
	o.c.t.Add(int64(100 * time.Millisecond)) // the lease has ended
	o.take("k", 1)
	st2 := o.s.Stats()
	if st2.Calls != st.Calls+1 || st2.GivenBack != held {
		t.Fatalf("after the lifetime: %+v, want one more call giving back %d", st2, held)
	}
	// The give-back applied (the TAT moved back by the 9 units), then the
	// new lease, halved to 5 units as most of the last one went unspent.
	if got, want := o.tat("k"), end-held*o.p.Interval+5*o.p.Interval; got != want || st2.Leased-st.Leased != 5 {
		t.Fatalf("TAT %d, want %d; leased %d", got, want, st2.Leased-st.Leased)
	}
}

func TestGiveBackOnlyOnItsOwnEnd(t *testing.T) {
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000)
	m := newModel(c)
	p := p100(t)
	a := leasestore.New(m, leasestore.Options{Now: c.now, MaxLease: 4, NoPrefetch: true})
	b := leasestore.New(m, leasestore.Options{Now: c.now, MaxLease: 4, NoPrefetch: true})
	defer a.Close()
	defer b.Close()
	take := func(s *leasestore.Store) {
		res := make([]funnel.Result, 1)
		if err := s.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: "k", N: 1, Limit: funnel.Checked{GCRA: p}}}, res); err != nil || !res[0].Allowed {
			t.Fatalf("%+v %v", res[0], err)
		}
	}
	for range 8 {
		take(a) // 7 decisions of a cold key in the store, then a lease of 4: 3 left
	}
	take(b) // b decides after a: the TAT is no longer a's lease's end
	before := m.tats["k"]
	leased := a.Stats().Leased
	c.t.Add(int64(200 * time.Millisecond))
	take(a) // a's lease ended with units left; its give-back must not apply
	st := a.Stats()
	if st.GivenBack == 0 {
		t.Fatalf("a gave nothing back: %+v", st)
	}
	want := max(before, c.now()) + (st.Leased-leased)*p.Interval // a's new lease
	if got := m.tats["k"]; got != want {
		t.Fatalf("TAT %d, want %d: a stale give-back moved it", got, want)
	}
}

func TestRefusedFromMemoryUntilRetryAfter(t *testing.T) {
	o := newOne(t, p100(t), leasestore.Options{})
	for o.take("k", 1).Allowed {
	}
	st0 := o.s.Stats()
	calls := st0.Calls
	r1 := o.take("k", 1)
	o.c.t.Add(int64(3 * time.Millisecond))
	r2 := o.take("k", 1)
	st := o.s.Stats()
	if r1.Allowed || r2.Allowed || st.Calls != calls || st.LocalRefusals != st0.LocalRefusals+2 {
		t.Fatalf("%+v %+v %+v", r1, r2, st)
	}
	if r2.RetryAfter != r1.RetryAfter-3*time.Millisecond || r1.RetryAfter <= 0 {
		t.Fatalf("RetryAfter %v then %v", r1.RetryAfter, r2.RetryAfter)
	}
	// Two units wait one interval more than one does (the second may
	// take a lease call: a future-dated unit, after the first).
	if r := o.take("k", 2); r.Allowed || r.RetryAfter != r2.RetryAfter+10*time.Millisecond {
		t.Fatalf("two units: %+v", r)
	}
	// The unit it waited for comes when its slot does.
	o.c.t.Add(int64(r2.RetryAfter))
	if r := o.take("k", 1); !r.Allowed {
		t.Fatalf("after RetryAfter: %+v %+v", r, o.s.Stats())
	}
	// A Reset through the store forgets the refusal at once.
	for o.take("k", 1).Allowed {
	}
	if _, err := o.s.Reset(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if r := o.take("k", 1); !r.Allowed || r.Remaining != 79 {
		t.Fatalf("after Reset: %+v", r)
	}
}

func TestNotLeasedGoesToTheStore(t *testing.T) {
	o := newOne(t, mkParams(t, 9, 20000, time.Second), leasestore.Options{}) // tolerance 500 µs
	for i := range 10 {
		if r := o.take("k", 1); !r.Allowed || r.Limit != 10 {
			t.Fatalf("%d: %+v", i, r)
		}
	}
	if r := o.take("k", 1); r.Allowed {
		t.Fatalf("beyond the burst: %+v", r)
	}
	if st := o.s.Stats(); st.Decisions != 0 || st.Calls != 0 {
		t.Fatalf("a limit too small to lease was leased: %+v", st)
	}
}

// failing fails every lease call once down is set.
type failing struct {
	*model
	down bool
}

func (f *failing) Lease(ctx context.Context, key string, p gcra.Params, req redisstore.LeaseCall) (redisstore.Grant, error) {
	if f.down {
		return redisstore.Grant{}, errors.New("redisstore: funnel: store unavailable: connection refused")
	}
	return f.model.Lease(ctx, key, p, req)
}

func (f *failing) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	if f.down {
		res[0] = funnel.Result{Fallback: true}
		return nil
	}
	return f.model.Do(ctx, ops, res)
}

func TestRedisDownSpendsWhatItHolds(t *testing.T) {
	for _, open := range []bool{false, true} {
		c := &clock{}
		c.t.Store(1_800_000_000_000_000_000)
		f := &failing{model: newModel(c)}
		s := leasestore.New(f, leasestore.Options{Now: c.now, FailOpen: open, Logger: quiet(), NoPrefetch: true})
		p := p100(t)
		take := func() funnel.Result {
			res := make([]funnel.Result, 1)
			if err := s.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: "k", N: 1, Limit: funnel.Checked{GCRA: p}}}, res); err != nil {
				t.Fatal(err)
			}
			return res[0]
		}
		for range 8 {
			take() // leases of 1, 2, 4, then 8 with 7 left
		}
		f.down = true
		st := s.Stats()
		held := st.Leased - (st.Spent - st.Direct)
		for i := int64(0); i < held; i++ {
			if r := take(); !r.Allowed || r.Fallback {
				t.Fatalf("a held unit: %+v", r)
			}
		}
		if r := take(); !r.Fallback || r.Allowed != open {
			t.Fatalf("fail-open %v, nothing held: %+v", open, r)
		}
		f.down = false
		if r := take(); !r.Allowed || r.Fallback {
			t.Fatalf("Redis back: %+v", r)
		}
		s.Close()
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// resetting is a model that resets its key through store s while one
// lease call is in Redis, after the lease took its units.
type resetting struct {
	*model
	s   *leasestore.Store
	arm bool
}

func (r *resetting) Lease(ctx context.Context, key string, p gcra.Params, call redisstore.LeaseCall) (redisstore.Grant, error) {
	g, err := r.model.Lease(ctx, key, p, call)
	if r.arm && err == nil && g.Units > 0 {
		r.arm = false
		if _, err := r.s.Reset(ctx, key); err != nil {
			return g, err
		}
	}
	return g, err
}

// A Reset through the store while a lease call is in flight: the units
// that call took before the reset are forfeited, so that right after the
// reset the key admits the fresh reduced burst, 80, and not those units
// on top of it.
func TestResetDuringLeaseCall(t *testing.T) {
	for _, race := range []bool{false, true} {
		c := &clock{}
		c.t.Store(1_800_000_000_000_000_000)
		b := &resetting{model: newModel(c)}
		s := leasestore.New(b, leasestore.Options{Now: c.now, NoPrefetch: true})
		if race {
			leasestore.ResetRace(s)
		}
		b.s = s
		p := p100(t)
		take := func() bool {
			res := make([]funnel.Result, 1)
			if err := s.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: "k", N: 1, Limit: funnel.Checked{GCRA: p}}}, res); err != nil {
				t.Fatal(err)
			}
			return res[0].Allowed
		}
		for range 20 {
			take() // warm: leases of 1, 2, 4, 8 spent
		}
		b.arm = true
		for b.arm && take() {
			// spending what it held, until the lease call that is reset
		}
		if b.arm {
			t.Fatal("no lease call was reset")
		}
		n := 1 // the decision during whose call the reset came
		for take() {
			n++
		}
		st := s.Stats()
		switch {
		case !race && n != 80:
			t.Fatalf("after the reset: %d admitted at once, want the reduced burst, 80; %+v", n, st)
		case race && n <= 80:
			t.Fatalf("the race kept no units: %d admitted", n)
		}
		t.Logf("race kept %v: %d admitted after the reset; %+v", race, n, st)
		s.Close()
	}
}

// TestUnitsEndOneIntervalApart: under contention a grant's units live
// longer than L_k by how far the funnel was ahead of each of them, the
// funnel's lead before the grant plus an interval for each unit before it,
// so that units granted at once end one interval apart, as future-dated
// ones do, not all when the first does. 100/s with a burst of 100, leased
// for 495 ms (τ' 505 ms): another process has taken the funnel 200 ms
// ahead, and the 7 cold decisions before the key is warm here 70 ms more;
// the lease that follows (8 units at once) finds it d = 270 ms ahead, so
// its unit j ends 495+270+10·j ms after the grant. They all ended at
// 765 ms when one extension served the whole grant, which near the limit
// lost the units of a node that spends them slower than one an interval.
func TestUnitsEndOneIntervalApart(t *testing.T) {
	o := newOne(t, p100(t), leasestore.Options{Lifetime: time.Second})
	ms := int64(time.Millisecond)
	o.m.tats["k"] = o.c.now() + 200*ms
	grant := o.c.now()
	for o.s.Stats().Calls == 0 {
		if r := o.take("k", 1); !r.Allowed {
			t.Fatalf("refused: %+v", r)
		}
	}
	st := o.s.Stats()
	n, d := st.Leased, 200+10*st.Direct // the lease's units, and the lead before it (ms)
	if st.Direct != 7 || n != 8 || o.tat("k") != grant+(d+10*n)*ms {
		t.Fatalf("the lease: %+v, TAT %d ms ahead", st, (o.tat("k")-grant)/ms)
	}
	local := func(at int64, want bool) {
		t.Helper()
		o.c.t.Store(grant + at)
		before := o.s.Stats()
		if r := o.take("k", 1); !r.Allowed {
			t.Fatalf("%d µs after the grant: refused %+v", at/1000, r)
		}
		after := o.s.Stats()
		if got := after.Calls == before.Calls && after.Local == before.Local+1; got != want {
			t.Fatalf("%d µs after the grant: from memory %v, want %v (%+v)", at/1000, got, want, after)
		}
	}
	end := (495 + d) * ms            // unit 0's end (spent by the decision that leased)
	local(end+5*ms, true)            // unit 1 lives 10 ms longer
	local(end+10*(n-1)*ms-1, true)   // the last unit, just before its end
	local(end+10*(n-1)*ms+ms, false) // every unit has ended: a lease call
}
