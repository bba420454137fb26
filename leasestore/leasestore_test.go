package leasestore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/leasestore"
	"github.com/funnelrl/funnel/redisstore"
)

// clock is the simulation's one clock, in Unix nanoseconds.
type clock struct{ t atomic.Int64 }

func (c *clock) now() int64 { return c.t.Load() }

// model is the shared store as the lease protocol sees it: gcra.Lease and
// gcra.Decide on a map of TATs, on the simulation's clock.
type model struct {
	mu    sync.Mutex
	c     *clock
	tats  map[string]int64
	nodes map[string]map[string]int64 // key -> node -> when it last leased
	// rtt, when set, draws the two halves of a call's round trip: the
	// clock moves by the first before the store decides and by the second
	// before the answer is back.
	rtt func() (int64, int64)
	// idle is the time, summed over calls and decisions made from
	// idleFrom on, by which a key's TAT (after a give-back) was behind
	// the store's time: the funnel's units that nobody took while they
	// could have been, which fall off a full bucket (ns; divided by the
	// interval, units).
	idle, idleFrom int64
	// shares is each key's share state (gcra.Share, in µs of the clock),
	// and shareViolations the calls after which it held more than the
	// funnel (gcra.ShareHolds).
	shares          map[string]map[string]*gcra.ShareNode
	shareViolations int
	// reserved is every reservation each node was granted on each key, its
	// hold cut as gcra.Share cuts it at the node's later calls (key ->
	// node -> reservations, in µs).
	reserved map[string]map[string][]gcra.ShareReservation
	// fence is each key's fence (gcra.ShareFence) as a share call last
	// wrote it into the key's TAT, as share.lua writes it into the key;
	// noFence, a mutation, writes none.
	fence   map[string]int64
	noFence bool
}

// fellBehind notes that key's TAT tat was behind now. m.mu is held.
func (m *model) fellBehind(tat, now int64) {
	if now >= m.idleFrom && tat < now && tat != 0 {
		m.idle += now - tat
	}
}

func newModel(c *clock) *model { return &model{c: c, tats: map[string]int64{}} }

func (m *model) Lease(_ context.Context, key string, p gcra.Params, call redisstore.LeaseCall) (redisstore.Grant, error) {
	req := call.LeaseRequest
	var up, down int64
	if m.rtt != nil {
		up, down = m.rtt()
	}
	m.c.t.Add(up)
	m.mu.Lock()
	now := m.c.now()
	before := m.tats[key]
	if req.BackUnits > 0 && req.BackEnd > 0 && before == req.BackEnd {
		before -= req.BackUnits * p.Interval
	}
	m.fellBehind(before, now)
	tat, n, err := gcra.Lease(now, m.tats[key], p, req)
	if err == nil {
		m.tats[key] = tat
	}
	nodes := m.count(key, call, now)
	m.mu.Unlock()
	m.c.t.Add(down)
	if err != nil {
		return redisstore.Grant{}, err
	}
	if tat <= now {
		tat = 0
	}
	return redisstore.Grant{Now: now, Units: n, TAT: tat, Nodes: nodes}, nil
}

// Share serves a call for a share of key's funnel as gcra.Share does, in
// whole µs of the clock, after the first half of a round trip, and writes
// the fence into the key's TAT while a reservation is live, as share.lua
// does; a key whose TAT is ahead of the clock and not the fence (decided
// plainly) answers leasestore.ErrShareMixed.
func (m *model) Share(_ context.Context, key string, p gcra.Params, req gcra.ShareRequest) (gcra.ShareGrant, error) {
	var up, down int64
	if m.rtt != nil {
		up, down = m.rtt()
	}
	m.c.t.Add(up)
	m.mu.Lock()
	now := m.c.now()
	if tat := m.tats[key]; tat > now && (m.noFence || tat != m.fence[key]) {
		m.mu.Unlock()
		m.c.t.Add(down)
		return gcra.ShareGrant{}, leasestore.ErrShareMixed
	}
	if m.shares == nil {
		m.shares = map[string]map[string]*gcra.ShareNode{}
	}
	st := m.shares[key]
	if st == nil {
		st = map[string]*gcra.ShareNode{}
		m.shares[key] = st
	}
	g, err := gcra.Share(now/1000, st, p, req)
	if err == nil && !gcra.ShareHolds(st, g.Now, p) {
		m.shareViolations++
	}
	if err == nil {
		if m.reserved == nil {
			m.reserved = map[string]map[string][]gcra.ShareReservation{}
		}
		if m.reserved[key] == nil {
			m.reserved[key] = map[string][]gcra.ShareReservation{}
		}
		// A cut applies from the call on: a reservation live then is split
		// there, its capacity before the call kept.
		rs := m.reserved[key][req.Node]
		for i, r := range rs {
			if r.Hold <= g.Now || r.Start >= g.Now {
				continue
			}
			c := min(r.C, req.Level)
			rs[i].Hold = g.Now
			rs = append(rs, gcra.ShareReservation{Start: g.Now, Hold: min(r.Hold, g.Now+req.Grace+(gcra.ShareDrain(c, r.K, p)+999)/1000), K: r.K, C: c})
		}
		if g.K > 0 {
			rs = append(rs, gcra.ShareReservation{Start: g.Start, Hold: g.Hold, K: g.K, C: g.C})
		}
		m.reserved[key][req.Node] = rs
		if f := gcra.ShareFence(st, g.Now, p); f > 0 && !m.noFence {
			if m.fence == nil {
				m.fence = map[string]int64{}
			}
			m.tats[key], m.fence[key] = f, f
		}
	}
	m.mu.Unlock()
	m.c.t.Add(down)
	return g, err
}

