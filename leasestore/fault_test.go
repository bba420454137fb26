package leasestore_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/eventually"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/leasestore"
	"github.com/funnelrl/funnel/redisstore"
)

// A node that dies holding a lease strands its units: the others carry
// on, short of those units until the funnel refills them, and never over.
func TestDeadNodeStrandsItsUnits(t *testing.T) {
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000)
	m := newModel(c)
	p := p100(t) // leased under a burst of 80, leases of up to 20
	s := newSim(t, c, m, 2, p, 1, leasestore.Options{NoPrefetch: true})
	for range 30 {
		s.request(0, "k", 1) // node 0 warms the key and leases
	}
	st := s.nodes[0].Stats()
	stranded := st.Leased - (st.Spent - st.Direct)
	if stranded <= 0 {
		t.Fatalf("node 0 holds nothing: %+v", st)
	}
	// Node 0 dies (it is never called again). Node 1, at the same instant,
	// gets what is left of the reduced burst, less the stranded units.
	before := len(s.adm["k"])
	for range 100 {
		s.request(1, "k", 1)
	}
	got := int64(len(s.adm["k"]) - before)
	if want := 80 - 30 - stranded; got != want {
		t.Fatalf("node 1 admitted %d at once, want %d (80 - 30 spent - %d stranded)", got, want, stranded)
	}
	// A second later the funnel has refilled: node 1 gets the whole
	// reduced burst again, stranded units or not.
	c.t.Add(int64(time.Second))
	before = len(s.adm["k"])
	for range 100 {
		s.request(1, "k", 1)
	}
	if got := len(s.adm["k"]) - before; got != 80 {
		t.Fatalf("after a second node 1 admitted %d, want 80", got)
	}
	s.check()
}

// Redis stopped under load: a node spends what it holds, then answers
// its fallback; Redis started again on the same port, decisions resume
// by themselves. Nothing is ever over the limit.
func TestRedisRestartUnderLoad(t *testing.T) {
	srv := redistest.StartServer(t)
	rs := redisstore.New(srv.Client(), redisstore.Options{Timeout: 50 * time.Millisecond, Logger: quiet()})
	ls := leasestore.New(rs, leasestore.Options{Logger: quiet()})
	defer ls.Close()
	c, err := funnel.Limit{Count: 1000, Period: time.Second, Burst: 999}.Check()
	if err != nil {
		t.Fatal(err)
	}
	var fallbacks, allowed, errs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]funnel.Result, 1)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := ls.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: "k", N: 1, Limit: c}}, res); err != nil {
					errs.Add(1)
					continue
				}
				switch {
				case res[0].Fallback:
					fallbacks.Add(1)
					if res[0].Allowed {
						t.Error("a fail-closed fallback admitted")
					}
				case res[0].Allowed:
					allowed.Add(1)
				}
			}
		}()
	}
	eventually.True(t, "decisions", func() bool { return allowed.Load() > 100 })
	srv.Stop()
	eventually.True(t, "fallbacks", func() bool { return fallbacks.Load() > 100 })
	srv.MustStart()
	resumed := allowed.Load()
	eventually.True(t, "decisions after the restart", func() bool { return allowed.Load() > resumed+100 })
	close(stop)
	wg.Wait()
	if errs.Load() > 0 {
		t.Fatalf("%d errors: a store that cannot decide answers the fallback", errs.Load())
	}
	t.Logf("%d admitted, %d fallbacks; %+v", allowed.Load(), fallbacks.Load(), ls.Stats())
}

