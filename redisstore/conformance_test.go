package redisstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/storetest"
)

// stores counts the stores the tests build, so that each gets its own key
// prefix on a shared server.
var stores atomic.Int64

// conformanceOptions are the options of the stores the suite runs: each with
// its own prefix, the suite's clock, and a timeout long enough that a slow
// test machine never turns a decision into a fallback.
func conformanceOptions(now func() int64) redisstore.Options {
	return redisstore.Options{
		Now:     now,
		Prefix:  fmt.Sprintf("conformance%d:", stores.Add(1)),
		Timeout: 20 * time.Second,
	}
}

// conformance returns a storetest constructor of stores on a go-redis client.
func conformance(client redisstore.Client) storetest.NewStore {
	return func(t *testing.T, now func() int64) funnel.Store {
		return redisstore.New(client, conformanceOptions(now))
	}
}

// conformanceRueidis returns a storetest constructor of stores on a rueidis
// client.
func conformanceRueidis(client rueidis.Client) storetest.NewStore {
	return func(t *testing.T, now func() int64) funnel.Store {
		return redisstore.NewRueidis(client, conformanceOptions(now))
	}
}

func newRueidis(t *testing.T, addrs ...string) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestConformance(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	storetest.Run(t, conformance(c))
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	storetest.Run(t, conformance(c))
}

// A go-redis Ring over two single nodes: the Ring picks each key's node by
// its own hash, so each decision goes alone (no batch), and the suite passes
// with the keys spread over both nodes.
func TestConformanceRing(t *testing.T) {
	t.Parallel()
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"a": a.Addr, "b": b.Addr},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() {
		// After the parallel subtests: both nodes got keys.
		for _, srv := range []*redistest.Server{a, b} {
			if n := srv.Do("DBSIZE").(int64); n == 0 {
				t.Errorf("node %s of the ring holds no key", srv.Addr)
			}
		}
		ring.Close()
	})
	storetest.Run(t, conformance(ring))
}

func TestConformanceRueidis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	storetest.Run(t, conformanceRueidis(newRueidis(t, srv.Addr)))
}

func TestConformanceClusterRueidis(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	storetest.Run(t, conformanceRueidis(newRueidis(t, cl.Addrs()...)))
}

// The suite again with Funnel's module loaded (see module.go): the store
// decides funnels through FUNNEL.GCRA, on a single Redis and on a Redis
// Cluster, through either client library.
func TestConformanceModule(t *testing.T) {
	t.Parallel()
	path := redisstore.FunnelPaths[1]
	srv := path.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	storetest.Run(t, conformance(c))
}

func TestConformanceModuleRueidis(t *testing.T) {
	t.Parallel()
	srv := redisstore.FunnelPaths[1].Start(t)
	storetest.Run(t, conformanceRueidis(newRueidis(t, srv.Addr)))
}

func TestConformanceModuleCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartClusterWith(t, 3, 0, "--loadmodule", redistest.Module(t))
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	t.Cleanup(func() { redisstore.FunnelPaths[1].Check(t, c) })
	storetest.Run(t, conformance(c))
}

func TestConformanceModuleClusterRueidis(t *testing.T) {
	t.Parallel()
	cl := redistest.StartClusterWith(t, 3, 0, "--loadmodule", redistest.Module(t))
	t.Cleanup(func() { redisstore.FunnelPaths[1].Check(t, cl.Client()) })
	storetest.Run(t, conformanceRueidis(newRueidis(t, cl.Addrs()...)))
}
