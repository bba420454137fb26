package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel/internal/daemon"
	"github.com/funnelrl/funnel/internal/redistest"
)

// The daemon over a real Redis: CL.THROTTLE through funnel serve lands in
// Redis in redis-cell's key format, under the configured prefix.
func TestDaemonRedisStore(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	cfg := testConfig()
	cfg.Store = "redis://" + srv.Addr + "/0"
	cfg.KeyPrefix = "rl:"
	d, err := daemon.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		d.Close()
	}()

	front := redis.NewClient(&redis.Options{Addr: d.RESPAddr().String()})
	defer front.Close()
	back := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer back.Close()
	tctx, tcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer tcancel()

	got, err := front.Do(tctx, "CL.THROTTLE", "user123", 15, 30, 60).Int64Slice()
	if err != nil || !slices.Equal(got, []int64{0, 16, 15, -1, 2}) {
		t.Fatalf("CL.THROTTLE = %v, %v", got, err)
	}
	tat, err := back.Get(tctx, "rl:user123").Result()
	if err != nil {
		t.Fatalf("the key is not in Redis under the prefix: %v", err)
	}
	if ns, err := strconv.ParseInt(tat, 10, 64); err != nil || ns < 1e18 {
		t.Fatalf("stored TAT %q is not a nanosecond epoch", tat)
	}
	if pttl, err := back.PTTL(tctx, "rl:user123").Result(); err != nil || pttl <= 0 || pttl > 2*time.Second {
		t.Fatalf("PTTL = %v, %v; want (0, 2s]", pttl, err)
	}
	if n, err := front.Del(tctx, "user123").Result(); err != nil || n != 1 {
		t.Fatalf("DEL through funnel = %v, %v", n, err)
	}
	if n, err := back.Exists(tctx, "rl:user123").Result(); err != nil || n != 0 {
		t.Fatalf("key still in Redis after DEL: %v, %v", n, err)
	}

	// The rest of the family goes through the same store: a fixed window
	// and a funnel at once, then a lease.
	all, err := front.Do(tctx, "FUNNEL.ALLOWALL", 2, "LIMIT", "{u}:d", "fixed_window", 2, 60000, "LIMIT", "{u}:s", "gcra", 1, 1000).Slice()
	if err != nil || len(all) != 4 || all[0] != int64(1) {
		t.Fatalf("FUNNEL.ALLOWALL = %v, %v", all, err)
	}
	if v, err := back.Get(tctx, "rl:{u}:d").Result(); err != nil || !strings.HasPrefix(v, "F") {
		t.Fatalf("the fixed window in Redis: %q, %v", v, err)
	}
	lease, err := front.Do(tctx, "FUNNEL.ACQUIRE", "jobs", 1, 30000, "ID", "j1").Slice()
	if err != nil || lease[0] != int64(1) || lease[5] != "j1" {
		t.Fatalf("FUNNEL.ACQUIRE = %v, %v", lease, err)
	}
	if n, err := back.ZCard(tctx, "rl:jobs").Result(); err != nil || n != 2 {
		t.Fatalf("the leases in Redis: %d, %v (want the lease and the marker)", n, err)
	}
	if held, err := front.Do(tctx, "FUNNEL.RELEASE", "jobs", "j1").Int64(); err != nil || held != 1 {
		t.Fatalf("FUNNEL.RELEASE = %v, %v", held, err)
	}
}

// The daemon over a master that a Sentinel watches, named by a
// redis-sentinel:// store URL: CL.THROTTLE lands in the master's database
// that the URL names.
func TestDaemonSentinelStore(t *testing.T) {
	t.Parallel()
	master := redistest.StartServer(t)
	sentinel := redistest.StartSentinel(t, "mymaster", master)
	cfg := testConfig()
	cfg.HTTP, cfg.GRPC = "", ""
	cfg.Store = "redis-sentinel://" + sentinel.Addr + "/mymaster/1"
	d, _, stop := start(t, cfg)
	front := redis.NewClient(&redis.Options{Addr: d.RESPAddr().String()})
	defer front.Close()
	back := redis.NewClient(&redis.Options{Addr: master.Addr, DB: 1})
	defer back.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := front.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60).Int64Slice()
	if err != nil || !slices.Equal(got, []int64{0, 16, 15, -1, 2}) {
		t.Fatalf("CL.THROTTLE = %v, %v", got, err)
	}
	if n, err := back.Exists(ctx, "user123").Result(); err != nil || n != 1 {
		t.Fatalf("the key is not in the master's db 1: %v, %v", n, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
