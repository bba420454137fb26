package leasestore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/leasestore"
	"github.com/funnelrl/funnel/redisstore"
)

// delayedCmd is delayed with the GCRA command's leases taking simulated
// time too.
type delayedCmd struct{ delayed }

func (d delayedCmd) LeaseGCRA(ctx context.Context, key string, p gcra.CommandParams, call redisstore.LeaseCall) (redisstore.CommandGrant, error) {
	up, down := d.rtt()
	d.c.t.Add(up)
	g, err := d.Store.LeaseGCRA(ctx, key, p, call)
	d.c.t.Add(down)
	return g, err
}

// commandLimit is a GCRA command's limit: max_burst, tokens_per_period,
// period in seconds.
type commandLimit struct {
	burst, per int64
	period     float64
}

func (l commandLimit) params(t testing.TB, count int64) gcra.CommandParams {
	t.Helper()
	p, err := gcra.NewCommandParams(l.burst, l.per, l.period, count)
	if err != nil || p.Overflow != nil {
		t.Fatal(p, err)
	}
	return p
}

// cmdSim is a fleet of leasing stores answering GCRA calls from a real
// Redis on one clock that moves in whole µs (the arrivals, the round trips).
type cmdSim struct {
	t       *testing.T
	c       *clock
	l       commandLimit
	stores  []*leasestore.Store
	adm     map[string][]admission // in µs
	arrived map[string][]admission
}

func newCmdSim(t *testing.T, srv *redistest.Server, prefix string, nodes int, l commandLimit, rtt bool, mutate func(*leasestore.Store)) *cmdSim {
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000)
	rs := redisstore.New(srv.Client(), redisstore.Options{Now: c.now, Prefix: prefix, Timeout: 10 * time.Second})
	whole := func() (int64, int64) { return 0, 0 }
	if rtt {
		rt := rttUpTo(uint64(nodes), int64(100*time.Microsecond), int64(2*time.Millisecond))
		whole = func() (int64, int64) {
			a, b := rt()
			return a / 1000 * 1000, b / 1000 * 1000
		}
	}
	d := delayedCmd{delayed{rs, c, whole}}
	s := &cmdSim{t: t, c: c, l: l, adm: map[string][]admission{}, arrived: map[string][]admission{}}
	for i := range nodes {
		skew := int64(i%3-1) * int64(2*time.Second) // local clocks apart: only differences count
		n := leasestore.New(d, leasestore.Options{Logger: quiet(), Now: func() int64 { return c.now() + skew }})
		if mutate != nil {
			mutate(n)
		}
		t.Cleanup(func() { n.Close() })
		s.stores = append(s.stores, n)
	}
	return s
}

// request sends a GCRA call of q tokens on key to node i.
func (s *cmdSim) request(i int, key string, q int64) {
	s.t.Helper()
	s.arrived[key] = append(s.arrived[key], admission{s.c.now() / 1000, q})
	res, err := s.stores[i].GCRA(context.Background(), key, s.l.params(s.t, q))
	if err != nil {
		s.t.Fatal(err)
	}
	if res.Fallback {
		s.t.Fatalf("a fallback with the store up: %+v", res)
	}
	rep := res.Reply
	switch {
	case !rep.Limited:
		s.adm[key] = append(s.adm[key], admission{s.c.now() / 1000, q})
		if rep.RetryAfter != -1 {
			s.t.Fatalf("an admission with a retry: %+v", rep)
		}
	case rep.RetryAfter < 1:
		s.t.Fatalf("a refusal of %d tokens without a RetryAfter: %+v", q, rep)
	}
}

