package httpreply_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/httpreply"
)

// sfItem is one member of a structured field List of Strings with
// parameters, as the rate-limit fields use.
type sfItem struct {
	Name   string
	Params map[string]string // integers as decimal, strings unquoted
}

// parseSFList parses a List of String items with Integer or String
// parameters (RFC 9651, sections 4.2.1 to 4.2.3), strictly enough to catch
// a malformed field.
func parseSFList(t *testing.T, s string) []sfItem {
	t.Helper()
	var items []sfItem
	i := 0
	str := func() string {
		if i >= len(s) || s[i] != '"' {
			t.Fatalf("%q: want a string at %d", s, i)
		}
		i++
		var b strings.Builder
		for ; i < len(s); i++ {
			switch c := s[i]; c {
			case '\\':
				i++
				if i >= len(s) || (s[i] != '"' && s[i] != '\\') {
					t.Fatalf("%q: bad escape", s)
				}
				b.WriteByte(s[i])
			case '"':
				i++
				return b.String()
			default:
				if c < 0x20 || c > 0x7e {
					t.Fatalf("%q: byte %#x in a string", s, c)
				}
				b.WriteByte(c)
			}
		}
		t.Fatalf("%q: unterminated string", s)
		return ""
	}
	for {
		it := sfItem{Name: str(), Params: map[string]string{}}
		for i < len(s) && s[i] == ';' {
			i++
			j := i
			for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] == '-' || s[i] >= '0' && s[i] <= '9') {
				i++
			}
			key := s[j:i]
			if key == "" || i >= len(s) || s[i] != '=' {
				t.Fatalf("%q: bad parameter at %d", s, j)
			}
			i++
			if s[i] == '"' {
				it.Params[key] = str()
				continue
			}
			j = i
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
			if i == j || i-j > 15 {
				t.Fatalf("%q: bad integer at %d", s, j)
			}
			it.Params[key] = s[j:i]
		}
		items = append(items, it)
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i == len(s) {
			return items
		}
		if s[i] != ',' {
			t.Fatalf("%q: want ',' at %d", s, i)
		}
		i++
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
	}
}

// The draft's own examples, and the same fields as this package writes
// them, parse to the same items.
func TestHeadersMatchDraftExamples(t *testing.T) {
	cases := []struct {
		name     string
		draft    string // as printed in draft-ietf-httpapi-ratelimit-headers-11
		policies []httpreply.Policy
		field    string
	}{{
		// Section 3.2.
		name:     "policy",
		draft:    `"default";q=100;w=10`,
		policies: []httpreply.Policy{{Name: "default", Limit: funnel.Limit{Algorithm: funnel.FixedWindow, Count: 100, Period: 10 * time.Second}}},
		field:    httpreply.HeaderPolicy,
	}, {
		// Section 3.2, several policies.
		name:  "policies",
		draft: `"permin";q=50;w=60,"perhr";q=1000;w=3600`,
		policies: []httpreply.Policy{
			{Name: "permin", Limit: funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 50, Period: time.Minute}},
			{Name: "perhr", Limit: funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1000, Period: time.Hour}},
		},
		field: httpreply.HeaderPolicy,
	}, {
		// Section 4.2.
		name:     "ratelimit",
		draft:    `"default";r=50;t=30`,
		policies: []httpreply.Policy{{Name: "default", Limit: funnel.PerMinute(100), Result: funnel.Result{Allowed: true, Remaining: 50, ResetAfter: 30 * time.Second}}},
		field:    httpreply.HeaderRateLimit,
	}, {
		// Appendix B.2.1: 99 left for the next 50 s of a 100 per minute
		// window (the RateLimit field).
		name:  "fixedwindow",
		draft: `"fixedwindow";r=99;t=50`,
		policies: []httpreply.Policy{{Name: "fixedwindow", Limit: funnel.Limit{Algorithm: funnel.FixedWindow, Count: 100, Period: time.Minute},
			Result: funnel.Result{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: 49*time.Second + 1}}},
		field: httpreply.HeaderRateLimit,
	}, {
		// Appendix B.1.4: a throttled response, r=0 and t the wait.
		name:  "throttled",
		draft: `"default";r=0;t=5`,
		policies: []httpreply.Policy{{Name: "default", Limit: funnel.PerMinute(100),
			Result: funnel.Result{Allowed: false, Limit: 100, Remaining: 0, RetryAfter: 4500 * time.Millisecond, ResetAfter: time.Minute}}},
		field: httpreply.HeaderRateLimit,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			httpreply.SetHeaders(h, c.policies...)
			got := h.Get(c.field)
			if vs := h.Values(c.field); len(vs) != 1 {
				t.Errorf("%d %s field lines, want 1", len(vs), c.field)
			}
			if !reflect.DeepEqual(parseSFList(t, got), parseSFList(t, c.draft)) {
				t.Errorf("%s: %s\nthe draft: %s", c.field, got, c.draft)
			}
		})
	}
}

