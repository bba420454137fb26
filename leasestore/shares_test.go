package leasestore_test

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/leasestore"
	"github.com/funnelrl/funnel/redisstore"
)

var sharesFigures = flag.Bool("shares", false, "TestSharesOverloadModel: every row, not only a few")

// TestSharesOverloadModel drives one hot key leased in rate shares in the
// model, as TestOverloadModel drives units: 20,000/s with bursts of 500
// and 10,000, 3 and 16 nodes, equal and 10:1 demand, 0.5× to 100× the
// rate, round trips of 0 and up to 100 µs each way, node clocks apart.
// Every admission is replayed through one exact funnel, and the
// allocator's reservations are checked after every call. Without -shares
// only a few rows run.
func TestSharesOverloadModel(t *testing.T) {
	t.Parallel()
	for _, burst := range []int64{500, 10000} {
		p := mkParams(t, burst, 20000, time.Second)
		for _, nodes := range []int{3, 16} {
			for _, unequal := range []bool{false, true} {
				w := make([]int, nodes)
				for i := range w {
					w[i] = 1
				}
				if unequal {
					w[0] = 10
				}
				for _, f := range []float64{0.5, 0.9, 1.05, 1.2, 1.5, 2, 10, 100} {
					for _, rt := range []int64{0, int64(100 * time.Microsecond)} {
						if !*sharesFigures && (burst != 500 || unequal || rt == 0 || (f != 0.5 && f != 2) || (nodes == 16 && f != 2)) {
							continue
						}
						name := fmt.Sprintf("burst%d/nodes%d/unequal%v/%vx/rtt%v", burst, nodes, unequal, f, time.Duration(rt))
						seed := uint64(nodes) + uint64(f)
						if f != math.Trunc(f) {
							seed += uint64(1000 * f)
						}
						t.Run(name, func(t *testing.T) {
							under, calls, st, fig := overloadWith(t, seed, p, f, w, rt, leasestore.Options{Shares: true})
							t.Logf("%s: steady under-admission %.2f%%, %.4f calls per decision; in the steady second: %d admitted of %d, %d calls, %d local refusals, %d fallbacks",
								name, under, calls, fig.adm, fig.exact, fig.st.Calls+fig.st.Direct, fig.st.LocalRefusals, st.Fallbacks)
						})
					}
				}
			}
		}
	}
}

// TestSharesSmallLimits leases in shares, through a test knob, the limits
// that Shared leaves to units (bursts of 0 and 10 at 20,000/s), to show
// what they would give up: a burst of B split among N nodes leaves each a
// bucket of about (B+1)/N units, so that at most B+1 nodes can admit at
// one instant, and buckets of a few units lose the pooling of one funnel
// near the limit, however few the calls. Every admission is still
// replayed through one exact funnel (the allocator's paths that grant
// nothing when the capacity is spent run here). Without -shares only two
// rows run, as replay checks.
func TestSharesSmallLimits(t *testing.T) {
	t.Parallel()
	for _, burst := range []int64{0, 10} {
		p := mkParams(t, burst, 20000, time.Second)
		for _, nodes := range []int{3, 16} {
			w := make([]int, nodes)
			for i := range w {
				w[i] = 1
			}
			for _, f := range []float64{0.5, 0.9, 1.05, 1.2, 1.5, 2, 10, 100} {
				if !*sharesFigures && (burst != 10 || f != 2) {
					continue
				}
				name := fmt.Sprintf("burst%d/nodes%d/%vx", burst, nodes, f)
				seed := uint64(nodes) + uint64(1000*f)
				t.Run(name, func(t *testing.T) {
					under, calls, _, fig := overloadWith(t, seed, p, f, w, int64(100*time.Microsecond), leasestore.Options{Shares: true},
						func(s *leasestore.Store) { leasestore.ShareMinLimit(s, 1) })
					t.Logf("%s: steady under-admission %.2f%%, %.4f calls per decision; in the steady second: %d admitted of %d, %d local refusals",
						name, under, calls, fig.adm, fig.exact, fig.st.LocalRefusals)
				})
			}
		}
	}
}

