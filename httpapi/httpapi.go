// Package httpapi serves Funnel over HTTP with JSON: decisions for any
// algorithm of the family, leases, refunds, peeks, resets and bans, health
// and readiness, and the metrics handler it is given.
//
// Endpoints (times in JSON are milliseconds, in header fields seconds):
//
//	POST   /v1/throttle      a decision: 200 if allowed, 429 if refused
//	                         (503 if the store could not decide: below);
//	                         with "peek": true, a probe that charges
//	                         nothing, 200 whatever it finds
//	POST   /v1/charge        record units already spent, into debt: 200
//	POST   /v1/reserve       take an estimate and record a reservation:
//	                         200 or 429 (or 503), as a throttle
//	POST   /v1/settle        settle a reservation at the actual units: 200,
//	                         404 for an unknown or expired reservation
//	POST   /v1/acquire       take a concurrency lease: 200 or 429 (or 503)
//	POST   /v1/release       give a lease back
//	POST   /v1/refund        give units back: 204
//	GET    /v1/keys/{key}    peek (the limit in the query string)
//	DELETE /v1/keys/{key}    reset
//	GET    /v1/bans          the banned keys
//	DELETE /v1/bans/{key}    lift a ban
//	GET    /healthz          the process is up
//	GET    /readyz           the store answers
//	GET    /metrics          Options.Metrics
//
// A key in a path is percent-encoded (url.PathEscape): "a//b" is
// /v1/keys/a%2F%2Fb. Unescaped, "//" and ".." segments would be cleaned away
// by a redirect to another key.
//
// Decisions carry the RateLimit-Policy and RateLimit header fields of
// draft-ietf-httpapi-ratelimit-headers (see httpreply.SetHeaders), and
// Retry-After on a 429. Errors are problem details (RFC 9457,
// application/problem+json).
//
// A key longer than funnel.MaxKeyLen (1024 bytes) is stored under its hash
// (funnel.BoundKey), as on every edge: the same long key is the same store
// key over RESP, HTTP and gRPC.
//
// When the store cannot decide (funnel.Unavailable), the answer is a
// fallback, Options.Fail's or the store's own (a Redis store configured to
// fail open or closed): a decision with "fallback": true. A fail-open
// fallback is 200 with "allowed": true. A fail-closed fallback, the
// default, is not a refusal by the limit, and is not answered 429: it is
// 503 Service Unavailable with Retry-After: 1, and the same JSON decision,
// with "allowed": false, "fallback": true and "retry_after_ms": 1000, so
// that a client that reads decisions reads this one too, and a client that
// reads only the status retries later. The RateLimit field, which would
// describe the key's state, is left out of fallbacks. This holds for every
// answer that carries a decision: throttles with one or several limits,
// acquires, peeks and reserves (a reserve's fallback records no
// reservation). A charge and a settle are not decisions: a store that
// cannot record them is answered 503 with a problem, never a fallback.
//
// Every request gets a status chosen for it, never an empty 200: a body
// that does not arrive within the http.Server's ReadTimeout is 408 Request
// Timeout, one that cannot be read for another reason (such as a
// connection closed before its end) 400, one larger than Options.MaxBody
// 413. A request whose client goes away before it is decided is written
// 499 Client Closed Request (nginx's code): nobody reads it, but access
// logs and proxies see that it was not answered OK.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/httpreply"
	"github.com/funnelrl/funnel/internal/lograte"
)

// Defaults of Options.
const (
	// DefaultMaxBody is the default bound on a request body, in bytes.
	DefaultMaxBody = 64 << 10
	// DefaultMaxLimits is the default bound on the limits of one throttle.
	DefaultMaxLimits = 16
	// DefaultReadyTimeout is the default bound on the readiness check.
	DefaultReadyTimeout = 2 * time.Second
)