// count notes call's node as leasing key at now and returns the nodes
// that leased it within call.Window, as lease.lua counts them. m.mu is
// held.
func (m *model) count(key string, call redisstore.LeaseCall, now int64) int64 {
	if call.Node == "" || call.Window <= 0 {
		return 0
	}
	if m.nodes == nil {
		m.nodes = map[string]map[string]int64{}
	}
	seen := m.nodes[key]
	if seen == nil {
		seen = map[string]int64{}
		m.nodes[key] = seen
	}
	seen[call.Node] = now
	for n, at := range seen {
		if at <= now-int64(call.Window) {
			delete(seen, n)
		}
	}
	return int64(len(seen))
}

func (m *model) Do(_ context.Context, ops []funnel.Op, res []funnel.Result) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	op := ops[0]
	if len(ops) != 1 || op.Kind != funnel.OpTake || op.Limit.Algorithm != funnel.GCRA {
		return fmt.Errorf("the model takes one funnel op")
	}
	m.fellBehind(m.tats[op.Key], m.c.now())
	tat, r, err := gcra.Decide(m.c.now(), m.tats[op.Key], op.Limit.GCRA, op.N)
	if err != nil {
		return err
	}
	m.tats[op.Key] = tat
	res[0] = funnel.ResultOf(op.Limit.GCRA, r)
	return nil
}

func (m *model) Reset(_ context.Context, key string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	had := m.tats[key] > m.c.now()
	delete(m.tats, key)
	if f := m.fence[key]; f > m.c.now() && !m.noFence {
		m.tats[key] = f // a reset keeps the shares' fence, as keyops.lua does
	}
	return had, nil
}

func (m *model) TTL(context.Context, string) (time.Duration, bool, error) { return 0, false, nil }
func (m *model) Bans(context.Context) ([]funnel.Ban, error)               { return nil, nil }
func (m *model) Unban(context.Context, string) (bool, error)              { return false, nil }

// delayed is a real Redis store whose calls take simulated time.
type delayed struct {
	*redisstore.Store
	c   *clock
	rtt func() (int64, int64)
}

func (d delayed) Lease(ctx context.Context, key string, p gcra.Params, call redisstore.LeaseCall) (redisstore.Grant, error) {
	up, down := d.rtt()
	d.c.t.Add(up)
	g, err := d.Store.Lease(ctx, key, p, call)
	d.c.t.Add(down)
	return g, err
}

func (d delayed) Share(ctx context.Context, key string, p gcra.Params, req gcra.ShareRequest) (gcra.ShareGrant, error) {
	up, down := d.rtt()
	d.c.t.Add(up)
	g, err := d.Store.Share(ctx, key, p, req)
	d.c.t.Add(down)
	return g, err
}

// admission is one admitted request, at the instant it was answered.
type admission struct {
	at, q int64
}

// sim is a fleet of leasing stores on one backend, driven one request at
// a time on the simulation's clock.
type sim struct {
	t       testing.TB
	c       *clock
	nodes   []*leasestore.Store
	p       gcra.Params
	keys    int
	adm     map[string][]admission
	arrived map[string][]admission // every request, at its arrival
	refused int
}

