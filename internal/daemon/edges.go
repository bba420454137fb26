package daemon

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httpapi"
	"github.com/funnelrl/funnel/internal/auth"
	"github.com/funnelrl/funnel/metrics"
	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
	"github.com/funnelrl/funnel/tracing"
)

// edge is a listener in front of the limiter besides RESP: the HTTP API or
// Envoy's rate-limit service.
type edge struct {
	name     string
	ln       net.Listener
	serve    func() error // returns nil once shut down
	shutdown func(ctx context.Context) error
	close    func()
}

func (e edge) addr() net.Addr { return e.ln.Addr() }

// openEdges binds the gRPC and HTTP listeners that the configuration asks
// for (an empty address turns one off): gRPC first, as the HTTP listener
// serves the rate-limit service's /json and /healthcheck too.
func (d *Daemon) openEdges() error {
	if d.cfg.GRPC != "" {
		if err := d.openGRPC(); err != nil {
			return err
		}
	}
	if d.cfg.HTTP != "" {
		if err := d.openHTTP(); err != nil {
			return err
		}
	}
	return nil
}

// openGRPC loads and watches the rules and binds Envoy's rate-limit service
// (with gRPC health and reflection).
func (d *Daemon) openGRPC() error {
	var src rls.RulesSource
	switch {
	case d.cfg.RulesXDS != "":
		c, err := d.openRulesXDS()
		if err != nil {
			return err
		}
		src = c
	case d.cfg.Rules != "":
		w, err := rules.Watch(d.cfg.Rules, rules.WatchOptions{
			Options:  rules.Options{MergeDomains: d.cfg.RulesMergeDomains},
			Logger:   d.log,
			OnReload: func(_ *rules.Set, err error) { d.metrics.RulesReloaded(err); d.console.rulesReloaded(err) },
		})
		if err != nil {
			return fmt.Errorf("daemon: %w", err)
		}
		d.metrics.RulesReloaded(nil)
		r := w.Rules()
		d.log.Info("rules loaded", "path", d.cfg.Rules, "files", len(r.Files()), "domains", len(r.Domains()), "rules", len(r.All()))
		d.console.rulesReloaded(nil)
		d.watcher = w
		src = w
	default:
		d.log.Info("no rules (--rules): the rate-limit service allows every descriptor")
		src = rls.Static(&rules.Set{})
	}
	ln, err := net.Listen("tcp", d.cfg.GRPC)
	if err != nil {
		return fmt.Errorf("daemon: grpc listener: %w", err)
	}
	if ln, err = d.limit("grpc", ln, d.conns.GRPC); err != nil {
		return err
	}
	opts := rls.Options{
		Logger:     d.log,
		Fail:       d.cfg.Fail(),
		ShadowMode: d.cfg.ShadowMode,
		// envoy's QUOTA_MODE and RESPONSE_DYNAMIC_METADATA
		QuotaMode:       d.cfg.QuotaMode,
		DynamicMetadata: d.cfg.RLSDynamicMetadata,
		// envoy's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false
		ChargeOverLimit: d.cfg.ChargeOverLimit,
		Observe: func(rule string, r funnel.Result, err error) {
			if err != nil {
				d.metrics.ObserveError(rule)
			} else {
				d.metrics.ObserveDecision(rule, r)
			}
		},
		// envoy's statistics, under the names of its Prometheus mapping
		NearLimitRatio: d.cfg.NearLimitRatio,
		Count:          func(key string, c rls.Counts) { d.metrics.ObserveRateLimit(key, metrics.RateLimitCounts(c)) },
	}
	if d.cfg.RLSHeaders {
		opts.ResponseHeaders = &rls.Headers{Limit: d.cfg.RLSHeaderLimit, Remaining: d.cfg.RLSHeaderRemaining,
			Reset: d.cfg.RLSHeaderReset, IETF: d.cfg.RLSHeadersFormat == "ietf"}
	}
	if d.traces != nil {
		opts.Trace = tracing.WithRule
	}
	srv, jsonSrv := d.rlsServers(src, opts)
	d.rls, d.rlsJSON = srv, jsonSrv
	// The health service answers probes, which send no metadata, without
	// credentials; the rate-limit service and reflection need them.
	gopts := d.sec.creds.ServerOptions(auth.GRPCOptions{Exempt: auth.HealthMethods, Logger: d.log})
	if tc := d.sec.tlsConfig(); tc != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tc)))
	}
	gopts = append(gopts, d.traces.grpcOptions()...)
	gopts = append(gopts, d.grpcConnOptions()...)
	gs := grpc.NewServer(gopts...)
	srv.Register(gs)
	d.edges = append(d.edges, edge{
		name: "grpc",
		ln:   ln,
		serve: func() error {
			if err := gs.Serve(ln); !errors.Is(err, grpc.ErrServerStopped) {
				return err
			}
			return nil
		},
		shutdown: func(ctx context.Context) error {
			srv.SetServing(false)
			done := make(chan struct{})
			go func() { gs.GracefulStop(); close(done) }()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				gs.Stop()
				return ctx.Err()
			}
		},
		close: func() { gs.Stop(); ln.Close() },
	})
	return nil
}