// Options configure a Server. The zero value is a good default.
type Options struct {
	// Ready reports whether the store can serve; /readyz answers 503 when
	// it returns an error. Nil means a TTL call on the store for a key
	// that does not exist, bounded by ReadyTimeout.
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds the default readiness check; zero means
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Metrics is served at GET /metrics (such as metrics.Metrics.Handler());
	// nil leaves /metrics out (404).
	Metrics http.Handler
	// Observe is called with each limit's decision or error, for metrics
	// (metrics.Metrics.Observer fits). A fallback is observed as a
	// Fallback result.
	Observe func(funnel.Result, error)
	// Fail is the answer of decision endpoints when the store cannot
	// decide; the zero value is funnel.FailClosed (503, see the package
	// doc).
	Fail funnel.FailMode
	// MaxBody bounds a request body, in bytes (413 beyond); zero means
	// DefaultMaxBody.
	MaxBody int64
	// MaxLimits bounds the limits of one throttle request; zero means
	// DefaultMaxLimits.
	MaxLimits int
	// Logger receives errors that are not sent (a store that is down, a
	// bug); nil means slog.Default().
	Logger *slog.Logger
}

// Server is the HTTP API over a Limiter. Build one with New; it is an
// http.Handler, safe for concurrent use.
type Server struct {
	lim  *funnel.Limiter
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux

	warned *lograte.Sometimes // that the store is down
}

// New returns the HTTP API over lim.
func New(lim *funnel.Limiter, opts Options) *Server {
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.MaxLimits <= 0 {
		opts.MaxLimits = DefaultMaxLimits
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	s := &Server{lim: lim, opts: opts, log: opts.Logger, mux: http.NewServeMux(), warned: lograte.New(time.Second)}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.mux.HandleFunc("POST /v1/throttle", s.throttle)
	s.mux.HandleFunc("POST /v1/charge", s.charge)
	s.mux.HandleFunc("POST /v1/reserve", s.reserve)
	s.mux.HandleFunc("POST /v1/settle", s.settle)
	s.mux.HandleFunc("POST /v1/acquire", s.acquire)
	s.mux.HandleFunc("POST /v1/release", s.release)
	s.mux.HandleFunc("POST /v1/refund", s.refund)
	s.mux.HandleFunc("GET /v1/keys/{key...}", s.peek)
	s.mux.HandleFunc("DELETE /v1/keys/{key...}", s.reset)
	s.mux.HandleFunc("GET /v1/bans", s.bans)
	s.mux.HandleFunc("DELETE /v1/bans/{key...}", s.unban)
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	if opts.Metrics != nil {
		s.mux.Handle("GET /metrics", opts.Metrics)
	}
	return s
}

// ServeHTTP routes r. Requests that match no route, or no method of their
// route, get a 404 or 405 problem (with Allow).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := s.mux.Handler(r); pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	// Let the mux answer into a recorder, to keep its status, its Allow
	// and its redirects, and answer a problem instead of its text.
	rec := &recorder{header: http.Header{}}
	s.mux.ServeHTTP(rec, r)
	switch rec.status {
	case 0:
		// The mux always answers a request it does not route; should it
		// not, the answer is an error, not an empty 200.
		httpreply.Problem{Status: http.StatusInternalServerError}.Write(w)
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		detail := "no endpoint " + r.URL.Path
		if rec.status == http.StatusMethodNotAllowed {
			detail = r.Method + " is not allowed on " + r.URL.Path
		}
		httpreply.Problem{Status: rec.status, Detail: detail}.Write(w)
	default:
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		w.Write(rec.body)
	}
}

// recorder keeps what the mux writes for a request it does not route.
type recorder struct {
	header http.Header
	status int
	body   []byte
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	r.body = append(r.body, b...)
	return len(b), nil
}

