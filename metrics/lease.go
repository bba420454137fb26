package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// LeaseStats are the counters of a leasing store (package leasestore's
// Stats, which the caller copies): this package does not import the
// leasing store, so that metrics do not bring the Redis clients with them.
type LeaseStats struct {
	// Decisions is the number of leased decisions; Local of them were
	// answered from memory without waiting for a lease call.
	Decisions, Local int64
	// LocalRefusals were refused from memory.
	LocalRefusals int64
	// Calls is the number of lease calls, Prefetches of them made in the
	// background, and Failed of them failed.
	Calls, Prefetches, Failed int64
	// Leased is the units granted; Spent of them were admitted, Forfeited
	// expired unspent, and GivenBack were sent back.
	Leased, Spent, Forfeited, GivenBack int64
	// Fallbacks were answered with the fallback because a lease call failed.
	Fallbacks int64
}

// Leases registers the counters of a leasing store (package leasestore)
// in m's registry, read from stats at each scrape (named here with the
// default namespace, "funnel"):
//
//	funnel_lease_decisions_total{how="local"|"waited"}   leased decisions, answered from memory or after a lease call
//	funnel_lease_local_refusals_total                    refused from memory until a RetryAfter
//	funnel_lease_calls_total{kind="decision"|"prefetch"} lease calls to Redis
//	funnel_lease_call_failures_total                     lease calls that failed
//	funnel_lease_units_total{state="leased"|"spent"|"forfeited"|"given_back"}
//	funnel_lease_fallbacks_total                         decisions answered with the fallback
//
// A nil *Metrics registers nothing.
func (m *Metrics) Leases(stats func() LeaseStats) error {
	if m == nil {
		return nil
	}
	counter := func(name, help string, labels prometheus.Labels, f func(LeaseStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: m.namespace, Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(f(stats())) })
	}
	const units = "lease_units_total"
	const unitsHelp = "Units of leased funnels, by what became of them."
	const calls = "lease_calls_total"
	const callsHelp = "Lease calls to Redis, made by a decision that waited or in the background."
	const decisions = "lease_decisions_total"
	const decisionsHelp = "Leased decisions, answered from memory or after waiting for a lease call."
	for _, c := range []prometheus.Collector{
		counter(decisions, decisionsHelp, prometheus.Labels{"how": "local"}, func(s LeaseStats) int64 { return s.Local }),
		counter(decisions, decisionsHelp, prometheus.Labels{"how": "waited"}, func(s LeaseStats) int64 { return s.Decisions - s.Local }),
		counter("lease_local_refusals_total", "Decisions refused from memory, before the RetryAfter of a lease call that found no room.", nil,
			func(s LeaseStats) int64 { return s.LocalRefusals }),
		counter(calls, callsHelp, prometheus.Labels{"kind": "decision"}, func(s LeaseStats) int64 { return s.Calls - s.Prefetches }),
		counter(calls, callsHelp, prometheus.Labels{"kind": "prefetch"}, func(s LeaseStats) int64 { return s.Prefetches }),
		counter("lease_call_failures_total", "Lease calls that failed (Redis unreachable or too slow).", nil,
			func(s LeaseStats) int64 { return s.Failed }),
		counter(units, unitsHelp, prometheus.Labels{"state": "leased"}, func(s LeaseStats) int64 { return s.Leased }),
		counter(units, unitsHelp, prometheus.Labels{"state": "spent"}, func(s LeaseStats) int64 { return s.Spent }),
		counter(units, unitsHelp, prometheus.Labels{"state": "forfeited"}, func(s LeaseStats) int64 { return s.Forfeited }),
		counter(units, unitsHelp, prometheus.Labels{"state": "given_back"}, func(s LeaseStats) int64 { return s.GivenBack }),
		counter("lease_fallbacks_total", "Leased decisions answered with the fallback: no units held and a lease call failed.", nil,
			func(s LeaseStats) int64 { return s.Fallbacks }),
	} {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
