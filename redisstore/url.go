package redisstore

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ParseURL parses the address of a Redis store into go-redis client options:
//
//	redis://[user:pass@]host[:port][/db][?option=value…]       a single Redis
//	rediss://…                                                  the same over TLS
//	redis-cluster://[user:pass@]host:port[,host:port…][?…]      a Redis Cluster
//	rediss-cluster://…                                          the same over TLS
//
// The port defaults to 6379. Options in the query are go-redis's
// (dial_timeout, pool_size, max_retries…; see redis.ParseURL and
// redis.ParseClusterURL). The cluster forms take no database number.
// redis.NewUniversalClient builds the client the options describe: a
// *redis.Client or, for the cluster forms, a *redis.ClusterClient.
//
// redis.UniversalOptions has no field for some of go-redis's options (such
// as max_concurrent_dials), and UniversalOptions.Simple does not pass on
// every field it has (such as conn_max_lifetime_jitter): Open does not go
// through it, and gives its client every option of the URL.
func ParseURL(s string) (*redis.UniversalOptions, error) {
	single, cluster, err := parseURL(s)
	if err != nil {
		return nil, err
	}
	u := &redis.UniversalOptions{}
	if cluster != nil {
		copyOptions(u, cluster)
		u.IsClusterMode = true
		return u, nil
	}
	copyOptions(u, single)
	u.Addrs = []string{single.Addr}
	return u, nil
}

// parseURL parses a store URL (see ParseURL) with go-redis's own parsers,
// and returns their options as they are: those of a single Redis, or those
// of a cluster.
func parseURL(s string) (*redis.Options, *redis.ClusterOptions, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return nil, nil, fmt.Errorf("redisstore: store URL %q: want redis://, rediss://, redis-cluster:// or rediss-cluster://", redact(s))
	}
	switch scheme {
	case "redis", "rediss":
		o, err := redis.ParseURL(s)
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: store URL %q: %w", redact(s), err)
		}
		return o, nil, nil
	case "redis-cluster", "rediss-cluster":
		u, err := clusterURL(strings.TrimSuffix(scheme, "-cluster"), rest)
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: store URL %q: %w", redact(s), err)
		}
		o, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: store URL %q: %w", redact(s), err)
		}
		return nil, o, nil
	}
	return nil, nil, fmt.Errorf("redisstore: store URL %q: unknown scheme %q (want redis, rediss, redis-cluster or rediss-cluster)", redact(s), scheme)
}

// clusterURL rewrites the part after "redis-cluster://" as the URL that
// redis.ParseClusterURL reads: the first host in the authority, the others
// as addr parameters.
func clusterURL(scheme, rest string) (string, error) {
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	path, query, _ := strings.Cut(tail, "?")
	if path != "" && path != "/" {
		return "", fmt.Errorf("a cluster has no database number (path %q)", path)
	}
	userinfo, hosts := "", authority
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	var addrs []string
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return "", fmt.Errorf("empty host in %q", hosts)
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "6379")
		}
		addrs = append(addrs, h)
	}
	q := url.Values{}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	u := scheme + "://" + userinfo + addrs[0]
	if enc := q.Encode(); enc != "" || query != "" {
		u += "?" + strings.Trim(enc+"&"+query, "&")
	}
	return u, nil
}

// redact hides the password of a URL in error messages.
func redact(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return s
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return s
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// copyOptions sets every field of dst (a *redis.UniversalOptions) that src
// (a *redis.Options or *redis.ClusterOptions) has under the same name and
// type, so that a field that go-redis adds to both is carried without a list
// here to keep up to date.
func copyOptions(dst, src any) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	for i := 0; i < d.NumField(); i++ {
		f := d.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		if v := s.FieldByName(f.Name); v.IsValid() && v.Type() == f.Type {
			d.Field(i).Set(v)
		}
	}
}

// Open connects a store to the Redis at url (see ParseURL). The client is
// built from go-redis's own options for the URL, with every option of its
// query, and so that the store's timeout bounds every network wait
// (ContextTimeoutEnabled) and a refused connection fails at once rather than
// after go-redis's dial retries; the store's Close closes it. Open does not
// contact Redis: a Redis that is down when the store opens is the same as one
// that goes down later.
func Open(url string, opts Options) (*Store, error) {
	single, cluster, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	var c interface {
		Client
		io.Closer
	}
	if cluster != nil {
		o := cluster
		failFast(&o.ContextTimeoutEnabled, &o.MaxRetries, &o.MinRetryBackoff, &o.DialerRetries, &o.DialerRetryTimeout)
		c = redis.NewClusterClient(o)
	} else {
		o := single
		failFast(&o.ContextTimeoutEnabled, &o.MaxRetries, &o.MinRetryBackoff, &o.DialerRetries, &o.DialerRetryTimeout)
		c = redis.NewClient(o)
	}
	s := New(c, opts)
	s.closer = c
	return s, nil
}

// failFast sets the options that Open sets on top of the URL's, in the
// fields of the same names of either kind of client options.
func failFast(contextTimeout *bool, maxRetries *int, minRetryBackoff *time.Duration, dialerRetries *int, dialerRetryTimeout *time.Duration) {
	*contextTimeout = true
	// go-redis retries a command 3 times, with backoffs from 8 ms, and a
	// refused connection 5 times: one quick retry (a pooled connection that
	// Redis closed) is enough, the store's timeout bounds the rest, and an
	// outage must fall back at once. A URL's max_retries and
	// min_retry_backoff win.
	if *maxRetries == 0 {
		*maxRetries = 1
	}
	if *minRetryBackoff == 0 {
		*minRetryBackoff = time.Millisecond
	}
	*dialerRetries, *dialerRetryTimeout = 1, time.Millisecond
}
