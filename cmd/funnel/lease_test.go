package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/redistest"
)

// Two `funnel serve --lease` processes share a funnel through one Redis;
// one is killed with SIGKILL holding a lease. The other carries on, and
// the two together never admit more than the funnel: the dead one's
// unspent units are stranded, not reused.
func TestLeaseNodeKilled(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	flags := []string{"--store", "redis://" + srv.Addr + "/0", "--lease", "500ms"}
	a, b := startServe(t, flags...), startServe(t, flags...)
	// 200 a second, 200 at once: leased under 100 at once (R·L = 100).
	throttle := func(p *proc) bool { return p.ints("CL.THROTTLE", "k", 199, 200, 1)[0] == 0 }
	start := time.Now()
	admitted := 0
	for range 40 {
		if throttle(a) {
			admitted++ // a warms the key and leases
		}
	}
	a.stop(syscall.SIGKILL)
	for range 400 {
		if throttle(b) {
			admitted++
		}
	}
	elapsed := time.Since(start)
	bound := 200 + int(elapsed*200/time.Second) + 1
	if admitted > bound || admitted < 40 {
		t.Fatalf("admitted %d in %v; the funnel admits at most %d", admitted, elapsed, bound)
	}
	// b goes on deciding as the funnel refills (on Redis's clock, which a
	// test of real processes cannot advance).
	deadline := time.Now().Add(5 * time.Second)
	for !throttle(b) {
		if time.Now().After(deadline) {
			t.Fatalf("the surviving node refuses for 5 s:\n%s", b.log())
		}
	}
	t.Logf("admitted %d in %v (the funnel: at most %d)", admitted, elapsed.Round(time.Millisecond), bound)
}

// Two `funnel serve --lease 200ms --lease-shares` processes share a hot
// key (2,000 a second, 500 at once) in rate shares through one Redis:
// driven as fast as they answer, together they never admit more than the
// funnel would, Redis sees a few share calls per node and lifetime, not a
// script per decision, and the funnel's own key holds the shares' fence:
// a third process deciding plainly (no --lease-shares, as during a rolling
// change of the mode) is refused while the shares are live. One node is
// then killed with SIGKILL: the other carries on.
func TestLeaseSharesServe(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	flags := []string{"--store", "redis://" + srv.Addr + "/0", "--lease", "200ms", "--lease-shares"}
	a, b := startServe(t, flags...), startServe(t, flags...)
	plain := startServe(t, "--store", "redis://"+srv.Addr+"/0") // asked only once the shares are live
	throttle := func(p *proc) bool { return p.ints("CL.THROTTLE", "hot", 499, 2000, 1)[0] == 0 }
	start := time.Now()
	admitted, decisions := 0, 0
	for time.Since(start) < 600*time.Millisecond {
		for _, p := range []*proc{a, b} {
			decisions++
			if throttle(p) {
				admitted++
			}
		}
	}
	elapsed := time.Since(start)
	// At once: the fence is at least the tolerance (250 ms) ahead of the
	// last grant's drain.
	if throttle(plain) {
		t.Fatal("a plain process admitted on top of live shares")
	}
	if bound := 500 + int(elapsed*2000/time.Second) + 1; admitted > bound || admitted < min(400, decisions/2) {
		t.Fatalf("admitted %d of %d in %v; the funnel admits at most %d", admitted, decisions, elapsed, bound)
	}
	ctx := context.Background()
	stats, err := srv.Client().Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Calls are bounded by the fleet and the lifetime, not the traffic:
	// a node calls about once per lifetime, and never within an eighth of
	// one of its last call (renewing early when its demand moves).
	calls := redistest.ScriptCalls(stats)
	if most := int64(8 * 2 * (elapsed/(200*time.Millisecond) + 1)); calls == 0 || calls > most {
		t.Fatalf("%d script calls for %d decisions in %v (at most %d):\n%s", calls, decisions, elapsed, most, stats)
	}
	if fence, err := srv.Client().Get(ctx, "hot").Int64(); err != nil || fence <= 0 {
		t.Fatalf("the funnel's own key holds %d (%v), not a fence", fence, err)
	}
	a.stop(syscall.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for !throttle(b) {
		if time.Now().After(deadline) {
			t.Fatalf("the surviving node refuses for 5 s:\n%s", b.log())
		}
	}
	t.Logf("admitted %d of %d decisions in %v with %d script calls", admitted, decisions, elapsed.Round(time.Millisecond), calls)
}
