package leasestore_test

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/leasestore"
)

var (
	overloadFigures = flag.Bool("overload", false, "TestOverloadModel: every row (minutes), not only the short ones")
	overloadSeeds   = flag.Int("overload.seeds", 1, "TestOverloadModel: runs of each row, each with its own seed")
)

// overload drives one hot key at factor times p's rate, from nodes chosen
// by weight (random arrivals), with round trips of up to rttMax each way,
// and replays the admissions (each must be admitted by one exact funnel).
// It returns the under-admission in the steady state (the second after
// steadyAfter) as a share of one exact funnel's admissions of the same
// arrivals, and the store calls per decision.
func overload(t *testing.T, seed uint64, p gcra.Params, factor float64, weights []int, rttMax int64) (steady, calls float64, st leasestore.Stats) {
	steady, calls, st, _ = overloadSteady(t, seed, p, factor, weights, rttMax)
	return steady, calls, st
}

// steadyFigures is what the fleet did in overload's steady second: its
// counters, the units the shared funnel let fall off a full bucket
// (idle: nobody took them while they could have been), and the units
// admitted and those one exact funnel admits.
type steadyFigures struct {
	st               leasestore.Stats
	idle, adm, exact int64
}

// overloadSteady is overload, with the steady second's figures.
func overloadSteady(t *testing.T, seed uint64, p gcra.Params, factor float64, weights []int, rttMax int64) (steady, calls float64, st leasestore.Stats, fig steadyFigures) {
	return overloadWith(t, seed, p, factor, weights, rttMax, leasestore.Options{})
}

// overloadWith is overloadSteady with the stores' options; each of prep
// is called on every node before it is used.
func overloadWith(t *testing.T, seed uint64, p gcra.Params, factor float64, weights []int, rttMax int64, opts leasestore.Options, prep ...func(*leasestore.Store)) (steady, calls float64, st leasestore.Stats, fig steadyFigures) {
	r := rand.New(rand.NewPCG(seed, 17))
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000)
	m := newModel(c)
	if rttMax > 0 {
		m.rtt = rttUpTo(seed, rttMax, rttMax)
	}
	s := newSim(t, c, m, len(weights), p, 1, opts)
	for _, n := range s.nodes {
		for _, f := range prep {
			f(n)
		}
	}
	var cum []int
	total := 0
	for _, w := range weights {
		total += w
		cum = append(cum, total)
	}
	start := c.now()
	half := start + steadyAfter(p, factor)
	end := half + int64(time.Second)
	mean := float64(p.Interval) / factor
	m.idleFrom = half
	var atHalf leasestore.Stats
	// Arrivals keep their schedule: a lease call's round trip moves the
	// one clock, and the requests due meanwhile arrive when it is back,
	// so that the load stays what was asked for.
	next := c.now()
	for c.now() < end {
		if atHalf.Decisions == 0 && c.now() >= half {
			atHalf = s.stats()
		}
		next += int64(r.ExpFloat64() * mean)
		if d := next - c.now(); d > 0 {
			c.t.Add(d)
		}
		x := r.IntN(total)
		i := 0
		for cum[i] <= x {
			i++
		}
		s.request(i, "hot", 1)
	}
	if _, _, err := s.replay(); err != nil {
		t.Fatal(err)
	}
	var adm, exact int64
	for _, a := range s.adm["hot"] {
		if a.at >= half {
			adm += a.q
		}
	}
	var tat int64
	for _, a := range s.arrived["hot"] {
		var res gcra.Result
		if tat, res, _ = gcra.Decide(a.at, tat, p, a.q); res.Allowed && a.at >= half {
			exact += a.q
		}
	}
	m.mu.Lock()
	if m.shareViolations > 0 {
		t.Errorf("%d share calls left the reservations over the funnel", m.shareViolations)
	}
	m.mu.Unlock()
	st = s.stats()
	fig = steadyFigures{st: st, idle: m.idle / p.Interval, adm: adm, exact: exact}
	sub(&fig.st, atHalf)
	return 100 * float64(exact-adm) / float64(max(exact, 1)), float64(st.Calls+st.Direct) / float64(max(st.Decisions+st.Direct, 1)), st, fig
}

// steadyAfter is when a funnel p driven from empty at factor times its
// rate is in its steady state: after a second, and after the exact
// funnel's burst is spent (its tolerance over factor−1; near the limit,
// seconds), so that the second measured after it compares the fleet with
// a funnel that admits the rate, not with one still spending its burst
// (which the fleet gives up R·L_k of: not a steady loss).
func steadyAfter(p gcra.Params, factor float64) int64 {
	d := int64(time.Second)
	if factor > 1 {
		d += int64(float64(p.Tolerance) / (factor - 1))
	}
	return d
}

