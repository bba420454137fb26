// Package console serves Funnel's live console at /ui/ on the HTTP
// listener: decisions per second by outcome, store health, the keys refused
// most (a bounded heavy-hitter sketch, Top), a key's state with reset and
// unban, the active bans, the loaded rules and a dry run against them.
//
// Pages are rendered on the server with html/template; the script and the
// style sheet are small hand-written files embedded with go:embed, served
// from /ui/static/, and the page loads nothing else: no build step, no
// external network. Every answer carries a strict Content-Security-Policy
// (no inline script or style, nothing from another origin).
//
// The console sits behind the same credentials as the rest of the HTTP
// API: a browser logs in with a user and password of the Credentials (the
// form is checked with auth.Credentials.Check, at most LoginLimit attempts
// per client address) and gets a session cookie
// (HttpOnly, SameSite=Strict, Path=/ui/, Secure over TLS); a script reads
// the JSON endpoints with the API's Authorization header instead. Every
// action (logout, reset, unban) is a POST that must carry the session's
// CSRF token (the form field csrf or the X-CSRF-Token header); the login
// form's token is the double of a cookie, so that the server keeps nothing
// for a visitor who has not logged in;
// actions are not taken with an Authorization header, which a browser may
// replay on its own. Each action writes an audit log line: who, what, which
// key, when (the log's time), from where. No password or session id is
// ever written into a page. When the Credentials are empty (authentication
// off) the console is open, as the API is, and a visitor gets a session
// without logging in, for its CSRF token.
//
// JSON endpoints, under /ui/api/ (times in milliseconds):
//
//	GET  top?window=1m|15m[&edge=][&rule=]  the keys refused most (TopReply)
//	GET  live                               decisions per second and health (LiveReply)
//	GET  bans                               the active bans (BansReply)
//	GET  key?key=K&…limit…                  a key's state, charging nothing (KeyReply)
//	GET  rules                              the loaded rules (RulesReply)
//	GET  dryrun?domain=D&entry=k=v…[&hits=] which rule a descriptor hits (DryRunReply)
//	POST reset, unban (form: key, csrf)     act on a key (session and CSRF token)
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/auth"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/rules"
)

