package auth_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"github.com/funnelrl/funnel/internal/auth"
)

func ExampleCredentials_Middleware() {
	creds := auth.New("s3cret", map[string]string{"alice": "wonderland"})
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, _ := auth.UserFrom(r.Context())
		fmt.Fprintf(w, "hello %q\n", user)
	})
	h := creds.Middleware(auth.HTTPOptions{
		Exempt: auth.HealthPaths,
		Logger: slog.New(slog.DiscardHandler),
	})(app)

	send := func(path string, set func(*http.Request)) {
		req := httptest.NewRequest("GET", path, nil)
		set(req)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Print(path, " ", rec.Code, " ", rec.Body.String())
	}
	send("/v1/bans", func(r *http.Request) {})
	send("/v1/bans", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") })
	send("/v1/bans", func(r *http.Request) { r.SetBasicAuth("alice", "wonderland") })
	send("/v1/bans", func(r *http.Request) { r.SetBasicAuth("alice", "s3cret") })
	send("/healthz", func(r *http.Request) {})
	// Output:
	// /v1/bans 401 {"type":"about:blank","title":"Unauthorized","status":401,"detail":"auth: credentials are required"}
	// /v1/bans 200 hello "default"
	// /v1/bans 200 hello "alice"
	// /v1/bans 401 {"type":"about:blank","title":"Unauthorized","status":401,"detail":"auth: invalid username-password pair"}
	// /healthz 200 hello ""
}
