// Package rls serves Envoy's rate-limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, over gRPC,
// with rules in envoyproxy/ratelimit's configuration format (package
// rules) and decisions taken by a funnel.Limiter.
//
// A request's descriptors are matched to rules as envoyproxy/ratelimit
// matches them, and decided together: either every limit that is enforced
// admits the request and each matched limit is charged, or the request is
// refused and nothing is charged. This is where Funnel differs from envoy's
// service, which counts every hit, refused or not, on every descriptor: with
// Funnel a refused request (or a request refused by another descriptor)
// does not eat into the limits that admitted it. A rule in shadow mode
// reports OK in its descriptor status, as envoy's service does (its refusal
// shows in the metrics and in a LimitRemaining of 0), and does not refuse
// the request, which is then charged to the limits that admitted it.
//
// A rule in quota mode (quota_mode, or every descriptor with
// Options.QuotaMode, as envoy's QUOTA_MODE) refuses the request only when
// every quota descriptor of the request is over its limit: the request is
// OVER_LIMIT when a rule that is not a quota is over, or when all its quota
// descriptors are, and a quota over its limit still says OVER_LIMIT in its
// own status. When the request goes on, it is charged to the limits that
// admitted it (envoy's service charges them all).
//
// A rule with charge_over_limit (or every rule, with
// Options.ChargeOverLimit) charges every hit, as envoy's service does by
// default: hits that overflow its limit are charged anyway, into debt
// (funnel.Limiter.Charge), and answered OVER_LIMIT, and the key stays over
// its limit until the debt has drained. This is what the charges that
// Envoy sends when a stream ends (apply_on_stream_done, with hits_addend
// the tokens of a response) need: a cost that is never dropped. Such a
// rule is charged whatever the request's outcome; when it is over its
// limit, the request is refused, and its other limits are not charged. A
// descriptor whose hits_addend is explicitly 0 charges nothing and answers
// as envoy's service does: OVER_LIMIT only when its key is already above
// its limit (in debt), OK at the limit (a check at request time).
//
// On Redis Cluster, the keys of one request are often in several hash
// slots, which no script can decide together. Such a request is decided
// one slot at a time (each slot atomically, the slots at once), and when
// one slot refuses, the limits of the slots that admitted are refunded:
// the request is refused and in the end charged to no limit, as on a
// single Redis. What is not atomic is the moment between a slot's charge
// and its refund, when another request may find the charge and be refused
// for it; and a refund gives back exactly what the charge took only when
// little time has passed between them (the README's "Several descriptors
// on Redis Cluster" says what each algorithm gives back).
//
// A descriptor's key longer than funnel.MaxKeyLen (1024 bytes) is stored
// under its hash, after Options.Prefix (funnel.StoreKey), as on every edge.
//
// When the store cannot decide (funnel.Unavailable), the answer is a
// fallback, Options.Fail's or the store's own (a Redis store configured to
// fail open or closed). A fail-closed fallback, the default, is the status
// Unavailable (Envoy then applies its own failure_mode_deny), never
// OVER_LIMIT. A fail-open fallback is OK, and says that it is one: the
// response's dynamic_metadata holds "fallback": true (which Envoy puts in
// the request's dynamic metadata under envoy.filters.http.ratelimit, for
// access logs and other filters), the gRPC response headers
// "funnel-fallback: open" (FallbackHeader), and the statuses of the
// limits that fell back have no duration_until_reset. /json answers the
// same body, with the header Funnel-Fallback: open.
//
// Besides gRPC, JSONHandler and HealthHandler serve envoy's HTTP endpoints
// (POST /json and /healthcheck); Options.ResponseHeaders adds envoy's
// rate-limit headers, or the IETF draft's fields; Options.Count receives
// envoy's per-rule statistics (Counts).
//
//	srv := rls.New(limiter, watcher, rls.Options{})
//	go srv.Serve(ctx, listener)
package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimit "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/httpreply"
	"github.com/funnelrl/funnel/internal/lograte"
	"github.com/funnelrl/funnel/rules"
)

// ServiceName is the gRPC name of the rate-limit service, as the health
// service reports it.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// RulesSource gives the rules in force. *rules.Watcher is one; Static
// makes one of fixed rules.
type RulesSource interface {
	// Rules returns the rules in force (nil: no rules, every domain
	// unknown).
	Rules() *rules.Set
}

// Static returns a RulesSource that always gives r.
func Static(r *rules.Set) RulesSource { return static{r} }

type static struct{ r *rules.Set }

func (s static) Rules() *rules.Set { return s.r }

