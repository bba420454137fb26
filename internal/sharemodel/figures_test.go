package sharemodel

import (
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	figures = flag.Bool("figures", false, "run TestShareFigures's whole table")
	window  = flag.Duration("window", 4*time.Second, "the steady window of each row of TestShareFigures")
	seed    = flag.Uint64("seed", 1, "the seed of TestShareFigures's rows")
)

// row is one line of the figures table.
type row struct {
	count, burst int64
	nodes        int
	unequal      bool
	factor       float64
	budget       bool          // grants lengthened to a call budget of 0.8% (up to 2 s)
	rotate       time.Duration // the heavy node moves on every rotate
}

// config returns the row's simulation: L = 200 ms, round trips up to
// 100 µs each way, clocks up to 1 ms apart, and a steady window that
// starts once one exact funnel has spent its burst.
func (r row) config(win time.Duration, seed uint64) Config {
	cfg := Config{
		Count: r.count, Period: time.Second, Burst: r.burst, Nodes: r.nodes, Factor: r.factor,
		Lifetime: 200 * time.Millisecond, MaxOneWay: 100 * time.Microsecond, MaxOffset: time.Millisecond,
		Seed: seed, Sigmas: -1, CapSplit: CapSqrt, Shift: 1.3, Grace: 5 * time.Millisecond,
	}
	if r.unequal {
		cfg.Weights = weights(r.nodes, 10)
	}
	if r.budget {
		cfg.CallBudget, cfg.MaxLifetime = 0.008, 2*time.Second
	}
	cfg.Rotate = r.rotate
	cfg.Steady = time.Second
	if r.factor > 1 {
		// Twice the time one exact funnel takes to spend its burst: the
		// fleet's first grants are shares of a demand not yet measured,
		// so its burst is spent later.
		tau := time.Duration(float64(r.burst+1) / float64(r.count) * 1e9)
		cfg.Steady = 2 * max(time.Second, time.Duration(float64(tau)/(r.factor-1)))
	}
	if r.budget {
		cfg.Steady += 4 * time.Second // lifetimes up to 2 s: a longer start
	}
	cfg.Duration = cfg.Steady + win
	return cfg
}

func (r row) String() string {
	d := "equal"
	if r.unequal {
		d = "10:1"
		if r.rotate > 0 {
			d = fmt.Sprintf("10:1↻%v", r.rotate)
		}
	}
	l := "0.2s"
	if r.budget {
		l = "≤2s"
	}
	return fmt.Sprintf("%6d/s %5d %2d %-12s %4s %6.2f", r.count, r.burst, r.nodes, d, l, r.factor)
}

// weights returns n weights: the first heavy, the others 1.
func weights(n int, heavy float64) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = 1
	}
	w[0] = heavy
	return w
}

func tableRows() []row {
	var rows []row
	for _, lim := range [][2]int64{{20000, 10}, {20000, 500}, {20000, 10000}, {2000, 10}, {2000, 500}} {
		for _, n := range []int{3, 16} {
			for _, u := range []bool{false, true} {
				for _, f := range []float64{0.5, 0.9, 1.05, 1.2, 1.5, 2, 10, 100} {
					rows = append(rows, row{count: lim[0], burst: lim[1], nodes: n, unequal: u, factor: f})
				}
			}
		}
	}
	return rows
}

// runRows simulates the rows on every core, in order of their results.
func runRows(t *testing.T, rows []row, win time.Duration, seed uint64) []Result {
	out := make([]Result, len(rows))
	errs := make([]error, len(rows))
	next := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i], errs[i] = Run(rows[i].config(win, seed))
			}
		}()
	}
	for i := range rows {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%v: %v", rows[i], err)
		}
	}
	return out
}

// formatTable renders the results: calls per decision in the steady
// window and over the whole run (the start included), calls per second in
// the steady window,
// steady under-admission (for a factor above 1, the shortfall from R and
// from one exact funnel fed the same requests, as shares of R; below 1,
// the requests the exact funnel admitted and the fleet refused, as a
// share of its admissions), and over-admissions.
func formatTable(rows []row, res []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-42s %9s %9s %8s %8s %8s %8s %5s\n", "rate burst N demand L factor", "calls/dec", "(run)", "calls/s", "under/R", "vsExact", "missed", "over")
	for i, r := range rows {
		x := res[i]
		underR, vsEx := "-", "-"
		if r.factor > 1 {
			underR = fmt.Sprintf("%.2f%%", 100*x.UnderVsR())
			vsEx = fmt.Sprintf("%.2f%%", 100*x.UnderVsExact())
		}
		fmt.Fprintf(&b, "%-42s %9.4f %9.4f %8.1f %8s %8s %7.2f%% %5d\n", r, x.SteadyCallsPerDecision(), x.CallsPerDecision(), x.SteadyCallsPerSecond(),
			underR, vsEx, 100*x.MissedShare(), x.Over)
	}
	return b.String()
}

// TestShareFigures measures the whole table (with -args -figures; a
// handful of its rows otherwise) and fails on any over-admission.
func TestShareFigures(t *testing.T) {
	rows := tableRows()
	win := *window
	if !*figures {
		rows = []row{
			{20000, 500, 16, false, 1.05, false, 0}, {20000, 500, 16, true, 2, false, 0}, {20000, 10000, 3, true, 0.9, false, 0},
			{2000, 10, 3, false, 10, false, 0}, {2000, 500, 16, true, 1.2, false, 0}, {20000, 10, 16, false, 0.5, false, 0},
			{2000, 500, 16, true, 0.5, true, 0}, {20000, 500, 16, true, 1.5, false, 250 * time.Millisecond},
		}
		win = 300 * time.Millisecond
	}
	if *figures {
		// The slow limit again, with grants lengthened to keep the calls
		// within about 1% of the decisions (a budget of 0.8%: short grants and
		// renewal margins add the rest).
		for _, lim := range [][2]int64{{2000, 10}, {2000, 500}} {
			for _, n := range []int{3, 16} {
				for _, u := range []bool{false, true} {
					for _, f := range []float64{0.5, 0.9, 1.05, 1.2, 1.5, 2, 10, 100} {
						rows = append(rows, row{lim[0], lim[1], n, u, f, true, 0})
					}
				}
			}
		}
		// Shifting demand: the heavy node (10:1) moves on every second or
		// every quarter second.
		for _, lim := range [][2]int64{{20000, 500}, {2000, 500}} {
			for _, rot := range []time.Duration{time.Second, 250 * time.Millisecond} {
				for _, f := range []float64{0.9, 1.05, 1.5, 2} {
					rows = append(rows, row{lim[0], lim[1], 16, true, f, false, rot})
				}
			}
		}
	}
	res := runRows(t, rows, win, *seed)
	t.Logf("\n%s", formatTable(rows, res))
	for i, x := range res {
		if x.Over != 0 {
			t.Errorf("%v: %d over-admissions", rows[i], x.Over)
		}
	}
}