// run drives steps calls (1 token, sometimes 2 or 3) on keys with a skew,
// from random nodes: load times the limit's rate, in bursts when onOff.
func (s *cmdSim) run(r *rand.Rand, steps, keys int, load float64, onOff bool) {
	mean := float64(s.l.params(s.t, 1).Interval) * 1000 / load
	on := true
	for step := 0; step < steps; step++ {
		gap := int64(r.ExpFloat64() * mean)
		if onOff && step%200 == 0 {
			on = !on
		}
		if onOff && !on {
			gap *= 20
		}
		s.c.t.Add(gap / 1000 * 1000)
		key := fmt.Sprintf("k%d", int(float64(keys)*r.Float64()*r.Float64()))
		q := int64(1)
		if r.IntN(10) == 0 {
			q += r.Int64N(3)
		}
		s.request(r.IntN(len(s.stores)), key, q)
	}
}

// replay replays every admission, at its instant, through one exact GCRA
// command with the configured limit (gcra.DecideCommand) and returns the
// first one it refuses as an error, the tokens admitted, and those one
// exact command admits of every call.
func (s *cmdSim) replay() (admitted, exact int64, err error) {
	run := func(as []admission, stop bool) (int64, error) {
		var tat, n int64
		for j, a := range as {
			nt, rep, stored, err := gcra.DecideCommand(a.at, tat, tat > 0, s.l.params(s.t, a.q))
			if err != nil {
				s.t.Fatal(err)
			}
			if rep.Limited {
				if stop {
					return n, fmt.Errorf("admission %d of %d (%d tokens at %d µs) is over the limit: %+v", j, len(as), a.q, a.at, rep)
				}
				continue
			}
			if stored {
				tat = nt
			}
			n += a.q
		}
		return n, nil
	}
	for key, as := range s.adm {
		slices.SortStableFunc(as, func(a, b admission) int { return int(a.at - b.at) })
		n, rerr := run(as, true)
		if rerr != nil && err == nil {
			err = fmt.Errorf("key %s: %w", key, rerr)
		}
		admitted += n
	}
	for _, as := range s.arrived {
		n, _ := run(as, false)
		exact += n
	}
	return admitted, exact, err
}

func (s *cmdSim) stats() leasestore.Stats {
	var st leasestore.Stats
	for _, n := range s.stores {
		add(&st, n.Stats())
	}
	return st
}

// cmdRuns runs 4 nodes on two smooth limits (leased for 12.5 ms and
// 50 ms, with future-dated tokens), 8 seeds each: loads of 2 to 100 times
// the rate, on/off or random, 1 to 3 keys, with and without round trips;
// and returns each run's replay error.
func cmdRuns(t *testing.T, srv *redistest.Server, prefix string, mutate func(*leasestore.Store)) []error {
	var errs []error
	for li, l := range []commandLimit{{500, 20000, 1}, {4999, 50000, 1}} {
		for seed := uint64(0); seed < 8; seed++ {
			r := rand.New(rand.NewPCG(seed, uint64(40+li)))
			s := newCmdSim(t, srv, fmt.Sprintf("%s%d.%d:", prefix, li, seed), 4, l, seed%2 == 1, mutate)
			s.run(r, 5000, 1+r.IntN(3), []float64{2, 10, 100, 4}[seed%4], seed%3 == 0)
			_, _, err := s.replay()
			errs = append(errs, err)
		}
	}
	return errs
}

// cmdOnThenBurst runs one node on a smooth limit (20,000/s, a burst of
// 500: leased for 12.5 ms): 12.5 ms of calls at 4× the rate, then 40 ms of
// nothing, then 1,000 calls at one instant, and returns the replay's
// error. Tokens that outlive the key's lifetime are spent in the burst on
// top of a refilled funnel.
func cmdOnThenBurst(t *testing.T, srv *redistest.Server, prefix string, mutate func(*leasestore.Store)) error {
	s := newCmdSim(t, srv, prefix, 1, commandLimit{500, 20000, 1}, false, mutate)
	for range 1000 {
		s.c.t.Add(12000)
		s.request(0, "k0", 1)
	}
	s.c.t.Add(int64(40 * time.Millisecond))
	for range 1000 {
		s.request(0, "k0", 1)
	}
	_, _, err := s.replay()
	return err
}