// Headers names the headers that envoyproxy/ratelimit adds to responses
// (LIMIT_RESPONSE_HEADERS_ENABLED) or to the requests Envoy forwards: the
// limit, the remaining count and the seconds to reset of the descriptor
// closest to its limit (or of the last one that refused the request).
// With IETF, the fields of draft-ietf-httpapi-ratelimit-headers replace
// the three.
type Headers struct {
	// Limit names the header of the limit (requests per unit), envoy's
	// LIMIT_LIMIT_HEADER.
	Limit string
	// Remaining names the header of the requests left, envoy's
	// LIMIT_REMAINING_HEADER.
	Remaining string
	// Reset names the header of the whole seconds until the reset, envoy's
	// LIMIT_RESET_HEADER.
	Reset string
	// IETF sends, instead of the three headers above, the RateLimit-Policy
	// and RateLimit fields of the same descriptor (see package internal/httpreply),
	// named after its rule: its name, or else its full key.
	IETF bool
}

// DefaultHeaders returns envoyproxy/ratelimit's default names:
// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset.
func DefaultHeaders() *Headers {
	return &Headers{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}
}

// LegacyHeaders returns the names that envoyproxy/ratelimit used before
// it took the IETF draft's: X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset.
func LegacyHeaders() *Headers {
	return &Headers{Limit: "X-RateLimit-Limit", Remaining: "X-RateLimit-Remaining", Reset: "X-RateLimit-Reset"}
}

// IETFHeaders returns Headers that send the RateLimit-Policy and RateLimit
// fields.
func IETFHeaders() *Headers { return &Headers{IETF: true} }

// Options configure a Server. The zero value is a good default.
type Options struct {
	// Logger receives store errors and other failures that are not sent
	// to clients; nil means slog.Default().
	Logger *slog.Logger
	// ShadowMode turns every OVER_LIMIT overall answer into OK (envoy's
	// global SHADOW_MODE); descriptor statuses still say which limit
	// refused.
	ShadowMode bool
	// ChargeOverLimit gives every rule charge_over_limit (see
	// rules.Rule.ChargeOverLimit): every hit is charged, the hits that
	// overflow too, as envoyproxy/ratelimit does when
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is false, its default.
	ChargeOverLimit bool
	// QuotaMode puts every descriptor in quota mode (envoy's global
	// QUOTA_MODE): the request is refused only when all of its
	// descriptors that are not unlimited are over their limits (one that
	// no rule matches is never over).
	QuotaMode bool
	// DynamicMetadata sets the response's dynamic_metadata as envoy's
	// RESPONSE_DYNAMIC_METADATA does: the domain, the descriptors (their
	// entries as "key=value", their limit override and hits_addend), the
	// request's hits_addend, and under "metadata" the metadata of the
	// rules whose descriptors passed, merged (nested mappings merged, the
	// first descriptor's value kept where two differ).
	DynamicMetadata bool
	// ResponseHeaders, when set, adds these headers to every answer that
	// has a limit (response_headers_to_add); nil adds none, as envoy by
	// default.
	ResponseHeaders *Headers
	// RequestHeaders, when set, asks Envoy to add these headers to the
	// request it forwards upstream (request_headers_to_add).
	RequestHeaders *Headers
	// Prefix is prepended to every store key: the store key of a
	// descriptor's key is funnel.StoreKey(Prefix, key).
	Prefix string
	// Fail is the answer when the store cannot decide; the zero value is
	// funnel.FailClosed (the status Unavailable, see the package doc).
	Fail funnel.FailMode
	// Now is the clock used for the reset of rules that refuse every
	// request (requests_per_unit 0), which never reach the store; nil
	// means time.Now.
	Now func() time.Time
	// Observe, when set, is called once per decided descriptor with the
	// rule's metric name (rules.Match.Metric) and the result or error,
	// for metrics by rule.
	Observe func(rule string, r funnel.Result, err error)
	// Trace, when set, returns the context of a decision marked with the
	// rules it decides (their metric names, comma-separated), for the
	// decision's span (tracing.WithRule); nil marks nothing and costs
	// nothing.
	Trace func(ctx context.Context, rules string) context.Context
	// Count, when set, is called once per decided descriptor that has a
	// limit with the rule's metric name (rules.Match.Metric: envoy's
	// statistics key, "domain.key_value…") and the hits it counts as
	// envoyproxy/ratelimit counts them (see Counts), for its statistics.
	Count func(metric string, c Counts)
	// NearLimitRatio is the share of a limit past which admitted hits
	// count as near the limit (envoy's NEAR_LIMIT_RATIO); 0 means 0.8.
	NearLimitRatio float64
	// StopTimeout bounds the graceful stop in Serve; 0 means 5 seconds.
	StopTimeout time.Duration
}

// Server answers ShouldRateLimit. Build one with New; it is safe for
// concurrent use.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	lim    *funnel.Limiter
	rules  RulesSource
	opts   Options
	log    *slog.Logger
	health *health.Server
	// serving is what SetServing set last, for HealthHandler.
	serving atomic.Bool
	// Each kind of failure is logged at most once a second.
	warnDown, warnSetup, warnBug *lograte.Sometimes
}

