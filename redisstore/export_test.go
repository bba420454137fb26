package redisstore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel/internal/redistest"
)

// SetLogPack makes s keep the sliding logs of a count up to n packed, and
// larger ones in sorted sets, rather than up to 256 (0: every log in a
// sorted set, as Options.SortedSetLogs), for the tests that run both
// formats. Call it before s is used.
func SetLogPack(s *Store, n int) { s.logPack = int64(n) }

// SetConcRead makes conc.lua read a concurrency key whole when it holds
// up to n leases, rather than 16 (0: only a key without leases), for the
// tests that run both of its reads. Call it before s is used.
func SetConcRead(s *Store, n int) { s.concRead = int64(n) }

// FunnelPath is one of the two ways a store decides funnels on Redis:
// through gcra.lua, or through Funnel's module (see module.go).
type FunnelPath struct {
	Name   string
	Module bool
}

// FunnelPaths are both, for the tests that run each.
var FunnelPaths = []FunnelPath{{"script", false}, {"module", true}}

// Start starts a redis-server for the path, with extra arguments: with
// Funnel's module loaded on the module's path, without it on the script's
// (where a store finds no module and uses the script). When the test ends
// it checks that the path was taken: on the module's, that FUNNEL.GCRA was
// called and none of gcra.lua, takes.lua, window.lua, conc.lua and log.lua
// ever loaded (takes under several limits, of windows, of concurrency
// limits and of packed sliding logs went through FUNNEL.TAKES,
// FUNNEL.WINDOW, FUNNEL.CONC and FUNNEL.LOG, if any); on the script's,
// that gcra.lua was.
func (p FunnelPath) Start(t testing.TB, extra ...string) *redistest.Server {
	t.Helper()
	if p.Module {
		extra = append([]string{"--loadmodule", redistest.Module(t)}, extra...)
	}
	srv := redistest.StartServer(t, extra...)
	t.Cleanup(func() { p.Check(t, srv.Client()) })
	return srv
}

// Check checks that the decisions on c (a node, or a cluster's client)
// took the path (see Start), and on the module's that no node answered
// MOVED.
func (p FunnelPath) Check(t testing.TB, c redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	loaded, takesLoaded, moved := false, false, false
	var calls int64
	each := func(ctx context.Context, n *redis.Client) error {
		if ok, err := n.ScriptExists(ctx, gcraScript.Hash(), takesScript.goRedis.Hash(), windowScript.goRedis.Hash(), concScript.goRedis.Hash(), logScript.goRedis.Hash()).Result(); err == nil {
			loaded = loaded || ok[0]
			takesLoaded = takesLoaded || ok[1] || ok[2] || ok[3] || ok[4]
		}
		info, err := n.Info(ctx, "commandstats", "errorstats").Result()
		if err != nil {
			return err
		}
		if _, rest, ok := strings.Cut(info, "cmdstat_funnel.gcra:calls="); ok {
			v, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			calls += v
		}
		// A cluster client routes the command by its first key: a MOVED
		// would mean it routed it by another word.
		moved = moved || strings.Contains(info, "errorstat_MOVED")
		return nil
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return each(ctx, n)
		})
	case *redis.Client:
		err = each(ctx, c)
	}
	switch {
	case err != nil:
		t.Errorf("%s path: %v", p.Name, err)
	case p.Module && (calls == 0 || loaded || takesLoaded || moved):
		t.Errorf("module path: %d calls of FUNNEL.GCRA, gcra.lua loaded: %v, takes.lua, window.lua, conc.lua or log.lua loaded: %v, MOVED answered: %v", calls, loaded, takesLoaded, moved)
	case !p.Module && (calls > 0 || !loaded):
		t.Errorf("script path: %d calls of FUNNEL.GCRA, gcra.lua loaded: %v", calls, loaded)
	}
}