// sharesMoving drives one key leased in shares from nodes whose demand
// moves: 10:1 weights whose heavy node moves every 150 ms, each node off
// for 70 ms in every 210 (its requests dropped), at factor
// times the rate, round trips of up to 2 ms each way (one in 50 of
// 20 ms), for two seconds; break, when set, breaks a rule on each node.
// It returns the replay's error (nil when every admission conforms).
func sharesMoving(t *testing.T, seed uint64, p gcra.Params, nodes int, factor float64, brk func(*leasestore.Store)) error {
	r := rand.New(rand.NewPCG(seed, 5))
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000)
	m := newModel(c)
	m.rtt = rtt(seed)
	// Renewals made by the decisions that find them due, in this
	// goroutine: each admission's instant is exact.
	s := newSim(t, c, m, nodes, p, 1, leasestore.Options{Shares: true, NoPrefetch: true})
	if brk != nil {
		for _, n := range s.nodes {
			brk(n)
		}
	}
	start := c.now()
	end := start + int64(1500*time.Millisecond)
	mean := float64(p.Interval) / factor
	next := start
	mine := make([][]int64, nodes) // each node's admissions
	for c.now() < end {
		next += int64(r.ExpFloat64() * mean)
		if d := next - c.now(); d > 0 {
			c.t.Add(d)
		}
		heavy := int((c.now() - start) / int64(150*time.Millisecond) % int64(nodes))
		i := r.IntN(nodes + 9)
		if i >= nodes {
			i = heavy
		}
		if (c.now()-start+int64(i)*int64(37*time.Millisecond))/int64(70*time.Millisecond)%3 == 2 {
			continue // each node is off a third of the time, 70 ms at once
		}
		before := len(s.adm["hot"])
		s.request(i, "hot", 1)
		if len(s.adm["hot"]) > before {
			mine[i] = append(mine[i], c.now())
		}
	}
	if m.shareViolations > 0 {
		t.Fatalf("%d share calls left the reservations over the funnel", m.shareViolations)
	}
	if _, _, err := s.replay(); err != nil {
		return err
	}
	for i, n := range s.nodes {
		if err := withinReservations(p, m.reserved["hot"][leasestore.NodeName(n)], mine[i]); err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
	}
	return nil
}

// withinReservations replays one node's admissions (ns, one unit each, in
// order) through a bucket that drains at the largest rate among the
// node's reservations live at each instant (µs, as the allocator kept
// them), and checks that its level never exceeds the largest capacity
// among them: the node's part of the proof (its level is within what the
// allocator reserved for it at every instant), which the fleet's replay
// through one funnel sees only when the funnel is full.
func withinReservations(p gcra.Params, res []gcra.ShareReservation, adm []int64) error {
	unit := gcra.ShareParts * p.Interval
	at := func(t int64) (k, c int64) { // t in ns
		for _, r := range res {
			if r.Start*1000 <= t && t < r.Hold*1000 {
				k, c = max(k, r.K), max(c, r.C*unit)
			}
		}
		return k, c
	}
	// Breakpoints: every start and hold, and every admission.
	type ev struct {
		t     int64
		admit bool
	}
	var evs []ev
	for _, r := range res {
		evs = append(evs, ev{r.Start * 1000, false}, ev{r.Hold * 1000, false})
	}
	for _, t := range adm {
		evs = append(evs, ev{t, true})
	}
	slices.SortStableFunc(evs, func(a, b ev) int { return cmp.Compare(a.t, b.t) })
	var level, last int64
	var trail []string
	for _, e := range evs {
		trail = append(trail, fmt.Sprintf("%d:%v", e.t%1e9, e.admit))
		if len(trail) > 12 {
			trail = trail[1:]
		}
		if e.t > last && level > 0 {
			k, _ := at(last) // constant over (last, e.t): no breakpoint between
			level = max(level-k*(e.t-last), 0)
		}
		last = max(last, e.t)
		_, c := at(e.t)
		if e.admit {
			level += unit
		}
		if level > c {
			var near []string
			for _, r := range res {
				if r.Start*1000 <= e.t+1e8 && r.Hold*1000 >= e.t-1e8 {
					near = append(near, fmt.Sprintf("[%d,%d) k=%d c=%d", r.Start*1000-e.t, r.Hold*1000-e.t, r.K, r.C))
				}
			}
			return fmt.Errorf("level %.6f units over the %d reserved at %d ns (admission: %v); reservations around: %v; events %v", float64(level)/float64(unit), c/unit, e.t, e.admit, near, trail)
		}
	}
	return nil
}