func newSim(t testing.TB, c *clock, b leasestore.Backend, nodes int, p gcra.Params, keys int, opts leasestore.Options) *sim {
	s := &sim{t: t, c: c, p: p, keys: keys, adm: map[string][]admission{}, arrived: map[string][]admission{}}
	for i := range nodes {
		o := opts
		skew := int64(i%3-1) * int64(2*time.Second) // local clocks off by ±2 s: only differences count
		o.Now = func() int64 { return c.now() + skew }
		n := leasestore.New(b, o)
		t.Cleanup(func() { n.Close() })
		s.nodes = append(s.nodes, n)
	}
	return s
}

// request sends q units of key to node i.
func (s *sim) request(i int, key string, q int64) {
	s.t.Helper()
	s.arrived[key] = append(s.arrived[key], admission{s.c.now(), q})
	c, err := funnel.Limit{Count: 1, Period: time.Duration(s.p.Interval), Burst: s.p.Burst}.Check()
	if err != nil {
		s.t.Fatal(err)
	}
	c.GCRA = s.p
	res := make([]funnel.Result, 1)
	if err := s.nodes[i].Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: key, N: q, Limit: c}}, res); err != nil {
		s.t.Fatal(err)
	}
	if res[0].Fallback {
		s.t.Fatalf("a fallback with the store up: %+v", res[0])
	}
	if res[0].Allowed {
		s.adm[key] = append(s.adm[key], admission{s.c.now(), q})
	} else {
		s.refused++
		if res[0].RetryAfter <= 0 {
			s.t.Fatalf("a refusal without a RetryAfter: %+v", res[0])
		}
	}
}

// check replays every admission, at its instant, through one exact funnel
// under the configured limit: each must be admitted. It returns the units
// admitted, and those that one exact funnel admits of every request that
// arrived.
func (s *sim) check() (admitted, exact int64) {
	s.t.Helper()
	admitted, exact, err := s.replay()
	if err != nil {
		s.t.Fatal(err)
	}
	return admitted, exact
}

// replay is check's replay, which returns the first over-admission found
// as an error instead of failing the test.
func (s *sim) replay() (admitted, exact int64, err error) {
	for key, as := range s.adm {
		slices.SortStableFunc(as, func(a, b admission) int { return int(a.at - b.at) })
		var tat int64
		for j, a := range as {
			var r gcra.Result
			var err error
			tat, r, err = gcra.Decide(a.at, tat, s.p, a.q)
			if err != nil || !r.Allowed {
				return 0, 0, fmt.Errorf("key %s: admission %d of %d (%d units at %d) is over the limit: %+v %v",
					key, j, len(as), a.q, a.at, r, err)
			}
			admitted += a.q
		}
	}
	for _, as := range s.arrived {
		var tat int64
		for _, a := range as {
			var r gcra.Result
			if tat, r, _ = gcra.Decide(a.at, tat, s.p, a.q); r.Allowed {
				exact += a.q
			}
		}
	}
	return admitted, exact, nil
}

func (s *sim) stats() leasestore.Stats {
	var t leasestore.Stats
	for _, n := range s.nodes {
		add(&t, n.Stats())
	}
	return t
}

// run drives steps requests: arrivals at rate times the limit's rate
// (random, or on/off in bursts), to keys drawn with a skew, from random
// nodes, each of 1 unit or sometimes 2 or 3.
func (s *sim) run(r *rand.Rand, steps int, load float64, onOff bool) {
	drive(r, s.c, steps, float64(s.p.Interval)/load, onOff, s.keys, len(s.nodes), s.request)
}

// drive sends steps requests to nodes on c: arrivals mean ns apart on
// average (random, or on/off in bursts of 200), to keys drawn with a skew
// among keys, from random nodes, each of 1 unit or sometimes 2 or 3.
func drive(r *rand.Rand, c *clock, steps int, mean float64, onOff bool, keys, nodes int, request func(node int, key string, q int64)) {
	on := true
	for step := 0; step < steps; step++ {
		gap := int64(r.ExpFloat64() * mean)
		if onOff && step%200 == 0 {
			on = !on
		}
		if onOff && !on {
			gap *= 20
		}
		c.t.Add(gap)
		key := fmt.Sprintf("k%d", int(float64(keys)*r.Float64()*r.Float64()))
		q := int64(1)
		if r.IntN(10) == 0 {
			q += r.Int64N(3)
		}
		request(r.IntN(nodes), key, q)
	}
}

