// Package httplimit limits the requests of a net/http server with a Funnel
// limit: one limit, a key per request (the client's address, a header, the
// user in the context), the RateLimit-Policy and RateLimit header fields of
// draft-ietf-httpapi-ratelimit-headers, and a 429 problem (RFC 9457) with
// Retry-After when the limit refuses.
//
//	lim := funnel.New(memstore.New(memstore.Options{}))
//	mw, err := httplimit.New(lim, funnel.PerMinute(60), httplimit.ClientIP())
//	if err != nil { ... }
//	http.ListenAndServe(addr, mw(app))
//
// A handler that calls the Limiter itself, for several limits at once,
// writes the same header fields with SetHeaders.
//
// A leaky bucket limit delays admitted requests as nginx's limit_req does;
// a concurrency limit holds a lease while the handler runs and releases it
// after, reporting how long the handler took: with a Burst, the requests
// beyond Count wait their delay first (OpenResty limit.conn), and the
// latencies reported move the delay.
//
// A request whose cost is known only once it has been served (the tokens
// of a language model's response) is charged after its handler ran: with
// ReportedCost, the handler reports the cost with ReportCost(r.Context(),
// n), and the middleware charges it with funnel.Limiter.Charge, into debt
// when it does not fit, so that the key's next requests are refused until
// the debt has drained.
//
// A key longer than funnel.MaxKeyLen (1024 bytes) is stored under its hash,
// after the Prefix (funnel.StoreKey), as on every edge.
//
// When the store cannot decide (funnel.Unavailable), requests are refused
// with 503 (funnel.FailClosed, the default of every edge), go through
// (Fail(funnel.FailOpen)), or go to a handler of yours (OnStoreError).
//
// A fail-closed answer, the middleware's or the store's own (a Result with
// Fallback set and Allowed false, as a Redis store configured to fail
// closed gives), is not a refusal by the limit and is not answered 429: it
// is 503 Service Unavailable with Retry-After: 1 and a problem of type
// temporary-reduced-capacity, so that a client retries later but not at
// once. A fail-open answer passes the request to the wrapped handler.
// Neither carries the RateLimit field, which would describe the key's
// state: the store said nothing about the key.
//
// A request that the middleware answers itself gets a status chosen for
// it, never an empty 200 (what net/http sends for a handler that writes
// nothing). A request whose client goes away before it is decided, or
// while it waits a leaky bucket's delay, is written 499 Client Closed
// Request (nginx's code) as a problem: nobody reads it, but access logs and
// proxies see that it was not answered OK. A request whose context's
// deadline passes before then is answered 503. Neither is a store that
// cannot decide: Fail and OnStoreError do not apply to them. Nor do they
// apply to an error that is a bug (a store's internal error, a limit that
// cannot be applied), answered 500 and logged.
package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/internal/httpreply"
	"github.com/funnelrl/funnel/internal/lograte"
)

// Option configures the middleware.
type Option func(*config)

// config is the middleware's configuration.
type config struct {
	name      string
	prefix    string
	quantity  func(*http.Request) int64
	skip      func(*http.Request) bool
	skipNoKey bool
	headers   bool
	reported  bool // ReportedCost
	onLimited func(http.ResponseWriter, *http.Request, funnel.Result)
	fail      funnel.FailMode
	onError   func(http.ResponseWriter, *http.Request, http.Handler, error) // nil: fail
	observe   func(funnel.Result, error)
	log       *slog.Logger
	// A store that is down, or a limit that cannot be applied, is logged at
	// most once a second, not once per request.
	warned, wrong *lograte.Sometimes
}

// Name sets the policy name written in the header fields and in the
// problem's violated-policies ("default" when not given). It must be 1 to
// 256 bytes of printable ASCII (see ErrPolicyName).
func Name(name string) Option { return func(c *config) { c.name = name } }

// Prefix is prepended to every key, to keep this limit's keys apart from
// others' in a shared store ("login:" + the client's address): the store
// key is funnel.StoreKey(prefix, key).
func Prefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// Quantity sets the units a request costs, such as its size; the default
// is 1. A cost of 0 lets the request through without charging it; a
// negative cost is answered 500 and logged. A concurrency limit ignores it:
// a request holds one lease.
func Quantity(f func(*http.Request) int64) Option { return func(c *config) { c.quantity = f } }

// Skip lets the requests for which f reports true through without a
// decision and without header fields (health checks, allow-listed clients).
func Skip(f func(*http.Request) bool) Option { return func(c *config) { c.skip = f } }

// SkipNoKey lets requests for which the KeyFunc finds no key through,
// unlimited. Without it they are answered 400 Bad Request: a request that
// leaves out its key (a header) must not escape the limit unnoticed.
func SkipNoKey() Option { return func(c *config) { c.skipNoKey = true } }

// NoHeaders leaves out the RateLimit-Policy and RateLimit fields, for a
// limit whose details should not be told to clients (Retry-After is still
// sent with a refusal).
func NoHeaders() Option { return func(c *config) { c.headers = false } }