// New returns a server that decides with lim under the rules of src.
func New(lim *funnel.Limiter, src RulesSource, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NearLimitRatio <= 0 {
		opts.NearLimitRatio = DefaultNearLimitRatio
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 5 * time.Second
	}
	s := &Server{lim: lim, rules: src, opts: opts, log: opts.Logger, health: health.NewServer(),
		warnDown: lograte.New(time.Second), warnSetup: lograte.New(time.Second), warnBug: lograte.New(time.Second)}
	s.SetServing(true)
	return s
}

// Register registers the rate-limit service, the gRPC health service and
// server reflection on g. Call it once per grpc.Server.
func (s *Server) Register(g *grpc.Server) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
}

// SetServing sets what the health service reports, for the whole server
// ("") and for ServiceName: SERVING or NOT_SERVING; HealthHandler answers
// the same.
func (s *Server) SetServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.serving.Store(ok)
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(ServiceName, st)
}

// Serve serves the service on l until ctx ends, then reports NOT_SERVING,
// stops gracefully (at most Options.StopTimeout, then abruptly) and returns
// nil. It returns the error of grpc.Server.Serve if serving fails first.
func (s *Server) Serve(ctx context.Context, l net.Listener, opts ...grpc.ServerOption) error {
	g := grpc.NewServer(opts...)
	s.Register(g)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.SetServing(false)
	stopped := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(s.opts.StopTimeout)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		g.Stop()
		<-stopped
	}
	<-errc
	return nil
}

// ShouldRateLimit decides a request. Its errors are gRPC statuses: see
// statusOf.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := s.decide(ctx, req)
	if err != nil {
		return nil, s.statusOf(err)
	}
	if isFallback(resp) {
		// Outside a gRPC call (JSONHandler), there is no header to set.
		grpc.SetHeader(ctx, metadata.Pairs(FallbackHeader, "open"))
	}
	return resp, nil
}

// FallbackHeader is the gRPC response header (and the HTTP header of
// JSONHandler) of an answer that is a fail-open fallback: the store could
// not decide, and the request was let through. Its value is "open".
const FallbackHeader = "funnel-fallback"

// isFallback reports whether resp is a fail-open fallback (see respond).
func isFallback(resp *rlsv3.RateLimitResponse) bool {
	return resp.GetDynamicMetadata().GetFields()["fallback"].GetBoolValue()
}

// badRequest is an error in the request, sent to the client as it is.
type badRequest string

func (e badRequest) Error() string { return "rls: " + string(e) }

// errFallback reports that the store could not decide and is configured to
// fail closed.
var errFallback = errors.New("rls: the store could not decide (fail-closed fallback)")

// statusOf maps an error of decide to the gRPC status sent to the client,
// by its class (funnel.ClassOf): a bad request or limit is InvalidArgument;
// a store that cannot be reached (or its fail-closed fallback) is
// Unavailable, so that Envoy applies its own failure_mode_deny; a context
// that ended is Canceled or DeadlineExceeded; keys that the store cannot
// decide together even one group at a time (a store that does not say its
// groups), or a key of another algorithm, are
// FailedPrecondition (the rules' doing, not the client's); anything else is
// Internal. The client's errors are not logged; the others are, at most
// once a second each, and their detail is never sent.
func (s *Server) statusOf(err error) error {
	var bad badRequest
	if errors.As(err, &bad) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if errors.Is(err, errFallback) {
		err = fmt.Errorf("%w: %w", funnel.ErrUnavailable, err)
	}
	switch funnel.ClassOf(err) {
	case funnel.ClassInvalid:
		return status.Error(codes.InvalidArgument, "rls: "+err.Error())
	case funnel.ClassCanceled:
		if errors.Is(err, context.DeadlineExceeded) {
			return status.Error(codes.DeadlineExceeded, "rls: deadline exceeded")
		}
		return status.Error(codes.Canceled, "rls: canceled")
	case funnel.ClassUnavailable:
		s.warnDown.Do(func(held int64) { s.log.Warn("rls: store unavailable", "err", err, "held_back", held) })
		return status.Error(codes.Unavailable, "rls: the store is unavailable")
	case funnel.ClassCrossSlot:
		s.warnSetup.Do(func(held int64) {
			s.log.Error("rls: the keys of one request are in several hash slots", "err", err, "held_back", held)
		})
		return status.Error(codes.FailedPrecondition, "rls: the limits of one request must share a hash slot")
	case funnel.ClassWrongType:
		s.warnSetup.Do(func(held int64) {
			s.log.Error("rls: a key holds the state of another algorithm than its rule's", "err", err, "held_back", held)
		})
		return status.Error(codes.FailedPrecondition, "rls: a key holds the state of another algorithm than its rule's")
	}
	s.warnBug.Do(func(held int64) { s.log.Error("rls: decision failed", "err", err, "held_back", held) })
	return status.Error(codes.Internal, "rls: internal error")
}

// item is one descriptor of a request.
type item struct {
	rule      *rules.Rule
	key       string
	metric    string
	hits      int64
	negative  bool
	unlimited bool
	quota     bool // counts among the request's quota descriptors
	op        int  // index in ops, or -1
	res       funnel.Result
	over      bool
}