// TestSharesMutationsCaught breaks each of the node's rules of the share
// mode in turn and checks that the replay finds an over-admission within
// a few seeds, while the protocol as built passes the same seeds.
func TestSharesMutationsCaught(t *testing.T) {
	t.Parallel()
	p := mkParams(t, 500, 20000, time.Second)
	const seeds = 6
	for seed := uint64(1); seed <= seeds; seed++ {
		if err := sharesMoving(t, seed, p, 8, 3, nil); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
	for name, brk := range map[string]func(*leasestore.Store){
		"no clock margin": leasestore.ShareNoMargin,
		"no truncation":   leasestore.ShareNoTruncate,
		"additive":        leasestore.ShareAdditive,
		"low level":       leasestore.ShareLowLevel,
	} {
		caught := false
		for seed := uint64(1); seed <= seeds && !caught; seed++ {
			if err := sharesMoving(t, seed, p, 8, 3, brk); err != nil {
				t.Logf("%s: seed %d: %v", name, seed, err)
				caught = true
			}
		}
		if !caught {
			t.Errorf("%s: no over-admission found in %d seeds", name, seeds)
		}
	}
}

// TestSharesLukewarm measures keys at a few decisions per second per node
// leased in shares (100/s with a burst of 1,000, the lukewarm key;
// 3 and 16 nodes at 5 to 60 decisions per second each; and 1,000/s with a
// burst of 1,000 on 100 nodes at 5 to 20 each, the fleet of 100;
// lifetime 200 ms): store calls per decision and the under-admission
// against one exact funnel. Every admission is replayed. Without -shares
// only one row runs.
func TestSharesLukewarm(t *testing.T) {
	t.Parallel()
	type row struct {
		p     gcra.Params
		nodes int
		rate  float64
	}
	var rows []row
	for _, nodes := range []int{3, 16} {
		for _, rate := range []float64{5, 10, 27, 60} {
			rows = append(rows, row{mkParams(t, 999, 100, time.Second), nodes, rate})
		}
	}
	for _, rate := range []float64{5, 10, 20} {
		rows = append(rows, row{mkParams(t, 999, 1000, time.Second), 100, rate})
	}
	for _, rw := range rows {
		p, nodes, rate := rw.p, rw.nodes, rw.rate
		{
			if !*sharesFigures && (nodes != 3 || rate != 27) {
				continue
			}
			r := rand.New(rand.NewPCG(uint64(nodes), uint64(rate)))
			c := &clock{}
			c.t.Store(1_800_000_000_000_000_000)
			m := newModel(c)
			m.rtt = rtt(uint64(rate))
			s := newSim(t, c, m, nodes, p, 1, leasestore.Options{Shares: true, NoPrefetch: true})
			end := c.now() + int64(20*time.Second)
			mean := float64(time.Second) / (rate * float64(nodes))
			for c.now() < end {
				c.t.Add(int64(r.ExpFloat64() * mean))
				s.request(r.IntN(nodes), "k", 1)
			}
			a, e := s.check()
			st := s.stats()
			t.Logf("%d/s, nodes %d × %v/s: %.4f calls per decision, under-admission %.2f%%",
				time.Second/time.Duration(p.Interval), nodes, rate, float64(st.Calls+st.Direct)/float64(st.Decisions), 100*float64(e-a)/float64(max(e, 1)))
		}
	}
}

// TestShared checks which limits are leased in shares at 200 ms: a limit
// of 64 units or more whose rate brings 16 units per lifetime.
func TestShared(t *testing.T) {
	const L = 200 * time.Millisecond
	for _, c := range []struct {
		burst, count int64
		want         bool
	}{
		{500, 20000, true},
		{63, 20000, true},
		{62, 20000, false}, // 63 units: a fleet's buckets too small
		{10, 20000, false},
		{999, 100, true}, // 20 units per lifetime
		{999, 80, true},  // 16
		{999, 79, false}, // under 16
	} {
		p := mkParams(t, c.burst, c.count, time.Second)
		if got := leasestore.Shared(p, L); got != c.want {
			t.Errorf("Shared(burst %d, %d/s) = %v, want %v", c.burst, c.count, got, c.want)
		}
	}
}

// TestSharesOneNode checks a key leased in shares through one node on
// the model: its first call (demand unmeasured) gets a quarter of the
// rate, a refusal's RetryAfter is the wait for its bucket and its
// ResetAfter the bucket scaled to the limit, a peek answers from it without
// a call, a Reset empties it, and a charge is refused
// (ErrShares) with nothing changed.
func TestSharesOneNode(t *testing.T) {
	p := mkParams(t, 999, 1000, time.Second) // τ 1 s, 1,000 units
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000)
	m := newModel(c)
	s := leasestore.New(m, leasestore.Options{Shares: true, NoPrefetch: true, Now: c.now, Logger: quiet()})
	t.Cleanup(func() { s.Close() })
	lim := funnel.Checked{GCRA: p}
	do := func(kind funnel.OpKind, q int64) (funnel.Result, error) {
		res := make([]funnel.Result, 1)
		err := s.Do(context.Background(), []funnel.Op{{Kind: kind, Key: "k", N: q, Limit: lim}}, res)
		return res[0], err
	}
	// The first grant: a quarter of the rate (250/s) and what it drains
	// in L/4 (50 ms): 12 units.
	var admitted int64
	for {
		r, err := do(funnel.OpTake, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			// 4 ms per unit at 250/s: the next unit fits after at most that.
			if r.RetryAfter <= 0 || r.RetryAfter > 4*time.Millisecond || r.Limit != p.Limit {
				t.Fatalf("refusal %+v", r)
			}
			break
		}
		admitted++
	}
	if admitted != 12 || s.Stats().Calls != 1 {
		t.Fatalf("first grant: %d admitted with %d calls, want 12 with 1", admitted, s.Stats().Calls)
	}
	if r, err := do(funnel.OpPeek, 1); err != nil || r.Allowed || s.Stats().Calls != 1 {
		t.Fatalf("peek on a full bucket: %+v, %v, %d calls", r, err, s.Stats().Calls)
	}
	c.t.Add(int64(4 * time.Millisecond))
	if r, err := do(funnel.OpPeek, 1); err != nil || !r.Allowed || r.Remaining != 1000/12 || r.ResetAfter != time.Second*11/12+1 {
		t.Fatalf("peek after one unit drained: %+v, %v", r, err)
	}
	// A refusal (2 units, 1 here) reports ResetAfter as the peek did, the
	// bucket scaled to the whole limit, and Remaining below the units
	// refused.
	if r, err := do(funnel.OpTake, 2); err != nil || r.Allowed || r.Remaining != 1 || r.ResetAfter != time.Second*11/12+1 || r.RetryAfter != 4*time.Millisecond {
		t.Fatalf("a take of 2 after one unit drained: %+v, %v", r, err)
	}
	if _, err := do(funnel.OpCharge, 5); !errors.Is(err, leasestore.ErrShares) {
		t.Fatalf("charge: %v, want ErrShares", err)
	}
	if _, err := s.Reset(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if r, err := do(funnel.OpPeek, 12); err != nil || !r.Allowed {
		t.Fatalf("peek after a reset: %+v, %v", r, err)
	}
	// A take beyond this node's 12 units, its bucket empty: refused, with
	// Remaining below the 13 units refused (the bucket scaled says 1,000).
	if r, err := do(funnel.OpTake, 13); err != nil || r.Allowed || r.Remaining != 12 {
		t.Fatalf("a take of 13 on an empty bucket of 12: %+v, %v", r, err)
	}
	// Two keys leased in shares at once: all-or-nothing on their buckets
	// ("j" makes its first call within the decision).
	two := func() []funnel.Result {
		t.Helper()
		res := make([]funnel.Result, 2)
		if err := s.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: "k", N: 1, Limit: lim}, {Kind: funnel.OpTake, Key: "j", N: 1, Limit: lim}}, res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	if r := two(); !r[0].Allowed || !r[1].Allowed {
		t.Fatalf("two keys with room: %+v", r)
	}
	for { // fill j's bucket (the clock stands still)
		if p, _ := do2(s, "j", lim); !p.Allowed {
			break
		}
		if err := s.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: "j", N: 1, Limit: lim}}, make([]funnel.Result, 1)); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := do(funnel.OpPeek, 11)
	r := two()
	if !r[0].Allowed || r[1].Allowed || r[1].RetryAfter <= 0 {
		t.Fatalf("k with room, j full: %+v, want k's peek and j's refusal", r)
	}
	if after, _ := do(funnel.OpPeek, 11); after.Allowed != before.Allowed || after.Remaining != before.Remaining {
		t.Fatalf("k was charged though j was refused: %+v then %+v", before, after)
	}
	// A refund goes back to j's bucket.
	res := make([]funnel.Result, 1)
	if err := s.Do(context.Background(), []funnel.Op{{Kind: funnel.OpRefund, Key: "j", N: 1, Limit: lim}}, res); err != nil || !res[0].Allowed {
		t.Fatalf("refund: %+v, %v", res[0], err)
	}
	if p, _ := do2(s, "j", lim); !p.Allowed {
		t.Fatalf("j after a refund of one unit: %+v", p)
	}
	// A take of -1 (CL.THROTTLE's negative quantity) gives one back too.
	if err := s.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: "j", N: 1, Limit: lim}}, res); err != nil || !res[0].Allowed {
		t.Fatalf("j's refunded unit: %+v, %v", res[0], err)
	}
	if p, _ := do2(s, "j", lim); p.Allowed {
		t.Fatalf("j full again: %+v", p)
	}
	if err := s.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: "j", N: -1, Limit: lim}}, res); err != nil || !res[0].Allowed {
		t.Fatalf("a take of -1: %+v, %v", res[0], err)
	}
	if p, _ := do2(s, "j", lim); !p.Allowed {
		t.Fatalf("j after a take of -1: %+v", p)
	}
	// A key leased in shares beside another limit: refused.
	win, err := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Second}.Check()
	if err != nil {
		t.Fatal(err)
	}
	err = s.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: "k", N: 1, Limit: lim}, {Kind: funnel.OpTake, Key: "w", N: 1, Limit: win}}, make([]funnel.Result, 2))
	if !errors.Is(err, leasestore.ErrShares) {
		t.Fatalf("a share and a window at once: %v, want ErrShares", err)
	}
}