// OnLimited replaces the response to a refused request. When f is called
// the header fields (and Retry-After) are already set on w; f writes the
// status and the body. The default writes a 429 problem.
func OnLimited(f func(w http.ResponseWriter, r *http.Request, res funnel.Result)) Option {
	return func(c *config) { c.onLimited = f }
}

// Fail sets what answers a request when the store cannot decide
// (funnel.Unavailable): funnel.FailClosed, the default, answers 503 Service
// Unavailable with Retry-After: 1; funnel.FailOpen lets the request
// through, unlimited. Either is observed as a Fallback result. It replaces
// OnStoreError.
func Fail(m funnel.FailMode) Option {
	return func(c *config) { c.fail, c.onError = m, nil }
}

// OnStoreError handles the requests the store could not decide for: f
// answers the request itself, or passes it to next. err is the store's
// error (wrapping funnel.ErrUnavailable for a store that is down). A
// request whose own context ended while the store was asked (its client
// went away, or its deadline passed) is not the store's failure and does
// not reach f: it is answered 499 or 503 (see the package doc). It
// replaces Fail.
//
// Fail and OnStoreError apply to errors. A store that answers on its own
// when it cannot decide (a Result with Fallback set, as a Redis store
// configured to fail open or closed does) is obeyed: its open answer serves
// the request, its closed one is answered as funnel.FailClosed is, 503 with
// Retry-After: 1.
func OnStoreError(f func(w http.ResponseWriter, r *http.Request, next http.Handler, err error)) Option {
	return func(c *config) { c.onError = f }
}

// Observe calls f after each decision, with its result or its error: a
// hook for metrics (metrics.Metrics.Observer fits) or logs. A request that
// Fail answers is observed as a Fallback result; one that OnStoreError
// answers, as an error.
func Observe(f func(funnel.Result, error)) Option { return func(c *config) { c.observe = f } }

// Logger sets where errors are logged; the default is slog.Default().
func Logger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// errNoKey is the error of a request without a key.
var errNoKey = errors.New("middleware: no rate-limit key for the request")

// New returns a middleware that applies limit to each request, under the
// key that key finds for it, through lim. It checks the limit and the
// options first: the error wraps funnel.ErrInvalidLimit for a bad limit, or
// is ErrPolicyName for a bad Name.
//
// An admitted request gets the header fields and goes to the next handler;
// a refused one gets the header fields, Retry-After and a 429 problem
// (OnLimited replaces it). The middleware is safe for concurrent use.
func New(lim *funnel.Limiter, limit funnel.Limit, key KeyFunc, opts ...Option) (func(http.Handler) http.Handler, error) {
	if lim == nil || key == nil {
		return nil, errors.New("middleware: New needs a limiter and a key function")
	}
	if err := limit.Validate(); err != nil {
		return nil, err
	}
	c := config{name: httpreply.DefaultName, headers: true, warned: lograte.New(time.Second), wrong: lograte.New(time.Second)}
	for _, o := range opts {
		o(&c)
	}
	if err := httpreply.CheckPolicyName(c.name); err != nil {
		return nil, err
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.onLimited == nil {
		c.onLimited = c.tooMany
	}
	return func(next http.Handler) http.Handler {
		return &handler{c: &c, lim: lim, limit: limit, key: key, next: next}
	}, nil
}

// handler is the middleware around one next handler.
type handler struct {
	c     *config
	lim   *funnel.Limiter
	limit funnel.Limit
	key   KeyFunc
	next  http.Handler
}

// ServeHTTP decides for r, then serves it or refuses it.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := h.c
	if c.skip != nil && c.skip(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	k, ok := h.key(r)
	if !ok {
		if c.skipNoKey {
			h.next.ServeHTTP(w, r)
			return
		}
		httpreply.Problem{Status: http.StatusBadRequest, Detail: errNoKey.Error()}.Write(w)
		return
	}
	k = funnel.StoreKey(c.prefix, k)
	ctx := r.Context()

	var (
		res   funnel.Result
		err   error
		lease funnel.Lease
	)
	n := int64(1)
	switch h.limit.Algorithm {
	case funnel.Concurrency:
		lease, res, err = h.lim.Acquire(ctx, k, h.limit)
	default:
		if c.quantity != nil {
			n = c.quantity(r)
		}
		res, err = h.lim.AllowN(ctx, k, h.limit, n)
	}
	if err != nil {
		if !h.fail(w, r, k, err) {
			return
		}
		res = c.fail.Fallback(h.limit)
	}
	if res.Fallback {
		// The store answered on its own (fail open or closed): honour it.
		h.observe(res, nil)
		h.setHeaders(w, res)
		if res.Allowed {
			h.serveCosted(w, r, k, 0) // a fallback took nothing
		} else {
			failClosed(w)
		}
		return
	}
	h.observe(res, nil)
	h.setHeaders(w, res)
	if !res.Allowed {
		c.onLimited(w, r, res)
		return
	}
	var started time.Time // when the next handler started; zero until then
	if lease.ID != "" {
		defer func() { h.release(ctx, lease, started) }()
	}
	switch {
	case res.Delay <= 0:
	case lease.ID != "":
		// A lease waits its turn holding its place: the deferred release
		// gives it back if the client leaves first.
		t := time.NewTimer(res.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			httpreply.Unserved(ctx, w, "while it waited its turn")
			return
		}
	default:
		// The leaky bucket's queue: units not used are given back.
		if _, err := h.lim.Await(ctx, k, h.limit, n, res); err != nil {
			if err != ctx.Err() { // the refund failed too: the units stay charged
				c.warned.Do(func(held int64) {
					c.log.Warn("rate limit: a request that left its queue kept its units", "key", k, "err", err, "held_back", held)
				})
			}
			httpreply.Unserved(ctx, w, "while it waited its turn")
			return
		}
	}
	started = time.Now()
	h.serveCosted(w, r, k, n)
}

// release gives the lease of a request back, even when its client has
// gone (the lease is ours), with the latency of the next handler when it
// started: the concurrency limit's unit delay follows it.
func (h *handler) release(ctx context.Context, lease funnel.Lease, started time.Time) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var err error
	if started.IsZero() {
		_, err = h.lim.Release(rctx, lease)
	} else {
		_, err = h.lim.ReleaseAfter(rctx, lease, min(time.Since(started), algo.MaxUnitDelay))
	}
	if err != nil && !errors.Is(err, funnel.ErrLeaseNotHeld) { // expired while the handler ran: nothing to give back
		h.c.log.Warn("rate limit: release (the lease will expire)", "key", lease.Key, "err", err)
	}
}

