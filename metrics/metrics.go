// Package metrics exposes Funnel's Prometheus metrics: decisions by rule and
// outcome, the store's latency and errors, fail-open answers, rule reloads
// and connected clients; and for Envoy's rate-limit service, the statistics
// of envoyproxy/ratelimit under the names of its Prometheus mapping (see
// ObserveRateLimit).
//
// Cardinality is bounded: decisions are labelled by rule (a name from the
// configuration, at most Options.MaxRules of them) and outcome, never by
// key. Every metric lives in the Metrics' own prometheus.Registry, not in the
// global one, so that several servers (or tests) in one process do not
// collide.
//
//	m := metrics.New(metrics.Options{})
//	store := metrics.InstrumentStore(memstore.New(memstore.Options{}), m)
//	http.Handle("/metrics", m.Handler())
package metrics

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Outcomes of a decision, the values of the decisions_total outcome label.
const (
	// OutcomeAllowed counts requests the limit admitted.
	OutcomeAllowed = "allowed"
	// OutcomeRefused counts requests the limit refused (their key is not
	// banned).
	OutcomeRefused = "refused"
	// OutcomeBanned counts requests refused because their key is banned.
	OutcomeBanned = "banned"
	// OutcomeFallback counts requests the store could not decide for,
	// answered with the configured fail-open or fail-closed answer.
	OutcomeFallback = "fallback"
	// OutcomeError counts calls that failed without a decision.
	OutcomeError = "error"
)

// OtherRule is the rule label that decisions of rules beyond
// Options.MaxRules are counted under.
const OtherRule = "_other"

// DefaultMaxRules is the number of distinct rule labels kept when
// Options.MaxRules is zero.
const DefaultMaxRules = 1000

// Options configure Metrics. The zero value is a good default.
type Options struct {
	// Namespace prefixes every metric name; "" means "funnel".
	Namespace string
	// MaxRules bounds the number of distinct rule labels; the decisions of
	// further rules are counted under one more label, OtherRule. Zero means
	// DefaultMaxRules.
	MaxRules int
	// StoreBuckets are the upper bounds, in seconds, of the store latency
	// histogram's buckets; nil means DefaultStoreBuckets.
	StoreBuckets []float64
	// NoRuntimeMetrics leaves out the Go runtime (go_*) and process
	// (process_*) collectors, which are registered by default.
	NoRuntimeMetrics bool
}

// DefaultStoreBuckets spans an in-memory decision (a few microseconds) to a
// slow network store (a second).
var DefaultStoreBuckets = []float64{
	5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1,
}

// Metrics holds Funnel's collectors and the registry they are registered
// in. Build one with New; it is safe for concurrent use. The zero Metrics is
// not usable, but a nil *Metrics is: every method of a nil *Metrics does
// nothing, so callers need not test whether metrics are enabled.
type Metrics struct {
	reg      *prometheus.Registry
	maxRules int

	decisions   *prometheus.CounterVec
	failOpen    *prometheus.CounterVec
	failOpenAll *failOpenCollector // failOpen and FailOpenFunc's counts
	storeTime   *prometheus.HistogramVec
	storeErrors *prometheus.CounterVec
	reloads     *prometheus.CounterVec
	lastReload  prometheus.Gauge
	namespace   string

	mu    sync.Mutex
	rules sync.Map // rule name -> *ruleCounters
	nrule int      // entries in rules, under mu

	ops [numOps]opMetrics

	rateLimits  *rateLimitCollector   // envoy's statistics, by statistics key
	configLoads [2]prometheus.Counter // envoy's config_load_success and _error
}

// ruleCounters are one rule's counters, looked up once.
type ruleCounters struct {
	byOutcome [5]prometheus.Counter // allowed, refused, banned, fallback, error
	failOpen  prometheus.Counter
}

// FailOpenHelp is the help text of funnel_fail_open_total, for a collector
// that counts fail-open answers of its own under the same name (the RESP
// server's, under the rule "resp").
const FailOpenHelp = "Requests admitted without a decision because the store could not decide (fail open), by rule."

// Namespace returns the prefix of m's metric names ("funnel" by default),
// for the collectors that others register in m's registry.
func (m *Metrics) Namespace() string {
	if m == nil {
		return "funnel"
	}
	return m.namespace
}

