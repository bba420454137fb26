package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/funnelrl/funnel/leasestore"
)

// Leases registers the counters of a leasing store (package leasestore)
// in m's registry, read from stats at each scrape:
//
//	funnel_lease_decisions_total{how="local"|"waited"}   leased decisions, answered from memory or after a lease call
//	funnel_lease_local_refusals_total                    refused from memory until a RetryAfter
//	funnel_lease_calls_total{kind="decision"|"prefetch"} lease calls to Redis
//	funnel_lease_call_failures_total                     lease calls that failed
//	funnel_lease_units_total{state="leased"|"spent"|"forfeited"|"given_back"}
//	funnel_lease_fallbacks_total                         decisions answered with the fallback
//
// A nil *Metrics registers nothing.
func (m *Metrics) Leases(stats func() leasestore.Stats) error {
	if m == nil {
		return nil
	}
	counter := func(name, help string, labels prometheus.Labels, f func(leasestore.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(f(stats())) })
	}
	const units = "funnel_lease_units_total"
	const unitsHelp = "Units of leased funnels, by what became of them."
	const calls = "funnel_lease_calls_total"
	const callsHelp = "Lease calls to Redis, made by a decision that waited or in the background."
	const decisions = "funnel_lease_decisions_total"
	const decisionsHelp = "Leased decisions, answered from memory or after waiting for a lease call."
	for _, c := range []prometheus.Collector{
		counter(decisions, decisionsHelp, prometheus.Labels{"how": "local"}, func(s leasestore.Stats) int64 { return s.Local }),
		counter(decisions, decisionsHelp, prometheus.Labels{"how": "waited"}, func(s leasestore.Stats) int64 { return s.Decisions - s.Local }),
		counter("funnel_lease_local_refusals_total", "Decisions refused from memory, before the RetryAfter of a lease call that found no room.", nil,
			func(s leasestore.Stats) int64 { return s.LocalRefusals }),
		counter(calls, callsHelp, prometheus.Labels{"kind": "decision"}, func(s leasestore.Stats) int64 { return s.Calls - s.Prefetches }),
		counter(calls, callsHelp, prometheus.Labels{"kind": "prefetch"}, func(s leasestore.Stats) int64 { return s.Prefetches }),
		counter("funnel_lease_call_failures_total", "Lease calls that failed (Redis unreachable or too slow).", nil,
			func(s leasestore.Stats) int64 { return s.Failed }),
		counter(units, unitsHelp, prometheus.Labels{"state": "leased"}, func(s leasestore.Stats) int64 { return s.Leased }),
		counter(units, unitsHelp, prometheus.Labels{"state": "spent"}, func(s leasestore.Stats) int64 { return s.Spent }),
		counter(units, unitsHelp, prometheus.Labels{"state": "forfeited"}, func(s leasestore.Stats) int64 { return s.Forfeited }),
		counter(units, unitsHelp, prometheus.Labels{"state": "given_back"}, func(s leasestore.Stats) int64 { return s.GivenBack }),
		counter("funnel_lease_fallbacks_total", "Leased decisions answered with the fallback: no units held and a lease call failed.", nil,
			func(s leasestore.Stats) int64 { return s.Fallbacks }),
	} {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
