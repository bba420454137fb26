package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/storetest"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url      string
		addrs    []string
		cluster  bool
		db       int
		user     string
		password string
		tls      bool
	}{
		{url: "redis://localhost:6380", addrs: []string{"localhost:6380"}},
		{url: "redis://10.0.0.1", addrs: []string{"10.0.0.1:6379"}},
		{url: "redis://user:p%40ss@redis.internal:7000/3", addrs: []string{"redis.internal:7000"}, db: 3, user: "user", password: "p@ss"},
		{url: "redis://:secret@h:1/0?dial_timeout=2s&pool_size=7", addrs: []string{"h:1"}, password: "secret"},
		{url: "rediss://h:6380/1", addrs: []string{"h:6380"}, db: 1, tls: true},
		{url: "redis-cluster://a:7000,b:7001,c", addrs: []string{"a:7000", "b:7001", "c:6379"}, cluster: true},
		{url: "redis-cluster://u:pw@a:7000,[::1]:7001/", addrs: []string{"a:7000", "[::1]:7001"}, cluster: true, user: "u", password: "pw"},
		{url: "redis-cluster://a:7000?max_redirects=5", addrs: []string{"a:7000"}, cluster: true},
		{url: "rediss-cluster://a:7000,b:7001", addrs: []string{"a:7000", "b:7001"}, cluster: true, tls: true},
	} {
		o, err := redisstore.ParseURL(tc.url)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if strings.Join(o.Addrs, " ") != strings.Join(tc.addrs, " ") || o.IsClusterMode != tc.cluster || o.DB != tc.db ||
			o.Username != tc.user || o.Password != tc.password || (o.TLSConfig != nil) != tc.tls {
			t.Errorf("%s: addrs %q cluster %v db %d user %q password %q TLS %v", tc.url, o.Addrs, o.IsClusterMode, o.DB, o.Username, o.Password, o.TLSConfig != nil)
		}
	}
	o, _ := redisstore.ParseURL("redis://h/0?dial_timeout=2s&pool_size=7&conn_max_lifetime=1h&conn_max_lifetime_jitter=1m&pool_fifo=true")
	if o.DialTimeout != 2*time.Second || o.PoolSize != 7 || o.ConnMaxLifetime != time.Hour || o.ConnMaxLifetimeJitter != time.Minute || !o.PoolFIFO {
		t.Errorf("query options lost: %+v", o)
	}
	o, _ = redisstore.ParseURL("redis-cluster://a:1,b:2?dial_timeout=2s&read_only=true&failing_timeout_seconds=9")
	if o.DialTimeout != 2*time.Second || !o.ReadOnly || o.FailingTimeoutSeconds != 9 {
		t.Errorf("cluster query options lost: %+v", o)
	}
	for _, bad := range []string{
		"localhost:6379",
		"http://h:1",
		"memory://",
		"redis://h:1/x",
		"redis-cluster://a:1/2",
		"redis-cluster://a:1,,b:2",
		"redis-cluster://a:1?bogus=1",
		"redis://user:hunter2@h:1/?bogus=1",
	} {
		_, err := redisstore.ParseURL(bad)
		if err == nil {
			t.Errorf("%s: no error", bad)
			continue
		}
		if !strings.HasPrefix(err.Error(), "redisstore: ") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error %q", bad, err)
		}
	}
}

// Open connects to the database the URL names.
func TestOpen(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := context.Background()
	s, err := redisstore.Open("redis://"+srv.Addr+"/3", redisstore.Options{Prefix: "app:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r, err := storetest.Throttle(ctx, s, "k", mkParams(t, 0, 1, time.Minute), 1); err != nil || !r.Allowed || r.Fallback {
		t.Fatalf("%+v, %v", r, err)
	}
	db3 := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 3})
	defer db3.Close()
	if n := db3.Exists(ctx, "app:k").Val(); n != 1 {
		t.Fatal("key not in db 3 under the prefix")
	}
	if ttl, ok, err := s.TTL(ctx, "k"); err != nil || !ok || ttl <= 59*time.Second || ttl > time.Minute {
		t.Fatalf("TTL = %v, %v, %v", ttl, ok, err)
	}
	if existed, err := s.Reset(ctx, "k"); err != nil || !existed {
		t.Fatalf("Reset = %v, %v", existed, err)
	}
	if n := db3.Exists(ctx, "app:k").Val(); n != 0 {
		t.Fatal("key still there after Reset")
	}
}
