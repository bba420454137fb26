package redisstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/storetest"
)

// The store over go-redis's Sentinel-backed failover client: the client asks
// the Sentinel where the master is, and the conformance suite passes through
// it.
func TestSentinel(t *testing.T) {
	t.Parallel()
	master := redistest.StartServer(t)
	sentinel := redistest.StartSentinel(t, "mymaster", master)
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "mymaster",
		SentinelAddrs:         []string{sentinel.Addr},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { client.Close() })
	var n atomic.Int64 // the suite builds stores from parallel subtests
	storetest.Run(t, func(t *testing.T, now func() int64) funnel.Store {
		prefix := fmt.Sprintf("sentinel%d:", n.Add(1))
		s := redisstore.New(client, redisstore.Options{Now: now, Prefix: prefix, Timeout: 5 * time.Second})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// The master that a Sentinel watches is killed while 8 goroutines hammer one
// key: decisions fall back (closed) until the Sentinel promotes the replica,
// then resume by themselves on it (the store loads the script there, which
// it never saw), and the key never admits more than its limit plus one per
// interval over the whole run, on Redis's own clock.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	sentinel := redistest.StartSentinel(t, "mymaster", master)
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "mymaster",
		SentinelAddrs:         []string{sentinel.Addr},
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		// As Open sets them: an outage falls back at once.
		MaxRetries:         1,
		MinRetryBackoff:    time.Millisecond,
		DialerRetries:      1,
		DialerRetryTimeout: time.Millisecond,
	})
	t.Cleanup(func() { client.Close() })
	logs := &logCounter{}
	s := redisstore.New(client, redisstore.Options{Logger: slog.New(logs)})
	const key = "failover"
	p := mkParams(t, 4, 20, time.Second) // T = 50 ms, limit 5
	before := redisTime(t, replica.Client())

	l := startLoad(t, s, key, p)
	defer l.halt()
	// A second of decisions (20 slots) before the kill, and after the failover.
	waitFor(t, "decisions before the kill", 20*time.Second, func() bool { return l.admitted.Load() >= p.Limit+20 })
	if n := cachedScripts(t, replica); n != 0 {
		t.Fatalf("the replica has %d scripts before the failover", n)
	}
	master.Stop()
	killedAt := time.Now()
	admittedAtKill := l.admitted.Load()
	waitFor(t, "fallbacks after the kill", 20*time.Second, func() bool { return l.fallback.Load() > 0 })
	if err := sentinel.WaitMaster("mymaster", replica.Addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "decisions after the failover", 30*time.Second, func() bool { return l.admitted.Load() >= admittedAtKill+20 })
	resumed := time.Duration(l.resumedAt.Load() - killedAt.UnixNano())
	l.halt()
	after := redisTime(t, replica.Client())

	if role := replica.Do("ROLE").([]any); role[0] != "master" {
		t.Errorf("the replica's role after the failover: %v", role)
	}
	if n := cachedScripts(t, replica); n != 1 {
		t.Errorf("the promoted replica has %d scripts, want the store's", n)
	}
	elapsed := after - before
	bound := p.Limit + elapsed/p.Interval
	t.Logf("decisions resumed %v after the kill; %d decisions (%d allowed), %d fallbacks, %d errors; %d log records",
		resumed.Round(time.Millisecond), l.ok.Load(), l.admitted.Load(), l.fallback.Load(), l.errs.Load(), logs.count())
	t.Logf("admitted %d over %v of Redis time: bound %d = limit %d + %v / %v",
		l.admitted.Load(), time.Duration(elapsed), bound, p.Limit, time.Duration(elapsed), time.Duration(p.Interval))
	if l.admitted.Load() > bound {
		t.Errorf("admitted %d > %d", l.admitted.Load(), bound)
	}
	if l.errs.Load() != 0 {
		t.Errorf("%d errors", l.errs.Load())
	}
}

// cachedScripts returns the number of scripts in srv's script cache.
func cachedScripts(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info, err := srv.Info("memory")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(info["number_of_cached_scripts"])
	if err != nil {
		t.Fatalf("INFO memory: number_of_cached_scripts %q", info["number_of_cached_scripts"])
	}
	return n
}

// Open with a redis-sentinel:// URL: the first Sentinel of the list is not
// there, the second tells where the master is, the store decides in the
// database the path names, and follows the master when the Sentinel fails
// it over to the replica.
func TestOpenSentinelURL(t *testing.T) {
	t.Parallel()
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	sentinel := redistest.StartSentinel(t, "mymaster", master)
	dead, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("redis-sentinel://127.0.0.1:%d,%s/mymaster/2?dial_timeout=1s", dead, sentinel.Addr)
	s, err := redisstore.Open(url, redisstore.Options{Prefix: "url:", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	p := mkParams(t, 0, 1, time.Hour)
	if r, err := storetest.Throttle(ctx, s, "k", p, 1); err != nil || !r.Allowed || r.Fallback {
		t.Fatalf("first decision: %+v, %v", r, err)
	}
	db2 := redis.NewClient(&redis.Options{Addr: master.Addr, DB: 2})
	defer db2.Close()
	if n := db2.Exists(ctx, "url:k").Val(); n != 1 {
		t.Fatal("key not in the master's db 2 under the prefix")
	}
	// The replica has the key too; once promoted, it still refuses.
	replica2 := redis.NewClient(&redis.Options{Addr: replica.Addr, DB: 2})
	defer replica2.Close()
	waitFor(t, "the key on the replica", 10*time.Second, func() bool { return replica2.Exists(ctx, "url:k").Val() == 1 })
	master.Stop()
	if err := sentinel.WaitMaster("mymaster", replica.Addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a decision on the promoted replica", 30*time.Second, func() bool {
		r, err := storetest.Throttle(ctx, s, "k", p, 1)
		return err == nil && !r.Fallback && !r.Allowed
	})
}
