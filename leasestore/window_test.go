package leasestore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/leasestore"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/redisstore"
)

// midnight is 1.5 s before a midnight UTC: the start of the window
// simulations, so that daily windows roll during them.
const midnight = 1_800_057_600_000_000_000 - 1_500_000_000

// timed is one node's view of the shared store of window limits (a memory
// store on the simulation's clock, or a real Redis store that takes it):
// its calls take simulated time, and it notes, per key, the store's time
// of the node's last take. A decision of a cold key is made there, a round
// trip's second half before the node answers: the replay takes it at that
// instant.
type timed struct {
	funnel.Store
	c    *clock
	rtt  func() (int64, int64)
	mu   sync.Mutex
	last map[string]int64
}

func (m *timed) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	up, down := m.rtt()
	m.c.t.Add(up)
	err := m.Store.Do(ctx, ops, res)
	if ops[0].Kind == funnel.OpTake {
		m.mu.Lock()
		m.last[ops[0].Key] = m.c.now()
		m.mu.Unlock()
	}
	m.c.t.Add(down)
	return err
}

func (*timed) Lease(context.Context, string, gcra.Params, redisstore.LeaseCall) (redisstore.Grant, error) {
	return redisstore.Grant{}, errors.New("the window simulation leases no funnel")
}

// newMem returns a memory store on c.
func newMem(t testing.TB, c *clock) funnel.Store {
	m := memstore.New(memstore.Options{Now: c.now, SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	return m
}

// wsim is a fleet of leasing stores on one backend deciding window limits,
// driven one request at a time on the simulation's clock.
type wsim struct {
	t       testing.TB
	c       *clock
	nodes   []*leasestore.Store
	views   []*timed
	lim     funnel.Checked
	keys    int
	adm     map[string][]admission
	arrived map[string][]admission
}

func newWSim(t testing.TB, c *clock, b funnel.Store, rtt func() (int64, int64), nodes int, l funnel.Limit, keys int, opts leasestore.Options, mutate func(*leasestore.Store)) *wsim {
	lim, err := l.Check()
	if err != nil {
		t.Fatal(err)
	}
	s := &wsim{t: t, c: c, lim: lim, keys: keys, adm: map[string][]admission{}, arrived: map[string][]admission{}}
	for i := range nodes {
		o := opts
		// One request at a time, its lease calls made by the decision: a
		// background call would move the shared clock while the driver
		// reads the instant of an admission, and a window has no slack
		// for an instant read late across its end.
		o.NoPrefetch = true
		skew := int64(i%3-1) * int64(2*time.Second) // local clocks off by ±2 s: only differences count
		o.Now = func() int64 { return c.now() + skew }
		o.Logger = quiet()
		v := &timed{Store: b, c: c, rtt: rtt, last: map[string]int64{}}
		n := leasestore.New(v, o)
		s.views = append(s.views, v)
		if mutate != nil {
			mutate(n)
		}
		t.Cleanup(func() { n.Close() })
		s.nodes = append(s.nodes, n)
	}
	return s
}

// request sends q units of key to node i and returns its result.
func (s *wsim) request(i int, key string, q int64) funnel.Result {
	s.t.Helper()
	s.arrived[key] = append(s.arrived[key], admission{s.c.now(), q})
	res := make([]funnel.Result, 1)
	direct := s.nodes[i].Stats().Direct
	if err := s.nodes[i].Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: key, N: q, Limit: s.lim}}, res); err != nil {
		s.t.Fatal(err)
	}
	r := res[0]
	at := s.c.now()
	if s.nodes[i].Stats().Direct != direct {
		// decided in the store (no lease call of the node's runs on
		// this key meanwhile: a key in the store is cold here)
		v := s.views[i]
		v.mu.Lock()
		at = v.last[key]
		v.mu.Unlock()
	}
	if r.Fallback {
		s.t.Fatalf("a fallback with the store up: %+v", r)
	}
	if r.Allowed {
		s.adm[key] = append(s.adm[key], admission{at, q})
	} else if r.RetryAfter <= 0 {
		s.t.Fatalf("a refusal without a RetryAfter: %+v", r)
	}
	return r
}

// exactWindow is one exact window counter of the simulation's limit.
type exactWindow struct {
	lim   funnel.Checked
	fixed algo.Fixed
	slide algo.Sliding
}

func (w *exactWindow) take(at, q int64) bool {
	var r algo.Result
	var err error
	if w.lim.Algorithm == funnel.FixedWindow {
		w.fixed, r, err = algo.FixedDecide(at, w.fixed, w.lim.Window.Count, w.lim.Span(at), q)
	} else {
		w.slide, r, err = algo.SlidingDecide(at, w.slide, w.lim.Window, q)
	}
	return err == nil && r.Allowed
}

// check replays every admission, at its instant, through one exact window
// counter of the limit: it returns an error unless each is admitted, the
// units admitted, and those one exact counter admits of every arrival.
func (s *wsim) check() (admitted, exact int64, err error) {
	for key, as := range s.adm {
		slices.SortStableFunc(as, func(a, b admission) int { return int(a.at - b.at) })
		w := exactWindow{lim: s.lim}
		for j, a := range as {
			if !w.take(a.at, a.q) {
				return 0, 0, fmt.Errorf("key %s: admission %d of %d (%d units at %d) is over the limit", key, j, len(as), a.q, a.at)
			}
			admitted += a.q
		}
	}
	for _, as := range s.arrived {
		w := exactWindow{lim: s.lim}
		for _, a := range as {
			if w.take(a.at, a.q) {
				exact += a.q
			}
		}
	}
	return admitted, exact, nil
}