// rtt draws round trips of 0 to 2 ms each way, a few of them 20 ms, from
// its own source (lease calls made in the background draw too).
func rtt(seed uint64) func() (int64, int64) {
	return rttUpTo(seed, int64(2*time.Millisecond), int64(20*time.Millisecond))
}

// rttUpTo draws round trips of 0 to most ns each way, one in 50 of them
// spike ns. The simulation runs one request at a time, so that a round
// trip moves every node's clock: under overload, short ones keep the
// arrivals at the load asked for.
func rttUpTo(seed uint64, most, spike int64) func() (int64, int64) {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, 99))
	return func() (int64, int64) {
		mu.Lock()
		defer mu.Unlock()
		d := func() int64 {
			if r.IntN(50) == 0 {
				return spike
			}
			return r.Int64N(most)
		}
		return d(), d()
	}
}

func mkParams(t testing.TB, burst, count int64, period time.Duration) gcra.Params {
	t.Helper()
	p, err := gcra.NewParams(burst, count, period)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNeverOverAdmitsModel runs the protocol on the model store for many
// seeds: 1, 4 and 16 nodes, random and on/off arrivals at half to a
// hundred times the rate, several limits, smooth ones among them.
func TestNeverOverAdmitsModel(t *testing.T) {
	t.Parallel()
	limits := []gcra.Params{
		mkParams(t, 999, 1000, time.Second),    // 1000/s, 1000 burst: leases of up to 200
		mkParams(t, 99, 100, time.Second),      // 100/s, burst 100: leases up to 20
		mkParams(t, 49999, 50000, time.Second), // 50k/s, a second's burst
		mkParams(t, 4999, 50000, time.Second),  // 50k/s, 100 ms: smooth, leased for 50 ms
		mkParams(t, 500, 20000, time.Second),   // 20k/s, 25 ms: smooth, leased for 12.5 ms
		mkParams(t, 10, 20000, time.Second),    // 550 µs: too smooth to lease, every decision goes to the store
	}
	for _, nodes := range []int{1, 4, 16} {
		for li, p := range limits {
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
						// Overload: round trips short enough that the
						// arrivals keep their rate (see rttUpTo).
						m.rtt = rttUpTo(seed, int64(100*time.Microsecond), int64(2*time.Millisecond))
					}
					s := newSim(t, c, m, nodes, p, 1+r.IntN(5), leasestore.Options{})
					s.run(r, 3000, load, seed%3 == 0)
					a, e := s.check()
					admitted += a
					exact += e
					add(&st, s.stats())
				}
				t.Logf("admitted %d, one exact funnel %d (%.2f%%); %d decisions, %d local, %d calls, %d units leased, %d forfeited, %d given back",
					admitted, exact, 100*float64(exact-admitted)/float64(max(exact, 1)), st.Decisions, st.Local, st.Calls, st.Leased, st.Forfeited, st.GivenBack)
			})
		}
	}
}

// runFunnels runs the model simulation of TestNeverOverAdmitsModel with
// each store mutated by mutate, on the smooth limits and loads where the
// lease rules matter, and returns each run's replay error.
func runFunnels(t *testing.T, nodes int, mutate func(*leasestore.Store)) []error {
	var errs []error
	for li, p := range []gcra.Params{mkParams(t, 500, 20000, time.Second), mkParams(t, 4999, 50000, time.Second)} {
		for seed := uint64(0); seed < 8; seed++ {
			r := rand.New(rand.NewPCG(seed, uint64(nodes*10+li)))
			c := &clock{}
			c.t.Store(1_800_000_000_000_000_000)
			m := newModel(c)
			if seed%2 == 1 {
				m.rtt = rttUpTo(seed, int64(100*time.Microsecond), int64(2*time.Millisecond))
			}
			s := newSim(t, c, m, nodes, p, 1+r.IntN(3), leasestore.Options{})
			for _, n := range s.nodes {
				mutate(n)
			}
			s.run(r, 5000, []float64{2, 10, 100, 4}[seed%4], seed%3 == 0)
			_, _, err := s.replay()
			errs = append(errs, err)
		}
	}
	return errs
}