// statusOf maps an error to its HTTP status, the problem's detail (empty
// when the error must not be sent) and whether it is the store's failure.
func statusOf(err error) (status int, detail string, storeDown bool) {
	var tooLarge *http.MaxBytesError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, "the body is larger than " + strconv.FormatInt(tooLarge.Limit, 10) + " bytes", false
	case errors.Is(err, errReadTimeout):
		return http.StatusRequestTimeout, errReadTimeout.Error(), false
	case errors.Is(err, errBodyRead):
		return http.StatusBadRequest, errBodyRead.Error(), false
	case errors.Is(err, errBadJSON), errors.As(err, &syntax), errors.As(err, &typ):
		return http.StatusBadRequest, err.Error(), false
	case errors.Is(err, errMediaType):
		return http.StatusUnsupportedMediaType, err.Error(), false
	case errors.Is(err, errInput):
		return http.StatusUnprocessableEntity, err.Error(), false
	case errors.Is(err, funnel.ErrUnknownReservation):
		// The reservation the request names is not there (never made,
		// refused, another key's, or ended with its TTL): 404, kept apart
		// from 409, a key that holds another algorithm's state.
		return http.StatusNotFound, err.Error(), false
	}
	switch funnel.ClassOf(err) {
	case funnel.ClassInvalid, funnel.ClassCrossSlot:
		// The client chose the limits and the keys.
		return http.StatusUnprocessableEntity, err.Error(), false
	case funnel.ClassWrongType:
		return http.StatusConflict, err.Error(), false
	case funnel.ClassUnavailable, funnel.ClassCanceled:
		return http.StatusServiceUnavailable, "the store is unavailable", true
	}
	return http.StatusInternalServerError, "", false
}

// fail answers err as a problem, and logs what is not sent. Every error is
// answered, even when the client has gone: a handler that returns without
// writing would answer 200, a decision that was not made.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, detail, down := statusOf(err)
	switch {
	case down && r.Context().Err() != nil:
		// The client has gone (499), or the request's own deadline passed
		// (503), while the store was asked: not the store's failure,
		// nothing to log.
		httpreply.Unserved(r.Context(), w, "before it was decided")
		return
	case down:
		s.warnDown(r, err)
	case status == http.StatusInternalServerError:
		s.log.Error("httpapi", "path", r.URL.Path, "err", err)
	}
	httpreply.Problem{Status: status, Detail: detail}.Write(w)
}

// warnDown logs that the store is unavailable, at most once a second, so
// that a store that is down does not log once per request.
func (s *Server) warnDown(r *http.Request, err error) {
	s.warned.Do(func(held int64) {
		s.log.Warn("httpapi: the store is unavailable (logged once a second at most)", "path", r.URL.Path, "err", err, "held_back", held)
	})
}

// Errors of decoding.
var (
	errBadJSON   = errors.New("httpapi: bad JSON")
	errMediaType = errors.New("httpapi: the body must be application/json")
	// errReadTimeout is a body that did not arrive within the server's
	// ReadTimeout (408); errBodyRead, one that could not be read for
	// another reason, such as a connection closed before its end (400).
	// Their details never carry the underlying error, which names the
	// connection's addresses.
	errReadTimeout = errors.New("httpapi: the body was not received in time")
	errBodyRead    = errors.New("httpapi: the body could not be read")
)

// readError classifies an error of reading a body: too large (413), not
// received within the read deadline (408), or another failure (400).
func readError(err error) error {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return err
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: %w", errReadTimeout, err)
	}
	return fmt.Errorf("%w: %w", errBodyRead, err)
}

// decode reads r's JSON body into v: bounded, strict (no unknown fields,
// nothing after the value), and with one meaning only (checkOneMeaning: no
// field twice, even up to case, no string that is not UTF-8). It is the
// only place where the server decodes JSON.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return errMediaType
		}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		return readError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: the body is empty", errBadJSON)
		}
		return fmt.Errorf("%w: %w", errBadJSON, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: more than one JSON value in the body", errBadJSON)
	}
	return checkOneMeaning(data)
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		httpreply.Problem{Status: http.StatusInternalServerError}.Write(w)
		return
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(body)
}

// checkKey validates a key. A key of any length is taken: one longer than
// funnel.MaxKeyLen is stored under its hash (see storeKey).
func checkKey(key string) error {
	if key == "" {
		return inputf("the key is missing")
	}
	return nil
}

// storeKey is the store key of a request's key: funnel.StoreKey, as on
// every edge.
func storeKey(key string) string { return funnel.StoreKey("", key) }

// maxLeaseID bounds a lease id, in bytes: the stores' (every edge takes
// the same).
const maxLeaseID = funnel.MaxLeaseIDLen

