package redisstore_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
)

// A master of a Redis Cluster is killed while 8 goroutines hammer one of its
// keys: decisions fall back (closed) until its replica takes over, then
// resume by themselves, and the key never admits more than its limit plus
// one per interval over the whole run, on Redis's own clock.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	logs := &logCounter{}
	s := openStore(t, "redis-cluster://"+strings.Join(cl.Addrs(), ","), redisstore.Options{Logger: slog.New(logs)})
	const key = "failover"
	p := mkParams(t, 4, 20, time.Second) // T = 50 ms, limit 5
	master := cl.MasterOf(key)
	if master < 0 {
		t.Fatal("no master for the key")
	}
	// Redis's clock (every node runs on this machine), from a node that stays.
	clockNode := cl.Nodes[(master+1)%len(cl.Nodes)]
	if m := cl.MasterOf(key); clockNode == cl.Nodes[m] {
		t.Fatal("clock node is the master")
	}
	before := redisTime(t, clockNode.Client())

	l := startLoad(t, s, key, p)
	defer l.halt()
	// A second of decisions (20 slots) before the kill, and after the failover.
	waitFor(t, "decisions before the kill", 20*time.Second, func() bool { return l.admitted.Load() >= p.Limit+20 })
	cl.Kill(master)
	killedAt := time.Now()
	admittedAtKill := l.admitted.Load()
	waitFor(t, "fallbacks after the kill", 20*time.Second, func() bool { return l.fallback.Load() > 0 })
	waitFor(t, "decisions after the failover", 30*time.Second, func() bool { return l.admitted.Load() >= admittedAtKill+20 })
	resumed := time.Duration(l.resumedAt.Load() - killedAt.UnixNano())
	l.halt()
	after := redisTime(t, clockNode.Client())

	if m := cl.MasterOf(key); m < 0 || m == master {
		t.Fatalf("master of the key after the failover: node %d (killed: %d)", m, master)
	}
	elapsed := after - before
	bound := p.Limit + elapsed/p.Interval
	t.Logf("killed node %d; decisions resumed %v later; %d decisions (%d allowed), %d fallbacks, %d errors; %d log records",
		master, resumed.Round(time.Millisecond), l.ok.Load(), l.admitted.Load(), l.fallback.Load(), l.errs.Load(), logs.count())
	t.Logf("admitted %d over %v of Redis time: bound %d = limit %d + %v / %v",
		l.admitted.Load(), time.Duration(elapsed), bound, p.Limit, time.Duration(elapsed), time.Duration(p.Interval))
	if l.admitted.Load() > bound {
		t.Errorf("admitted %d > %d", l.admitted.Load(), bound)
	}
	if l.errs.Load() != 0 {
		t.Errorf("%d errors", l.errs.Load())
	}
}