// A Redis that restarts empty while nodes hold leases: the units leased
// before the loss and spent after it are admitted on top of the fresh
// funnel's. Their slots lie within [t−L_k, t+2L] (t the loss; future-dated
// units are taken up to 2L ahead), where the reduced funnel holds at most
// (2L+L_k+τ')/T = (2L+τ)/T of them: replayed from the loss on through one
// exact funnel that starts empty then, the fleet over-admits by at most
// that many units, R·2L plus the limit. Before the loss the replay is
// exact, as always.
func TestRedisRestartsEmptyBound(t *testing.T) {
	srv := redistest.StartServer(t)
	p := mkParams(t, 500, 20000, time.Second) // leased for 12.5 ms
	const lifetime = 200 * time.Millisecond
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000)
	rs := redisstore.New(srv.Client(), redisstore.Options{Now: c.now, Timeout: 10 * time.Second})
	d := delayed{rs, c, rttUpTo(7, int64(100*time.Microsecond), int64(time.Millisecond))}
	s := newSim(t, c, d, 4, p, 1, leasestore.Options{Lifetime: lifetime, NoPrefetch: true})
	r := rand.New(rand.NewPCG(7, 8))
	s.run(r, 20000, 10, false)
	loss := c.now()
	srv.Stop()
	srv.MustStart()
	if n, err := srv.Client().DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Fatalf("Redis restarted with %d keys, %v", n, err)
	}
	for range 3 {
		srv.Client().Ping(context.Background()) // let the pool drop its dead connections
	}
	s.run(r, 20000, 10, false)
	// Before the loss: exact. From it on: through a funnel empty at the
	// loss, over by at most (2L+τ)/T units.
	before, after, over := overAfterLoss(s, "k0", loss)
	bound := (2*int64(lifetime) + p.Tolerance) / p.Interval
	t.Logf("%d admitted before the loss, %d after; over a funnel empty at the loss by %d units (bound %d); %+v",
		len(before), len(after), over, bound, s.stats())
	if over > bound {
		t.Fatalf("over-admitted %d units after the loss, more than (2L+τ)/T = %d", over, bound)
	}
}

// A Redis that restarts empty while nodes lease in shares: the share
// state (each node's reservations) is lost, so the allocator hands out
// the whole rate and capacity again while the nodes' older grants still
// admit until they end and drain. Until the older reservations would
// have ended (their holds, at most W after the loss: the longest grant,
// ten lifetimes, plus the grace and the drain of a full bucket), the
// fleet admits at most as a funnel of twice the rate and capacity would;
// so replayed from the loss on through one exact funnel that starts empty
// then, it over-admits by at most B + R·W units.
func TestSharesRedisRestartsEmptyBound(t *testing.T) {
	srv := redistest.StartServer(t)
	p := mkParams(t, 500, 20000, time.Second)
	const lifetime = 200 * time.Millisecond
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000)
	rs := redisstore.New(srv.Client(), redisstore.Options{Now: c.now, Timeout: 10 * time.Second})
	d := delayed{rs, c, rttUpTo(7, int64(100*time.Microsecond), int64(time.Millisecond))}
	s := newSim(t, c, d, 4, p, 1, leasestore.Options{Lifetime: lifetime, NoPrefetch: true, Shares: true})
	r := rand.New(rand.NewPCG(7, 8))
	s.run(r, 40000, 10, false)
	loss := c.now()
	srv.Stop()
	srv.MustStart()
	if n, err := srv.Client().DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Fatalf("Redis restarted with %d keys, %v", n, err)
	}
	for range 3 {
		srv.Client().Ping(context.Background())
	}
	s.run(r, 40000, 10, false)
	before, after, over := overAfterLoss(s, "k0", loss)
	w := 10*int64(lifetime) + int64(50*time.Millisecond) + max(p.Tolerance, 10*int64(lifetime))
	bound := p.Limit + w/p.Interval
	t.Logf("%d admitted before the loss, %d after; over a funnel empty at the loss by %d units (bound %d); %+v",
		len(before), len(after), over, bound, s.stats())
	if over > bound {
		t.Fatalf("over-admitted %d units after the loss, more than B + R·W = %d", over, bound)
	}
	if s.stats().Calls == 0 {
		t.Fatal("no share call")
	}
}

// overAfterLoss splits key's admissions at the loss: those before it are
// replayed through one exact funnel (each must be admitted), those from it
// on through one that starts empty then, and over is the units it refuses.
func overAfterLoss(s *sim, key string, loss int64) (before, after []admission, over int64) {
	for _, a := range s.adm[key] {
		if a.at < loss {
			before = append(before, a)
		} else {
			after = append(after, a)
		}
	}
	s.adm = map[string][]admission{key: before}
	s.check()
	var tat int64
	for _, a := range after {
		var res gcra.Result
		var nt int64
		if nt, res, _ = gcra.Decide(a.at, tat, s.p, a.q); res.Allowed {
			tat = nt
		} else {
			over += a.q
		}
	}
	return before, after, over
}