// do2 peeks one unit of key through s.
func do2(s *leasestore.Store, key string, lim funnel.Checked) (funnel.Result, error) {
	res := make([]funnel.Result, 1)
	err := s.Do(context.Background(), []funnel.Op{{Kind: funnel.OpPeek, Key: key, N: 1, Limit: lim}}, res)
	return res[0], err
}

// TestSharesMixedGoesPlain checks that a key whose TAT is ahead (decided
// plainly elsewhere) is decided plainly here too, in the store, for a
// lifetime: the allocator answers ErrShareMixed.
func TestSharesMixedGoesPlain(t *testing.T) {
	p := mkParams(t, 999, 1000, time.Second)
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000)
	m := newModel(c)
	m.tats["k"] = c.now() + int64(500*time.Millisecond) // 500 units taken plainly
	s := leasestore.New(m, leasestore.Options{Shares: true, NoPrefetch: true, Now: c.now, Logger: quiet()})
	t.Cleanup(func() { s.Close() })
	res := make([]funnel.Result, 1)
	op := []funnel.Op{{Kind: funnel.OpTake, Key: "k", N: 1, Limit: funnel.Checked{GCRA: p}}}
	for range 3 {
		if err := s.Do(context.Background(), op, res); err != nil || !res[0].Allowed || res[0].Remaining != 499-(s.Stats().Direct-1) {
			t.Fatalf("%+v, %v (stats %+v)", res[0], err, s.Stats())
		}
	}
	if st := s.Stats(); st.Calls != 1 || st.Direct != 3 || st.Spent != 3 {
		t.Fatalf("one share call, then plain decisions: %+v", st)
	}
}

