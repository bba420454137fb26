package daemon

import (
	"crypto/tls"
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/funnelrl/funnel/respserver"
)

// openRESP binds the Redis-protocol listener and builds its server, with
// its metrics.
func (d *Daemon) openRESP() error {
	ln, err := net.Listen("tcp", d.cfg.RESP)
	if err != nil {
		return fmt.Errorf("daemon: resp listener: %w", err)
	}
	if tc := d.sec.tlsConfig(); tc != nil {
		// Connections of a TLS listener are served by a goroutine each,
		// not by the event loops.
		ln = tls.NewListener(ln, tc)
		if d.cfg.EventLoops > 0 {
			d.log.Info("RESP over TLS serves a goroutine per connection: event_loops is not used", "event_loops", d.cfg.EventLoops)
		}
	}
	d.respLn = ln
	d.respSrv = respserver.New(d.console.watch(d.store, "resp"), respserver.Config{
		Credentials: d.sec.creds,
		MaxClients:  d.conns.RESP,
		Slots:       d.slots,
		IdleTimeout: d.cfg.IdleTimeout,
		AuthTimeout: d.conns.Auth,

		HandshakeTimeout: d.conns.Handshake,
		EventLoops:       d.cfg.EventLoops,
		Logger:           d.log,
		Fail:             d.cfg.Fail(),
		FailClosed:       respFailClosed(d.cfg.RESPFailClosed),
		Persistence:      d.snap.persistence(),
	})
	if err := d.metrics.ConnectedClients("resp", func() int { return d.respSrv.Stats().Clients }); err != nil {
		return err
	}
	if err := d.metrics.Registry().Register(refusedConns(d.metrics.Namespace(), "resp", func() float64 { return float64(d.respSrv.Stats().Rejected) })); err != nil {
		return err
	}
	// Decisions over RESP have no rule to label them by: they are counted
	// apart, from the server's own counters.
	// Fallbacks (the store could not decide) are counted apart from the
	// decisions, as the other edges count them, and fail-open ones in
	// funnel_fail_open_total too, under the rule "resp".
	stat := func(f func(respserver.Stats) int64) func() float64 {
		return func() float64 { return float64(f(d.respSrv.Stats())) }
	}
	for _, c := range []prometheus.Collector{
		respDecisions(d.metrics.Namespace(), "allowed", stat(func(st respserver.Stats) int64 { return st.Allowed - st.FailOpen })),
		respDecisions(d.metrics.Namespace(), "refused", stat(func(st respserver.Stats) int64 { return st.Limited - st.FailClosed })),
		respDecisions(d.metrics.Namespace(), "fallback", stat(func(st respserver.Stats) int64 { return st.FailOpen + st.FailClosed })),
	} {
		if err := d.metrics.Registry().Register(c); err != nil {
			return err
		}
	}
	if err := d.metrics.FailOpenFunc("resp", stat(func(st respserver.Stats) int64 { return st.FailOpen })); err != nil {
		return err
	}
	// Costs known afterwards: charges and settles are not decisions.
	for _, c := range []struct {
		kind string
		f    func(respserver.Stats) int64
	}{
		{"charge", func(st respserver.Stats) int64 { return st.Charges }},
		{"charge_in_debt", func(st respserver.Stats) int64 { return st.ChargesInDebt }},
		{"settle", func(st respserver.Stats) int64 { return st.Settles }},
		{"settle_in_debt", func(st respserver.Stats) int64 { return st.SettlesInDebt }},
		{"settle_again", func(st respserver.Stats) int64 { return st.SettlesAgain }},
		{"settle_unknown", func(st respserver.Stats) int64 { return st.SettlesUnknown }},
	} {
		if err := d.metrics.Registry().Register(respCosts(d.metrics.Namespace(), c.kind, stat(c.f))); err != nil {
			return err
		}
	}
	return nil
}

// respCosts counts the RESP server's charges and settles of one kind.
func respCosts(ns, kind string, f func() float64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace:   ns,
		Name:        "resp_costs_total",
		Help:        "Costs recorded over the Redis protocol after the fact, by kind: charge (FUNNEL.CHARGE), charge_in_debt (of them, those that left their key over its limit), settle (FUNNEL.SETTLE), settle_in_debt, settle_again (a reservation settled before: nothing changed), settle_unknown (an unknown or expired reservation).",
		ConstLabels: prometheus.Labels{"kind": kind},
	}, f)
}

// respDecisions counts the RESP server's decisions of one outcome.
func respDecisions(ns, outcome string, f func() float64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace:   ns,
		Name:        "resp_decisions_total",
		Help:        "Decisions made over the Redis protocol (CL.THROTTLE and FUNNEL.*), by outcome (allowed, refused, fallback: the store could not decide).",
		ConstLabels: prometheus.Labels{"outcome": outcome},
	}, f)
}

// respFailClosed maps the configuration's resp_fail_closed to the server's.
func respFailClosed(s string) respserver.FailClosedReply {
	if s == "refuse" {
		return respserver.FailClosedRefuse
	}
	return respserver.FailClosedError
}

// RESPAddr returns the address the RESP listener is bound to, or nil when
// it is off.
func (d *Daemon) RESPAddr() net.Addr {
	if d.respLn == nil {
		return nil
	}
	return d.respLn.Addr()
}