// TestOverloadModel measures steady overload in the model: 20,000/s with
// bursts of 500 (leased for 12.5 ms) and 10,000 (200 ms), 3 and 16 nodes,
// equal and 10:1 demand, 1.05× to 100× the rate, and below it, 0.5× and
// 0.9× (where the under-admission is the requests refused that one exact
// funnel admits, and the calls per decision the cost), round trips of 0
// and up to 100 µs each way (the simulation runs one request at a time, so that a
// round trip stops every node's arrivals: those due meanwhile arrive
// together when it is back, which keeps the load, and longer round trips
// would bunch them more; and a lease call made in the background takes
// what simulated time the driver's goroutine moves the clock by
// meanwhile).
// Every admission is replayed (never over); the figures are logged, with
// where the steady second's units went: forfeited, given back (a give-back
// whose compare-and-set fails is lost too), or fallen off the funnel
// (nobody leased them while they could have been). -overload.seeds n runs
// every row n times, each with its own seed (the runs are not exactly
// repeatable either: background lease calls race the driver's clock).
// They take minutes (at 100×, four million requests a run): without
// -overload, only the 3-node runs at 2× and 10× without round trips run,
// as replay checks.
func TestOverloadModel(t *testing.T) {
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
					if !*overloadFigures && (nodes > 3 || f > 10 || f < 2 || unequal) {
						continue
					}
					for _, rt := range []int64{0, int64(100 * time.Microsecond)} {
						if !*overloadFigures && rt > 0 {
							continue
						}
						name := fmt.Sprintf("burst%d/nodes%d/unequal%v/%vx/rtt%v", burst, nodes, unequal, f, time.Duration(rt))
						seed := uint64(nodes) + uint64(f)
						if f != math.Trunc(f) {
							seed += uint64(1000 * f)
						}
						for run := range max(*overloadSeeds, 1) {
							seed := seed + uint64(run)*1_000_003
							name := name
							if *overloadSeeds > 1 {
								name += fmt.Sprintf("/seed%d", seed)
							}
							t.Run(name, func(t *testing.T) {
								under, calls, st, fig := overloadSteady(t, seed, p, f, w, rt)
								t.Logf("%s: steady under-admission %.2f%%, %.4f calls per decision, %d forfeited, %d given back; in the steady second: %d admitted of %d, %d forfeited, %d given back, %d fell off the funnel, %d calls",
									name, under, calls, st.Forfeited, st.GivenBack, fig.adm, fig.exact, fig.st.Forfeited, fig.st.GivenBack, fig.idle, fig.st.Calls+fig.st.Direct)
							})
						}
					}
				}
			}
		}
	}
}

var lukewarmFigures = flag.Bool("lukewarm", false, "TestLukewarmModel: every row, not only one")

// TestLukewarmModel measures the cold-key threshold's trade-off: nodes
// at a few decisions per second each on one key (100/s, a burst of 1,000,
// the key of the issue), for thresholds of 2, 4 and 8 decisions per
// lifetime, and lifetimes of 100 ms to 1 s: store calls per decision
// against the units forfeited per decision and the under-admission
// against one exact funnel. Every admission is replayed. Without
// -lukewarm only one row runs, as a replay check.
func TestLukewarmModel(t *testing.T) {
	t.Parallel()
	p := mkParams(t, 999, 100, time.Second)
	for _, nodes := range []int{3, 16} {
		for _, rate := range []float64{5, 10, 27, 60} {
			for _, life := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, time.Second} {
				for _, w := range []int64{2, 4, 8} {
					if !*lukewarmFigures && (nodes != 3 || rate != 27 || life != 200*time.Millisecond || w != 4) {
						continue
					}
					r := rand.New(rand.NewPCG(uint64(nodes), uint64(rate)))
					c := &clock{}
					c.t.Store(1_800_000_000_000_000_000)
					m := newModel(c)
					m.rtt = rtt(uint64(w))
					s := newSim(t, c, m, nodes, p, 1, leasestore.Options{Lifetime: life, NoPrefetch: true})
					for _, n := range s.nodes {
						leasestore.SetWarm(n, w)
					}
					end := c.now() + int64(20*time.Second)
					mean := float64(time.Second) / (rate * float64(nodes))
					for c.now() < end {
						c.t.Add(int64(r.ExpFloat64() * mean))
						s.request(r.IntN(nodes), "k", 1)
					}
					a, e := s.check()
					st := s.stats()
					dec := float64(st.Decisions)
					t.Logf("nodes %d × %v/s, lifetime %v, warm %d: %.3f calls per decision, %.3f units forfeited per decision, under-admission %.2f%%",
						nodes, rate, life, w, float64(st.Calls+st.Direct)/dec, float64(st.Forfeited)/dec, 100*float64(e-a)/float64(max(e, 1)))
				}
			}
		}
	}
}

// TestOverloadSmallShares: 16 nodes overloading a limit whose reduced
// burst gives each node less than two units (2,000/s with a burst of 10,
// leased for 2.5 ms), at 50× with equal demand. Under contention and in
// demand, the key leases future-dated units; it was kept cold instead
// (its lease size capped at one unit), each decision a store call: about
// 0.1 calls per decision, against under 0.01 now. Every admission is
// replayed.
func TestOverloadSmallShares(t *testing.T) {
	t.Parallel()
	p := mkParams(t, 10, 2000, time.Second)
	w := make([]int, 16)
	for i := range w {
		w[i] = 1
	}
	under, calls, st := overload(t, 99, p, 50, w, 0)
	t.Logf("steady under-admission %.2f%%, %.4f calls per decision (%d direct), %d forfeited", under, calls, st.Direct, st.Forfeited)
	if calls > 0.01 {
		t.Errorf("%.4f store calls per decision (%d of them plain decisions), want at most 0.01", calls, st.Direct)
	}
}

// sub takes s's counts off t's.
func sub(t *leasestore.Stats, s leasestore.Stats) {
	t.Decisions -= s.Decisions
	t.Local -= s.Local
	t.LocalRefusals -= s.LocalRefusals
	t.Calls -= s.Calls
	t.Prefetches -= s.Prefetches
	t.Failed -= s.Failed
	t.Direct -= s.Direct
	t.Leased -= s.Leased
	t.Spent -= s.Spent
	t.Forfeited -= s.Forfeited
	t.GivenBack -= s.GivenBack
	t.Fallbacks -= s.Fallbacks
}