func TestPolicyFormats(t *testing.T) {
	cases := []struct {
		limit funnel.Limit
		want  string
	}{
		// A full bucket of 16, refilled in 16 × 2 s.
		{funnel.PerMinute(30).WithBurst(15), `"p";q=16;w=32`},
		{funnel.PerMinute(30), `"p";q=30;w=60`},
		{funnel.PerSecond(10).WithBurst(0), `"p";q=1;w=1`}, // 100 ms, rounded up
		{funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 4}, `"p";q=5;w=1`},
		{funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1000, Calendar: funnel.Daily}, `"p";q=1000;w=86400`},
		{funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1000, Calendar: funnel.Weekly}, `"p";q=1000;w=604800`},
		{funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1000, Calendar: funnel.Monthly}, `"p";q=1000`},
		{funnel.Limit{Algorithm: funnel.SlidingLog, Count: 5, Period: 1500 * time.Millisecond}, `"p";q=5;w=2`},
		{funnel.Limit{Algorithm: funnel.Concurrency, Count: 8, Period: time.Minute}, `"p";q=8;qu="concurrent-requests"`},
	}
	for _, c := range cases {
		if got := string(httpreply.AppendPolicy(nil, "p", c.limit)); got != c.want {
			t.Errorf("%v: %s, want %s", c.limit, got, c.want)
		}
		parseSFList(t, c.want)
	}
}

func TestRateLimitFormats(t *testing.T) {
	cases := []struct {
		r    funnel.Result
		want string
	}{
		{funnel.Result{Allowed: true, Remaining: 15, ResetAfter: 2 * time.Second}, `"p";r=15;t=2`},
		{funnel.Result{Allowed: true, Remaining: 15, ResetAfter: 2*time.Second + 1}, `"p";r=15;t=3`},
		{funnel.Result{Allowed: true, Remaining: 16}, `"p";r=16;t=0`},
		// Refused: t is the wait, as Retry-After.
		{funnel.Result{Remaining: 0, RetryAfter: 1500 * time.Millisecond, ResetAfter: 32 * time.Second}, `"p";r=0;t=2`},
		// Refused for good (more than the limit at once): t is the reset.
		{funnel.Result{Remaining: 3, RetryAfter: funnel.Never, ResetAfter: 10 * time.Second}, `"p";r=3;t=10`},
		// Banned: t is the end of the ban.
		{funnel.Result{Banned: true, RetryAfter: time.Hour}, `"p";r=0;t=3600`},
		{funnel.Result{Allowed: true, Fallback: true}, `"p";r=0`},
	}
	for _, c := range cases {
		if got := string(httpreply.AppendRateLimit(nil, "p", c.r)); got != c.want {
			t.Errorf("%+v: %s, want %s", c.r, got, c.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	cases := []struct {
		policies []httpreply.Policy
		want     string
	}{
		{[]httpreply.Policy{{Name: "a", Result: funnel.Result{Allowed: true}}}, ""},
		{[]httpreply.Policy{{Name: "a", Result: funnel.Result{RetryAfter: time.Nanosecond}}}, "1"},
		{[]httpreply.Policy{{Name: "a", Result: funnel.Result{RetryAfter: 2 * time.Second}}}, "2"},
		{[]httpreply.Policy{{Name: "a", Result: funnel.Result{RetryAfter: 2*time.Second + time.Millisecond}}}, "3"},
		{[]httpreply.Policy{{Name: "a", Result: funnel.Result{RetryAfter: funnel.Never}}}, ""},
		{[]httpreply.Policy{{Name: "a", Result: funnel.Result{Fallback: true}}}, ""},
		// Several refusing limits: the longest wait.
		{[]httpreply.Policy{
			{Name: "a", Result: funnel.Result{RetryAfter: 2 * time.Second}},
			{Name: "b", Result: funnel.Result{Allowed: true}},
			{Name: "c", Result: funnel.Result{RetryAfter: 90 * time.Second}},
		}, "90"},
		// A refusal no wait lifts: waiting for the others would not help.
		{[]httpreply.Policy{
			{Name: "a", Result: funnel.Result{RetryAfter: 2 * time.Second}},
			{Name: "b", Result: funnel.Result{RetryAfter: funnel.Never}},
		}, ""},
	}
	for i, c := range cases {
		for j := range c.policies {
			c.policies[j].Limit = funnel.PerSecond(1)
		}
		h := http.Header{}
		httpreply.SetHeaders(h, c.policies...)
		if got := h.Get("Retry-After"); got != c.want {
			t.Errorf("case %d: Retry-After %q, want %q", i, got, c.want)
		}
	}
}

func TestNameEscaping(t *testing.T) {
	got := string(httpreply.AppendPolicy(nil, `a "quoted" \ name`, funnel.PerSecond(1)))
	if want := `"a \"quoted\" \\ name";q=1;w=1`; got != want {
		t.Errorf("%s, want %s", got, want)
	}
	if items := parseSFList(t, got); items[0].Name != `a "quoted" \ name` {
		t.Errorf("round trip: %q", items[0].Name)
	}
	for _, bad := range []string{"", "é", "tab\there", strings.Repeat("x", 257)} {
		if httpreply.CheckPolicyName(bad) == nil {
			t.Errorf("CheckPolicyName(%q): no error", bad)
		}
	}
}

func TestSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		-time.Second:               0,
		0:                          0,
		1:                          1,
		time.Second:                1,
		time.Second + 1:            2,
		1000 * time.Hour:           3_600_000,
		funnel.Never:               9_223_372_037,
		24 * 365 * 100 * time.Hour: 3_153_600_000,
	} {
		if got := httpreply.Seconds(d); got != want {
			t.Errorf("Seconds(%v) = %d, want %d", d, got, want)
		}
	}
}