// onThenBurst runs one node on a smooth limit (20,000/s, a burst of 500:
// leased for 12.5 ms): 12.5 ms of requests at 4× the rate, then 40 ms of
// nothing, then 1,000 requests at one instant, and returns the replay's
// error. Units that outlive the key's lifetime are spent in the burst on
// top of a refilled funnel.
func onThenBurst(t *testing.T, mutate func(*leasestore.Store)) error {
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000)
	s := newSim(t, c, newModel(c), 1, mkParams(t, 500, 20000, time.Second), 1, leasestore.Options{})
	mutate(s.nodes[0])
	for range 1000 {
		c.t.Add(12500)
		s.request(0, "k0", 1)
	}
	c.t.Add(int64(40 * time.Millisecond))
	for range 1000 {
		s.request(0, "k0", 1)
	}
	a, e, err := s.replay()
	if err == nil {
		t.Logf("on then burst: admitted %d, one exact funnel %d (the burst given up twice: 2 × 250)", a, e)
	}
	return err
}

// lateBursts runs the smooth limit of onThenBurst (20,000/s, a burst of
// 500: L_k 12.475 ms, units extended to 24.95 ms at most) twice, and
// returns the replays' errors. Once on one node: 9 requests at 4× the
// rate, whose lease (sized by that demand: about 1,000 units, the first
// 250 at once on an empty funnel) is then left alone for 24.8 ms, and
// 1,000 requests at one instant: the units granted at once must end L_k
// after their slot, since nothing of the funnel was taken ahead of them.
// Once on two nodes: 100 ms at 4× the rate, both leasing future-dated
// units while the other's queue before them, then 40 ms of nothing and
// 1,000 requests at one instant on each: a unit must end τ−T after its
// slot at most, however far the funnel was taken ahead of its grant.
func lateBursts(t *testing.T, mutate func(*leasestore.Store)) []error {
	var errs []error
	for _, nodes := range []int{1, 2} {
		c := &clock{}
		c.t.Store(1_800_000_000_000_000_000)
		s := newSim(t, c, newModel(c), nodes, mkParams(t, 500, 20000, time.Second), 1, leasestore.Options{})
		for _, n := range s.nodes {
			mutate(n)
		}
		on, idle := 9, 24800*time.Microsecond
		if nodes == 2 {
			on, idle = 8000, 40*time.Millisecond
		}
		for i := range on {
			c.t.Add(12500)
			s.request(i%nodes, "k0", 1)
		}
		c.t.Add(int64(idle))
		for i := range nodes {
			for range 1000 {
				s.request(i, "k0", 1)
			}
		}
		_, _, err := s.replay()
		errs = append(errs, err)
	}
	return errs
}

// A lease rule broken must show as an over-admission in the replay, or the
// simulation would not be testing it.
func TestFunnelMutationsAreCaught(t *testing.T) {
	t.Parallel()
	for name, m := range map[string]func(*leasestore.Store){
		"leases live the store's lifetime, not the key's":               leasestore.FullLifetime,
		"future-dated units are spent before their slots":               leasestore.EarlyUnits,
		"units live longer than the funnel was ahead of their grant":    leasestore.ExtendAlways,
		"units live longer than the reduced tolerance less an interval": leasestore.ExtendPastTolerance,
	} {
		caught := 0
		errs := append(append(runFunnels(t, 4, m), onThenBurst(t, m)), lateBursts(t, m)...)
		for _, err := range errs {
			if err != nil {
				caught++
			}
		}
		if caught == 0 {
			t.Errorf("%s: went unnoticed", name)
		}
		t.Logf("%s: caught in %d of %d runs; first: %v", name, caught, len(errs), errors.Join(errs...))
	}
	// Unmutated, the same runs never over-admit.
	none := func(*leasestore.Store) {}
	for i, err := range append(append(runFunnels(t, 4, none), onThenBurst(t, none)), lateBursts(t, none)...) {
		if err != nil {
			t.Errorf("run %d: %v", i, err)
		}
	}
}

func add(t *leasestore.Stats, s leasestore.Stats) {
	t.Decisions += s.Decisions
	t.Local += s.Local
	t.LocalRefusals += s.LocalRefusals
	t.Calls += s.Calls
	t.Prefetches += s.Prefetches
	t.Failed += s.Failed
	t.Direct += s.Direct
	t.Leased += s.Leased
	t.Spent += s.Spent
	t.Forfeited += s.Forfeited
	t.GivenBack += s.GivenBack
	t.Fallbacks += s.Fallbacks
}