// op is one distinct key charged by a request.
type op struct {
	req      funnel.Request
	rule     string // the rule's metric name, for traces
	enforced bool   // a rule not in shadow mode and not a quota charges it
	quota    bool   // a quota not in shadow mode charges it
	debt     bool   // a rule with charge_over_limit: charged whatever it holds
	res      funnel.Result
}

// quotas counts the quota descriptors of a request that plan found:
// total, and sure, those that pass whatever the store says (no rule, a
// refund, shadow mode). When there are some and none is sure, the request
// is refused if every op of a quota refuses.
type quotas struct{ total, sure int }

// decisive reports whether the quotas may refuse the request.
func (q quotas) decisive() bool { return q.total > 0 && q.sure == 0 }

// maxHits bounds one descriptor's hits_addend.
const maxHits = math.MaxInt64 / 1024

// addHits returns a+b (both at least 0), or math.MaxInt64 when the sum
// does not fit.
func addHits(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// decide decides a request in four steps: match (the descriptors to their
// rules and keys), plan (the keys to charge and their quantities), charge
// (the limiter's decision) and respond (the statuses and headers). Its
// errors are sent through statusOf.
func (s *Server) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, badRequest("the domain is required")
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return nil, badRequest("at least one descriptor is required")
	}
	var itemBuf [4]item // most requests have few descriptors
	var items []item
	if len(descs) <= len(itemBuf) {
		items = itemBuf[:len(descs)]
	} else {
		items = make([]item, len(descs))
	}
	replacing, err := s.match(req, items)
	if err != nil {
		return nil, err
	}
	var opBuf [4]op
	ops, q, denied, err := s.plan(ctx, items, replacing, opBuf[:0])
	if err != nil {
		return nil, err
	}
	if len(ops) > 0 {
		if err := s.charge(ctx, ops, q, denied); err != nil {
			for i := range items {
				if items[i].op >= 0 {
					s.observe(items[i].metric, funnel.Result{}, err)
				}
			}
			return nil, err
		}
	}
	return s.respond(req, items, ops), nil
}

// match fills items, one per descriptor of req and in their order, with
// the hits to charge (or to refund, when negative) and the rule that
// matches the descriptor, its key and the name of its metric. A
// descriptor of an unknown domain, or that no rule matches, is left
// without a rule; one whose rule is unlimited is marked so, without a
// rule. match returns the names of the rules that the matched rules
// replace, or nil when they replace none.
func (s *Server) match(req *rlsv3.RateLimitRequest, items []item) (map[string]bool, error) {
	set := s.rules.Rules()
	domain := req.Domain
	known := set.HasDomain(domain)
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}
	var entryBuf [8]rules.Entry
	var replacing map[string]bool
	for i, d := range req.GetDescriptors() {
		it := &items[i]
		it.op = -1
		it.hits = hits
		if h := d.GetHitsAddend(); h != nil {
			if h.Value > maxHits {
				return nil, badRequest("descriptor " + strconv.Itoa(i) + ": hits_addend is too large")
			}
			it.hits = int64(h.Value)
		}
		it.negative = d.GetIsNegativeHits()
		it.quota = s.opts.QuotaMode
		if !known {
			continue // an unknown domain is not limited, as in envoy
		}
		var entries []rules.Entry
		if n := len(d.GetEntries()); n <= len(entryBuf) {
			entries = entryBuf[:n]
		} else {
			entries = make([]rules.Entry, n)
		}
		for j, e := range d.GetEntries() {
			entries[j] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		var err error
		it.rule, it.key, it.metric, err = ruleOf(set, domain, d, entries)
		if err != nil {
			return nil, badRequest("descriptor " + strconv.Itoa(i) + ": " + err.Error())
		}
		if it.rule == nil {
			continue
		}
		it.quota = it.quota || it.rule.QuotaMode
		if len(it.rule.Replaces) > 0 {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			for _, name := range it.rule.Replaces {
				replacing[name] = true
			}
		}
		if it.rule.Unlimited {
			it.unlimited, it.rule, it.quota = true, nil, false
		}
	}
	return replacing, nil
}

// ruleOf returns the rule of descriptor d of domain, whose entries are
// entries, with its key and the name of its metric: the limit sent with
// the descriptor (envoy's limit override) when there is one, else the
// rule of set that matches the entries, else a nil rule. Its error is an
// invalid limit override.
func ruleOf(set *rules.Set, domain string, d *ratelimit.RateLimitDescriptor, entries []rules.Entry) (r *rules.Rule, key, metric string, err error) {
	if o := d.GetLimit(); o != nil {
		if r, err = overrideRule(domain, o); err != nil {
			return nil, "", "", err
		}
		return r, rules.KeyFor(domain, entries), r.FullKey, nil
	}
	if m, ok := set.Match(domain, entries); ok {
		return m.Rule, m.Key, m.Metric, nil
	}
	return nil, "", "", nil
}