// New returns Metrics registered in a new registry.
func New(opts Options) *Metrics {
	ns := opts.Namespace
	if ns == "" {
		ns = "funnel"
	}
	buckets := opts.StoreBuckets
	if buckets == nil {
		buckets = DefaultStoreBuckets
	}
	m := &Metrics{
		reg:       prometheus.NewRegistry(),
		maxRules:  opts.MaxRules,
		namespace: ns,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns,
			Name:      "decisions_total",
			Help:      "Decisions by rule and outcome (allowed, refused, banned, fallback, error).",
		}, []string{"rule", "outcome"}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns,
			Name:      "fail_open_total",
			Help:      FailOpenHelp,
		}, []string{"rule"}),
		storeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns,
			Name:      "store_duration_seconds",
			Help:      "Time the store took per call, by operation, errors included.",
			Buckets:   buckets,
		}, []string{"op"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns,
			Name:      "store_errors_total",
			Help:      "Store calls that failed or returned a fallback answer, by operation and kind (unavailable, canceled, wrong_type, cross_slot, invalid, other).",
		}, []string{"op", "kind"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns,
			Name:      "rules_reloads_total",
			Help:      "Loads of the rules file, by result (success, failure).",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns,
			Name:      "rules_last_reload_success_timestamp_seconds",
			Help:      "Unix time of the last successful load of the rules file.",
		}),
	}
	if m.maxRules <= 0 {
		m.maxRules = DefaultMaxRules
	}
	m.failOpenAll = &failOpenCollector{
		vec:   m.failOpen,
		desc:  prometheus.NewDesc(prometheus.BuildFQName(ns, "", "fail_open_total"), FailOpenHelp, []string{"rule"}, nil),
		funcs: map[string]func() float64{},
	}
	m.rateLimits = newRateLimitCollector(m.maxRules)
	// envoy's names of the same loads, for dashboards written for it
	m.configLoads[0] = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimit_service_config_load_success",
		Help: "Successful loads of the rules (envoyproxy/ratelimit's config_load_success; funnel_rules_reloads_total's success).",
	})
	m.configLoads[1] = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimit_service_config_load_error",
		Help: "Failed loads of the rules (envoyproxy/ratelimit's config_load_error; funnel_rules_reloads_total's failure).",
	})
	m.reg.MustRegister(m.decisions, m.failOpenAll, m.storeTime, m.storeErrors, m.reloads, m.lastReload, m.rateLimits,
		m.configLoads[0], m.configLoads[1])
	if !opts.NoRuntimeMetrics {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	// Series that exist before their first event, so that rate() and
	// absent() work from the first scrape.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	for op := range m.ops {
		m.ops[op].time = m.storeTime.WithLabelValues(opNames[op])
		for k := range m.ops[op].errors {
			m.ops[op].errors[k] = m.storeErrors.WithLabelValues(opNames[op], kindNames[k])
		}
	}
	return m
}

// Registry returns the registry every collector of m is registered in, to
// register more collectors or to gather them elsewhere.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler returns an http.Handler that serves m's registry in the
// Prometheus exposition formats (text, or OpenMetrics when asked for). A nil
// *Metrics serves 404 Not Found.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:          m.reg, // promhttp_* metrics about the scrapes themselves
		EnableOpenMetrics: true,
	})
}

// rule returns the counters of rule, creating them up to the bound.
func (m *Metrics) rule(rule string) *ruleCounters {
	if c, ok := m.rules.Load(rule); ok {
		return c.(*ruleCounters)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.rules.Load(rule); ok {
		return c.(*ruleCounters)
	}
	label := rule
	if m.nrule >= m.maxRules {
		label = OtherRule
		if c, ok := m.rules.Load(OtherRule); ok {
			return c.(*ruleCounters)
		}
		rule = OtherRule // further rules share this entry, not one each
	}
	c := &ruleCounters{failOpen: m.failOpen.WithLabelValues(label)}
	for i, o := range [...]string{OutcomeAllowed, OutcomeRefused, OutcomeBanned, OutcomeFallback, OutcomeError} {
		c.byOutcome[i] = m.decisions.WithLabelValues(label, o)
	}
	m.rules.Store(rule, c)
	m.nrule++
	return c
}

// ObserveDecision counts one decision of rule: its outcome, and a fail-open
// answer (a Fallback result that is Allowed). Rule must come from the
// configuration, never from the request (not a key, not a client address):
// beyond Options.MaxRules distinct rules, decisions are counted under
// OtherRule.
func (m *Metrics) ObserveDecision(rule string, r funnel.Result) {
	if m == nil {
		return
	}
	c := m.rule(rule)
	switch {
	case r.Fallback:
		c.byOutcome[3].Inc()
		if r.Allowed {
			c.failOpen.Inc()
		}
	case r.Allowed:
		c.byOutcome[0].Inc()
	case r.Banned:
		c.byOutcome[2].Inc()
	default:
		c.byOutcome[1].Inc()
	}
}

// ObserveError counts a call of rule that failed without a decision.
func (m *Metrics) ObserveError(rule string) {
	if m == nil {
		return
	}
	m.rule(rule).byOutcome[4].Inc()
}

// Observer returns a function that counts the decisions of rule: a decision
// when err is nil, an error otherwise. It fits the middleware's Observe
// option.
func (m *Metrics) Observer(rule string) func(funnel.Result, error) {
	return func(r funnel.Result, err error) {
		if err != nil {
			m.ObserveError(rule)
			return
		}
		m.ObserveDecision(rule, r)
	}
}

// RulesReloaded counts a load of the rules file: a success when err is nil
// (and the time of the last success is set to now), a failure otherwise.
func (m *Metrics) RulesReloaded(err error) {
	m.rulesReloadedAt(time.Now(), err)
}

// rulesReloadedAt is RulesReloaded at time now.
func (m *Metrics) rulesReloadedAt(now time.Time, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.reloads.WithLabelValues("failure").Inc()
		m.configLoads[1].Inc()
		return
	}
	m.reloads.WithLabelValues("success").Inc()
	m.configLoads[0].Inc()
	m.lastReload.Set(float64(now.UnixNano()) / 1e9)
}

