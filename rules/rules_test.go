package rules

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
)

func loadEnvoyExamples(t *testing.T) *Set {
	t.Helper()
	r, err := Load("testdata/envoy", Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func entries(kv ...string) []Entry {
	var es []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, Entry{kv[i], kv[i+1]})
	}
	return es
}

func fixed(count int64, period time.Duration) funnel.Limit {
	return funnel.Limit{Algorithm: funnel.FixedWindow, Count: count, Period: period}
}

func TestEnvoyExamplesLoadUnchanged(t *testing.T) {
	r := loadEnvoyExamples(t)
	want := []string{"edge_proxy_per_ip", "example4", "example6", "example7", "example8", "example9", "internal", "messaging", "mongo_cps", "rl"}
	if got := r.Domains(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("domains %v, want %v", got, want)
	}
	if len(r.Files()) != 10 {
		t.Fatalf("files %v", r.Files())
	}
}

// The cases of envoyproxy/ratelimit's README, example by example.
func TestEnvoyExamplesMatch(t *testing.T) {
	r := loadEnvoyExamples(t)
	for _, c := range []struct {
		name    string
		domain  string
		entries []Entry
		// want is the limit, or nothing matched when zero and !deny
		want      funnel.Limit
		deny      bool
		unlimited bool
		shadow    bool
		key       string
		full      string
		metric    string
	}{
		// Example 1: two values of one key, 500 per second each.
		{name: "1 users", domain: "mongo_cps", entries: entries("database", "users"), want: fixed(500, time.Second),
			key: "mongo_cps_database_users_", full: "mongo_cps.database_users"},
		{name: "1 default", domain: "mongo_cps", entries: entries("database", "default"), want: fixed(500, time.Second),
			key: "mongo_cps_database_default_"},
		{name: "1 other value", domain: "mongo_cps", entries: entries("database", "other")},
		{name: "1 unknown domain", domain: "mongo", entries: entries("database", "users")},
		// Example 2: nested descriptors; a key without value matches any value.
		{name: "2 marketing", domain: "messaging", entries: entries("message_type", "marketing", "to_number", "2061111111"),
			want: fixed(5, 24*time.Hour), key: "messaging_message_type_marketing_to_number_2061111111_",
			full: "messaging.message_type_marketing.to_number"},
		{name: "2 marketing other number", domain: "messaging", entries: entries("message_type", "marketing", "to_number", "2062222222"),
			want: fixed(5, 24*time.Hour), key: "messaging_message_type_marketing_to_number_2062222222_"},
		{name: "2 any number", domain: "messaging", entries: entries("to_number", "2061111111"),
			want: fixed(100, 24*time.Hour), key: "messaging_to_number_2061111111_", full: "messaging.to_number"},
		{name: "2 placeholder alone", domain: "messaging", entries: entries("message_type", "marketing")},
		{name: "2 other type", domain: "messaging", entries: entries("message_type", "transactional", "to_number", "1")},
		// Example 3: the most specific match at the same level wins.
		{name: "3 any address", domain: "edge_proxy_per_ip", entries: entries("remote_address", "50.0.0.1"), want: fixed(10, time.Second)},
		{name: "3 blocked address", domain: "edge_proxy_per_ip", entries: entries("remote_address", "50.0.0.5"), deny: true,
			full: "edge_proxy_per_ip.remote_address_50.0.0.5"},
		// Example 4: the request's depth must be the rule's.
		{name: "4 nested", domain: "example4", entries: entries("key", "value", "subkey", "subvalue"), want: fixed(300, time.Second)},
		{name: "4 too shallow", domain: "example4", entries: entries("key", "value")},
		{name: "4 too deep", domain: "example4", entries: entries("key", "value", "subkey", "subvalue", "x", "y")},
		// Example 5: unlimited.
		{name: "5 ldap", domain: "internal", entries: entries("ldap", "anything"), unlimited: true},
		{name: "5 azure", domain: "internal", entries: entries("azure", "x"), want: fixed(100, time.Minute)},
		// Example 6: shadow mode on one value.
		{name: "6 user-a", domain: "example6", entries: entries("service", "auth-service", "user", "user-a"), want: fixed(10, time.Second), shadow: true},
		{name: "6 user-b", domain: "example6", entries: entries("service", "auth-service", "user", "user-b"), want: fixed(20, time.Second)},
		{name: "6 user-c", domain: "example6", entries: entries("service", "auth-service", "user", "user-c")},
		// Example 7: both rules match on their own (replaces is applied
		// across a request's descriptors, in package rls).
		{name: "7 specific", domain: "example7", entries: entries("key_1", "value_1", "user", "bkthomps"), want: fixed(5, time.Second)},
		{name: "7 replacing", domain: "example7", entries: entries("key_2", "value_2", "user", "bkthomps"), want: fixed(10, time.Second)},
		// Example 8: detailed_metric names the metric after the value.
		{name: "8 unspecified", domain: "example8", entries: entries("key1", "unspecified_value"), want: fixed(10, time.Minute),
			full: "example8.key1", metric: "example8.key1_unspecified_value"},
		{name: "8 unspecified 2", domain: "example8", entries: entries("key1", "unspecified_value2"), want: fixed(10, time.Minute),
			metric: "example8.key1_unspecified_value2"},
		{name: "8 value1", domain: "example8", entries: entries("key1", "value1"), want: fixed(20, time.Minute), metric: "example8.key1_value1"},
		// Example 9: a trailing '*' matches a prefix; each value has its
		// own limit.
		{name: "9 value1", domain: "example9", entries: entries("key1", "value1"), want: fixed(20, time.Minute),
			key: "example9_key1_value1_", metric: "example9.key1_value*"},
		{name: "9 value_2", domain: "example9", entries: entries("key1", "value_2"), want: fixed(20, time.Minute), key: "example9_key1_value_2_"},
		{name: "9 no prefix", domain: "example9", entries: entries("key1", "valu")},
		// examples/ratelimit/config/example.yaml
		{name: "rl mock", domain: "rl", entries: entries("source_cluster", "proxy", "destination_cluster", "mock"), want: fixed(1, time.Minute)},
		{name: "rl foo", domain: "rl", entries: entries("foo", "foo"), want: fixed(2, time.Minute)},
		{name: "rl foo bar", domain: "rl", entries: entries("foo", "foo", "bar", "bar"), want: fixed(3, time.Minute)},
		{name: "rl foo bar banned", domain: "rl", entries: entries("foo", "foo", "bar", "banned"), deny: true},
		{name: "rl foo baz", domain: "rl", entries: entries("foo", "foo", "baz", "baz"), want: fixed(1, time.Second)},
		{name: "rl foo qux", domain: "rl", entries: entries("foo", "foo", "qux", "x")},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, ok := r.Match(c.domain, c.entries)
			if !ok {
				if !c.want.IsZero() || c.deny || c.unlimited {
					t.Fatalf("no match, want %v", c.want)
				}
				return
			}
			if c.want.IsZero() && !c.deny && !c.unlimited {
				t.Fatalf("matched %s, want no match", m.Rule.FullKey)
			}
			rule := m.Rule
			if rule.Limit != c.want || rule.Deny() != c.deny || rule.Unlimited != c.unlimited || rule.ShadowMode != c.shadow {
				t.Errorf("rule %s: %v deny %v unlimited %v shadow %v, want %v %v %v %v", rule.FullKey,
					rule.Limit, rule.Deny(), rule.Unlimited, rule.ShadowMode, c.want, c.deny, c.unlimited, c.shadow)
			}
			if c.key != "" && m.Key != c.key {
				t.Errorf("key %q, want %q", m.Key, c.key)
			}
			if c.full != "" && rule.FullKey != c.full {
				t.Errorf("full key %q, want %q", rule.FullKey, c.full)
			}
			if c.metric == "" {
				c.metric = rule.FullKey
			}
			if m.Metric != c.metric {
				t.Errorf("metric %q, want %q", m.Metric, c.metric)
			}
		})
	}
}