// plan drops the rules that other matched rules replace, then gathers the
// keys that items charge into ops, which it returns with the request's
// quotas: see addOp. A rule that refuses everything charges nothing and is
// over its limit; denied reports that the request is refused whatever the
// store says: such a rule is enforced (neither it nor the server is in
// shadow mode, and it is not a quota), or every quota is such a rule. A
// descriptor with negative hits is refunded at once, as there is nothing
// to decide, and its error ends the request.
func (s *Server) plan(ctx context.Context, items []item, replacing map[string]bool, ops []op) (_ []op, q quotas, denied bool, _ error) {
	var byKey map[string]int
	quotaOps := 0
	for i := range items {
		it := &items[i]
		if it.rule != nil && it.rule.Name != "" && replacing[it.rule.Name] {
			it.rule, it.quota = nil, s.opts.QuotaMode
		}
		if it.quota {
			q.total++
		}
		if it.rule == nil {
			if it.quota {
				q.sure++ // no rule: never over
			}
			continue
		}
		shadow := it.rule.ShadowMode || s.opts.ShadowMode
		if it.quota && (shadow || it.negative) {
			q.sure++
		}
		if it.rule.Deny() {
			it.over = true
			denied = denied || !shadow && !it.quota
			s.observe(it.metric, funnel.Result{}, nil)
			s.count(it, funnel.Result{})
			continue
		}
		if it.negative {
			if err := s.lim.Refund(ctx, funnel.StoreKey(s.opts.Prefix, it.key), it.rule.Limit, it.hits); err != nil {
				s.observe(it.metric, funnel.Result{}, err)
				return nil, q, false, err
			}
			it.res = funnel.Result{Allowed: true}
			continue
		}
		key := funnel.StoreKey(s.opts.Prefix, it.key)
		ops, byKey = addOp(ops, byKey, len(items), it, key, !shadow && !it.quota, !shadow && it.quota, it.rule.ChargeOverLimit || s.opts.ChargeOverLimit)
		if it.quota && !shadow {
			quotaOps++
		}
	}
	if q.decisive() && quotaOps == 0 {
		denied = true // every quota refuses everything
	}
	return ops, q, denied, nil
}

// addOp charges the hits of it to key, in ops, and records the op in it.
// Two descriptors on one key make one op of both quantities (at most
// math.MaxInt64, which no limit admits: many descriptors must not wrap
// the sum around to a small charge), enforced, a quota or charged into
// debt (debt: charge_over_limit) when either is. Past
// smallRequest ops, byKey indexes them, sized for n; addOp returns ops
// and byKey as they are after it.
func addOp(ops []op, byKey map[string]int, n int, it *item, key string, enforced, quota, debt bool) ([]op, map[string]int) {
	if j := findKey(ops, byKey, key); j >= 0 {
		ops[j].req.N = addHits(ops[j].req.N, it.hits)
		ops[j].enforced = ops[j].enforced || enforced
		ops[j].quota = ops[j].quota || quota
		ops[j].debt = ops[j].debt || debt
		it.op = j
		return ops, byKey
	}
	if len(ops) == smallRequest {
		byKey = make(map[string]int, n)
		for j := range ops {
			byKey[ops[j].req.Key] = j
		}
	}
	if byKey != nil {
		byKey[key] = len(ops)
	}
	it.op = len(ops)
	ops = append(ops, op{req: funnel.Request{Key: key, Limit: it.rule.Limit, N: it.hits}, rule: it.metric, enforced: enforced, quota: quota, debt: debt})
	return ops, byKey
}

// lazyNow reads the clock once, when first needed.
type lazyNow struct {
	read func() time.Time
	now  time.Time
}

// get returns the time, read on the first call.
func (c *lazyNow) get() time.Time {
	if c.now.IsZero() {
		c.now = c.read()
	}
	return c.now
}