// checkName validates a policy name, defaulting it.
func checkName(name, def string) (string, error) {
	if name == "" {
		return def, nil
	}
	if err := httpreply.CheckPolicyName(name); err != nil {
		return "", inputf("name: %v", err)
	}
	return name, nil
}

// quantity returns a request's quantity, 1 when left out.
func quantity(q *int64) int64 {
	if q == nil {
		return 1
	}
	return *q
}

// observe calls the Observe hook.
func (s *Server) observe(r funnel.Result, err error) {
	if s.opts.Observe != nil {
		s.opts.Observe(r, err)
	}
}

// fellBack handles the error of a decision: for a store that cannot decide
// (funnel.Unavailable) it reports true, and the caller answers Options.Fail's
// fallback; otherwise it answers the error and reports false. A client that
// has gone is not a store that is down: it is neither answered a fallback
// nor counted as one.
func (s *Server) fellBack(w http.ResponseWriter, r *http.Request, err error) bool {
	if funnel.Unavailable(r.Context(), err) {
		s.warnDown(r, err)
		return true
	}
	s.observe(funnel.Result{}, err)
	s.fail(w, r, err)
	return false
}

// decided answers a decision whose overall outcome is res: the header
// fields of policies, and the status of httpreply.FallbackStatus (200 if
// allowed, 429 if refused, 503 with Retry-After if refused by a fail-closed
// fallback only).
func decided(w http.ResponseWriter, res funnel.Result, policies []httpreply.Policy, body any) {
	httpreply.SetHeaders(w.Header(), policies...)
	writeJSON(w, httpreply.FallbackStatus(w.Header(), res), body)
}

