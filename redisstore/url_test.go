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
		"redis-sentinel://s:26379",
		"redis-sentinel://s:26379/",
		"redis-sentinel://s:26379/m/x",
		"redis-sentinel://s:26379/m/1/2",
		"redis-sentinel://s:26379,/m",
		"redis-sentinel://u:hunter2@s/m?bogus=1",
		"redis-sentinel://s/m?master_name=other",
		"redis-sentinel://s/m?db=1",
		"redis-sentinel://s/m?password=hunter2",
		"redis-sentinel://s/m?sentinel_password=hunter2&bogus=1",
		"redis-sentinel://s/m#frag",
		"sentinel://s/m",
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

// The Sentinel forms: the Sentinels in the authority (port 26379 by
// default), the master's name and database in the path, the master's
// credentials as the user and password, the Sentinels' as options.
func TestParseSentinelURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url              string
		addrs            []string
		master           string
		db               int
		user, password   string
		sUser, sPassword string
		tls              bool
		dialTimeout      time.Duration
	}{
		{url: "redis-sentinel://s1/mymaster", addrs: []string{"s1:26379"}, master: "mymaster"},
		{url: "redis-sentinel://s1:5000,s2,[::1]:5001/mymaster/3", addrs: []string{"s1:5000", "s2:26379", "[::1]:5001"}, master: "mymaster", db: 3},
		{url: "redis-sentinel://u:p%40ss@s1:5000/my%20master", addrs: []string{"s1:5000"}, master: "my master", user: "u", password: "p@ss"},
		{url: "redis-sentinel://:pw@s1/m?sentinel_password=spw&dial_timeout=2s", addrs: []string{"s1:26379"}, master: "m", password: "pw", sPassword: "spw", dialTimeout: 2 * time.Second},
		{url: "redis-sentinel://s1/m/0?sentinel_username=su&sentinel_password=a%26b", addrs: []string{"s1:26379"}, master: "m", sUser: "su", sPassword: "a&b"},
		{url: "rediss-sentinel://s1:5000,s2:5001/m", addrs: []string{"s1:5000", "s2:5001"}, master: "m", tls: true},
	} {
		o, err := redisstore.ParseURL(tc.url)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if strings.Join(o.Addrs, " ") != strings.Join(tc.addrs, " ") || o.MasterName != tc.master || o.IsClusterMode ||
			o.DB != tc.db || o.Username != tc.user || o.Password != tc.password ||
			o.SentinelUsername != tc.sUser || o.SentinelPassword != tc.sPassword ||
			(o.TLSConfig != nil) != tc.tls || o.DialTimeout != tc.dialTimeout {
			t.Errorf("%s: addrs %q master %q db %d user %q password %q sentinel %q/%q TLS %v dial %v", tc.url, o.Addrs, o.MasterName,
				o.DB, o.Username, o.Password, o.SentinelUsername, o.SentinelPassword, o.TLSConfig != nil, o.DialTimeout)
		}
	}
}

// Passwords never show in errors or in what is logged.
func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"memory":                          "memory",
		"redis://h:1/2":                   "redis://h:1/2",
		"redis://u:pw@h:1/2":              "redis://u:xxxxx@h:1/2",
		"redis-cluster://:pw@a:1,b:2?x=1": "redis-cluster://:xxxxx@a:1,b:2?x=1",
		"redis-sentinel://u:pw@s/m?sentinel_password=spw&dial_timeout=1s": "redis-sentinel://u:xxxxx@s/m?sentinel_password=xxxxx&dial_timeout=1s",
	} {
		if got := redisstore.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// ParseURL never panics, and accepts only the schemes IsURL names.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"redis://h:1/2", "rediss://u:p@h", "redis-cluster://a:1,b:2?max_redirects=3",
		"redis-sentinel://u:p@s1,s2:5000/m/1?sentinel_password=sp", "rediss-sentinel://s/m", "redis-sentinel://s/",
		"redis-sentinel://s/m?addr=x", "x://", "memory"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := redisstore.ParseURL(s)
		if err == nil && !redisstore.IsURL(s) {
			t.Fatalf("%q parsed, yet IsURL is false", s)
		}
	})
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
