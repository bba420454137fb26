package redisstore

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
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
//	redis-sentinel://[user:pass@]host[:port][,host[:port]…]/master[/db][?…]
//	                                                            a master that Sentinels watch
//	rediss-sentinel://…                                         the same over TLS
//
// The port defaults to 6379, and to 26379 (Sentinel's) in the Sentinel
// forms. Options in the query are go-redis's (dial_timeout, pool_size,
// max_retries…; see redis.ParseURL, redis.ParseClusterURL and
// redis.ParseFailoverURL). The cluster forms take no database number.
// redis.NewUniversalClient builds the client the options describe: a
// *redis.Client or, for the cluster forms, a *redis.ClusterClient, or for
// the Sentinel forms a failover client.
//
// In the Sentinel forms the hosts are the Sentinels', the path names the
// master as the Sentinels know it (their "sentinel monitor" name) and,
// optionally, the database; the user and password are the master's, as in
// redis://, so that moving a store from redis:// to redis-sentinel://
// keeps their meaning. Sentinels that require credentials of their own
// take them in the sentinel_username and sentinel_password options. The
// scheme is Lettuce's and Spring's, the master in the path that of
// Python's redis+sentinel:// URLs; envoyproxy/ratelimit's REDIS_TYPE=sentinel
// with REDIS_URL=master,host:port,host:port is, in this form,
// redis-sentinel://host:port,host:port/master. Over TLS (rediss-sentinel)
// the Sentinels and the master are all checked against the first
// Sentinel's host name, as go-redis does.
//
// redis.UniversalOptions has no field for some of go-redis's options (such
// as max_concurrent_dials), and UniversalOptions.Simple does not pass on
// every field it has (such as conn_max_lifetime_jitter): Open does not go
// through it, and gives its client every option of the URL.
func ParseURL(s string) (*redis.UniversalOptions, error) {
	p, err := parseURL(s)
	if err != nil {
		return nil, err
	}
	u := &redis.UniversalOptions{}
	switch {
	case p.cluster != nil:
		copyOptions(u, p.cluster)
		u.IsClusterMode = true
	case p.failover != nil:
		copyOptions(u, p.failover)
		u.Addrs = p.failover.SentinelAddrs
	default:
		copyOptions(u, p.single)
		u.Addrs = []string{p.single.Addr}
	}
	return u, nil
}

// IsURL reports whether s has the scheme of a store URL that ParseURL
// reads; it does not check the rest.
func IsURL(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	return ok && slices.Contains(schemes, scheme)
}

// schemes are the schemes of store URLs.
var schemes = []string{"redis", "rediss", "redis-cluster", "rediss-cluster", "redis-sentinel", "rediss-sentinel"}

// Schemes returns the schemes of store URLs, as IsURL takes them
// ("redis", "rediss", "redis-cluster", ...), for a caller that lists them.
func Schemes() []string { return slices.Clone(schemes) }

// parsed is a store URL parsed by go-redis's own parsers, their options as
// they are: exactly one field is set.
type parsed struct {
	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// parseURL parses a store URL (see ParseURL).
func parseURL(s string) (parsed, error) {
	var p parsed
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return p, fmt.Errorf("redisstore: store URL %q: want redis://, rediss://, redis-cluster://, rediss-cluster://, redis-sentinel:// or rediss-sentinel://", redact(s))
	}
	var err error
	switch scheme {
	case "redis", "rediss":
		p.single, err = redis.ParseURL(s)
	case "redis-cluster", "rediss-cluster":
		var u string
		if u, err = clusterURL(strings.TrimSuffix(scheme, "-cluster"), rest); err == nil {
			p.cluster, err = redis.ParseClusterURL(u)
		}
	case "redis-sentinel", "rediss-sentinel":
		var u string
		if u, err = sentinelURL(strings.TrimSuffix(scheme, "-sentinel"), rest); err == nil {
			p.failover, err = redis.ParseFailoverURL(u)
		}
	default:
		err = fmt.Errorf("unknown scheme %q (want %s)", scheme, strings.Join(schemes, ", "))
	}
	if err != nil {
		return parsed{}, fmt.Errorf("redisstore: store URL %q: %w", redact(s), err)
	}
	return p, nil
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
	userinfo, hosts := splitUserinfo(authority)
	addrs, err := hostList(hosts, "6379")
	if err != nil {
		return "", err
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

// splitUserinfo splits an authority into its "user:pass@" (with the '@'),
// and its hosts.
func splitUserinfo(authority string) (userinfo, hosts string) {
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		return authority[:i+1], authority[i+1:]
	}
	return "", authority
}

// hostList splits a comma-separated list of hosts, each given port if it
// has none.
func hostList(hosts, port string) ([]string, error) {
	var addrs []string
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return nil, fmt.Errorf("empty host in %q", hosts)
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), port)
		}
		addrs = append(addrs, h)
	}
	return addrs, nil
}

