package sharemodel

import (
	"math"
	"testing"
	"time"
)

// base is a configuration of the replay tests: 20,000/s with a burst of
// 500, 16 nodes, L = 200 ms, the protocol's defaults.
func base(f float64) Config {
	return Config{
		Count: 20000, Period: time.Second, Burst: 500, Nodes: 16, Factor: f,
		Lifetime: 200 * time.Millisecond, MaxOneWay: 100 * time.Microsecond, MaxOffset: time.Millisecond,
		Duration: 1500 * time.Millisecond, Steady: time.Second, Sigmas: -1, CapSplit: CapSqrt, Check: true,
		Shift: 1.3, Grace: 5 * time.Millisecond,
	}
}

// TestReplay runs fleets under steady, unequal, shifting and extreme
// demand, with and without round trips and with clocks far apart, and
// replays every admission through one exact funnel: it admits them all.
// The allocator's reservations never hold more than R or B, and the calls
// are bounded by the fleet and L (at most eight calls per node and L),
// not by the traffic.
func TestReplay(t *testing.T) {
	type tc struct {
		name string
		mod  func(*Config)
	}
	cases := []tc{
		{"equal", func(c *Config) {}},
		{"10:1", func(c *Config) { c.Weights = weights(c.Nodes, 10) }},
		{"rotating 100:1", func(c *Config) { c.Weights = weights(c.Nodes, 100); c.Rotate = 110 * time.Millisecond }},
		{"rotating fast, 3 nodes", func(c *Config) {
			c.Nodes = 3
			c.Weights = weights(3, 10)
			c.Rotate = 30 * time.Millisecond
		}},
		{"no round trip", func(c *Config) { c.MaxOneWay = 0; c.MaxOffset = 0 }},
		{"slow links, clocks 50ms apart", func(c *Config) {
			c.MaxOneWay = 5 * time.Millisecond
			c.MaxOffset = 50 * time.Millisecond
			c.Weights = weights(c.Nodes, 10)
			c.Rotate = 70 * time.Millisecond
		}},
		{"a node joins, clocks 100ms apart", func(c *Config) {
			c.Nodes = 3
			c.JoinAt = time.Second
			c.MaxOffset = 100 * time.Millisecond
		}},
		{"a node joins, large burst", func(c *Config) { c.Burst = 10000; c.Nodes = 3; c.JoinAt = time.Second }},
		{"small burst, 3 nodes", func(c *Config) { c.Burst = 10; c.Nodes = 3; c.Weights = weights(3, 10) }},
		{"small burst, 16 nodes", func(c *Config) { c.Burst = 10 }},
		{"large burst", func(c *Config) {
			c.Burst = 10000
			c.Weights = weights(c.Nodes, 10)
			c.Rotate = 110 * time.Millisecond
		}},
		{"slow rate", func(c *Config) { c.Count = 2000; c.Nodes = 3; c.Weights = weights(3, 10) }},
		{"demand unshaded, half-and-half capacity", func(c *Config) {
			c.Sigmas = 0
			c.CapSplit = CapHalf
			c.Weights = weights(c.Nodes, 10)
			c.Rotate = 110 * time.Millisecond
		}},
		{"lifetimes to a call budget", func(c *Config) {
			c.Count = 2000
			c.CallBudget = 0.008
			c.MaxLifetime = 2 * time.Second
			c.Duration = 3 * time.Second
			c.Weights = weights(c.Nodes, 10)
			c.Rotate = 700 * time.Millisecond
		}},
		{"no early renewal, no truncation", func(c *Config) {
			c.Shift = 0
			c.Grace = 0
			c.Weights = weights(c.Nodes, 10)
			c.Rotate = 250 * time.Millisecond
		}},
		{"grace shorter than the round trip", func(c *Config) {
			c.Grace = 50 * time.Microsecond
			c.Weights = weights(c.Nodes, 10)
			c.Rotate = 250 * time.Millisecond
		}},
		{"proportional capacity, headroom", func(c *Config) {
			c.CapSplit = CapProp
			c.Headroom = 0.1
			c.Sigmas = 2
		}},
	}
	factors := []float64{0.5, 1.05, 3, 10}
	if testing.Short() {
		factors = []float64{1.05, 3}
	}
	for _, c := range cases {
		for _, f := range factors {
			for seed := uint64(1); seed <= 2; seed++ {
				cfg := base(f)
				cfg.Seed = seed
				c.mod(&cfg)
				r, err := Run(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if r.Over != 0 || r.Violations != 0 {
					t.Errorf("%s, factor %v, seed %d: %d over-admissions, %d grants over R or B", c.name, f, seed, r.Over, r.Violations)
				}
				// A node calls at most every L/8 (early renewals when its
				// demand shifts; short grants last L/4); lifetimes only
				// lengthen under a call budget.
				bound := int64(cfg.Nodes) * (8*int64(cfg.Duration/cfg.Lifetime) + 2)
				if r.Calls > bound {
					t.Errorf("%s, factor %v, seed %d: %d calls, more than %d", c.name, f, seed, r.Calls, bound)
				}
				if r.Admitted == 0 {
					t.Errorf("%s, factor %v, seed %d: nothing admitted", c.name, f, seed)
				}
			}
		}
	}
}

// TestMutations breaks each rule of the protocol in a setting where it
// matters and checks that the replay through one exact funnel catches an
// over-admission within 20 seeds, while the same settings without the
// mutation admit nothing over.
func TestMutations(t *testing.T) {
	// Most settings are a fleet of three at a few times the rate, whose
	// third node joins after a second: the others' shares shrink to let
	// it in while their buckets are full.
	join := func(burst int64, f float64) func(*Config) {
		return func(c *Config) {
			c.Burst = burst
			c.Nodes = 3
			c.Factor = f
			c.JoinAt = time.Second
		}
	}
	cases := []struct {
		m   Mutation
		mod func(*Config)
	}{
		// The rate and capacity of a grant released at its end, while
		// the node's bucket drains for up to τ more.
		{ReleaseAtEnd, join(10000, 3)},
		// Σc = 2B: every node bursts its double share at the start.
		{CapacityOverB, func(c *Config) { c.Nodes = 3; c.Factor = 1.5 }},
		// Σk > R while the shares move.
		{RateOverR, join(10000, 3)},
		// A renewal drops the node's earlier grants: its level, up to the
		// old capacity, is no longer reserved.
		{ReplaceOnRenew, join(10000, 10)},
		// A call ends the node's older grants Grace after it, but the node
		// goes on draining them until their old hold: shares that move
		// every quarter second.
		{NoTruncation, func(c *Config) {
			c.Burst = 10
			c.Nodes = 3
			c.Factor = 3
			c.Weights = weights(3, 10)
			c.Rotate = 250 * time.Millisecond
		}},
		// Clocks up to 100 ms apart read as one: a node behind admits
		// under its old grant after the allocator has moved its capacity.
		{NoClockMargin, func(c *Config) {
			join(10, 3)(c)
			c.MaxOffset = 100 * time.Millisecond
		}},
	}
	for _, c := range cases {
		caught := false
		for seed := uint64(1); seed <= 20 && !caught; seed++ {
			cfg := base(1)
			cfg.Duration = 2 * time.Second
			cfg.Seed = seed
			cfg.Check = false
			c.mod(&cfg)
			exact := cfg
			cfg.Mutation = c.m
			r, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			caught = r.Over > 0
			if e, _ := Run(exact); e.Over != 0 {
				t.Errorf("%v's setting, seed %d, without the mutation: %d over-admissions", c.m, seed, e.Over)
			}
		}
		if !caught {
			t.Errorf("%v: no over-admission in 20 seeds", c.m)
		}
	}
}

// TestCheckCatchesOvercommit checks the allocator's own invariant check:
// a mutation that grants past R is reported as a violation.
func TestCheckCatchesOvercommit(t *testing.T) {
	cfg := base(1.5)
	cfg.Nodes = 3
	cfg.Weights = weights(3, 10)
	cfg.Rotate = 70 * time.Millisecond
	cfg.Mutation = RateOverR
	r, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Violations == 0 {
		t.Errorf("rate-over-R: no violation reported")
	}
}

func TestWaterfill(t *testing.T) {
	const inf = math.MaxFloat64
	for _, c := range []struct {
		demand []float64
		want   []float64
	}{
		{[]float64{10, 20, 40}, []float64{20, 30, 50}},           // under R: the rest split equally
		{[]float64{50, 50}, []float64{50, 50}},                   // exactly R
		{[]float64{90, 10, 10}, []float64{80, 10, 10}},           // the small ones met, the large one capped
		{[]float64{300, 200, 10}, []float64{45, 45, 10}},         // two capped at the water level
		{[]float64{inf, 20}, []float64{80, 20}},                  // an unknown demand takes what is left
		{[]float64{math.Inf(1), math.Inf(1)}, []float64{50, 50}}, // two unknown: halves
	} {
		a := &allocator{cfg: &Config{Smoothing: time.Second}, demand: c.demand}
		active := make([]int, len(c.demand))
		for i := range active {
			active[i] = i
		}
		got := waterfill(a, active, 100)
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-9 {
				t.Errorf("waterfill(%v) = %v; want %v", c.demand, got, c.want)
				break
			}
		}
	}
}

func TestRunErrors(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.Nodes = 0 },
		func(c *Config) { c.Factor = 0 },
		func(c *Config) { c.Lifetime = 0 },
		func(c *Config) { c.Steady = c.Duration },
		func(c *Config) { c.Weights = []float64{1} },
		func(c *Config) { c.Count = 0 },
	} {
		cfg := base(1)
		mod(&cfg)
		if _, err := Run(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}
