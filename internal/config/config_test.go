package config

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	in := `
resp: 0.0.0.0:7000
store: memory
max_keys: 1000
requirepass: s3cret
idle_timeout: 5m
log_level: debug
`
	got, err := Parse(strings.NewReader(in), "funnel.yaml", Default())
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.RESP, want.MaxKeys, want.RequirePass, want.IdleTimeout, want.LogLevel = "0.0.0.0:7000", 1000, "s3cret", 5*time.Minute, "debug"
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestParseTLS(t *testing.T) {
	in := "tls_cert: tls/tls.crt\ntls_key: tls/tls.key\ntls_ca: tls/ca.crt\nmetrics_open: true\n"
	got, err := Parse(strings.NewReader(in), "funnel.yaml", Default())
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.TLSCert, want.TLSKey, want.TLSCA, want.MetricsOpen = "tls/tls.crt", "tls/tls.key", "tls/ca.crt", true
	if got != want || !got.TLS() {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
}

// A boolean may be written as YAML 1.1 wrote it.
func TestParseYAML11Booleans(t *testing.T) {
	got, err := Parse(strings.NewReader("fail_open: yes\nmetrics_open: on\nno_console: No\n"), "funnel.yaml", Default())
	want := Default()
	want.FailOpen, want.MetricsOpen = true, true
	if err != nil || got != want {
		t.Fatalf("%+v, %v", got, err)
	}
}

// A key given no value sets its setting's zero value.
func TestParseNull(t *testing.T) {
	got, err := Parse(strings.NewReader("http:\nsnapshot_interval: ~\nnear_limit_ratio:\n"), "funnel.yaml", Default())
	want := Default()
	want.HTTP, want.SnapshotInterval, want.NearLimitRatio = "", 0, 0
	if err != nil || got != want {
		t.Fatalf("%+v, %v", got, err)
	}
}

func TestParseEmpty(t *testing.T) {
	got, err := Parse(strings.NewReader(""), "empty.yaml", Default())
	if err != nil || got != Default() {
		t.Fatalf("%+v, %v", got, err)
	}
}

func TestParseErrorsNameFileLineField(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"resp: x\nbogus: 1\n", `funnel.yaml: line 2: field bogus not found`},
		{"max_keys: many\n", `funnel.yaml: line 1: max_keys: "many" is not an integer`},
		{"resp: a\nresp: b\n", `funnel.yaml: line 2: mapping key "resp" already defined at line 1`},
		{"idle_timeout: soon\n", `funnel.yaml: line 1: idle_timeout: "soon" is not a duration`},
		{"fail_open: maybe\n", `funnel.yaml: line 1: fail_open: "maybe" is not true or false`},
		{"- a\n- b\n", `funnel.yaml: line 1: want a mapping of keys to values`},
		{"resp: [a, b]\n", `funnel.yaml: line 1: resp: want a value, not a list`},
		// A key is the flag's name with '_' for '-'; --config is no key.
		{"fail-open: true\n", `funnel.yaml: line 1: field fail-open not found`},
		{"config: other.yaml\n", `funnel.yaml: line 1: field config not found`},
	} {
		_, err := Parse(strings.NewReader(c.in), "funnel.yaml", Default())
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", c.in, err, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.RESP, c.HTTP, c.GRPC = "", "", "" }, "resp, http and grpc are all off: at least one listener is needed"},
		{func(c *Config) { c.RESP = "" }, ""},
		{func(c *Config) { c.RESP, c.HTTP = "", "" }, ""},
		{func(c *Config) { c.HTTP, c.GRPC = "", "" }, ""},
		{func(c *Config) { c.Store = "redis-sentinel://127.0.0.1:26379/mymaster" }, ""},
		{func(c *Config) { c.Store = "rediss-sentinel://s1,s2/mymaster/1" }, ""},
		{func(c *Config) { c.Store = "sentinel://s1/mymaster" }, `store "sentinel://s1/mymaster": want memory, redis://`},
		{func(c *Config) { c.Store = "etcd://x" }, `store "etcd://x"`},
		{func(c *Config) { c.MaxKeys = -1 }, "max_keys -1 is negative"},
		{func(c *Config) { c.LeaseShares = true }, "lease_shares without lease"},
		{func(c *Config) {
			c.Store, c.Lease, c.LeaseShares = "redis://127.0.0.1:6379", 200*time.Millisecond, true
		}, ""},
		{func(c *Config) { c.MaxClients = -1 }, "max_clients -1 is negative"},
		{func(c *Config) { c.IdleTimeout = -time.Second }, "idle_timeout -1s is negative"},
		{func(c *Config) { c.LogLevel = "loud" }, `log_level "loud"`},
		{func(c *Config) { c.RESPFailClosed = "allow" }, `resp_fail_closed "allow": want error or refuse`},
		{func(c *Config) { c.RESPFailClosed = "refuse" }, ""},
		{func(c *Config) { c.Rules, c.GRPC = "rules.yaml", "" }, `rules "rules.yaml": the rules serve Envoy's rate-limit service, which an empty grpc address turns off`},
		{func(c *Config) { c.Rules = "rules.yaml" }, ""},
		{func(c *Config) { c.Store = "redis://127.0.0.1:6379/0" }, ""},
		{func(c *Config) { c.LogLevel = "WARN" }, ""},
		{func(c *Config) { c.TLSCert = "tls.crt" }, `tls_cert "tls.crt" without tls_key`},
		{func(c *Config) { c.TLSKey = "tls.key" }, `tls_key "tls.key" without tls_cert`},
		{func(c *Config) { c.TLSCA = "ca.crt" }, `tls_ca "ca.crt" without tls_cert and tls_key`},
		{func(c *Config) { c.TLSKey, c.TLSCA = "tls.key", "ca.crt" }, `tls_key "tls.key" without tls_cert`},
		{func(c *Config) { c.TLSCert, c.TLSKey = "tls.crt", "tls.key" }, ""},
		{func(c *Config) { c.TLSCert, c.TLSKey, c.TLSCA = "tls.crt", "tls.key", "ca.crt" }, ""},
		{func(c *Config) { c.MetricsOpen = true }, ""},
		{func(c *Config) { c.RLSHeaders, c.RLSHeaderLimit = true, "X-RateLimit-Limit" }, ""},
		{func(c *Config) { c.RLSHeaders, c.RLSHeaderReset = true, "Rate Limit" }, `rls_header_reset "Rate Limit": want a header name`},
		{func(c *Config) { c.RLSHeaders, c.RLSHeaderRemaining = true, "" }, `rls_header_remaining "": want a header name`},
		{func(c *Config) { c.RLSHeaderRemaining = "" }, ""},
		{func(c *Config) { c.RLSHeaderLimit = "a:b" }, `rls_header_limit "a:b"`},
		{func(c *Config) { c.RLSHeadersFormat = "ietf" }, ""},
		{func(c *Config) { c.RLSHeadersFormat = "x-ratelimit" }, `rls_headers_format "x-ratelimit": want envoy or ietf`},
		{func(c *Config) { c.NearLimitRatio = 1.5 }, `near_limit_ratio 1.5: want a number from 0 to 1`},
		{func(c *Config) { c.NearLimitRatio = math.NaN() }, `near_limit_ratio NaN`},
	} {
		cfg := Default()
		c.mod(&cfg)
		err := cfg.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", cfg, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
}

