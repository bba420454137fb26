package redisstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/storetest"
)

// stores counts the stores the tests build, so that each gets its own key
// prefix on a shared server.
var stores atomic.Int64

// conformance returns a storetest constructor of stores on client, each with
// its own prefix, the suite's clock, and a timeout long enough that a slow
// test machine never turns a decision into a fallback.
func conformance(client redisstore.Client) storetest.NewStore {
	return func(t *testing.T, now func() int64) funnel.Store {
		return redisstore.New(client, redisstore.Options{
			Now:     now,
			Prefix:  fmt.Sprintf("conformance%d:", stores.Add(1)),
			Timeout: 20 * time.Second,
		})
	}
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