// mixedSim is newSim with its first plain nodes leasing in units (a
// process without Options.Shares: plain decisions while a key is cold,
// unit leases once warm) and the others as opts says.
func mixedSim(t *testing.T, c *clock, b leasestore.Backend, nodes, plain int, p gcra.Params, keys int, opts leasestore.Options) *sim {
	s := newSim(t, c, b, nodes, p, keys, opts)
	for i := range plain {
		o := opts
		o.Shares = false
		skew := int64(i%3-1) * int64(2*time.Second)
		o.Now = func() int64 { return c.now() + skew }
		s.nodes[i].Close()
		n := leasestore.New(b, o)
		t.Cleanup(func() { n.Close() })
		s.nodes[i] = n
	}
	return s
}

// TestSharesMixedFleetModel drives fleets in which some nodes lease in
// shares and others do not (a rolling change of the mode), on random
// arrivals at 0.5× to 10× the rate, and replays every admission through
// one exact funnel: the fence keeps the others' plain decisions and unit
// leases out while shares are live, and ErrShareMixed keeps shares out
// while the others' TAT is ahead. Without the fence (a mutation of the
// model's allocator) the replay finds an over-admission.
func TestSharesMixedFleetModel(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, seed uint64, noFence bool) (leasestore.Stats, error) {
		r := rand.New(rand.NewPCG(seed, 31))
		p := shareLimits(t)[int(seed)%len(shareLimits(t))]
		nodes := []int{2, 4, 16}[int(seed)%3]
		c := &clock{}
		c.t.Store(1_800_000_000_000_000_000)
		m := newModel(c)
		m.noFence = noFence
		m.rtt = rttUpTo(seed, int64(100*time.Microsecond), int64(2*time.Millisecond))
		s := mixedSim(t, c, m, nodes, nodes/2, p, 1+r.IntN(3), leasestore.Options{Shares: true, NoPrefetch: seed%2 == 0, Logger: quiet()})
		s.run(r, 3000, []float64{0.5, 2, 10}[int(seed/3)%3], seed%4 == 0)
		_, _, err := s.replay()
		return s.stats(), err
	}
	var total leasestore.Stats
	for seed := uint64(1); seed <= 12; seed++ {
		st, err := run(t, seed, false)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		add(&total, st)
	}
	t.Logf("%d decisions: %d local, %d share or lease calls, %d in the store", total.Decisions, total.Local, total.Calls, total.Direct)
	if total.Calls == 0 || total.Direct == 0 {
		t.Fatal("the fleets did not both lease and decide in the store")
	}
	caught := false
	for seed := uint64(1); seed <= 12 && !caught; seed++ {
		if _, err := run(t, seed, true); err != nil {
			t.Logf("without the fence: seed %d: %v", seed, err)
			caught = true
		}
	}
	if !caught {
		t.Error("without the fence: no over-admission found in 12 seeds")
	}
}