// fail handles a request whose decision failed with err. For a store that
// cannot decide (funnel.Unavailable) under Fail it reports true: the caller
// answers the fail mode's fallback. Otherwise it answers the request and
// reports false. Every error is answered, even when the client has gone: a
// handler that returns without writing would answer 200, a decision that
// was not made.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, key string, err error) bool {
	c := h.c
	ctx := r.Context()
	switch {
	case funnel.Unavailable(ctx, err):
		c.warned.Do(func(held int64) {
			c.log.Warn("rate limit: the store cannot decide (logged once a second at most)", "err", err, "held_back", held)
		})
		if c.onError == nil {
			return true
		}
		h.observe(funnel.Result{}, err)
		if c.headers {
			httpreply.SetHeaders(w.Header(), httpreply.Policy{Name: c.name, Limit: h.limit, Result: funnel.Result{Fallback: true}})
		}
		c.onError(w, r, h.next, err)
	case ctx.Err() != nil:
		// The request ended while the store was asked, whatever error the
		// store made of it: not the store's failure, nothing to log, no
		// fallback.
		h.observe(funnel.Result{}, err)
		httpreply.Unserved(ctx, w, "before it was decided")
	default:
		// A limit that cannot be applied, or a bug: not the client's doing,
		// nor a store that is down.
		h.observe(funnel.Result{}, err)
		c.wrong.Do(func(held int64) {
			c.log.Error("rate limit: the limit cannot be applied, or the store failed (logged once a second at most)", "key", key, "err", err, "held_back", held)
		})
		httpreply.Problem{Status: http.StatusInternalServerError}.Write(w)
	}
	return false
}

// setHeaders sets the header fields of res (Retry-After always, the
// RateLimit fields unless NoHeaders).
func (h *handler) setHeaders(w http.ResponseWriter, res funnel.Result) {
	p := httpreply.Policy{Name: h.c.name, Limit: h.limit, Result: res}
	if h.c.headers {
		httpreply.SetHeaders(w.Header(), p)
		return
	}
	httpreply.SetRetryAfter(w.Header(), []httpreply.Policy{p})
}

// observe calls the Observe hook.
func (h *handler) observe(res funnel.Result, err error) {
	if h.c.observe != nil {
		h.c.observe(res, err)
	}
}

// tooMany is the default answer to a refused request: 429 and a problem of
// type quota-exceeded (abnormal-usage-detected for a banned key).
func (c *config) tooMany(w http.ResponseWriter, _ *http.Request, res funnel.Result) {
	p := httpreply.Problem{
		Type:             httpreply.TypeQuotaExceeded,
		Title:            "Quota Exceeded",
		Status:           http.StatusTooManyRequests,
		Detail:           httpreply.RetryText(res),
		ViolatedPolicies: []string{c.name},
	}
	if res.Banned {
		p.Type, p.Title = httpreply.TypeAbnormalUsageDetected, "Abnormal Usage Detected"
	}
	p.Write(w)
}

// failClosed refuses a request with a fail-closed fallback: 503 and
// Retry-After: 1 (httpreply.FallbackStatus), since the store did not
// decide, so the answer must not look like a refusal by the limit (429),
// and the client may retry soon. The store's error is logged, not sent.
func failClosed(w http.ResponseWriter) {
	httpreply.Problem{
		Type:   httpreply.TypeTemporaryReducedCapacity,
		Title:  "Temporary Reduced Capacity",
		Status: httpreply.FallbackStatus(w.Header(), funnel.Result{Fallback: true}),
		Detail: "the rate limiter is unavailable",
	}.Write(w)
}
