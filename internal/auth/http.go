package auth

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/funnelrl/funnel/internal/httpreply"
	"github.com/funnelrl/funnel/internal/lograte"
)

// HealthPaths are the paths of the HTTP API's health and readiness, which
// probes reach without credentials. Add "/metrics" to serve Prometheus
// without them too.
var HealthPaths = []string{"/healthz", "/readyz"}

// DefaultRealm is the realm of the challenges when HTTPOptions.Realm is
// empty.
const DefaultRealm = "funnel"

// HTTPOptions configure Middleware. The zero value exempts no path.
type HTTPOptions struct {
	// Exempt lists the paths served without credentials, compared with
	// the request's URL path exactly: "/healthz" exempts neither
	// "/healthz/" nor "/healthz/x".
	Exempt []string
	// Realm is the realm of the WWW-Authenticate challenges; empty means
	// DefaultRealm.
	Realm string
	// Logger receives a warning when a request is refused, at most once a
	// second; nil means slog.Default().
	Logger *slog.Logger
}

// Middleware returns a wrapper that lets a request through to the handler
// it wraps when its Authorization header holds credentials of c (see the
// package's documentation), with the user in its context (UserFrom), or
// when its path is exempt. Any other request is answered 401 Unauthorized
// with the challenges
//
//	WWW-Authenticate: Bearer realm="funnel"
//	WWW-Authenticate: Basic realm="funnel", charset="UTF-8"
//
// and a problem (application/problem+json) that says whether the
// credentials were missing, malformed or wrong. When c is empty, the
// wrapper returns the handler itself.
func (c *Credentials) Middleware(opts HTTPOptions) func(http.Handler) http.Handler {
	if !c.Enabled() {
		return func(next http.Handler) http.Handler { return next }
	}
	realm := opts.Realm
	if realm == "" {
		realm = DefaultRealm
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	exempt := slices.Clone(opts.Exempt)
	challenges := []string{
		"Bearer realm=" + strconv.Quote(realm),
		"Basic realm=" + strconv.Quote(realm) + `, charset="UTF-8"`,
	}
	warned := lograte.New(time.Second) // a client that keeps failing logs once a second
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if slices.Contains(exempt, r.URL.Path) {
				next.ServeHTTP(w, r)
				return
			}
			user, err := c.authenticate(r.Header.Get("Authorization"))
			if err == nil {
				next.ServeHTTP(w, r.WithContext(withUser(r.Context(), user)))
				return
			}
			if !errors.Is(err, ErrMissing) {
				warned.Do(func(held int64) {
					log.Warn("auth: request refused (logged once a second at most)",
						"addr", r.RemoteAddr, "path", r.URL.Path, "user", c.loggedUser(user), "err", err, "held_back", held)
				})
			}
			w.Header()["WWW-Authenticate"] = challenges
			httpreply.Problem{Status: http.StatusUnauthorized, Detail: err.Error()}.Write(w)
		})
	}
}