// GCRA calls through leasing stores on a real Redis, whose scripts take
// the simulation's clock, never admit more than one exact GCRA command
// would: 1, 4 and 16 nodes at twice the rate on a bursty limit, 10× and
// on/off 100× on a smooth one (leased for 12.5 ms, with future-dated
// tokens), then the runs of the mutations' test unmutated.
func TestGCRANeverOverAdmitsRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for _, nodes := range []int{1, 4, 16} {
		for i, c := range []struct {
			l     commandLimit
			load  float64
			onOff bool
			steps int
		}{
			{commandLimit{999, 1000, 1}, 2, false, 4000},
			{commandLimit{500, 20000, 1}, 10, false, 5000},
			{commandLimit{500, 20000, 1}, 100, true, 5000},
		} {
			s := newCmdSim(t, srv, fmt.Sprintf("g%d.%d:", nodes, i), nodes, c.l, true, nil)
			s.run(rand.New(rand.NewPCG(uint64(nodes), uint64(i))), c.steps, 1, c.load, c.onOff)
			a, e, err := s.replay()
			if err != nil {
				t.Fatalf("%d nodes, %+v: %v", nodes, c, err)
			}
			st := s.stats()
			if st.Calls == 0 || st.Local == 0 || st.Direct == 0 {
				t.Fatalf("%d nodes, %+v: the calls were not leased: %+v", nodes, c, st)
			}
			t.Logf("%d nodes, %v×: admitted %d tokens, one exact command %d; %d calls, %d local, %d direct, %d lease calls",
				nodes, c.load, a, e, st.Decisions, st.Local, st.Direct, st.Calls)
		}
	}
	for i, err := range append(cmdRuns(t, srv, "u", nil), cmdOnThenBurst(t, srv, "ub:", nil)) {
		if err != nil {
			t.Errorf("run %d: %v", i, err)
		}
	}
}