// respond builds the response of decided items, whose charges are ops:
// a status per descriptor (see status); OVER_LIMIT overall when a limit
// that is neither a quota nor in shadow mode refuses, or when the request
// has quotas and all of them refuse (never when the server is in shadow
// mode); the configured headers of the status closest to its limit, which
// is the last such refusal or else the one with the fewest remaining; and
// with Options.DynamicMetadata, the dynamic metadata (see dynamicMetadata).
func (s *Server) respond(req *rlsv3.RateLimitRequest, items []item, ops []op) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(items)),
	}
	var closest *rlsv3.RateLimitResponse_DescriptorStatus // for the headers
	var closestItem *item
	closestOver := false
	var q quotas // here sure counts the quotas that passed
	clock := lazyNow{read: s.opts.Now}
	fallback := false
	for i := range items {
		it := &items[i]
		st := s.status(it, ops, &clock)
		resp.Statuses[i] = st
		fallback = fallback || it.op >= 0 && it.res.Fallback
		over := st.Code == rlsv3.RateLimitResponse_OVER_LIMIT // not in shadow mode
		if it.quota {
			q.total++
			if !over {
				q.sure++
			}
		}
		if it.rule == nil {
			continue
		}
		enforcedOver := over && !it.quota
		if enforcedOver {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		switch {
		case enforcedOver:
			closest, closestItem, closestOver = st, it, true
		case !closestOver && (closest == nil || st.LimitRemaining < closest.LimitRemaining):
			closest, closestItem = st, it
		}
	}
	if q.decisive() {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT // every quota refused
	}
	if s.opts.ShadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
	}
	if closest != nil {
		if h := s.opts.ResponseHeaders; h != nil {
			resp.ResponseHeadersToAdd = headers(h, closestItem, closest)
		}
		if h := s.opts.RequestHeaders; h != nil {
			resp.RequestHeadersToAdd = headers(h, closestItem, closest)
		}
	}
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, items, resp.Statuses)
	}
	if fallback {
		// The store could not decide a limit, and failed open: said in the
		// one field of the response that Envoy passes on as it is.
		if resp.DynamicMetadata == nil {
			resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		}
		resp.DynamicMetadata.Fields["fallback"] = structpb.NewBoolValue(true)
	}
	return resp
}

// status builds the status of one decided item and, for a charged one,
// observes its result and records in it whether it is over its limit. An
// unlimited rule has everything remaining; a descriptor without a rule is
// OK; a rule that refuses everything is over its limit until the end of
// its period; a charged rule reports its op's result; a refunded one what
// remains. A rule in shadow mode reports OK even when over its limit.
func (s *Server) status(it *item, ops []op, clock *lazyNow) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	switch {
	case it.unlimited:
		st.LimitRemaining = math.MaxUint32
		return st
	case it.rule == nil:
		return st
	}
	st.CurrentLimit = currentLimit(it.rule)
	switch {
	case it.rule.Deny():
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		st.DurationUntilReset = durationpb.New(unitReset(it.rule, clock.get()))
	case it.op >= 0:
		it.res = ops[it.op].res
		s.observe(it.metric, it.res, nil)
		s.count(it, it.res)
		it.over = !it.res.Allowed
		if it.over {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		st.LimitRemaining = uint32(min(max(it.res.Remaining, 0), math.MaxUint32))
		if it.res.Fallback {
			break // no decision: no reset to tell
		}
		reset := it.res.ResetAfter
		if reset == 0 && it.rule.Limit.Algorithm == funnel.FixedWindow {
			reset = windowReset(it.rule.Limit, clock.get())
		}
		if it.res.Banned && it.res.RetryAfter != funnel.Never {
			// The key is refused until its ban ends, whatever its window.
			reset = max(reset, it.res.RetryAfter)
		}
		st.DurationUntilReset = durationpb.New(reset)
	default: // a refund
		st.LimitRemaining = uint32(min(max(it.res.Remaining, 0), math.MaxUint32))
	}
	if it.rule.ShadowMode && st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
		// As envoy's service answers it: a rule in shadow mode reports
		// OK; its refusal shows in the metrics only.
		st.Code = rlsv3.RateLimitResponse_OK
	}
	return st
}

// charge decides ops together (on Redis Cluster, slot by slot: see
// allowAll). If every one admits, all are charged. If
// the request is refused (see refused), none is. If only limits in shadow
// mode or some quotas refuse, the request goes on, so it is charged to the
// others, together again (which a concurrent request may have filled
// meanwhile: then the decision is taken again on those that still admit,
// at most a few times). When denied, the request is refused whatever the
// store says: the ops are only peeked, for their statuses.
//
// The ops of rules with charge_over_limit come first (see chargeDebts):
// they are charged whatever the request's outcome, and one that leaves an
// enforced rule over its limit refuses the request, so that the others
// are only peeked.
func (s *Server) charge(ctx context.Context, ops []op, q quotas, denied bool) error {
	if s.opts.Trace != nil {
		names := make([]string, len(ops))
		for i := range ops {
			names[i] = ops[i].rule
		}
		ctx = s.opts.Trace(ctx, strings.Join(names, ","))
	}
	debts := 0
	for i := range ops {
		if ops[i].debt {
			debts++
		}
	}
	if debts > 0 {
		over, err := s.chargeDebts(ctx, ops, q)
		if err != nil {
			return err
		}
		denied = denied || over
		if debts == len(ops) {
			return nil
		}
	}
	if len(ops)-debts == 1 {
		// One key: the same decision, without AllowAll's bookkeeping.
		i := 0
		for ops[i].debt {
			i++
		}
		r := ops[i].req
		if denied {
			r.N = 0
		}
		res, err := s.lim.AllowN(ctx, r.Key, r.Limit, r.N)
		if err != nil {
			if !s.fellBack(ctx, err) {
				return err
			}
			res = s.opts.Fail.Fallback(r.Limit)
		}
		if res.Fallback && !res.Allowed {
			return errFallback
		}
		ops[i].res = res
		return nil
	}
	reqs := make([]funnel.Request, 0, len(ops))
	idx := make([]int, 0, len(ops))
	for i := range ops {
		if ops[i].debt {
			continue
		}
		r := ops[i].req
		if denied {
			r.N = 0
		}
		reqs = append(reqs, r)
		idx = append(idx, i)
	}
	for attempt := 0; len(reqs) > 0; attempt++ {
		m, err := s.allowAll(ctx, reqs)
		if err != nil {
			if !s.fellBack(ctx, err) {
				return err
			}
			m = funnel.MultiResult{Allowed: s.opts.Fail == funnel.FailOpen, Refused: -1, Results: make([]funnel.Result, len(reqs))}
			for j := range reqs {
				m.Results[j] = s.opts.Fail.Fallback(reqs[j].Limit)
			}
		}
		for j, r := range m.Results {
			if r.Fallback && !r.Allowed {
				return errFallback
			}
			ops[idx[j]].res = r
		}
		if m.Allowed || refused(ops, q) || attempt == 3 {
			return nil
		}
		// Only shadow rules or some quotas refused: charge the others.
		k := 0
		for j, r := range m.Results {
			if r.Allowed {
				reqs[k], idx[k] = reqs[j], idx[j]
				k++
			}
		}
		reqs, idx = reqs[:k], idx[:k]
	}
	return nil
}

