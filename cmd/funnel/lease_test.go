package main

import (
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