func (s *wsim) stats() leasestore.Stats {
	var t leasestore.Stats
	for _, n := range s.nodes {
		add(&t, n.Stats())
	}
	return t
}

// run drives steps requests at load times the limit's average rate, as
// sim.run does.
func (s *wsim) run(r *rand.Rand, steps int, load float64, onOff bool) {
	period := s.lim.Period
	if s.lim.Calendar != funnel.NoCalendar {
		period = 24 * time.Hour
	}
	mean := float64(period) / float64(s.lim.Count) / load
	drive(r, s.c, steps, mean, onOff, s.keys, len(s.nodes), func(node int, key string, q int64) { s.request(node, key, q) })
}

// windowLimits are the limits of the window simulations: 1 s windows of
// 1000 and of 100, and 250 ms windows of 500 (not much longer than a
// lease's lifetime), fixed then sliding.
func windowLimits() []funnel.Limit {
	return []funnel.Limit{
		{Algorithm: funnel.FixedWindow, Count: 1000, Period: time.Second},
		{Algorithm: funnel.FixedWindow, Count: 100, Period: time.Second},
		{Algorithm: funnel.FixedWindow, Count: 500, Period: 250 * time.Millisecond},
		{Algorithm: funnel.SlidingWindow, Count: 1000, Period: time.Second},
		{Algorithm: funnel.SlidingWindow, Count: 100, Period: time.Second},
		{Algorithm: funnel.SlidingWindow, Count: 500, Period: 250 * time.Millisecond},
	}
}

// runWindows runs the window simulation of every limit for 1, 4 and 16
// nodes and seeds seeds, and returns the first replay error of each.
func runWindows(t *testing.T, seeds uint64, mutate func(*leasestore.Store)) []error {
	var errs []error
	for _, nodes := range []int{1, 4, 16} {
		for li, l := range windowLimits() {
			var admitted, exact int64
			var st leasestore.Stats
			var first error
			for seed := uint64(0); seed < seeds; seed++ {
				r := rand.New(rand.NewPCG(seed, uint64(nodes*10+li)))
				c := &clock{}
				c.t.Store(midnight)
				s := newWSim(t, c, newMem(t, c), rtt(seed), nodes, l, 1+r.IntN(5), leasestore.Options{}, mutate)
				load := []float64{0.5, 1, 1.5, 4}[seed%4]
				s.run(r, 3000, load, seed%3 == 0)
				a, e, err := s.check()
				if err != nil && first == nil {
					first = fmt.Errorf("nodes %d, limit %v %v, seed %d: %w", nodes, l.Algorithm, l, seed, err)
				}
				admitted += a
				exact += e
				add(&st, s.stats())
			}
			errs = append(errs, first)
			if mutate == nil {
				t.Logf("nodes %d, %v %d per %v: admitted %d, one exact counter %d (%.2f%% under); %d decisions, %d local, %d calls, %d units leased, %d forfeited, %d refunded",
					nodes, l.Algorithm, l.Count, l.Period, admitted, exact, 100*float64(exact-admitted)/float64(max(exact, 1)),
					st.Decisions, st.Local, st.Calls, st.Leased, st.Forfeited, st.GivenBack)
			}
		}
	}
	return errs
}

// TestWindowsNeverOverAdmitModel runs the protocol for window limits on
// the model store for many seeds: 1, 4 and 16 nodes, random and on/off
// arrivals at half to four times the rate.
func TestWindowsNeverOverAdmitModel(t *testing.T) {
	t.Parallel()
	for _, err := range runWindows(t, 12, nil) {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestWindowMutationsAreCaught runs the same simulation with leases that
// outlive their window, and with refunds sent after their window ended
// (they then give the units back to the next window): the replay must find
// the over-admission, or the simulation would not be testing these rules.
func TestWindowMutationsAreCaught(t *testing.T) {
	t.Parallel()
	for name, m := range map[string]func(*leasestore.Store){
		"leases outlive their window":     leasestore.IgnoreWindowEnd,
		"refunds land in the next window": leasestore.RefundLate,
	} {
		caught := 0
		errs := runWindows(t, 4, m)
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
}

// TestWindowsNeverOverAdmitRedis runs the window protocol on a real Redis,
// whose scripts take the simulation's clock.
func TestWindowsNeverOverAdmitRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for _, nodes := range []int{1, 4, 16} {
		for li, l := range windowLimits()[:4] {
			t.Run(fmt.Sprintf("nodes%d/limit%d", nodes, li), func(t *testing.T) {
				c := &clock{}
				c.t.Store(midnight)
				rs := redisstore.New(srv.Client(), redisstore.Options{Now: c.now, Prefix: fmt.Sprintf("w%d.%d:", nodes, li), Timeout: 10 * time.Second})
				r := rand.New(rand.NewPCG(uint64(nodes), uint64(li)))
				s := newWSim(t, c, rs, rtt(uint64(nodes)), nodes, l, 3, leasestore.Options{}, nil)
				s.run(r, 3000, 2, false)
				a, e, err := s.check()
				if err != nil {
					t.Fatal(err)
				}
				st := s.stats()
				t.Logf("admitted %d, one exact counter %d; %d decisions, %d local, %d calls (%.3f per decision), %d refunded",
					a, e, st.Decisions, st.Local, st.Calls, float64(st.Calls)/float64(st.Decisions), st.GivenBack)
			})
		}
	}
}