// chargeDebts charges each op of a rule with charge_over_limit with
// Limiter.Charge, into debt when its hits do not fit (a charge is alone in
// its call: one call per key), and reports whether one of them that is
// enforced is now over its limit, or that the request's quotas are all
// charged here and all over, either of which refuses the request. A store that
// cannot record a charge is answered as one that cannot decide: the
// fallback, said in the response (a fail-open one is in its dynamic
// metadata), and the charge is lost.
func (s *Server) chargeDebts(ctx context.Context, ops []op, q quotas) (over bool, _ error) {
	quotaLeft, quotaPassed := false, false
	for i := range ops {
		if !ops[i].debt {
			continue
		}
		r := ops[i].req
		res, err := s.lim.Charge(ctx, r.Key, r.Limit, r.N)
		if err != nil {
			if !s.fellBack(ctx, err) {
				return false, err
			}
			res = s.opts.Fail.Fallback(r.Limit)
		}
		if res.Fallback && !res.Allowed {
			return false, errFallback
		}
		ops[i].res = res
		over = over || !res.Allowed && ops[i].enforced
	}
	for i := range ops {
		switch {
		case !ops[i].quota:
		case !ops[i].debt:
			quotaLeft = true
		case ops[i].res.Allowed:
			quotaPassed = true
		}
	}
	return over || q.decisive() && !quotaLeft && !quotaPassed, nil
}

// fellBack reports whether err, the error of a charge, is a store that
// cannot decide (funnel.Unavailable), which Options.Fail answers; the
// failure is logged at most once a second.
func (s *Server) fellBack(ctx context.Context, err error) bool {
	if !funnel.Unavailable(ctx, err) {
		return false
	}
	s.warnDown.Do(func(held int64) { s.log.Warn("rls: store unavailable", "err", err, "held_back", held) })
	return true
}

// refused reports whether the results of ops refuse the request: an
// enforced one refuses, or the quotas are decisive and every op of a quota
// refuses.
func refused(ops []op, q quotas) bool {
	quotaPassed := false
	for i := range ops {
		switch {
		case ops[i].res.Allowed:
			quotaPassed = quotaPassed || ops[i].quota
		case ops[i].enforced:
			return true
		}
	}
	return q.decisive() && !quotaPassed
}

// smallRequest is the number of keys up to which a request's keys are
// compared one by one rather than indexed in a map.
const smallRequest = 16

// findKey returns the index of the op on key, or -1; byKey indexes ops
// once there are more than smallRequest.
func findKey(ops []op, byKey map[string]int, key string) int {
	if byKey != nil {
		if j, ok := byKey[key]; ok {
			return j
		}
		return -1
	}
	for j := range ops {
		if ops[j].req.Key == key {
			return j
		}
	}
	return -1
}

func (s *Server) observe(rule string, r funnel.Result, err error) {
	if s.opts.Observe != nil {
		s.opts.Observe(rule, r, err)
	}
}