func TestEnvoyExampleRuleFields(t *testing.T) {
	r := loadEnvoyExamples(t)
	m, _ := r.Match("example7", entries("key_1", "value_1", "user", "bkthomps"))
	if m.Rule.Name != "specific_limit" || len(m.Rule.Replaces) != 0 {
		t.Errorf("specific: %+v", m.Rule)
	}
	m, _ = r.Match("example7", entries("key_2", "value_2", "user", "bkthomps"))
	if m.Rule.Name != "" || len(m.Rule.Replaces) != 1 || m.Rule.Replaces[0] != "specific_limit" {
		t.Errorf("replacing: %+v", m.Rule)
	}
	if m.Rule.RequestsPerUnit != 10 || m.Rule.Unit != UnitSecond || m.Rule.UnitMultiplier != 1 {
		t.Errorf("reported as %d per %d %v", m.Rule.RequestsPerUnit, m.Rule.UnitMultiplier, m.Rule.Unit)
	}
	if m.Rule.File != filepath.Join("testdata", "envoy", "example7.yaml") || m.Rule.Line != 15 {
		t.Errorf("written at %s:%d", m.Rule.File, m.Rule.Line)
	}
	if n := len(r.All()); n != 21 {
		t.Errorf("%d rules, want 21", n)
	}
}