// A lease rule broken must show as an over-admission in the replay, or the
// simulation would not be testing it.
func TestGCRAMutationsAreCaught(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for name, m := range map[string]func(*leasestore.Store){
		"leases live the store's lifetime, not the key's":  leasestore.FullLifetime,
		"future-dated tokens are spent before their slots": leasestore.EarlyUnits,
	} {
		caught := 0
		errs := append(cmdRuns(t, srv, "m"+name[:6], m), cmdOnThenBurst(t, srv, "mb"+name[:6]+":", m))
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

// One node on a fake clock: the leased command admits the reduced burst at
// one instant (the first calls decided in Redis, cold), refuses the next
// with the exact wait rounded up, the replies computed under the
// configured limit (10, and 2 remaining by the TAT), admits again an
// interval later; keys the command cannot read are its errors; and with
// Redis unreachable a cold key answers the fallback.
func TestGCRALeasedReplies(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000)
	rs := redisstore.New(srv.Client(), redisstore.Options{Now: c.now, Prefix: "r:", Timeout: 10 * time.Second})
	s := leasestore.New(rs, leasestore.Options{Logger: quiet(), Now: c.now, NoPrefetch: true})
	defer s.Close()
	ctx := context.Background()
	l := commandLimit{9, 10, 1} // 100 ms, 10 tokens: leased for 200 ms under 800 ms, 8 tokens
	if r, ok := leasestore.ReducedCommand(l.params(t, 1), 200*time.Millisecond); !ok || r.Variance != 800_000 || r.Limit != 8 {
		t.Fatalf("reduced: %+v, %v", r, ok)
	}
	for i := range 8 {
		res, err := s.GCRA(ctx, "k", l.params(t, 1))
		if err != nil || res.Reply.Limited || res.Reply.Limit != 10 || res.Fallback {
			t.Fatalf("call %d: %+v, %v", i, res, err)
		}
	}
	res, err := s.GCRA(ctx, "k", l.params(t, 1))
	if err != nil || res.Reply.Ints() != [5]int64{1, 10, 2, 1, 1} {
		t.Fatalf("the 9th call: %+v, %v", res.Reply, err)
	}
	if res, err := s.GCRA(ctx, "k", l.params(t, 9)); err != nil || !res.Reply.Limited || res.Reply.RetryAfter != -1 {
		t.Fatalf("9 tokens, beyond the reduced limit: %+v, %v", res.Reply, err)
	}
	c.t.Add(int64(100 * time.Millisecond))
	if res, err := s.GCRA(ctx, "k", l.params(t, 1)); err != nil || res.Reply.Limited {
		t.Fatalf("an interval later: %+v, %v", res.Reply, err)
	}
	if st := s.Stats(); st.Direct < 7 || st.Calls < 1 || st.Spent != 9 || st.LocalRefusals != 1 {
		t.Fatalf("stats %+v", st)
	}
	srv.Client().Set(ctx, "r:s", "nope", 0)
	if _, err := s.GCRA(ctx, "s", l.params(t, 1)); !errors.Is(err, gcra.ErrCommandInvalidKey) {
		t.Fatalf("a key that is not a TAT: %v", err)
	}

	down, err := redisstore.Open("redis://127.0.0.1:1", redisstore.Options{Timeout: 200 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	for _, open := range []bool{false, true} {
		n := leasestore.New(down, leasestore.Options{Logger: quiet(), FailOpen: open})
		res, err := n.GCRA(ctx, "k", l.params(t, 1))
		n.Close()
		if err != nil || !res.Fallback || res.Reply.Limited == open || res.Reply.Limit != 10 {
			t.Fatalf("fail open %v, Redis down: %+v, %v", open, res, err)
		}
	}
}

// The command's lease time is Redis's in whole milliseconds, up to one
// before the call ran: a lease made 999 µs into a millisecond ends a
// millisecond before its key's lifetime after the call, so that no token
// is spent more than its lifetime after its slot: L_k = 12.5 ms, extended
// by how far the funnel was ahead of the token (the cold decisions before
// the lease left it 350 µs ahead, and each token before it one interval
// more: 0.35 to 0.7 ms). 12.4 ms after the call, 13.399 ms after their
// slot (the call's Redis time, 999 µs before it), past every token's
// lifetime, the tokens held are not spent from memory (without the
// millisecond, they would be: their lives end 12.85 to 13.2 ms after the
// call).
func TestGCRALeaseEndsAMillisecondEarly(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000 + 999_000)
	rs := redisstore.New(srv.Client(), redisstore.Options{Now: c.now, Prefix: "e:", Timeout: 10 * time.Second})
	s := leasestore.New(rs, leasestore.Options{Logger: quiet(), Now: c.now, NoPrefetch: true})
	defer s.Close()
	ctx := context.Background()
	l := commandLimit{500, 20000, 1} // leased for 12.5 ms
	call := func() {
		t.Helper()
		if res, err := s.GCRA(ctx, "k", l.params(t, 1)); err != nil || res.Reply.Limited {
			t.Fatalf("%+v, %v", res, err)
		}
	}
	for s.Stats().Calls == 0 {
		call()
	}
	call() // from the lease, which holds more
	st := s.Stats()
	if st.Local == 0 || st.Leased-1 <= st.Spent-st.Direct {
		t.Fatalf("no tokens left in the lease: %+v", st)
	}
	c.t.Add(int64(11 * time.Millisecond))
	call()
	if s.Stats().Local != st.Local+1 {
		t.Fatalf("not spent from the lease 11 ms after it: %+v", s.Stats())
	}
	c.t.Add(int64(1400 * time.Microsecond))
	call()
	if s.Stats().Local != st.Local+1 {
		t.Fatalf("spent from the lease within its last millisecond: %+v", s.Stats())
	}
}