// sentinelOnly are the options of redis.ParseFailoverURL that the
// Sentinel forms give in their own place (the hosts, the path, the user and
// password), or under another name.
var sentinelOnly = []string{"addr", "master_name", "username", "password", "db"}

// sentinelURL rewrites the part after "redis-sentinel://" as the URL that
// redis.ParseFailoverURL reads: the Sentinels' credentials (from the
// sentinel_username and sentinel_password options) in the authority, the
// first Sentinel as its host and the others as addr parameters, the
// master's name, user and password as master_name, username and password
// parameters, and the database as its path.
func sentinelURL(scheme, rest string) (string, error) {
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	if strings.Contains(tail, "#") {
		return "", errors.New("a store URL has no fragment")
	}
	path, query, _ := strings.Cut(tail, "?")
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	master, err := url.PathUnescape(parts[0])
	switch {
	case err != nil:
		return "", fmt.Errorf("master name %q: %w", parts[0], err)
	case master == "":
		return "", errors.New("the path names the master, as the Sentinels know it: redis-sentinel://host:port/mymaster")
	case len(parts) > 2:
		return "", fmt.Errorf("path %q: want /master or /master/db", path)
	}
	db := "0"
	if len(parts) == 2 {
		if n, err := strconv.Atoi(parts[1]); err != nil || n < 0 {
			return "", fmt.Errorf("invalid database number %q", parts[1])
		}
		db = parts[1]
	}
	userinfo, hosts := splitUserinfo(authority)
	addrs, err := hostList(hosts, "26379")
	if err != nil {
		return "", err
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", err
	}
	for _, k := range sentinelOnly {
		if q.Has(k) {
			return "", fmt.Errorf("option %s: the Sentinel form gives it in its own place (redis-sentinel://user:pass@host:port,host:port/master/db)", k)
		}
	}
	sentinel := ""
	if q.Has("sentinel_username") || q.Has("sentinel_password") {
		sentinel = url.UserPassword(q.Get("sentinel_username"), q.Get("sentinel_password")).String() + "@"
		q.Del("sentinel_username")
		q.Del("sentinel_password")
	}
	q.Set("master_name", master)
	if userinfo != "" {
		u, err := url.Parse("redis://" + userinfo + "h")
		if err != nil {
			return "", errors.New("invalid user or password")
		}
		q.Set("username", u.User.Username())
		if p, ok := u.User.Password(); ok {
			q.Set("password", p)
		}
	}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	return scheme + "://" + sentinel + addrs[0] + "/" + db + "?" + q.Encode(), nil
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
	if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
		if user, _, hasPass := strings.Cut(rest[:at], ":"); hasPass {
			rest = user + ":xxxxx" + rest[at:]
		}
	}
	// The Sentinel forms take the Sentinels' password as an option.
	if path, query, ok := strings.Cut(rest, "?"); ok {
		params := strings.Split(query, "&")
		for i, p := range params {
			if k, _, ok := strings.Cut(p, "="); ok && strings.Contains(strings.ToLower(k), "password") {
				params[i] = k + "=xxxxx"
			}
		}
		rest = path + "?" + strings.Join(params, "&")
	}
	return scheme + "://" + rest
}

// Redact returns a store URL with its passwords (the user's and, in the
// Sentinel forms, the Sentinels') hidden, to be logged.
func Redact(url string) string { return redact(url) }

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
	p, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	var c interface {
		Client
		io.Closer
	}
	switch {
	case p.cluster != nil:
		o := p.cluster
		failFast(&o.ContextTimeoutEnabled, &o.MaxRetries, &o.MinRetryBackoff, &o.DialerRetries, &o.DialerRetryTimeout)
		c = redis.NewClusterClient(o)
	case p.failover != nil:
		// The client asks the Sentinels where the master is, and again
		// after a failover.
		o := p.failover
		failFast(&o.ContextTimeoutEnabled, &o.MaxRetries, &o.MinRetryBackoff, &o.DialerRetries, &o.DialerRetryTimeout)
		c = redis.NewFailoverClient(o)
	default:
		o := p.single
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