func TestEnvoyExample4TooDeep(t *testing.T) {
	r, err := Load("testdata/envoy_example4", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := r.Match("example4", entries("key", "value", "subkey", "subvalue")); ok {
		t.Fatalf("matched %s: the request has two entries, the rule one", m.Rule.FullKey)
	}
	if _, ok := r.Match("example4", entries("key", "value")); !ok {
		t.Fatal("the one-entry request does not match")
	}
}

func parse(t *testing.T, in string) (*Set, error) {
	t.Helper()
	return Parse(strings.NewReader(in), "rules.yaml", Options{})
}

func mustParse(t *testing.T, in string) *Set {
	t.Helper()
	r, err := parse(t, in)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMatchOrder(t *testing.T) {
	r := mustParse(t, `
domain: d
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/v1/*
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    value: /api/v1/users
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: path
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: other
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 6}
`)
	for _, c := range []struct {
		key, value string
		want       int64
	}{
		{"path", "/api/v1/users", 4}, // exact first
		{"path", "/api/v1/items", 2}, // then the first wildcard in file order
		{"path", "/api/x", 2},
		{"path", "/web", 5}, // "*" matches anything
		{"path", "", 5},
		{"other", "", 6},
	} {
		m, ok := r.Match("d", entries(c.key, c.value))
		if !ok || m.Rule.Limit.Count != c.want {
			t.Errorf("%s=%s: %v %v, want %d", c.key, c.value, ok, m.Rule, c.want)
		}
	}
}

func TestShareThresholdSharesOneKey(t *testing.T) {
	r := mustParse(t, `
domain: d
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: pages
    value: pages/*
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	a, _ := r.Match("d", entries("files", "files/a.pdf", "user", "u1"))
	b, _ := r.Match("d", entries("files", "files/b.csv", "user", "u1"))
	if a.Key != "d_files_files/*_user_u1_" || b.Key != a.Key {
		t.Errorf("keys %q and %q, want both d_files_files/*_user_u1_", a.Key, b.Key)
	}
	if a.Metric != "d.files_files/*.user" {
		t.Errorf("metric %q", a.Metric)
	}
	a, _ = r.Match("d", entries("pages", "pages/a"))
	b, _ = r.Match("d", entries("pages", "pages/b"))
	if a.Key == b.Key {
		t.Errorf("without share_threshold both values share %q", a.Key)
	}
}

func TestValueToMetric(t *testing.T) {
	r := mustParse(t, `
domain: domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
`)
	m, ok := r.Match("domain", entries("route", "api", "http_method", "GET", "subject_id", "123"))
	if !ok || m.Metric != "domain.route_api.http_method_GET.subject_id" || m.Rule.FullKey != "domain.route.http_method.subject_id" {
		t.Fatalf("%v %q %q", ok, m.Metric, m.Rule.FullKey)
	}
}

func TestExtendedRules(t *testing.T) {
	r := mustParse(t, `
domain: ext
descriptors:
  - key: gcra
    rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 30}
  - key: funnel
    rate_limit: {algorithm: funnel, period: 10s, requests_per_unit: 5, burst: 9, ban: 1h}
  - key: leaky
    rate_limit: {algorithm: leaky_bucket, period: 1s, requests_per_unit: 10, burst: 20, delay: 5}
  - key: nodelay
    rate_limit: {algorithm: leaky_bucket, period: 1s, requests_per_unit: 10, burst: 20, delay: nodelay}
  - key: sliding
    rate_limit: {algorithm: sliding_window, period: 90s, requests_per_unit: 100}
  - key: log
    rate_limit: {algorithm: sliding_log, unit: hour, requests_per_unit: 3}
  - key: daily
    rate_limit: {calendar: day, time_zone: Europe/Paris, requests_per_unit: 1000}
  - key: monthly
    rate_limit: {calendar: month, requests_per_unit: 1000}
  - key: week
    rate_limit: {unit: WEEK, requests_per_unit: 7}
  - key: fast
    rate_limit: {period: 100ms, requests_per_unit: 3}
  - key: tenmin
    rate_limit: {period: 10m, requests_per_unit: 3}
`)
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip(err)
	}
	for _, c := range []struct {
		key  string
		want funnel.Limit
		unit Unit
		mult uint32
		rpu  uint32
		skey string
	}{
		{"gcra", funnel.Limit{Count: 30, Period: time.Minute, Burst: 29}, UnitMinute, 1, 30, "ext_gcra_x_gcra"},
		{"funnel", funnel.Limit{Count: 5, Period: 10 * time.Second, Burst: 9, Ban: time.Hour}, UnitSecond, 10, 5, ""},
		{"leaky", funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 20, DelayUnits: 5}, UnitSecond, 1, 10, "ext_leaky_x_leaky_bucket"},
		{"nodelay", funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 20, DelayUnits: funnel.NoDelay}, UnitSecond, 1, 10, ""},
		{"sliding", funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 100, Period: 90 * time.Second}, UnitSecond, 90, 100, ""},
		{"log", funnel.Limit{Algorithm: funnel.SlidingLog, Count: 3, Period: time.Hour}, UnitHour, 1, 3, ""},
		{"daily", funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1000, Calendar: funnel.Daily, Location: paris}, UnitDay, 1, 1000, "ext_daily_x_"},
		{"monthly", funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1000, Calendar: funnel.Monthly}, UnitMonth, 1, 1000, ""},
		{"week", funnel.Limit{Algorithm: funnel.FixedWindow, Count: 7, Period: 7 * 24 * time.Hour}, UnitWeek, 1, 7, ""},
		{"fast", funnel.Limit{Algorithm: funnel.FixedWindow, Count: 3, Period: 100 * time.Millisecond}, UnitSecond, 1, 30, ""},
		{"tenmin", funnel.Limit{Algorithm: funnel.FixedWindow, Count: 3, Period: 10 * time.Minute}, UnitMinute, 10, 3, ""},
	} {
		m, ok := r.Match("ext", entries(c.key, "x"))
		if !ok {
			t.Errorf("%s: no match", c.key)
			continue
		}
		got := m.Rule.Limit
		if got.String() != c.want.String() || got.Location.String() != c.want.Location.String() {
			t.Errorf("%s: %v, want %v", c.key, got, c.want)
		}
		if m.Rule.Unit != c.unit || m.Rule.UnitMultiplier != c.mult || m.Rule.RequestsPerUnit != c.rpu {
			t.Errorf("%s: reported as %d per %d %v, want %d per %d %v", c.key, m.Rule.RequestsPerUnit, m.Rule.UnitMultiplier, m.Rule.Unit, c.rpu, c.mult, c.unit)
		}
		if c.skey != "" && m.Key != c.skey {
			t.Errorf("%s: key %q, want %q", c.key, m.Key, c.skey)
		}
	}
}

// charge_over_limit is read on a descriptor, as shadow_mode is; left out,
// it is false.
func TestChargeOverLimit(t *testing.T) {
	set, err := Parse(strings.NewReader(`domain: llm
descriptors:
  - key: api_key
    charge_over_limit: true
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`), "rules.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key  string
		want bool
	}{{"api_key", true}, {"user", false}} {
		m, ok := set.Match("llm", []Entry{{Key: c.key, Value: "x"}})
		if !ok || m.Rule.ChargeOverLimit != c.want {
			t.Errorf("%s: matched %v, ChargeOverLimit %v; want %v", c.key, ok, m.Rule != nil && m.Rule.ChargeOverLimit, c.want)
		}
	}
}

func TestRuleErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"domain: d\nbogus: 1\n", "rules.yaml:2:1: bogus: unknown field"},
		{"domain: d\ndomain: e\n", "rules.yaml:2:1: domain: defined twice (first at line 1)"},
		{"descriptors: []\n", "rules.yaml:1:1: domain: a domain is required"},
		{"", "rules.yaml:1:1: domain: the file is empty"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			`rules.yaml:4:24: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			`rules.yaml:4:51: descriptors[0].rate_limit.requests_per_unit: want a whole number from 0 to 4294967295, not int "-1"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n",
			`descriptors[0].rate_limit.requests_per_unit: 4294967296 is more than 4294967295`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n",
			`rules.yaml:4:17: descriptors[0].rate_limit.unit: a rate limit needs a unit`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
			`descriptors[0].rate_limit.unit: an unlimited rule takes no unit`},
		{"domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b\n",
			`rules.yaml:6:12: descriptors[1]: descriptor a_b is already defined at line 3`},
		{"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n",
			`rules.yaml:6:14: descriptors[0].descriptors[1]: descriptor a.b is already defined at line 5`},
		{"domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n",
			`descriptors[0].share_threshold: only a wildcard value`},
		{"domain: d\ndescriptors:\n  - value: b\n", `rules.yaml:3:5: descriptors[0].key: a descriptor needs a key`},
		{"domain: d\ndescriptors:\n  - key: a\n    shadow_mode: yes\n", `descriptors[0].shadow_mode: want true or false, not str "yes"`},
		{"domain: d\ndescriptors:\n  - key: a\n    charge_over_limit: 1\n", `descriptors[0].charge_over_limit: want true or false, not int "1"`},
		{"domain: d\ndescriptors:\n  - key: a\n    charge_over_limit: true\n    charge_over_limit: false\n", `charge_over_limit`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, period: 1s, requests_per_unit: 1}\n",
			`descriptors[0].rate_limit: give only one of unit, period and calendar`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {period: soon, requests_per_unit: 1}\n",
			`descriptors[0].rate_limit.period: want a duration such as 90s or 1h30m, not str "soon"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n",
			`descriptors[0].rate_limit.burst: only gcra, leaky_bucket and concurrency take a burst`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, time_zone: UTC}\n",
			`descriptors[0].rate_limit.time_zone: a time zone goes with a calendar`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {calendar: day, requests_per_unit: 1, time_zone: Mars/Olympus}\n",
			`descriptors[0].rate_limit.time_zone: unknown time zone "Mars/Olympus"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {calendar: year, requests_per_unit: 1}\n",
			`descriptors[0].rate_limit.calendar: unknown calendar "year"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {algorithm: concurrency, unit: second, requests_per_unit: 1}\n",
			`descriptors[0].rate_limit.algorithm: concurrency limits need a release`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {algorithm: concurrency, unit: second, requests_per_unit: 1, burst: 3}\n",
			`Envoy's rate-limit protocol cannot send`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 1}\n",
			`descriptors[0].rate_limit.algorithm: unknown algorithm "token_bucket"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {algorithm: sliding_window, period: 1500us, requests_per_unit: 1}\n",
			`rules.yaml:4:17: descriptors[0].rate_limit: invalid limit`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, delay: 2}\n",
			`descriptors[0].rate_limit.delay: only leaky_bucket takes a delay`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: x}, {name: \"\"}]\n",
			`descriptors[0].rate_limit.replaces[1].name: a replaced rule needs a name`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: x\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: x}]\n",
			`descriptors[0].rate_limit.replaces[0].name: a rule cannot replace itself`},
		{"domain: d\ndescriptors:\n  key: a\n", `rules.yaml:3:3: descriptors: want a list of descriptors, not a mapping`},
		{"domain: d\ndescriptors:\n  - key: [a]\n", `descriptors[0].key: want a string, not a list`},
		{"domain: d\ndescriptors:\n  - key: a\n    quota_mode: 1\n", `descriptors[0].quota_mode: want true or false, not int "1"`},
		{"domain: d\ndescriptors:\n  - key: a\n    metadata: [a]\n", `rules.yaml:4:15: descriptors[0].metadata: want a mapping, not a list`},
		{"domain: d\ndescriptors:\n  - key: a\n    metadata: {[a]: 1}\n", `descriptors[0].metadata: a metadata key must be a scalar, not a list`},
		{"domain: d\ndescriptors:\n  - key: a\n    metadata: {a: !!binary \"/w==\"}\n", `descriptors[0].metadata.a: text is not valid UTF-8`},
		{"domain: d\n  bad: indent\n", `rules.yaml:2:1: mapping values are not allowed`},
		{"domain: d\n---\ndomain: e\n", `rules.yaml:3:1: a second YAML document`},
	} {
		_, err := parse(t, c.in)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v,\nwant an error containing %q", c.in, err, c.want)
		}
	}
}

func TestRuleErrorsAreAllReported(t *testing.T) {
	_, err := parse(t, "domain: d\nx: 1\ny: 2\ndescriptors:\n  - key: a\n    z: 3\n")
	var re *Error
	if !errors.As(err, &re) || re.Line != 2 || re.Field != "x" {
		t.Fatalf("%v", err)
	}
	if n := strings.Count(err.Error(), "unknown field"); n != 3 {
		t.Fatalf("%d problems reported, want 3:\n%v", n, err)
	}
}

func TestLoadRulesDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	write("b.yml", "domain: b\n")
	write(".hidden.yaml", "not: rules\n")
	write("notes.txt", "not rules either")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := Load(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Domains(), ","); got != "a,b" {
		t.Fatalf("domains %s", got)
	}

	// A single file loads alone.
	r, err = Load(filepath.Join(dir, "a.yaml"), Options{})
	if err != nil || strings.Join(r.Domains(), ",") != "a" {
		t.Fatalf("%v %v", r.Domains(), err)
	}

	// A domain in two files is refused, unless merged.
	write("c.yaml", "domain: a\ndescriptors:\n  - key: j\n    rate_limit: {unit: second, requests_per_unit: 2}\n")
	_, err = Load(dir, Options{})
	if want := filepath.Join(dir, "c.yaml") + `:1:9: domain: domain "a" is already defined in ` + filepath.Join(dir, "a.yaml"); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("%v, want %s", err, want)
	}
	r, err = Load(dir, Options{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k", "j"} {
		if _, ok := r.Match("a", entries(k, "v")); !ok {
			t.Errorf("merged domain a has no rule for %s", k)
		}
	}
	write("d.yaml", "domain: a\ndescriptors:\n  - key: j\n")
	if _, err = Load(dir, Options{MergeDomains: true}); err == nil || !strings.Contains(err.Error(), "descriptor j is already defined") {
		t.Fatalf("%v", err)
	}

	if _, err := Load(filepath.Join(dir, "missing"), Options{}); err == nil {
		t.Fatal("a missing path loads")
	}
}

func TestNilRules(t *testing.T) {
	var r *Set
	if _, ok := r.Match("d", entries("a", "b")); ok || r.HasDomain("d") || r.Domains() != nil || r.All() != nil {
		t.Fatal("a nil Set matches")
	}
}

func FuzzParse(f *testing.F) {
	for _, p := range []string{"example.yaml", "example2.yaml", "example7.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", "envoy", p))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
	f.Add("domain: d\ndescriptors:\n  - key: a\n    value: b*\n    share_threshold: true\n    rate_limit: {algorithm: gcra, period: 1s, requests_per_unit: 5, burst: 2, ban: 1m}\n")
	f.Add("domain: d\ndescriptors: &a\n  - key: a\n    descriptors: *a\n")
	for _, p := range []string{"share_threshold.yaml", "metadata.yaml", "wildcard.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", "upstream", "config", p))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
	f.Add("domain: d\ndescriptors:\n  - key: a\n    value: x*y*\n    quota_mode: true\n    metadata: &m {a: [1, {b: *m}], <<: {c: !!binary aGk=}}\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	f.Fuzz(func(t *testing.T, in string) {
		r, err := Parse(strings.NewReader(in), "fuzz.yaml", Options{})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		for _, rule := range r.All() {
			if !rule.Unlimited && !rule.Deny() {
				if err := rule.Limit.Validate(); err != nil {
					t.Fatalf("rule %s: %v", rule.FullKey, err)
				}
			}
		}
	})
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	r := mustParse(t, `
domain: d
descriptors:
  - key: a
    rate_limit: &per_minute
      unit: minute
      requests_per_unit: 10
  - key: b
    rate_limit: *per_minute
  - key: c
    rate_limit:
      <<: *per_minute
      requests_per_unit: 20
`)
	for k, want := range map[string]int64{"a": 10, "b": 10, "c": 20} {
		m, ok := r.Match("d", entries(k, "x"))
		if !ok || m.Rule.Limit != fixed(want, time.Minute) {
			t.Errorf("%s: %v %v, want %d per minute", k, ok, m.Rule, want)
		}
	}
	// An alias of descriptors could nest without end: refused.
	_, err := parse(t, "domain: d\ndescriptors: &x\n  - key: a\n    descriptors: *x\n")
	if err == nil || !strings.Contains(err.Error(), "rules.yaml:4:18: descriptors[0].descriptors: an alias cannot stand for descriptors") {
		t.Fatalf("%v", err)
	}
}

// Past Options.MaxErrors problems (20 by default), one more says there
// were too many; a negative bound reports them all.
func TestMaxErrors(t *testing.T) {
	in := "domain: d\n"
	for i := range 25 {
		in += "x" + strconv.Itoa(i) + ": 1\n"
	}
	for _, c := range []struct {
		max, want int
		more      bool
	}{{0, 20, true}, {3, 3, true}, {-1, 25, false}} {
		_, err := Parse(strings.NewReader(in), "r.yaml", Options{MaxErrors: c.max})
		got := strings.Count(err.Error(), "unknown field")
		if more := strings.Contains(err.Error(), "too many errors"); got != c.want || more != c.more {
			t.Errorf("MaxErrors %d: %d problems, too many %v; want %d, %v", c.max, got, more, c.want, c.more)
		}
	}
	// No bound is 10,000 problems, then one that says there were more.
	var b strings.Builder
	b.WriteString("domain: d\n")
	for i := range 10005 {
		fmt.Fprintf(&b, "x%d: 1\n", i)
	}
	_, err := Parse(strings.NewReader(b.String()), "r.yaml", Options{MaxErrors: -1})
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 10001 || lines[10000] != "rules: r.yaml: too many errors" || !strings.HasPrefix(lines[9999], "rules: r.yaml:10001:1: x9999: unknown field") {
		t.Errorf("%d problems, the last two %q", len(lines), lines[len(lines)-2:])
	}
}

// A value that cannot be read is reported once, not again as the missing
// value it leaves; and the problems of a file whose domain is missing or
// unreadable are all reported, not only the domain's.
func TestRuleErrorsReportedOnce(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"domain: d\ndescriptors:\n  - key: [a]\n", []string{"rules.yaml:3:10: descriptors[0].key: want a string, not a list"}},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: [s], requests_per_unit: 1}\n",
			[]string{"rules.yaml:4:24: descriptors[0].rate_limit.unit: want a string, not a list"}},
		{"domain: [d]\ndescriptors:\n  - key: a\n    rate_limit: {period: soon, requests_per_unit: 1}\n", []string{
			"rules.yaml:1:9: domain: want a string, not a list",
			`rules.yaml:4:26: descriptors[0].rate_limit.period: want a duration such as 90s or 1h30m, not str "soon"`}},
		{"descriptors:\n  - key: a\n    bogus: 1\n", []string{
			"rules.yaml:1:1: domain: a domain is required",
			"rules.yaml:3:5: descriptors[0].bogus: unknown field"}},
	} {
		_, err := parse(t, c.in)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v", c.in, err)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(c.want) {
			t.Errorf("Parse(%q) = %d problems, want %d:\n%v", c.in, len(lines), len(c.want), err)
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("Parse(%q): problem %d is %q, want %q", c.in, i, lines[i], w)
			}
		}
	}
}

// A rule's Path is its descriptor's entries from the domain's first level
// down, one slice per rule (siblings do not share a backing array).
func TestRulePath(t *testing.T) {
	set, err := parse(t, `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
      - key: from_number
        rate_limit: {unit: day, requests_per_unit: 7}
  - key: to_number
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]Entry{
		"messaging.message_type_marketing.to_number":   {{"message_type", "marketing"}, {"to_number", ""}},
		"messaging.message_type_marketing.from_number": {{"message_type", "marketing"}, {"from_number", ""}},
		"messaging.to_number":                          {{"to_number", ""}},
	}
	if len(set.All()) != len(want) {
		t.Fatalf("%d rules", len(set.All()))
	}
	for _, r := range set.All() {
		if !slices.Equal(r.Path, want[r.FullKey]) {
			t.Errorf("%s: Path = %v, want %v", r.FullKey, r.Path, want[r.FullKey])
		}
	}
}
