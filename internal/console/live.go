package console

import (
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Bounds of the live view.
const (
	// LivePoints is the number of one-second points a series keeps: 15
	// minutes.
	LivePoints = 900
	// MaxSeries bounds the series of the live view; the decisions of
	// further rules are added to the series of rule "_other".
	MaxSeries = 64
)

// seriesKey names one series: decisions of a rule, through an edge, of one
// outcome.
type seriesKey struct{ edge, rule, outcome string }

// series is one series' last LivePoints rates and its last counter value.
type series struct {
	points [LivePoints]float64
	last   float64
	seen   bool
}

// histogram is the store latency histogram at one sample.
type histogram struct {
	bounds []float64
	counts []uint64 // cumulative
}

// sampler reads the metrics registry every second and keeps each
// decisions counter's rate over the last LivePoints seconds.
type sampler struct {
	g     prometheus.Gatherer
	top   *Top       // advanced at every sample
	rules *Decisions // the rules' decisions by edge
	now   func() time.Time
	quit  chan struct{}
	done  chan struct{}

	mu      sync.Mutex
	series  map[seriesKey]*series
	head    int   // index of the newest point
	ticks   int64 // samples taken
	at      time.Time
	hist    [61]histogram // the store latency histogram at the last 61 samples
	gauges  map[string]float64
	clients map[string]float64
}

func newSampler(g prometheus.Gatherer, top *Top, rules *Decisions, now func() time.Time) *sampler {
	return &sampler{g: g, top: top, rules: rules, now: now, series: map[seriesKey]*series{}, gauges: map[string]float64{}, clients: map[string]float64{}}
}

// start samples every step until stop.
func (s *sampler) start(step time.Duration) {
	if s.g == nil && s.top == nil && s.rules == nil {
		return
	}
	s.quit, s.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(step)
		defer t.Stop()
		s.sample()
		for {
			select {
			case <-s.quit:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
}

func (s *sampler) stop() {
	if s.quit != nil {
		close(s.quit)
		<-s.done
		s.quit = nil
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// kept reports whether a metric is shown in the health table.
func kept(name string) bool {
	for _, p := range []string{"funnel_lease_", "funnel_snapshot_", "funnel_fail_open_total", "funnel_store_errors_total",
		"funnel_memstore_", "funnel_rules_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// sample reads the registry once and adds one point to every series.
func (s *sampler) sample() {
	s.top.Advance()
	var mfs []*dto.MetricFamily
	if s.g != nil {
		var err error
		if mfs, err = s.g.Gather(); err != nil && len(mfs) == 0 {
			return
		}
	}
	counts := map[seriesKey]float64{}
	gauges := map[string]float64{}
	clients := map[string]float64{}
	var h histogram
	for _, mf := range mfs {
		name := mf.GetName()
		for _, m := range mf.GetMetric() {
			switch {
			case name == "funnel_decisions_total":
				// The HTTP API's, counted under the rule "http"; the
				// rules' come from Decisions, by edge.
				if rule := label(m, "rule"); rule == "http" {
					counts[seriesKey{"http", rule, label(m, "outcome")}] += value(m)
				}
			case name == "funnel_resp_decisions_total":
				counts[seriesKey{"resp", "resp", label(m, "outcome")}] += value(m)
			case name == "funnel_connected_clients":
				clients[label(m, "protocol")] = value(m)
			case name == "funnel_store_duration_seconds":
				for i, b := range m.GetHistogram().GetBucket() {
					if i >= len(h.bounds) {
						h.bounds = append(h.bounds, b.GetUpperBound())
						h.counts = append(h.counts, 0)
					}
					h.counts[i] += b.GetCumulativeCount()
				}
			case kept(name):
				k := name
				var ls []string
				for _, l := range m.GetLabel() {
					if name == "funnel_store_errors_total" && l.GetName() == "op" {
						continue // by kind only: the operations are on /metrics
					}
					ls = append(ls, l.GetName()+"="+l.GetValue())
				}
				if len(ls) > 0 {
					k += "{" + strings.Join(ls, ",") + "}"
				}
				gauges[k] += value(m)
			}
		}
	}
	s.rules.each(func(k seriesKey, n uint64) { counts[k] += float64(n) })
	for edge, n := range s.top.Delayed() {
		// The edge's delayed decisions, counted among its allowed too.
		counts[seriesKey{edge, edge, "delayed"}] += float64(n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.head = (s.head + 1) % LivePoints
	s.ticks++
	s.at = s.now()
	s.hist[s.ticks%int64(len(s.hist))] = h
	s.gauges, s.clients = gauges, clients
	for k, v := range counts {
		se, ok := s.series[k]
		if !ok {
			if len(s.series) >= MaxSeries {
				k.rule = "_other"
				if se, ok = s.series[k]; !ok {
					se = &series{}
					s.series[k] = se
				}
			} else {
				se = &series{}
				s.series[k] = se
			}
		}
		switch {
		case se.seen:
			se.points[s.head] += max(0, v-se.last)
		case s.ticks > 1:
			// A series that appears after the first sample is a counter
			// created at its first event: it counted from zero since.
			se.points[s.head] += v
		}
		se.last, se.seen = v, true
	}
	for _, se := range s.series {
		next := (s.head + 1) % LivePoints
		se.points[next] = 0 // the oldest point, reused at the next sample
	}
}

// quantile returns the q-quantile of the observations between two samples
// of a cumulative histogram, at the upper bound of its bucket, in seconds;
// NaN without observations.
func quantile(q float64, newer, older histogram) float64 {
	if len(newer.counts) == 0 {
		return math.NaN()
	}
	diff := func(i int) uint64 {
		if i < len(older.counts) {
			return newer.counts[i] - older.counts[i]
		}
		return newer.counts[i]
	}
	// The +Inf bucket is not among dto's buckets: the total is the last
	// bound's count, and a quantile beyond it is reported at that bound.
	total := diff(len(newer.counts) - 1)
	if total == 0 {
		return math.NaN()
	}
	rank := uint64(math.Ceil(q * float64(total)))
	for i := range newer.counts {
		if diff(i) >= rank {
			return newer.bounds[i]
		}
	}
	return newer.bounds[len(newer.bounds)-1]
}

// SeriesReply is one series of LiveReply.
type SeriesReply struct {
	Edge    string `json:"edge"`
	Rule    string `json:"rule"`
	Outcome string `json:"outcome"`
	// Points are decisions per second, oldest first, the last one the
	// newest full second.
	Points []float64 `json:"points"`
	// Total is the decisions counted since start.
	Total float64 `json:"total"`
}

// LiveReply is the answer of GET /ui/api/live.
type LiveReply struct {
	// AtMS is the time of the newest point (Unix ms); StepMS the time
	// between points.
	AtMS   int64         `json:"at_ms"`
	StepMS int64         `json:"step_ms"`
	Series []SeriesReply `json:"series"`
	Store  string        `json:"store"`
	// StoreP50MS and StoreP99MS are the store's latency over the last
	// minute (absent without calls, and with the memory store, whose calls
	// are not timed). With StoreLatencyCalls, they are the quantiles of
	// the store's decisions (Do and GCRA calls) within 1/128 (0.8 %)
	// above the exact value (Latency); without, the upper bound of the
	// metrics' histogram bucket that holds them, every store call counted.
	StoreP50MS *float64 `json:"store_p50_ms,omitempty"`
	StoreP99MS *float64 `json:"store_p99_ms,omitempty"`
	// StoreLatencyCalls is the number of decisions the quantiles are of.
	StoreLatencyCalls uint64 `json:"store_latency_calls,omitempty"`
	// Keys is the number of keys the store holds (-1: unknown).
	Keys int `json:"keys"`
	// Clients are the connected clients by protocol.
	Clients map[string]float64 `json:"clients"`
	// Health holds the store errors, fail-open answers, rules reloads,
	// leases and snapshots, as their metrics name them.
	Health map[string]float64 `json:"health"`
	// StoreStats are the store's own figures (the memory store's keys,
	// bans, evictions, expirations and bytes), at most StoreStatsEvery
	// old.
	StoreStats map[string]float64 `json:"store_stats,omitempty"`
	Rules      RulesReply         `json:"rules"`
	// TopRefusals, TopSkipped and TopSampling are the sketch's counts
	// (see TopReply).
	TopRefusals uint64 `json:"top_refusals"`
	TopSkipped  uint64 `json:"top_skipped"`
	TopSampling bool   `json:"top_sampling"`
}

// reply returns the sampler's series, keeping the last n points of each.
func (s *sampler) reply(rep *LiveReply, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rep.AtMS, rep.StepMS = s.at.UnixMilli(), 1000
	n = min(n, LivePoints-1, int(max(0, s.ticks-1)))
	for k, se := range s.series {
		sr := SeriesReply{Edge: k.edge, Rule: k.rule, Outcome: k.outcome, Total: se.last, Points: make([]float64, n)}
		for i := range n {
			sr.Points[i] = se.points[(s.head-n+1+i+LivePoints)%LivePoints]
		}
		rep.Series = append(rep.Series, sr)
	}
	sort.Slice(rep.Series, func(i, j int) bool {
		a, b := rep.Series[i], rep.Series[j]
		if a.Edge != b.Edge {
			return a.Edge < b.Edge
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		return a.Outcome < b.Outcome
	})
	newer := s.hist[s.ticks%int64(len(s.hist))]
	older := s.hist[(s.ticks+1)%int64(len(s.hist))] // 60 samples before, or empty
	if s.ticks < int64(len(s.hist)) {
		older = histogram{}
	}
	for q, dst := range map[float64]**float64{0.5: &rep.StoreP50MS, 0.99: &rep.StoreP99MS} {
		if v := quantile(q, newer, older); !math.IsNaN(v) {
			v *= 1000
			*dst = &v
		}
	}
	rep.Clients, rep.Health = s.clients, s.gauges
}

func (s *Server) liveJSON(w http.ResponseWriter, r *http.Request) {
	rep := LiveReply{Store: s.opts.StoreName, Keys: -1, Rules: s.rulesReply()}
	if s.opts.Keys != nil {
		rep.Keys = s.opts.Keys()
	}
	n := LivePoints
	if p := r.URL.Query().Get("points"); p == "60" {
		n = 60
	}
	s.live.reply(&rep, n)
	if s.opts.Latency != nil {
		rep.StoreP50MS, rep.StoreP99MS = nil, nil
		if q, calls := s.opts.Latency.Quantiles(s.now(), 0.5, 0.99); calls > 0 {
			p50, p99 := float64(q[0])/1e6, float64(q[1])/1e6
			rep.StoreP50MS, rep.StoreP99MS, rep.StoreLatencyCalls = &p50, &p99, calls
		}
	}
	rep.StoreStats = s.storeStats()
	rep.TopRefusals, rep.TopSkipped, rep.TopSampling = s.opts.Top.Counts()
	if rep.Series == nil {
		rep.Series = []SeriesReply{}
	}
	writeJSON(w, rep)
}