//go:embed assets
var assets embed.FS

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// CSP is the Content-Security-Policy of every answer of the console:
// scripts, styles and images from the console itself, requests to it, and
// nothing inline, framed or posted elsewhere.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Options configure a Server. Limiter and Store are required.
type Options struct {
	// Limiter peeks at keys (inspect, dry run) without charging them.
	Limiter *funnel.Limiter
	// Store lists and lifts bans and resets keys.
	Store funnel.Store
	// Credentials are the HTTP API's; empty means the console is open.
	Credentials *auth.Credentials
	// Top is the sketch of refused keys the edges record into (see
	// Watch); nil shows none.
	Top *Top
	// Decisions are the rules' decisions by edge, which the edges that
	// decide under rules count into; nil shows none.
	Decisions *Decisions
	// Latency is the store's decision latency (see Time), whose p50 and
	// p99 the live view shows; nil shows the metrics' store latency
	// histogram's buckets instead, if it has one.
	Latency *Latency
	// Gatherer is the metrics registry the live view samples every second
	// (metrics.Metrics.Registry()); nil shows no rates.
	Gatherer prometheus.Gatherer
	// Rules returns the rules in force; nil means there are none.
	Rules func() *rules.Set
	// KeyPrefix is the rate-limit service's prefix of store keys.
	KeyPrefix string
	// StoreName names the store on the page ("memory", "redis", …); it
	// must hold no password.
	StoreName string
	// Keys returns the keys the store holds, or -1 when it cannot tell;
	// nil means it cannot.
	Keys func() int
	// StoreStats returns more of the store's figures by name (the memory
	// store's evictions and bytes held); the live view calls it at most
	// every StoreStatsEvery, as it may walk the store. Nil shows none.
	StoreStats func() map[string]float64
	// Logger receives the audit log lines; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Server is the console: an http.Handler for the paths under Prefix. Build
// one with New and stop its sampler with Close; it is safe for concurrent
// use.
type Server struct {
	opts  Options
	log   *slog.Logger
	now   func() time.Time
	pages *template.Template
	mux   *http.ServeMux
	live  *sampler

	mu       sync.Mutex
	sessions map[string]*session // by id
	reload   reloadState         // under mu

	statsMu sync.Mutex
	stats   map[string]float64 // StoreStats' last answer
	statsAt time.Time

	attempts  *memstore.Store // login attempts by client address
	loginsLim *funnel.Limiter
}

// LoginLimit bounds the login attempts of one client address (the host of
// the request's RemoteAddr), right or wrong: 10 a minute, 10 at once.
var LoginLimit = funnel.PerMinute(10)

// StoreStatsEvery is how often the live view asks for Options.StoreStats.
const StoreStatsEvery = 10 * time.Second

// storeStats returns Options.StoreStats' answer, at most StoreStatsEvery
// old.
func (s *Server) storeStats() map[string]float64 {
	if s.opts.StoreStats == nil {
		return nil
	}
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if now := s.now(); s.stats == nil || now.Sub(s.statsAt) >= StoreStatsEvery {
		s.stats, s.statsAt = s.opts.StoreStats(), now
	}
	return s.stats
}

// session is one browser's login.
type session struct {
	user    string // "" until logged in (authentication on)
	csrf    string
	expires time.Time
}

// Session bounds.
const (
	sessionTTL  = 12 * time.Hour
	maxSessions = 1024
	cookieName  = "funnel_console"
	preCookie   = "funnel_console_login" // the login form's CSRF token
)

// New returns a console over opts and starts sampling the metrics every
// second, until Close.
func New(opts Options) *Server {
	s := &Server{opts: opts, log: opts.Logger, now: opts.Now, sessions: map[string]*session{}}
	s.attempts = memstore.New(memstore.Options{MaxKeys: 10000})
	s.loginsLim = funnel.New(s.attempts)
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.pages = template.Must(template.New("").Funcs(template.FuncMap{"ms": ms}).ParseFS(assets, "assets/*.html"))
	s.live = newSampler(opts.Gatherer, opts.Top, opts.Decisions, s.now)
	s.live.start(time.Second)
	static, _ := fs.Sub(assets, "assets")
	s.mux = http.NewServeMux()
	s.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", staticOnly(http.FileServerFS(static))))
	s.mux.HandleFunc("GET /ui/{$}", s.index)
	s.mux.HandleFunc("POST /ui/login", s.login)
	s.mux.HandleFunc("POST /ui/logout", s.action(s.logout))
	s.mux.HandleFunc("GET /ui/api/top", s.read(s.topJSON))
	s.mux.HandleFunc("GET /ui/api/live", s.read(s.liveJSON))
	s.mux.HandleFunc("GET /ui/api/bans", s.read(s.bansJSON))
	s.mux.HandleFunc("GET /ui/api/key", s.read(s.keyJSON))
	s.mux.HandleFunc("GET /ui/api/rules", s.read(s.rulesJSON))
	s.mux.HandleFunc("GET /ui/api/dryrun", s.read(s.dryRunJSON))
	s.mux.HandleFunc("POST /ui/api/reset", s.action(s.resetKey))
	s.mux.HandleFunc("POST /ui/api/unban", s.action(s.unban))
	return s
}

// Close stops sampling the metrics.
func (s *Server) Close() {
	s.live.stop()
	s.attempts.Close()
}

// staticOnly serves the script, the style sheet and the icon, not the
// templates nor a directory listing.
func staticOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "console.js", "console.css":
			w.Header().Set("Cache-Control", "no-cache")
			h.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// ServeHTTP serves the console's paths, with its security headers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if r.URL.Path == "/ui" {
		http.Redirect(w, r, Prefix, http.StatusFound)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// newToken returns 32 random bytes in base64url.
func newToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sessionOf returns the request's live session, or nil.
func (s *Server) sessionOf(r *http.Request) (string, *session) {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return "", nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[c.Value]
	if !ok || !s.now().Before(ss.expires) {
		delete(s.sessions, c.Value)
		return "", nil
	}
	cp := *ss
	return c.Value, &cp
}

// newSession starts a session for user and sets its cookie; the session
// whose id is old, if any, ends (a login gets a new id).
func (s *Server) newSession(w http.ResponseWriter, r *http.Request, old, user string) *session {
	id := newToken()
	ss := &session{user: user, csrf: newToken(), expires: s.now().Add(sessionTTL)}
	s.mu.Lock()
	delete(s.sessions, old)
	if len(s.sessions) >= maxSessions {
		now := s.now()
		for k, v := range s.sessions {
			if !now.Before(v.expires) {
				delete(s.sessions, k)
			}
		}
		for k := range s.sessions { // still full: forget any one
			if len(s.sessions) < maxSessions {
				break
			}
			delete(s.sessions, k)
		}
	}
	s.sessions[id] = ss
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: Prefix, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL / time.Second)})
	return ss
}

// authOn reports whether the console asks for credentials.
func (s *Server) authOn() bool { return s.opts.Credentials.Enabled() }

// userOf returns the logged-in user of a session ("anonymous" when
// authentication is off), and false when the session is not logged in.
func (s *Server) userOf(ss *session) (string, bool) {
	if ss == nil {
		return "", false
	}
	if !s.authOn() {
		return "anonymous", true
	}
	return ss.user, ss.user != ""
}

