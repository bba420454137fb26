package redisstore_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
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
	ctx := context.Background()
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

	var ok, admitted, fallback, errs atomic.Int64
	var resumedAt atomic.Int64 // time of the first decision after a fallback
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1_000_000; i++ { // bounded; stop ends it sooner
				select {
				case <-stop:
					return
				default:
				}
				r, err := s.Throttle(ctx, key, p, 1)
				switch {
				case err != nil:
					if errs.Add(1) == 1 {
						t.Errorf("Throttle: %v", err)
					}
				case r.Fallback:
					fallback.Add(1)
				default:
					ok.Add(1)
					if fallback.Load() > 0 && resumedAt.Load() == 0 {
						resumedAt.CompareAndSwap(0, time.Now().UnixNano())
					}
					if r.Allowed {
						admitted.Add(1)
					}
				}
			}
		}()
	}
	halt := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer halt()
	// A second of decisions (20 slots) before the kill, and after the failover.
	waitFor(t, "decisions before the kill", 20*time.Second, func() bool { return admitted.Load() >= p.Limit+20 })
	cl.Kill(master)
	killedAt := time.Now()
	admittedAtKill := admitted.Load()
	waitFor(t, "fallbacks after the kill", 20*time.Second, func() bool { return fallback.Load() > 0 })
	waitFor(t, "decisions after the failover", 30*time.Second, func() bool { return admitted.Load() >= admittedAtKill+20 })
	resumed := time.Duration(resumedAt.Load() - killedAt.UnixNano())
	halt()
	after := redisTime(t, clockNode.Client())

	if m := cl.MasterOf(key); m < 0 || m == master {
		t.Fatalf("master of the key after the failover: node %d (killed: %d)", m, master)
	}
	elapsed := after - before
	bound := p.Limit + elapsed/p.Interval
	t.Logf("killed node %d; decisions resumed %v later; %d decisions (%d allowed), %d fallbacks, %d errors; %d log records",
		master, resumed.Round(time.Millisecond), ok.Load(), admitted.Load(), fallback.Load(), errs.Load(), logs.count())
	t.Logf("admitted %d over %v of Redis time: bound %d = limit %d + %v / %v",
		admitted.Load(), time.Duration(elapsed), bound, p.Limit, time.Duration(elapsed), time.Duration(p.Interval))
	if admitted.Load() > bound {
		t.Errorf("admitted %d > %d", admitted.Load(), bound)
	}
	if errs.Load() != 0 {
		t.Errorf("%d errors", errs.Load())
	}
}
