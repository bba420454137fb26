package redisstore

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The client that Open builds has every go-redis option of the URL's query,
// single and cluster, those that redis.UniversalOptions cannot hold
// (max_concurrent_dials) or that UniversalOptions.Simple drops
// (conn_max_lifetime_jitter) included, and the options the store sets on top.
// Open does not dial, so the addresses need not answer.
func TestOpenKeepsURLOptions(t *testing.T) {
	t.Parallel()
	const query = "dial_timeout=3s&max_retries=5&pool_size=7&read_timeout=4s&write_timeout=6s" +
		"&conn_max_lifetime=1h&conn_max_lifetime_jitter=1m&client_name=funnel-test"
	// want checks the fields that both kinds of client options share.
	want := func(t *testing.T, dial, read, write, life, jitter time.Duration, retries, pool int, name string, ctxTimeout bool, minBackoff time.Duration) {
		t.Helper()
		if dial != 3*time.Second || read != 4*time.Second || write != 6*time.Second || retries != 5 || pool != 7 ||
			life != time.Hour || jitter != time.Minute || name != "funnel-test" {
			t.Errorf("URL options lost: dial %v read %v write %v retries %d pool %d lifetime %v jitter %v name %q",
				dial, read, write, retries, pool, life, jitter, name)
		}
		if !ctxTimeout || minBackoff != time.Millisecond {
			t.Errorf("store options lost: ContextTimeoutEnabled %v, MinRetryBackoff %v", ctxTimeout, minBackoff)
		}
	}

	t.Run("Single", func(t *testing.T) {
		s, err := Open("rediss://u:pw@127.0.0.1:1/2?"+query+"&max_concurrent_dials=3", Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		c, ok := s.closer.(*redis.Client)
		if !ok {
			t.Fatalf("client %T, want *redis.Client", s.closer)
		}
		o := c.Options()
		want(t, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.ConnMaxLifetime, o.ConnMaxLifetimeJitter,
			o.MaxRetries, o.PoolSize, o.ClientName, o.ContextTimeoutEnabled, o.MinRetryBackoff)
		if o.Addr != "127.0.0.1:1" || o.DB != 2 || o.Username != "u" || o.Password != "pw" || o.TLSConfig == nil ||
			o.MaxConcurrentDials != 3 || o.DialerRetries != 1 || o.DialerRetryTimeout != time.Millisecond {
			t.Errorf("options %+v", o)
		}
	})

	t.Run("Cluster", func(t *testing.T) {
		s, err := Open("rediss-cluster://u:pw@127.0.0.1:1,127.0.0.1:2?"+query+"&max_redirects=4&failing_timeout_seconds=9", Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		c, ok := s.closer.(*redis.ClusterClient)
		if !ok {
			t.Fatalf("client %T, want *redis.ClusterClient", s.closer)
		}
		o := c.Options()
		want(t, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.ConnMaxLifetime, o.ConnMaxLifetimeJitter,
			o.MaxRetries, o.PoolSize, o.ClientName, o.ContextTimeoutEnabled, o.MinRetryBackoff)
		if len(o.Addrs) != 2 || o.Addrs[0] != "127.0.0.1:1" || o.Addrs[1] != "127.0.0.1:2" || o.Username != "u" ||
			o.Password != "pw" || o.TLSConfig == nil || o.MaxRedirects != 4 || o.FailingTimeoutSeconds != 9 ||
			o.DialerRetries != 1 || o.DialerRetryTimeout != time.Millisecond {
			t.Errorf("options %+v", o)
		}
	})

	// Without max_retries in the URL, one retry; with min_retry_backoff,
	// the URL's backoff.
	for _, url := range []string{"redis://127.0.0.1:1?min_retry_backoff=5ms", "redis-cluster://127.0.0.1:1?min_retry_backoff=5ms"} {
		s, err := Open(url, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var retries int
		var backoff time.Duration
		switch c := s.closer.(type) {
		case *redis.Client:
			retries, backoff = c.Options().MaxRetries, c.Options().MinRetryBackoff
		case *redis.ClusterClient:
			retries, backoff = c.Options().MaxRetries, c.Options().MinRetryBackoff
		}
		if retries != 1 || backoff != 5*time.Millisecond {
			t.Errorf("%s: MaxRetries %d, MinRetryBackoff %v; want 1, 5ms", url, retries, backoff)
		}
		s.Close()
	}
}
