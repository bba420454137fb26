package redisstore

import (
	"fmt"
	"io"
	"net"
	"net/url"
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
func ParseURL(s string) (*redis.UniversalOptions, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return nil, fmt.Errorf("redisstore: store URL %q: want redis://, rediss://, redis-cluster:// or rediss-cluster://", redact(s))
	}
	switch scheme {
	case "redis", "rediss":
		o, err := redis.ParseURL(s)
		if err != nil {
			return nil, fmt.Errorf("redisstore: store URL %q: %w", redact(s), err)
		}
		return universal(o), nil
	case "redis-cluster", "rediss-cluster":
		u, err := clusterURL(strings.TrimSuffix(scheme, "-cluster"), rest)
		if err != nil {
			return nil, fmt.Errorf("redisstore: store URL %q: %w", redact(s), err)
		}
		o, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, fmt.Errorf("redisstore: store URL %q: %w", redact(s), err)
		}
		return universalCluster(o), nil
	}
	return nil, fmt.Errorf("redisstore: store URL %q: unknown scheme %q (want redis, rediss, redis-cluster or rediss-cluster)", redact(s), scheme)
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

func universal(o *redis.Options) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:                 []string{o.Addr},
		ClientName:            o.ClientName,
		DB:                    o.DB,
		Protocol:              o.Protocol,
		Username:              o.Username,
		Password:              o.Password,
		MaxRetries:            o.MaxRetries,
		MinRetryBackoff:       o.MinRetryBackoff,
		MaxRetryBackoff:       o.MaxRetryBackoff,
		DialTimeout:           o.DialTimeout,
		ReadTimeout:           o.ReadTimeout,
		WriteTimeout:          o.WriteTimeout,
		ContextTimeoutEnabled: o.ContextTimeoutEnabled,
		PoolFIFO:              o.PoolFIFO,
		PoolSize:              o.PoolSize,
		PoolTimeout:           o.PoolTimeout,
		MinIdleConns:          o.MinIdleConns,
		MaxIdleConns:          o.MaxIdleConns,
		MaxActiveConns:        o.MaxActiveConns,
		ConnMaxIdleTime:       o.ConnMaxIdleTime,
		ConnMaxLifetime:       o.ConnMaxLifetime,
		ConnMaxLifetimeJitter: o.ConnMaxLifetimeJitter,
		TLSConfig:             o.TLSConfig,
		DisableIdentity:       o.DisableIdentity,
		IdentitySuffix:        o.IdentitySuffix,
		UnstableResp3:         o.UnstableResp3,
		FailingTimeoutSeconds: o.FailingTimeoutSeconds,
	}
}

func universalCluster(o *redis.ClusterOptions) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:                 o.Addrs,
		IsClusterMode:         true,
		ClientName:            o.ClientName,
		Protocol:              o.Protocol,
		Username:              o.Username,
		Password:              o.Password,
		MaxRetries:            o.MaxRetries,
		MinRetryBackoff:       o.MinRetryBackoff,
		MaxRetryBackoff:       o.MaxRetryBackoff,
		DialTimeout:           o.DialTimeout,
		ReadTimeout:           o.ReadTimeout,
		WriteTimeout:          o.WriteTimeout,
		ContextTimeoutEnabled: o.ContextTimeoutEnabled,
		PoolFIFO:              o.PoolFIFO,
		PoolSize:              o.PoolSize,
		PoolTimeout:           o.PoolTimeout,
		MinIdleConns:          o.MinIdleConns,
		MaxIdleConns:          o.MaxIdleConns,
		MaxActiveConns:        o.MaxActiveConns,
		ConnMaxIdleTime:       o.ConnMaxIdleTime,
		ConnMaxLifetime:       o.ConnMaxLifetime,
		ConnMaxLifetimeJitter: o.ConnMaxLifetimeJitter,
		TLSConfig:             o.TLSConfig,
		MaxRedirects:          o.MaxRedirects,
		ReadOnly:              o.ReadOnly,
		RouteByLatency:        o.RouteByLatency,
		RouteRandomly:         o.RouteRandomly,
		FailingTimeoutSeconds: o.FailingTimeoutSeconds,
	}
}

// Open connects a store to the Redis at url (see ParseURL). The client is
// built so that the store's timeout bounds every network wait
// (ContextTimeoutEnabled) and a refused connection fails at once rather than
// after go-redis's dial retries; the store's Close closes it. Open does not
// contact Redis: a Redis that is down when the store opens is the same as one
// that goes down later.
func Open(url string, opts Options) (*Store, error) {
	o, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	o.ContextTimeoutEnabled = true
	// go-redis retries a refused connection 3 times with backoffs from 8 ms:
	// one quick retry (a pooled connection that Redis closed) is enough, the
	// store's timeout bounds the rest, and an outage must fall back at once.
	if o.MaxRetries == 0 {
		o.MaxRetries = 1
	}
	if o.MinRetryBackoff == 0 {
		o.MinRetryBackoff = time.Millisecond
	}
	var c interface {
		Client
		io.Closer
	}
	if o.IsClusterMode {
		co := o.Cluster()
		co.DialerRetries, co.DialerRetryTimeout = 1, time.Millisecond
		c = redis.NewClusterClient(co)
	} else {
		so := o.Simple()
		so.DialerRetries, so.DialerRetryTimeout = 1, time.Millisecond
		c = redis.NewClient(so)
	}
	s := New(c, opts)
	s.closer = c
	return s, nil
}