// throttle serves POST /v1/throttle.
func (s *Server) throttle(w http.ResponseWriter, r *http.Request) {
	var req ThrottleRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Limits != nil {
		if req.Key != "" || req.Limit != nil || req.Quantity != nil || req.Name != "" {
			s.fail(w, r, inputf("give either key, limit and quantity, or limits, not both"))
			return
		}
		if req.Peek {
			s.fail(w, r, inputf("peek takes one limit (key, limit and quantity), not limits"))
			return
		}
		s.throttleAll(w, r, req.Limits)
		return
	}
	name, limit, err := checkOne(req.Name, req.Key, req.Limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Peek {
		res, err := s.lim.PeekN(r.Context(), storeKey(req.Key), limit, quantity(req.Quantity))
		s.peeked(w, r, name, limit, res, err)
		return
	}
	res, err := s.lim.AllowN(r.Context(), storeKey(req.Key), limit, quantity(req.Quantity))
	if err != nil {
		if !s.fellBack(w, r, err) {
			return
		}
		res = s.opts.Fail.Fallback(limit)
	}
	s.observe(res, nil)
	decided(w, res, []httpreply.Policy{{Name: name, Limit: limit, Result: res}}, decision(res))
}

// checkOne checks the name, the key and the limit of a request for one
// limit, and converts the limit; a concurrency limit is refused.
func checkOne(name, key string, l *Limit) (string, funnel.Limit, error) {
	name, err := checkName(name, httpreply.DefaultName)
	if err == nil {
		err = checkKey(key)
	}
	var limit funnel.Limit
	if err == nil {
		limit, err = l.Funnel()
	}
	if err == nil && limit.Algorithm == funnel.Concurrency {
		err = inputf("concurrency limits take leases: POST /v1/acquire")
	}
	return name, limit, err
}

// charge serves POST /v1/charge: Limiter.Charge, units already spent,
// recorded into debt when they do not fit. It is answered 200 with the
// decision that a peek finds after it ("allowed": false while the key is
// over its limit, with Retry-After, the time until its debt has drained).
// A charge is not a decision: a store that cannot record it is answered
// 503, never a fallback that would hide the lost cost.
func (s *Server) charge(w http.ResponseWriter, r *http.Request) {
	var req ChargeRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	name, limit, err := checkOne(req.Name, req.Key, req.Limit)
	if err == nil && req.Quantity == nil {
		err = inputf("quantity is missing: the units spent")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.lim.Charge(r.Context(), storeKey(req.Key), limit, *req.Quantity)
	if err != nil {
		// The policy is known, the key's state is not.
		h := w.Header()
		h.Set(httpreply.HeaderPolicy, string(httpreply.AppendPolicy(nil, name, limit)))
		s.fail(w, r, err)
		return
	}
	httpreply.SetHeaders(w.Header(), httpreply.Policy{Name: name, Limit: limit, Result: res})
	writeJSON(w, http.StatusOK, decision(res))
}

// reserve serves POST /v1/reserve: Limiter.Reserve, an estimate taken as a
// throttle takes its quantity and, when admitted, a reservation recorded
// for POST /v1/settle. It is answered as a throttle (200, 429, or a
// fallback), with the reservation's id when admitted.
func (s *Server) reserve(w http.ResponseWriter, r *http.Request) {
	var req ReserveRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	name, limit, err := checkOne(req.Name, req.Key, req.Limit)
	switch {
	case err != nil:
	case req.Quantity == nil:
		err = inputf("quantity is missing: the estimate reserved, at least 1")
	case *req.Quantity < 1:
		err = inputf("quantity %d: the estimate reserved is at least 1", *req.Quantity)
	}
	var ttl time.Duration
	if err == nil {
		ttl, err = reservationTTL(req.TTL)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rv, res, err := s.lim.Reserve(r.Context(), storeKey(req.Key), limit, *req.Quantity, ttl)
	if err != nil {
		if !s.fellBack(w, r, err) {
			return
		}
		// A fallback records no reservation.
		rv, res = funnel.Reservation{}, s.opts.Fail.Fallback(limit)
	}
	s.observe(res, nil)
	d := decision(res)
	d.ReservationID = rv.ID
	decided(w, res, []httpreply.Policy{{Name: name, Limit: limit, Result: res}}, d)
}

// reservationTTL parses a reservation's TTL: left out, 0 (the limiter's
// default); else a duration from 1ms to funnel.MaxReservationTTL, rounded
// up to whole milliseconds by the limiter.
func reservationTTL(s string) (time.Duration, error) {
	d, err := parseDuration("ttl", s)
	if err != nil || s == "" {
		return 0, err
	}
	if d < time.Millisecond || d > funnel.MaxReservationTTL {
		return 0, inputf("ttl: %q is not from 1ms to %v", s, funnel.MaxReservationTTL)
	}
	return d, nil
}

// settle serves POST /v1/settle: Limiter.Settle, a reservation settled at
// the actual units. It is answered 200 with the key's state after it, as a
// charge is, its estimate and actual, and whether it was settled before;
// an unknown or expired reservation is 404. Like a charge, a settle is not
// a decision: a store that cannot record it is answered 503, never a
// fallback. The limit is the store's (the reservation's): the answer has
// the RateLimit field and Retry-After, but no RateLimit-Policy.
func (s *Server) settle(w http.ResponseWriter, r *http.Request) {
	var req SettleRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	name, err := checkName(req.Name, httpreply.DefaultName)
	if err == nil {
		err = checkKey(req.Key)
	}
	switch {
	case err != nil:
	case req.ReservationID == "":
		err = inputf("reservation_id is missing: the id that POST /v1/reserve answered")
	case req.Actual == nil:
		err = inputf("actual is missing: the units spent")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	st, err := s.lim.Settle(r.Context(), storeKey(req.Key), req.ReservationID, *req.Actual)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set(httpreply.HeaderRateLimit, string(httpreply.AppendRateLimit(nil, name, st.Result)))
	httpreply.SetRetryAfter(h, []httpreply.Policy{{Name: name, Result: st.Result}})
	writeJSON(w, http.StatusOK, Settled{Decision: decision(st.Result), Estimate: st.Estimate, Actual: st.Actual, Again: st.Again})
}

// throttleAll serves POST /v1/throttle with several limits.
func (s *Server) throttleAll(w http.ResponseWriter, r *http.Request, entries []Entry) {
	if len(entries) == 0 || len(entries) > s.opts.MaxLimits {
		s.fail(w, r, inputf("limits must hold 1 to %d entries", s.opts.MaxLimits))
		return
	}
	reqs := make([]funnel.Request, len(entries))
	policies := make([]httpreply.Policy, len(entries))
	for i, e := range entries {
		name, err := checkName(e.Name, "limit"+strconv.Itoa(i))
		if err == nil {
			err = checkKey(e.Key)
		}
		var limit funnel.Limit
		if err == nil {
			limit, err = e.Limit.Funnel()
		}
		if err == nil && limit.Algorithm == funnel.Concurrency {
			err = inputf("concurrency limits take leases: POST /v1/acquire")
		}
		if err != nil {
			s.fail(w, r, inputf("limits[%d]: %w", i, err))
			return
		}
		reqs[i] = funnel.Request{Key: storeKey(e.Key), Limit: limit, N: quantity(e.Quantity)}
		policies[i] = httpreply.Policy{Name: name, Limit: limit}
	}
	m, err := s.lim.AllowAll(r.Context(), reqs)
	if err != nil {
		if !s.fellBack(w, r, err) {
			return
		}
		open := s.opts.Fail == funnel.FailOpen
		m = funnel.MultiResult{Allowed: open, Refused: -1, Results: make([]funnel.Result, len(reqs))}
		for i := range m.Results {
			m.Results[i] = s.opts.Fail.Fallback(reqs[i].Limit)
		}
		if !open {
			m.Refused = 0
		}
	}
	reply := MultiDecision{Allowed: m.Allowed, Refused: m.Refused, Results: make([]Decision, len(m.Results))}
	retry := m.RetryAfter
	// The refusal is the fallback's when no limit that decided refused.
	fallbackOnly := !m.Allowed
	for i, res := range m.Results {
		s.observe(res, nil)
		policies[i].Result = res
		reply.Results[i] = decision(res)
		reply.Fallback = reply.Fallback || res.Fallback
		switch {
		case res.Allowed:
		case res.Fallback:
			retry = max(retry, funnel.FallbackRetry)
		default:
			fallbackOnly = false
		}
	}
	if !m.Allowed {
		reply.RetryAfterMs = ms(retry)
	}
	decided(w, funnel.Result{Allowed: m.Allowed, Fallback: fallbackOnly}, policies, reply)
}

// acquire serves POST /v1/acquire.
func (s *Server) acquire(w http.ResponseWriter, r *http.Request) {
	var req AcquireRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	name, err := checkName(req.Name, httpreply.DefaultName)
	if err == nil {
		err = checkKey(req.Key)
	}
	if err == nil && req.Limit != nil && req.Limit.Algorithm == "" {
		req.Limit.Algorithm = funnel.Concurrency.String()
	}
	var limit funnel.Limit
	if err == nil {
		limit, err = req.Limit.Funnel()
	}
	if err == nil && limit.Algorithm != funnel.Concurrency {
		err = inputf("leases are for concurrency limits")
	}
	if err == nil && len(req.Lease) > maxLeaseID {
		err = inputf("the lease id is longer than %d bytes", maxLeaseID)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var lease funnel.Lease
	var res funnel.Result
	if req.Lease != "" {
		lease, res, err = s.lim.AcquireID(r.Context(), storeKey(req.Key), limit, req.Lease)
	} else {
		lease, res, err = s.lim.Acquire(r.Context(), storeKey(req.Key), limit)
	}
	if err != nil {
		if !s.fellBack(w, r, err) {
			return
		}
		res = s.opts.Fail.Fallback(limit)
	}
	s.observe(res, nil)
	d := decision(res)
	d.Lease = lease.ID
	decided(w, res, []httpreply.Policy{{Name: name, Limit: limit, Result: res}}, d)
}

// release serves POST /v1/release.
func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	var req ReleaseRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	err := checkKey(req.Key)
	if err == nil && req.Lease == "" {
		err = inputf("the lease is missing")
	}
	var latency time.Duration
	if err == nil {
		latency, err = parseDuration("latency", req.Latency)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var ok bool
	lease := funnel.Lease{Key: storeKey(req.Key), ID: req.Lease}
	if req.Latency != "" {
		ok, err = s.lim.ReleaseAfter(r.Context(), lease, latency)
	} else {
		ok, err = s.lim.Release(r.Context(), lease)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, Released{Released: ok})
}

// refund serves POST /v1/refund.
func (s *Server) refund(w http.ResponseWriter, r *http.Request) {
	var req RefundRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	err := checkKey(req.Key)
	var limit funnel.Limit
	if err == nil {
		limit, err = req.Limit.Funnel()
	}
	if err == nil && limit.Algorithm == funnel.Concurrency {
		err = inputf("release the lease instead: POST /v1/release")
	}
	if err == nil {
		err = s.lim.Refund(r.Context(), storeKey(req.Key), limit, quantity(req.Quantity))
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// peek serves GET /v1/keys/{key}, the limit in the query string.
func (s *Server) peek(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	q := r.URL.Query()
	name, err := checkName(q.Get("name"), httpreply.DefaultName)
	if err == nil {
		err = checkKey(key)
	}
	var l *Limit
	if err == nil {
		l, err = limitFromQuery(q)
	}
	var limit funnel.Limit
	if err == nil {
		limit, err = l.Funnel()
	}
	if err == nil && limit.Algorithm == funnel.Concurrency {
		err = inputf("concurrency limits cannot be peeked")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.lim.Peek(r.Context(), storeKey(key), limit)
	s.peeked(w, r, name, limit, res, err)
}

// peeked answers a peek (GET /v1/keys/{key}, or POST /v1/throttle with
// "peek": true) whose result is res, or err.
func (s *Server) peeked(w http.ResponseWriter, r *http.Request, name string, limit funnel.Limit, res funnel.Result, err error) {
	switch {
	case err == nil:
	case funnel.Unavailable(r.Context(), err): // as fellBack, but a peek is not observed
		s.warnDown(r, err)
		res = s.opts.Fail.Fallback(limit)
	default:
		s.fail(w, r, err)
		return
	}
	// A peek that finds the key refused is answered 200: it asked, it did
	// not try; only a fail-closed fallback is not.
	status := http.StatusOK
	if res.Fallback && !res.Allowed {
		status = httpreply.FallbackStatus(w.Header(), res)
	}
	httpreply.SetHeaders(w.Header(), httpreply.Policy{Name: name, Limit: limit, Result: res})
	writeJSON(w, status, decision(res))
}

// reset serves DELETE /v1/keys/{key}.
func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := checkKey(key); err != nil {
		s.fail(w, r, err)
		return
	}
	existed, err := s.lim.Reset(r.Context(), storeKey(key))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ResetReply{Existed: existed})
}

// bans serves GET /v1/bans.
func (s *Server) bans(w http.ResponseWriter, r *http.Request) {
	bans, err := s.lim.Bans(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	reply := BansReply{Bans: make([]Ban, len(bans))}
	for i, b := range bans {
		reply.Bans[i] = Ban{Key: b.Key, Until: b.Until.UTC()}
	}
	slices.SortFunc(reply.Bans, func(a, b Ban) int {
		if c := a.Until.Compare(b.Until); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	writeJSON(w, http.StatusOK, reply)
}

// unban serves DELETE /v1/bans/{key}.
func (s *Server) unban(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := checkKey(key); err != nil {
		s.fail(w, r, err)
		return
	}
	ok, err := s.lim.Unban(r.Context(), storeKey(key))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, UnbanReply{Unbanned: ok})
}

// healthz serves GET /healthz: the process answers.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, "ok\n")
}

// readyzKey is the key the default readiness check asks the store about.
const readyzKey = "funnel:readyz"

// readyz serves GET /readyz: the store answers.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	var err error
	if s.opts.Ready != nil {
		err = s.opts.Ready(r.Context())
	} else {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.ReadyTimeout)
		_, _, err = s.lim.TTL(ctx, readyzKey)
		cancel()
	}
	if err != nil {
		if r.Context().Err() == nil {
			s.log.Warn("httpapi: not ready", "err", err)
		}
		httpreply.Problem{Status: http.StatusServiceUnavailable, Detail: "the store is unavailable"}.Write(w)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, "ready\n")
}