// FailOpenFunc adds to funnel_fail_open_total the fail-open answers that
// another part counts itself, under rule, read from count at each scrape
// (the RESP server counts its own, under the rule "resp"). The rule must not
// be one that ObserveDecision is given too; adding the same rule twice is an
// error.
func (m *Metrics) FailOpenFunc(rule string, count func() float64) error {
	if m == nil {
		return nil
	}
	c := m.failOpenAll
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.funcs[rule]; dup {
		return fmt.Errorf("metrics: fail-open counts of rule %q added twice", rule)
	}
	c.funcs[rule] = count
	return nil
}

// failOpenCollector collects funnel_fail_open_total: the counters of the
// rules, and the counts added by FailOpenFunc.
type failOpenCollector struct {
	vec   *prometheus.CounterVec
	desc  *prometheus.Desc
	mu    sync.Mutex
	funcs map[string]func() float64 // by rule, under mu
}

// Describe describes the counter vector, whose description the added counts
// share.
func (c *failOpenCollector) Describe(ch chan<- *prometheus.Desc) { c.vec.Describe(ch) }

// Collect collects the counters of the rules, then each added count.
func (c *failOpenCollector) Collect(ch chan<- prometheus.Metric) {
	c.vec.Collect(ch)
	c.mu.Lock()
	defer c.mu.Unlock()
	for rule, f := range c.funcs {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, f(), rule)
	}
}

// Evictions registers a counter of the keys a store bounded in keys evicted
// while they were still limited, read from count at each scrape (such as
// memstore.Store.Evictions).
func (m *Metrics) Evictions(count func() uint64) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: m.namespace,
		Name:      "store_evicted_keys_total",
		Help:      "Keys evicted by the memory store to stay within --max-keys while they were still limited (a concurrency limit that holds leases is never evicted).",
	}, func() float64 { return float64(count()) }))
}

// ConnectedClients registers a gauge of the clients connected over
// protocol (such as "resp", "http" or "grpc"), read from count at each
// scrape. Registering the same protocol twice is an error.
//
//	m.ConnectedClients("resp", func() int { return respServer.Stats().Clients })
func (m *Metrics) ConnectedClients(protocol string, count func() int) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace:   m.namespace,
		Name:        "connected_clients",
		Help:        "Clients connected now, by protocol.",
		ConstLabels: prometheus.Labels{"protocol": protocol},
	}, func() float64 { return float64(count()) }))
}

// ConnCounter counts the open connections of an http.Server, for
// ConnectedClients: set the server's ConnState to the counter's ConnState
// and register Count. The zero ConnCounter is ready; it is safe for
// concurrent use.
//
//	var conns metrics.ConnCounter
//	srv := &http.Server{Handler: h, ConnState: conns.ConnState}
//	m.ConnectedClients("http", conns.Count)
type ConnCounter struct{ n atomic.Int64 }

// ConnState counts a connection in on StateNew and out on StateClosed or
// StateHijacked.
func (c *ConnCounter) ConnState(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		c.n.Add(1)
	case http.StateClosed, http.StateHijacked:
		c.n.Add(-1)
	}
}

// Count returns the connections open now.
func (c *ConnCounter) Count() int { return int(c.n.Load()) }
