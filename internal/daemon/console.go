package daemon

import (
	"net/http"
	"strings"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/console"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
)

// consoleParts are the console's sketch of refused keys, which every edge
// records into, and its pages. A nil *consoleParts (the console is off)
// records nothing and mounts nothing.
type consoleParts struct {
	top   *console.Top
	rules *console.Decisions // the rate-limit service's decisions, by edge
	srv   *console.Server
}

// openConsole builds the console when the HTTP listener is on and the
// console is not turned off.
func (d *Daemon) openConsole() {
	if d.cfg.NoConsole || d.cfg.HTTP == "" {
		return
	}
	top := console.NewTop(nil)
	name := "memory"
	if d.cfg.Store != "memory" {
		name = "redis" // never the URL: it may hold a password
		if d.cfg.Lease > 0 {
			name += ", leased (--lease " + d.cfg.Lease.String() + ")"
		}
	}
	keys := func() int { return -1 }
	if _, ok := funnel.KeysOf(d.store); ok {
		keys = func() int { n, _ := funnel.KeysOf(d.store); return n }
	}
	var stats func() map[string]float64
	if ms, ok := d.store.(*memstore.Store); ok {
		stats = func() map[string]float64 {
			st := ms.Stats()
			return map[string]float64{"keys": float64(st.Keys), "bans": float64(st.Bans), "evicted": float64(st.Evicted),
				"expired": float64(st.Expired), "bytes": float64(st.Bytes)}
		}
	}
	var lat *console.Latency
	if d.cfg.Store != "memory" {
		// A network store's decisions are timed for the console's p50
		// and p99: two clock reads beside a round trip.
		lat = new(console.Latency)
		d.store = console.Time(d.store, lat)
		d.lim = funnel.New(d.store)
	}
	decisions := new(console.Decisions)
	d.console = &consoleParts{top: top, rules: decisions, srv: console.New(console.Options{
		Limiter:     d.lim,
		Store:       d.store,
		Credentials: d.sec.creds,
		Top:         top,
		Decisions:   decisions,
		Latency:     lat,
		Gatherer:    d.metrics.Registry(),
		Rules:       d.rules,
		StoreName:   name,
		Keys:        keys,
		StoreStats:  stats,
		Logger:      d.log,
	})}
}

// rules returns the rules in force, nil when there are none.
func (d *Daemon) rules() *rules.Set {
	switch {
	case d.watcher != nil:
		return d.watcher.Rules()
	case d.rulesXDS != nil:
		return d.rulesXDS.client.Rules()
	}
	return nil
}

// watch returns s recording its refusals for the console under edge.
func (c *consoleParts) watch(s funnel.Store, edge string) funnel.Store {
	if c == nil {
		return s
	}
	return console.Watch(s, c.top, edge)
}

// limiter returns the limiter of edge: lim, or one over s that records
// its refusals for the console (decisions through a Limiter are observed
// by a hook that admitted ones do not reach).
func (c *consoleParts) limiter(lim *funnel.Limiter, s funnel.Store, edge string) *funnel.Limiter {
	if c == nil {
		return lim
	}
	return funnel.New(c.watch(s, edge))
}

// rlsServers returns the rate-limit service's servers: for gRPC, and for
// the HTTP listener's /json. With the console, /json has a server of its
// own, so that the console tells the rules' decisions of each edge apart
// (their refusals, and every decision by rule and outcome); without, one
// server serves both.
func (d *Daemon) rlsServers(src rls.RulesSource, opts rls.Options) (grpc, json *rls.Server) {
	c := d.console
	if c == nil {
		s := rls.New(d.lim, src, opts)
		return s, s
	}
	server := func(edge string) *rls.Server {
		o := opts
		next := o.Observe
		o.Observe = func(rule string, r funnel.Result, err error) {
			c.rules.Observe(edge, rule, r, err)
			if next != nil {
				next(rule, r, err)
			}
		}
		return rls.New(funnel.New(console.WatchRefusals(d.store, c.top, edge)), src, o)
	}
	return server("grpc"), server("http")
}

// mount serves the console's paths (it checks the credentials itself, with
// a login form for browsers) and the rest with api.
func (c *consoleParts) mount(api http.Handler) http.Handler {
	if c == nil {
		return api
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, console.Prefix) {
			c.srv.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

func (c *consoleParts) rulesReloaded(err error) {
	if c != nil {
		c.srv.RulesReloaded(err)
	}
}

func (c *consoleParts) close() {
	if c != nil {
		c.srv.Close()
	}
}