// overrideRule builds the rule of a limit sent with a descriptor (envoy's
// limit override): a fixed window, never in shadow mode.
func overrideRule(domain string, o *ratelimit.RateLimitDescriptor_RateLimitOverride) (*rules.Rule, error) {
	var u rules.Unit
	switch o.GetUnit() {
	case typev3.RateLimitUnit_SECOND:
		u = rules.UnitSecond
	case typev3.RateLimitUnit_MINUTE:
		u = rules.UnitMinute
	case typev3.RateLimitUnit_HOUR:
		u = rules.UnitHour
	case typev3.RateLimitUnit_DAY:
		u = rules.UnitDay
	case typev3.RateLimitUnit_MONTH:
		u = rules.UnitMonth
	case typev3.RateLimitUnit_YEAR:
		u = rules.UnitYear
	default:
		return nil, errors.New("the limit override has no valid unit")
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil && m.Value > 0 {
		mult = m.Value
	}
	r := &rules.Rule{
		Domain:          domain,
		FullKey:         domain + ".override",
		RequestsPerUnit: o.GetRequestsPerUnit(),
		Unit:            u,
		UnitMultiplier:  mult,
	}
	if r.RequestsPerUnit > 0 {
		r.Limit = funnel.Limit{Algorithm: funnel.FixedWindow, Count: int64(r.RequestsPerUnit), Period: u.Duration() * time.Duration(mult)}
		if err := r.Limit.Validate(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// units maps the rules' units to the protocol's.
var units = [...]rlsv3.RateLimitResponse_RateLimit_Unit{
	rules.UnitUnknown: rlsv3.RateLimitResponse_RateLimit_UNKNOWN,
	rules.UnitSecond:  rlsv3.RateLimitResponse_RateLimit_SECOND,
	rules.UnitMinute:  rlsv3.RateLimitResponse_RateLimit_MINUTE,
	rules.UnitHour:    rlsv3.RateLimitResponse_RateLimit_HOUR,
	rules.UnitDay:     rlsv3.RateLimitResponse_RateLimit_DAY,
	rules.UnitWeek:    rlsv3.RateLimitResponse_RateLimit_WEEK,
	rules.UnitMonth:   rlsv3.RateLimitResponse_RateLimit_MONTH,
	rules.UnitYear:    rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// currentLimit reports a rule as the protocol's RateLimit: its name,
// requests_per_unit, unit and, when the period is several units,
// unit_multiplier.
func currentLimit(r *rules.Rule) *rlsv3.RateLimitResponse_RateLimit {
	l := &rlsv3.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit}
	if int(r.Unit) < len(units) {
		l.Unit = units[r.Unit]
	}
	if r.UnitMultiplier > 1 {
		l.UnitMultiplier = wrapperspb.UInt32(r.UnitMultiplier)
	}
	return l
}

// windowReset is the time from now to the end of a fixed window.
func windowReset(l funnel.Limit, now time.Time) time.Duration {
	ns := now.UnixNano()
	span := l.Span(ns)
	return time.Duration(span.End)*time.Millisecond - time.Duration(ns)
}

// unitReset is the time from now to the end of the rule's reported
// period, aligned to the Unix epoch, as envoy computes it for a rule that
// refuses everything.
func unitReset(r *rules.Rule, now time.Time) time.Duration {
	p := r.Unit.Duration() * time.Duration(max(r.UnitMultiplier, 1))
	if p <= 0 {
		return 0
	}
	ns := now.UnixNano()
	return p - time.Duration(ns)%p
}

// headers builds the headers of status st of item it: the limit, the
// remaining count and the whole seconds to reset (rounded up), or with
// h.IETF the RateLimit-Policy and RateLimit fields.
func headers(h *Headers, it *item, st *rlsv3.RateLimitResponse_DescriptorStatus) []*core.HeaderValue {
	reset := st.GetDurationUntilReset().AsDuration()
	if h.IETF {
		return ietfHeaders(it, st, reset)
	}
	return []*core.HeaderValue{
		{Key: h.Limit, Value: strconv.FormatUint(uint64(st.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		{Key: h.Remaining, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		{Key: h.Reset, Value: strconv.FormatInt(httpreply.Seconds(reset), 10)},
	}
}

// ietfHeaders builds the RateLimit-Policy and RateLimit fields of status
// st of item it, whose reset is reset: the policy of its rule's limit, and
// its decision's result when the store took one (t is then, for a
// refusal, the wait until the same request would pass), else what the
// status says.
func ietfHeaders(it *item, st *rlsv3.RateLimitResponse_DescriptorStatus, reset time.Duration) []*core.HeaderValue {
	name := it.rule.Name
	if name == "" {
		name = it.rule.FullKey
	}
	res := it.res
	if it.op < 0 {
		res = funnel.Result{Allowed: true, Remaining: int64(st.LimitRemaining), ResetAfter: reset}
	}
	var policy []byte
	if it.rule.Deny() {
		// No request ever passes: the quota is 0 in the rule's period.
		policy = httpreply.AppendPolicy(nil, name, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 0,
			Period: it.rule.Unit.Duration() * time.Duration(max(it.rule.UnitMultiplier, 1))})
	} else {
		policy = httpreply.AppendPolicy(nil, name, it.rule.Limit)
	}
	return []*core.HeaderValue{
		{Key: httpreply.HeaderPolicy, Value: string(policy)},
		{Key: httpreply.HeaderRateLimit, Value: string(httpreply.AppendRateLimit(nil, name, res))},
	}
}