// TestSharesMixedFleetRedis is TestSharesMixedFleetModel on a real Redis
// (share.lua's fence, gcra.lua's plain decisions and lease.lua's unit
// leases), whose scripts take the simulation's clock.
func TestSharesMixedFleetRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for seed := uint64(1); seed <= 6; seed++ {
		r := rand.New(rand.NewPCG(seed, 37))
		p := shareLimits(t)[int(seed)%len(shareLimits(t))]
		nodes := []int{2, 4, 16}[int(seed)%3]
		c := &clock{}
		c.t.Store(1_800_000_000_000_000_000)
		rs := redisstore.New(srv.Client(), redisstore.Options{Now: c.now, Prefix: fmt.Sprintf("mixed%d:", seed), Timeout: 10 * time.Second})
		d := delayed{rs, c, rttUpTo(seed, int64(100*time.Microsecond), int64(2*time.Millisecond))}
		s := mixedSim(t, c, d, nodes, nodes/2, p, 2, leasestore.Options{Shares: true, NoPrefetch: seed%2 == 0, Logger: quiet()})
		s.run(r, 3000, []float64{0.5, 2, 10}[int(seed/2)%3], seed%3 == 0)
		a, e := s.check()
		st := s.stats()
		t.Logf("seed %d: admitted %d, one exact funnel %d; %d decisions, %d local, %d calls, %d in Redis", seed, a, e, st.Decisions, st.Local, st.Calls, st.Direct)
	}
}

