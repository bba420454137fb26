package leasestore_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/eventually"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/leasestore"
	"github.com/funnelrl/funnel/redisstore"
)

// A Redis Cluster master killed under the load of four leasing nodes: the
// replica takes over, decisions resume by themselves, and the nodes admit
// no more than the funnel over the whole run, plus what the failover
// itself may lose (writes not yet replicated: at most the leases of the
// last moments, reported).
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	rs, err := redisstore.Open("redis-cluster://"+strings.Join(cl.Addrs(), ","), redisstore.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	const key = "failover"
	master := cl.MasterOf(key)
	if master < 0 {
		t.Fatal("no master for the key")
	}
	// 200 per second, 200 at once: leased under a burst of 160, leases of
	// up to 40 units.
	c, err := funnel.Limit{Count: 200, Period: time.Second, Burst: 199}.Check()
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*leasestore.Store
	for range 4 {
		n := leasestore.New(rs, leasestore.Options{Logger: quiet()})
		defer n.Close()
		nodes = append(nodes, n)
	}
	var admitted, fallbacks, errs atomic.Int64
	var resumedAt atomic.Int64
	var killed atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := nodes[w%len(nodes)]
			res := make([]funnel.Result, 1)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := n.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: key, N: 1, Limit: c}}, res); err != nil {
					errs.Add(1)
					continue
				}
				switch {
				case res[0].Fallback:
					fallbacks.Add(1)
				case res[0].Allowed:
					admitted.Add(1)
					if killed.Load() && fallbacks.Load() > 0 {
						resumedAt.CompareAndSwap(0, time.Now().UnixNano())
					}
				}
				time.Sleep(time.Millisecond) // about 8,000 requests a second: four times the limit
			}
		}()
	}
	eventually.True(t, "decisions before the kill", func() bool { return admitted.Load() >= 300 })
	cl.Kill(master)
	killed.Store(true)
	killedAt := time.Now()
	eventually.True(t, "fallbacks after the kill", func() bool { return fallbacks.Load() > 0 })
	eventually.TrueWithin(t, 30*time.Second, "decisions resumed after the failover", func() bool {
		return resumedAt.Load() != 0 && admitted.Load() >= 300+200
	})
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	var st leasestore.Stats
	for _, n := range nodes {
		add(&st, n.Stats())
	}
	bound := 200 + int64(elapsed*200/time.Second)
	// The replica may lack the writes of the last moments before the kill:
	// at most a lease per node.
	loss := int64(4 * 40)
	t.Logf("killed node %d; decisions resumed %v later; admitted %d in %v (the funnel admits %d), %d fallbacks, %d errors; %+v",
		master, time.Duration(resumedAt.Load()-killedAt.UnixNano()).Round(time.Millisecond), admitted.Load(), elapsed.Round(time.Millisecond), bound, fallbacks.Load(), errs.Load(), st)
	if admitted.Load() > bound+loss {
		t.Errorf("admitted %d > %d + %d", admitted.Load(), bound, loss)
	}
	if errs.Load() != 0 {
		t.Errorf("%d errors", errs.Load())
	}
}