// openHTTP binds the HTTP API: decisions, health, readiness, /metrics and,
// with the rate-limit service, its /json and /healthcheck; all behind the
// credentials but health, readiness, /healthcheck and, with metrics_open,
// /metrics.
func (d *Daemon) openHTTP() error {
	ln, err := net.Listen("tcp", d.cfg.HTTP)
	if err != nil {
		return fmt.Errorf("daemon: http listener: %w", err)
	}
	if ln, err = d.limit("http", ln, d.conns.HTTP); err != nil {
		return err
	}
	api := httpapi.New(d.console.limiter(d.lim, d.store, "http"), httpapi.Options{
		Metrics: d.metrics.Handler(),
		Observe: d.metrics.Observer("http"),
		Fail:    d.cfg.Fail(),
		Logger:  d.log,
	})
	guard := d.sec.creds.Middleware(auth.HTTPOptions{Exempt: httpExempt(d.cfg), Logger: d.log})
	var conns metrics.ConnCounter
	srv := &http.Server{
		Handler:   d.traces.httpHandler(d.console.mount(guard(withRLS(api, d.rls, d.rlsJSON)))),
		ConnState: conns.ConnState,
		// A client has handshake_timeout (5 s) for its TLS handshake and
		// its request's headers.
		ReadHeaderTimeout: d.conns.Handshake,
		// A body is at most httpapi.DefaultMaxBody: a client that takes
		// longer to send one is holding a connection, not sending it.
		ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute,
		// The timeouts above bound a TLS handshake too.
		TLSConfig: d.sec.tlsConfig(),
		ErrorLog:  stdlog.New(httpErrors{d.log}, "", 0),
	}
	if srv.TLSConfig != nil {
		// Handshakes use the watcher's configuration, not the copy that
		// net/http makes and offers HTTP/2 on: offer it here.
		srv.TLSConfig.NextProtos = []string{"h2", "http/1.1"}
	}
	if err := d.metrics.ConnectedClients("http", conns.Count); err != nil {
		ln.Close()
		return err
	}
	d.edges = append(d.edges, edge{
		name: "http",
		ln:   ln,
		serve: func() error {
			var err error
			if srv.TLSConfig != nil {
				err = srv.ServeTLS(ln, "", "")
			} else {
				err = srv.Serve(ln)
			}
			if !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
		shutdown: srv.Shutdown,
		close:    func() { srv.Close(); ln.Close() },
	})
	return nil
}

// withRLS serves, beside api, envoyproxy/ratelimit's HTTP endpoints of the
// rate-limit service srv, when there is one: POST /json (decided by
// jsonSrv) and /healthcheck. Other paths go to api as they came (a mux
// would clean them first).
func withRLS(api http.Handler, srv, jsonSrv *rls.Server) http.Handler {
	if srv == nil {
		return api
	}
	json, health := jsonSrv.JSONHandler(), srv.HealthHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/json":
			json.ServeHTTP(w, r)
		case "/healthcheck":
			health.ServeHTTP(w, r)
		default:
			api.ServeHTTP(w, r)
		}
	})
}

// httpErrors writes the HTTP server's own errors into a slog.Logger: a
// failed TLS handshake (a client that does not trust the certificate, or
// has none to give, or a scanner) at debug level, as RESP logs it, the
// others as warnings.
type httpErrors struct{ log *slog.Logger }

func (h httpErrors) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	level := slog.LevelWarn
	if strings.Contains(msg, "TLS handshake error") {
		level = slog.LevelDebug
	}
	h.log.Log(context.Background(), level, msg)
	return len(p), nil
}

// HTTPAddr returns the address the HTTP API is bound to, or nil when it is
// off.
func (d *Daemon) HTTPAddr() net.Addr { return d.edgeAddr("http") }

// GRPCAddr returns the address Envoy's rate-limit service is bound to, or
// nil when it is off.
func (d *Daemon) GRPCAddr() net.Addr { return d.edgeAddr("grpc") }

func (d *Daemon) edgeAddr(name string) net.Addr {
	for _, e := range d.edges {
		if e.name == name {
			return e.addr()
		}
	}
	return nil
}