// index serves the console's page, or the login page.
func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	_, ss := s.sessionOf(r)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if ss == nil && !s.authOn() {
		ss = s.newSession(w, r, "", "") // open console: a session for the CSRF token
	}
	user, ok := s.userOf(ss)
	if !ok {
		// Before logging in, the form's token is a cookie's double: the
		// server keeps nothing for a visitor who has not logged in, so
		// that visitors cannot push sessions out.
		tok := ""
		if c, err := r.Cookie(preCookie); err == nil && len(c.Value) == 43 {
			tok = c.Value
		} else {
			tok = newToken()
			http.SetCookie(w, &http.Cookie{Name: preCookie, Value: tok, Path: Prefix, HttpOnly: true,
				Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
		}
		e := r.URL.Query().Get("e")
		s.render(w, "login.html", map[string]any{"CSRF": tok, "Error": e != "" && e != "wait", "Wait": e == "wait"})
		return
	}
	s.render(w, "index.html", map[string]any{
		"CSRF": ss.csrf, "User": user, "Auth": s.authOn(), "Store": s.opts.StoreName,
		"Rules": s.rulesReply(),
	})
}

func (s *Server) render(w http.ResponseWriter, name string, data any) {
	if err := s.pages.ExecuteTemplate(w, name, data); err != nil {
		s.log.Error("console: page", "page", name, "err", err)
	}
}

// checkCSRF reports whether r carries the token of ss.
func checkCSRF(r *http.Request, ss *session) bool {
	tok := r.Header.Get("X-CSRF-Token")
	if tok == "" {
		tok = r.PostFormValue("csrf")
	}
	return ss != nil && tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(ss.csrf)) == 1
}

// login checks the form's user and password against the credentials.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	id, _ := s.sessionOf(r)
	pre, err := r.Cookie(preCookie)
	if err != nil || !checkCSRF(r, &session{csrf: pre.Value}) {
		s.problem(w, http.StatusForbidden, "console: missing or wrong CSRF token")
		return
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if res, err := s.loginsLim.Allow(r.Context(), host, LoginLimit); err == nil && !res.Allowed {
		s.log.Warn("console: login refused: too many attempts", "addr", r.RemoteAddr)
		http.Redirect(w, r, Prefix+"?e=wait", http.StatusSeeOther)
		return
	}
	user := r.PostFormValue("user")
	if user == "" {
		user = auth.DefaultUser
	}
	if s.authOn() && !s.opts.Credentials.Check(user, r.PostFormValue("password")) {
		logged := ""
		if s.opts.Credentials.Has(user) {
			logged = user // never what may be a password typed in its place
		}
		s.log.Warn("console: login refused", "user", logged, "addr", r.RemoteAddr)
		http.Redirect(w, r, Prefix+"?e=1", http.StatusSeeOther)
		return
	}
	s.newSession(w, r, id, user)
	s.log.Info("console: login", "user", user, "addr", r.RemoteAddr)
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// logout ends the session.
func (s *Server) logout(w http.ResponseWriter, r *http.Request, user string) {
	if c, err := r.Cookie(cookieName); err == nil {
		s.mu.Lock()
		delete(s.sessions, c.Value)
		s.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	s.log.Info("console: logout", "user", user, "addr", r.RemoteAddr)
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// read wraps a JSON reader: a logged-in session, or the API's
// Authorization header.
func (s *Server) read(h func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	guard := s.opts.Credentials.Middleware(auth.HTTPOptions{Logger: s.log})(http.HandlerFunc(h))
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if _, ss := s.sessionOf(r); ss != nil {
			if _, ok := s.userOf(ss); ok {
				h(w, r)
				return
			}
		}
		guard.ServeHTTP(w, r)
	}
}

// action wraps an action: a logged-in session and its CSRF token.
func (s *Server) action(h func(w http.ResponseWriter, r *http.Request, user string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
		w.Header().Set("Cache-Control", "no-store")
		_, ss := s.sessionOf(r)
		user, ok := s.userOf(ss)
		if !ok {
			s.problem(w, http.StatusUnauthorized, "console: log in first")
			return
		}
		if !checkCSRF(r, ss) {
			s.log.Warn("console: action refused: missing or wrong CSRF token", "user", user, "path", r.URL.Path, "addr", r.RemoteAddr)
			s.problem(w, http.StatusForbidden, "console: missing or wrong CSRF token")
			return
		}
		h(w, r, user)
	}
}

// problem writes an RFC 9457 problem.
func (s *Server) problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail})
}

// writeJSON writes v as JSON.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// ms returns d in whole milliseconds.
func ms(d time.Duration) int64 { return d.Milliseconds() }

// ctxTimeout bounds a store call of the console.
func ctxTimeout(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 5*time.Second)
}

// keyOf returns the form's or query's key, trimmed of nothing: keys are
// taken as typed, but an empty one is refused.
func keyOf(r *http.Request) (string, bool) {
	k := r.FormValue("key")
	return k, k != "" && len(k) <= 4096 && !strings.ContainsRune(k, 0)
}
