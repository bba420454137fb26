package auth

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// whoami answers the user the middleware put in the context, or "-".
var whoami = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	u, ok := UserFrom(r.Context())
	if !ok {
		u = "-"
	}
	io.WriteString(w, u)
})

func get(t *testing.T, url, authorization string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(body)
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	log, logs := captureLog()
	mw := testCreds().Middleware(HTTPOptions{Exempt: HealthPaths, Logger: log})
	srv := httptest.NewServer(mw(whoami))
	defer srv.Close()

	for _, tc := range []struct {
		name, path, authorization string
		status                    int
		body                      string // the user, when allowed; the problem's detail otherwise
	}{
		{"bearer", "/v1/x", "Bearer " + defaultPass, 200, DefaultUser},
		{"bearer lower case", "/v1/x", "bearer " + defaultPass, 200, DefaultUser},
		{"basic default", "/v1/x", basic(DefaultUser, defaultPass), 200, DefaultUser},
		{"basic empty user", "/v1/x", basic("", defaultPass), 200, DefaultUser},
		{"basic named", "/v1/x", basic("alice", alicePass), 200, "alice"},
		{"missing", "/v1/x", "", 401, ErrMissing.Error()},
		{"wrong bearer", "/v1/x", "Bearer wrong-pass", 401, ErrInvalid.Error()},
		{"bearer with a named user's pair", "/v1/x", "Bearer alice:" + alicePass, 401, ErrInvalid.Error()},
		{"wrong basic", "/v1/x", basic("alice", "wrong-pass"), 401, ErrInvalid.Error()},
		{"another user's password", "/v1/x", basic("bob", alicePass), 401, ErrInvalid.Error()},
		{"unknown user", "/v1/x", basic("typed-as-user", defaultPass), 401, ErrInvalid.Error()},
		{"unknown scheme", "/v1/x", "Digest username=alice", 401, ErrMalformed.Error()},
		{"bad base64", "/v1/x", "Basic %%%", 401, ErrMalformed.Error()},
		{"exempt healthz", "/healthz", "", 200, "-"},
		{"exempt readyz with wrong credentials", "/readyz", "Bearer wrong-pass", 200, "-"},
		{"not exempt below healthz", "/healthz/x", "", 401, ErrMissing.Error()},
		{"not exempt metrics", "/metrics", "", 401, ErrMissing.Error()},
	} {
		res, body := get(t, srv.URL+tc.path, tc.authorization)
		if res.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, res.StatusCode, tc.status, body)
			continue
		}
		noSecrets(t, tc.name+": the body", body)
		if tc.status == 200 {
			if body != tc.body {
				t.Errorf("%s: user %q, want %q", tc.name, body, tc.body)
			}
			continue
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type %q", tc.name, ct)
		}
		want := []string{`Bearer realm="funnel"`, `Basic realm="funnel", charset="UTF-8"`}
		if got := res.Header.Values("WWW-Authenticate"); !slices.Equal(got, want) {
			t.Errorf("%s: WWW-Authenticate %q, want %q", tc.name, got, want)
		}
		var p struct {
			Status int    `json:"status"`
			Title  string `json:"title"`
			Detail string `json:"detail"`
		}
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Errorf("%s: body %q: %v", tc.name, body, err)
		}
		if p.Status != 401 || p.Title != "Unauthorized" || p.Detail != tc.body {
			t.Errorf("%s: problem %+v, want detail %q", tc.name, p, tc.body)
		}
	}
	noSecrets(t, "the log", logs.String())
	if logs.Len() == 0 {
		t.Error("no refusal was logged")
	}
}

func TestMiddlewareMetricsExempt(t *testing.T) {
	t.Parallel()
	mw := testCreds().Middleware(HTTPOptions{Exempt: append(HealthPaths, "/metrics"), Realm: "edge"})
	srv := httptest.NewServer(mw(whoami))
	defer srv.Close()
	if res, _ := get(t, srv.URL+"/metrics", ""); res.StatusCode != 200 {
		t.Errorf("/metrics: status %d", res.StatusCode)
	}
	res, _ := get(t, srv.URL+"/v1/x", "")
	if got := res.Header.Get("WWW-Authenticate"); got != `Bearer realm="edge"` {
		t.Errorf("WWW-Authenticate %q", got)
	}
}

// An empty set lets everything through, with no user.
func TestMiddlewareOff(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]*Credentials{"nil": nil, "empty": New("", nil)} {
		srv := httptest.NewServer(c.Middleware(HTTPOptions{})(whoami))
		for _, a := range []string{"", "Bearer anything", "Digest x"} {
			if res, body := get(t, srv.URL+"/v1/x", a); res.StatusCode != 200 || body != "-" {
				t.Errorf("%s, %q: status %d, body %q", name, a, res.StatusCode, body)
			}
		}
		srv.Close()
	}
}

// The refusals of a client that keeps failing are logged once, not once
// per request.
func TestMiddlewareLogsSometimes(t *testing.T) {
	t.Parallel()
	log, logs := captureLog()
	h := testCreds().Middleware(HTTPOptions{Logger: log})(whoami)
	for range 100 {
		req := httptest.NewRequest(http.MethodGet, "/v1/x", nil)
		req.Header.Set("Authorization", basic("alice", "wrong-pass"))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 401 {
			t.Fatalf("status %d", rec.Code)
		}
	}
	if n := bytes.Count(logs.Bytes(), []byte("\n")); n != 1 {
		t.Errorf("%d lines logged for 100 refusals in well under a second:\n%s", n, logs)
	}
	if !bytes.Contains(logs.Bytes(), []byte("user=alice")) {
		t.Errorf("the log does not name the known user: %s", logs)
	}
}
