package daemon

import (
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/funnelrl/funnel/internal/connlimit"
)

// Connections. Each listener holds at most its own bound of connections
// (max_clients, http_max_conns, grpc_max_conns), and all of them together
// at most the process's (max_conns), whose default leaves the process a
// tenth of its descriptors: a listener full of idle connections leaves the
// others their places, and the process the descriptors for its store and
// files. A connection over a bound is closed at once (RESP tells it "-ERR
// max number of clients reached" first). A connection that does not use its
// place gives it up: a handshake takes handshake_timeout at most (TLS on
// RESP; TLS and the HTTP/2 preface on gRPC; TLS and the request headers on
// HTTP); a RESP client without credentials, auth_timeout; a gRPC
// connection without a call, grpc_idle_timeout; an HTTP one, 2 minutes.

// openConns computes the bounds on connections from the configuration and
// the descriptors the process may open, and makes the process's slots.
func (d *Daemon) openConns() {
	d.conns = d.cfg.ConnLimits(maxFiles())
	d.slots = connlimit.NewSlots(d.conns.Process)
}

// grpcPingEvery is the shortest interval between the pings of a client that
// the gRPC server accepts, with or without calls under way; a client that
// pings more often is sent GOAWAY (too_many_pings). Pings do not keep a
// connection without calls open beyond grpc_idle_timeout.
const grpcPingEvery = 10 * time.Second

// grpcConnOptions returns the gRPC server's options that bound its
// connections' handshakes and idleness.
func (d *Daemon) grpcConnOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(d.conns.Handshake),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: d.conns.GRPCIdle}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: grpcPingEvery, PermitWithoutStream: true}),
	}
}

// limit bounds ln, the listener called name, to max connections and the
// process's slots, and counts its connections and refusals in the metrics.
// On failure, it closes ln.
func (d *Daemon) limit(name string, ln net.Listener, max int) (net.Listener, error) {
	l := connlimit.NewListener(ln, max, d.slots)
	var err error
	if name != "http" { // HTTP's connected clients are counted by its server
		err = d.metrics.ConnectedClients(name, l.Open)
	}
	if err == nil {
		err = d.metrics.Registry().Register(refusedConns(d.metrics.Namespace(), name, func() float64 { return float64(l.Refused()) }))
	}
	if err != nil {
		ln.Close()
		return nil, err
	}
	return l, nil
}

// refusedConns counts the connections of a listener closed for being over a
// bound.
func refusedConns(ns, listener string, f func() float64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace:   ns,
		Name:        "connections_refused_total",
		Help:        "Connections closed as soon as accepted for being over a bound (max_clients, http_max_conns, grpc_max_conns, max_conns), by listener.",
		ConstLabels: prometheus.Labels{"listener": listener},
	}, f)
}