func TestParseUsers(t *testing.T) {
	users, err := ParseUsers(strings.NewReader("# users\nalice pw1\n\n  bob   pw2  \n"), "users")
	if err != nil || len(users) != 2 || users["alice"] != "pw1" || users["bob"] != "pw2" {
		t.Fatalf("%v, %v", users, err)
	}
	for _, in := range []string{"alice\n", "alice pw extra\n", "a x\na y\n"} {
		if _, err := ParseUsers(strings.NewReader(in), "users"); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseUsers(%q) = %v", in, err)
		}
	}
}

// FuzzParse checks that no input makes Parse panic, that a refused input
// leaves the base configuration, and that accepted input is stable when
// parsed again from the same text.
func FuzzParse(f *testing.F) {
	f.Add("resp: 127.0.0.1:7000\nstore: memory\n")
	f.Add("idle_timeout: 5m\nmax_keys: 10\n")
	f.Add("bogus: 1\n")
	f.Add("resp: [a, b]\n")
	f.Add("&a [*a]")
	f.Add("users_file: /dev/null\nlog_level: warn\n")
	f.Add("tls_cert: a\ntls_key: b\ntls_ca: c\nmetrics_open: true\n")
	f.Fuzz(func(t *testing.T, in string) {
		base := Default()
		got, err := Parse(strings.NewReader(in), "fuzz.yaml", base)
		if err != nil {
			if got != base {
				t.Fatalf("refused input changed the configuration: %+v", got)
			}
			return
		}
		again, err := Parse(strings.NewReader(in), "fuzz.yaml", base)
		if err != nil || again != got {
			t.Fatalf("second parse: %+v, %v; first %+v", again, err, got)
		}
	})
}

func FuzzParseUsers(f *testing.F) {
	f.Add("alice pw\n# c\nbob x\n")
	f.Add("a\n")
	f.Fuzz(func(t *testing.T, in string) {
		users, err := ParseUsers(strings.NewReader(in), "users")
		if err != nil {
			return
		}
		for name, pass := range users {
			if name == "" || pass == "" || strings.ContainsAny(name+pass, " \t\n") {
				t.Fatalf("user %q password %q", name, pass)
			}
		}
	})
}