// TestNeverOverAdmitsRedis runs the protocol on a real Redis, whose
// scripts take the simulation's clock.
func TestNeverOverAdmitsRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for _, nodes := range []int{1, 4, 16} {
		t.Run(fmt.Sprintf("nodes%d", nodes), func(t *testing.T) {
			c := &clock{}
			c.t.Store(1_800_000_000_000_000_000)
			rs := redisstore.New(srv.Client(), redisstore.Options{Now: c.now, Prefix: fmt.Sprintf("n%d:", nodes), Timeout: 10 * time.Second})
			r := rand.New(rand.NewPCG(uint64(nodes), 3))
			p := mkParams(t, 999, 1000, time.Second)
			s := newSim(t, c, delayed{rs, c, rtt(uint64(nodes))}, nodes, p, 3, leasestore.Options{})
			s.run(r, 4000, 2, false)
			a, e := s.check()
			st := s.stats()
			t.Logf("admitted %d, one exact funnel %d; %d decisions, %d local, %d calls (%.3f per decision)",
				a, e, st.Decisions, st.Local, st.Calls, float64(st.Calls)/float64(st.Decisions))
		})
		// Overload (10× and on/off at 100×) of a smooth limit, leased for
		// 12.5 ms with future-dated units.
		t.Run(fmt.Sprintf("nodes%d/smooth-overload", nodes), func(t *testing.T) {
			for i, load := range []float64{10, 100} {
				c := &clock{}
				c.t.Store(1_800_000_000_000_000_000)
				rs := redisstore.New(srv.Client(), redisstore.Options{Now: c.now, Prefix: fmt.Sprintf("o%d.%d:", nodes, i), Timeout: 10 * time.Second})
				r := rand.New(rand.NewPCG(uint64(nodes), uint64(5+i)))
				p := mkParams(t, 500, 20000, time.Second)
				d := delayed{rs, c, rttUpTo(uint64(nodes), int64(100*time.Microsecond), int64(2*time.Millisecond))}
				s := newSim(t, c, d, nodes, p, 2, leasestore.Options{})
				s.run(r, 6000, load, i == 1)
				a, e := s.check()
				st := s.stats()
				t.Logf("%v×: admitted %d, one exact funnel %d; %d decisions, %d local, %d calls (%.4f per decision)",
					load, a, e, st.Decisions, st.Local, st.Calls, float64(st.Calls)/float64(st.Decisions))
			}
		})
	}
}

// TestFleetOnRealRedisRealTime runs 8 leasing stores, 4 goroutines each,
// on one hot key and a few cold ones of a real Redis on Redis's own clock,
// for a fixed number of decisions. Each admission is recorded at the
// wall-clock instant it was answered, after Redis's answer (Redis's TIME
// and this process read the same clock). An instant read after Do returns
// is late by the scheduling of a loaded machine, which moves admissions
// later in the replay; the replay allows 5 ms for it (the fake-clock tests
// above replay exactly), so that what it checks is the protocol under
// real concurrency and the race detector.
func TestFleetOnRealRedisRealTime(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	rs := redisstore.New(srv.Client(), redisstore.Options{Timeout: 5 * time.Second})
	p := mkParams(t, 9999, 20000, time.Second) // 20k/s, 10000 burst: leases of up to 2000
	c, err := funnel.Limit{Count: 20000, Period: time.Second, Burst: 9999}.Check()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	adm := map[string][]admission{}
	var wg sync.WaitGroup
	var nodes []*leasestore.Store
	for range 8 {
		n := leasestore.New(rs, leasestore.Options{})
		nodes = append(nodes, n)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := make([]funnel.Result, 1)
				for i := range 3000 {
					key := "hot"
					if i%10 == w {
						key = fmt.Sprintf("cold%d", i%7)
					}
					if err := n.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: key, N: 1, Limit: c}}, res); err != nil {
						t.Error(err)
						return
					}
					if res[0].Allowed {
						at := time.Now().UnixNano()
						mu.Lock()
						adm[key] = append(adm[key], admission{at, 1})
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	replay := p
	replay.Tolerance += int64(5 * time.Millisecond)
	s := &sim{t: t, p: replay, adm: adm}
	a, _ := s.check()
	var st leasestore.Stats
	for _, n := range nodes {
		n.Close()
		add(&st, n.Stats())
	}
	t.Logf("96000 decisions: %d admitted; %d calls (%.4f per decision), %d local, %d units leased, %d forfeited",
		a, st.Calls, float64(st.Calls)/96000, st.Local, st.Leased, st.Forfeited)
}