// shareLimits are the limits the random share tests run: the smooth limit
// (20,000/s, burst 500), a burst of 10,000, 1,000/s with a burst of 999,
// and the smallest limit leased in shares (64 units).
func shareLimits(t *testing.T) []gcra.Params {
	return []gcra.Params{
		mkParams(t, 500, 20000, time.Second),
		mkParams(t, 9999, 20000, time.Second),
		mkParams(t, 999, 1000, time.Second),
		mkParams(t, 63, 2000, time.Second),
	}
}

// TestSharesNeverOverAdmitModel drives fleets of 1, 4 and 16 nodes
// leasing in shares with random requests of 1 to 3 units on a few keys,
// 0.5× to 100× the rate, steady and on/off, round trips up to 20 ms,
// clocks seconds apart, renewals in the background and in the decisions,
// and replays every admission through one exact funnel per key.
func TestSharesNeverOverAdmitModel(t *testing.T) {
	t.Parallel()
	for _, nodes := range []int{1, 4, 16} {
		for li, p := range shareLimits(t) {
			t.Run(fmt.Sprintf("nodes%d/limit%d", nodes, li), func(t *testing.T) {
				var admitted, exact int64
				var st leasestore.Stats
				for seed := uint64(0); seed < 12; seed++ {
					r := rand.New(rand.NewPCG(seed, uint64(nodes*10+li)))
					c := &clock{}
					c.t.Store(1_800_000_000_000_000_000)
					m := newModel(c)
					m.rtt = rtt(seed)
					load := []float64{0.5, 1, 1.5, 4, 10, 100}[seed%6]
					if load >= 10 {
						m.rtt = rttUpTo(seed, int64(100*time.Microsecond), int64(2*time.Millisecond))
					}
					s := newSim(t, c, m, nodes, p, 1+r.IntN(5), leasestore.Options{Shares: true, NoPrefetch: seed%2 == 0})
					s.run(r, 4000, load, seed%3 == 0)
					a, e := s.check()
					admitted += a
					exact += e
					add(&st, s.stats())
					m.mu.Lock()
					if m.shareViolations > 0 {
						t.Errorf("seed %d: %d share calls left the reservations over the funnel", seed, m.shareViolations)
					}
					m.mu.Unlock()
				}
				t.Logf("admitted %d, one exact funnel %d (%.2f%%); %d decisions, %d local, %d calls (%.4f per decision)",
					admitted, exact, 100*float64(exact-admitted)/float64(max(exact, 1)), st.Decisions, st.Local, st.Calls, float64(st.Calls)/float64(max(st.Decisions, 1)))
			})
		}
	}
}

// TestSharesNeverOverAdmitRedis runs fleets leasing in shares on a real
// Redis (share.lua), whose scripts take the simulation's clock, at 2× and
// 10× (on/off), and replays every admission through one exact funnel.
func TestSharesNeverOverAdmitRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for _, nodes := range []int{1, 4, 16} {
		for li, p := range shareLimits(t) {
			t.Run(fmt.Sprintf("nodes%d/limit%d", nodes, li), func(t *testing.T) {
				for i, load := range []float64{2, 10} {
					c := &clock{}
					c.t.Store(1_800_000_000_000_000_000)
					rs := redisstore.New(srv.Client(), redisstore.Options{Now: c.now, Prefix: fmt.Sprintf("s%d.%d.%d:", nodes, li, i), Timeout: 10 * time.Second})
					r := rand.New(rand.NewPCG(uint64(nodes), uint64(li*10+i)))
					d := delayed{rs, c, rttUpTo(uint64(nodes), int64(100*time.Microsecond), int64(2*time.Millisecond))}
					s := newSim(t, c, d, nodes, p, 2, leasestore.Options{Shares: true, NoPrefetch: i == 0})
					s.run(r, 4000, load, i == 1)
					a, e := s.check()
					st := s.stats()
					t.Logf("%v×: admitted %d, one exact funnel %d; %d decisions, %d local, %d calls (%.4f per decision)",
						load, a, e, st.Decisions, st.Local, st.Calls, float64(st.Calls)/float64(max(st.Decisions, 1)))
					if st.Calls == 0 {
						t.Fatal("no share call: the fleet did not lease in shares")
					}
				}
			})
		}
	}
}

// TestSharesAllOrNothingNeverOverAdmits drives fleets whose every request
// takes two keys leased in shares at once (as Envoy's descriptors do), 1
// to 3 units each, at 0.5× to 10× the rate, and replays each key's
// admissions through one exact funnel; an admission is of both keys or of
// neither.
func TestSharesAllOrNothingNeverOverAdmits(t *testing.T) {
	t.Parallel()
	p := mkParams(t, 500, 20000, time.Second)
	lim := funnel.Checked{GCRA: p}
	for _, nodes := range []int{1, 4, 16} {
		for _, load := range []float64{0.5, 2, 10} {
			r := rand.New(rand.NewPCG(uint64(nodes), uint64(load*10)))
			c := &clock{}
			c.t.Store(1_800_000_000_000_000_000)
			m := newModel(c)
			m.rtt = rttUpTo(uint64(nodes), int64(100*time.Microsecond), int64(2*time.Millisecond))
			var fleet []*leasestore.Store
			for i := range nodes {
				skew := int64(i%3-1) * int64(2*time.Second)
				n := leasestore.New(m, leasestore.Options{Shares: true, NoPrefetch: true, Logger: quiet(), Now: func() int64 { return c.now() + skew }})
				t.Cleanup(func() { n.Close() })
				fleet = append(fleet, n)
			}
			adm := map[string][]admission{}
			var both, refused int
			for range 20000 {
				c.t.Add(int64(r.ExpFloat64() * float64(p.Interval) / load))
				ops := []funnel.Op{{Kind: funnel.OpTake, Key: "a", N: 1 + r.Int64N(3), Limit: lim}, {Kind: funnel.OpTake, Key: "b", N: 1 + r.Int64N(3), Limit: lim}}
				res := make([]funnel.Result, 2)
				if err := fleet[r.IntN(nodes)].Do(context.Background(), ops, res); err != nil {
					t.Fatal(err)
				}
				switch {
				case res[0].Allowed && res[1].Allowed:
					both++
					for i, op := range ops {
						adm[op.Key] = append(adm[op.Key], admission{c.now(), ops[i].N})
					}
				case res[0].Fallback || res[1].Fallback:
					t.Fatalf("a fallback with the store up: %+v", res)
				default:
					refused++
				}
			}
			for key, as := range adm {
				var tat int64
				for j, a := range as {
					var res gcra.Result
					var err error
					if tat, res, err = gcra.Decide(a.at, tat, p, a.q); err != nil || !res.Allowed {
						t.Fatalf("nodes %d, %v×: key %s: admission %d of %d is over the limit", nodes, load, key, j, len(as))
					}
				}
			}
			if both == 0 {
				t.Fatalf("nodes %d, %v×: nothing admitted", nodes, load)
			}
			t.Logf("nodes %d, %v×: %d admitted (both keys), %d refused", nodes, load, both, refused)
		}
	}
}
