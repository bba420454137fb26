package rules

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// loadUpstream loads files of testdata/upstream/config, or of another
// folder when a name has a slash, as one directory (copied in order, so
// that one file can be loaded twice).
func loadUpstream(t *testing.T, merge bool, files ...string) (*Set, error) {
	t.Helper()
	dir := t.TempDir()
	for i, f := range files {
		p := filepath.Join("testdata", "upstream", "config", f)
		if strings.Contains(f, "/") {
			p = filepath.Join("testdata", "upstream", f)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(dir, string(rune('a'+i))+"_"+filepath.Base(f))
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Load(dir, Options{MergeDomains: merge})
}

// Every rules file of envoyproxy/ratelimit's tests loads, or is refused,
// as its configuration tests (test/config/config_test.go) expect.
func TestUpstreamConfigsLoadOrAreRefused(t *testing.T) {
	for _, c := range []struct {
		files []string
		merge bool
		// refused is what Funnel says, or "" when the files load; the
		// comment is upstream's message.
		refused string
	}{
		{files: []string{"basic_config.yaml"}},
		{files: []string{"metadata.yaml"}},
		{files: []string{"shadowmode_config.yaml"}},
		{files: []string{"share_threshold.yaml"}},
		{files: []string{"wildcard.yaml"}},
		{files: []string{"duplicate_domain.yaml"}},
		{files: []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, merge: true},
		{files: []string{"integration/another.yaml", "integration/basic.yaml", "integration/share_threshold.yaml", "integration/reload.yaml"}},
		// config file cannot have empty domain
		{files: []string{"empty_domain.yaml"}, refused: "a_empty_domain.yaml:1:1: domain: a domain is required"},
		// duplicate domain 'test-domain' in config file
		{files: []string{"basic_config.yaml", "duplicate_domain.yaml"}, refused: `b_duplicate_domain.yaml:1:9: domain: domain "test-domain" is already defined`},
		// descriptor has empty key
		{files: []string{"empty_key.yaml"}, refused: "a_empty_key.yaml:3:5: descriptors[0].key: a descriptor needs a key"},
		// duplicate descriptor composite key 'test-domain.key1_value1'
		{files: []string{"duplicate_key.yaml"}, refused: "a_duplicate_key.yaml:7:12: descriptors[1]: descriptor key1_value1 is already defined at line 3"},
		{files: []string{"merge_domain_key1.yaml", "merge_domain_key1.yaml"}, merge: true,
			refused: "b_merge_domain_key1.yaml:6:12: descriptors[0]: descriptor key1_value1 is already defined at line 5"},
		// invalid rate limit unit 'foo'
		{files: []string{"bad_limit_unit.yaml"}, refused: `a_bad_limit_unit.yaml:6:13: descriptors[0].rate_limit.unit: invalid rate limit unit "foo"`},
		// replaces should not contain name of same descriptor
		{files: []string{"replaces_self.yaml"}, refused: "a_replaces_self.yaml:10:21: descriptors[0].descriptors[0].rate_limit.replaces[0].name: a rule cannot replace itself"},
		// should not have an empty replaces entry
		{files: []string{"replaces_empty.yaml"}, refused: "a_replaces_empty.yaml:10:20: descriptors[0].descriptors[0].rate_limit.replaces[0].name: a replaced rule needs a name"},
		// error loading config file: yaml: line 2: found unexpected end of stream
		{files: []string{"bad_yaml.yaml"}, refused: "a_bad_yaml.yaml:2:1: found unexpected end of stream"},
		// config error, unknown key 'ratelimit'
		{files: []string{"misspelled_key.yaml"}, refused: "a_misspelled_key.yaml:5:5: descriptors[0].ratelimit: unknown field"},
		// config error, unknown key 'requestsperunit'
		{files: []string{"misspelled_key2.yaml"}, refused: "a_misspelled_key2.yaml:7:7: descriptors[0].rate_limit.requestsperunit: unknown field"},
		// config error, key is not of type string: 0.25
		{files: []string{"non_string_key.yaml"}, refused: "a_non_string_key.yaml:1:1: 0.25: unknown field"},
		// config error, yaml file contains list of type other than map: a
		{files: []string{"non_map_list.yaml"}, refused: `a_non_map_list.yaml:3:5: descriptors[0]: want a mapping, not str "a"`},
		// should not specify rate limit unit when unlimited
		{files: []string{"unlimited_with_unit.yaml"}, refused: "a_unlimited_with_unit.yaml:6:13: descriptors[0].rate_limit.unit: an unlimited rule takes no unit"},
	} {
		t.Run(strings.Join(c.files, "+"), func(t *testing.T) {
			r, err := loadUpstream(t, c.merge, c.files...)
			if c.refused == "" {
				if err != nil || r == nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.refused) {
				t.Fatalf("error %v\nwant one containing %q", err, c.refused)
			}
		})
	}
}

// upstreamMatch is what envoy's tests expect of one descriptor: no rule
// (count -1), or the rule's requests per unit, unit and flags, and the key
// its statistics are counted under.
type upstreamMatch struct {
	file    string
	domain  string
	entries []Entry
	count   int64
	unit    Unit
	name    string
	shadow  bool
	unlim   bool
	stat    string
	// shares names another value of the last entry that must be charged
	// to the same key (share_threshold), or not when it starts with '!'.
	shares string
}

// The descriptors that envoyproxy/ratelimit's configuration tests ask
// about, with the rules and statistics keys they expect.
var upstreamMatches = []upstreamMatch{
	// TestBasicConfig
	{file: "basic_config.yaml", domain: "foo_domain", entries: entries("key1", "value1"), count: -1},
	{file: "basic_config.yaml", domain: "test-domain", count: -1},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key1", "something"), count: -1},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key1", "value1"), count: -1},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key2", "value2", "subkey", "subvalue"), count: -1},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key5", "value5", "subkey5", "subvalue"), count: -1},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key1", "value1", "subkey1", "something"), count: 5, unit: UnitSecond, stat: "test-domain.key1_value1.subkey1"},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key1", "value1", "subkey1", "subvalue1"), count: 10, unit: UnitSecond, stat: "test-domain.key1_value1.subkey1_subvalue1"},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key2", "something"), count: 20, unit: UnitMinute, stat: "test-domain.key2"},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key2", "value2"), count: 30, unit: UnitMinute, stat: "test-domain.key2_value2"},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key2", "value3"), count: -1},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key3", "foo"), count: 1, unit: UnitHour, stat: "test-domain.key3"},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key4", "foo"), count: 1, unit: UnitDay, name: "key4_rate_limit", stat: "test-domain.key4"},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key6", "foo"), unlim: true, stat: "test-domain.key6"},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key7", "unspecified_value"), count: 70, unit: UnitMinute, stat: "test-domain.key7_unspecified_value"},
	{file: "basic_config.yaml", domain: "test-domain", entries: entries("key7", "another_value"), count: 70, unit: UnitMinute, stat: "test-domain.key7_another_value"},
	// TestShadowModeConfig
	{file: "shadowmode_config.yaml", domain: "test-domain", entries: entries("key1", "value1", "subkey1", "something"), count: 5, unit: UnitSecond, stat: "test-domain.key1_value1.subkey1"},
	{file: "shadowmode_config.yaml", domain: "test-domain", entries: entries("key1", "value1", "subkey1", "subvalue1"), count: 10, unit: UnitSecond, shadow: true, stat: "test-domain.key1_value1.subkey1_subvalue1"},
	{file: "shadowmode_config.yaml", domain: "test-domain", entries: entries("key2", "something"), count: 20, unit: UnitMinute, shadow: true, stat: "test-domain.key2"},
	{file: "shadowmode_config.yaml", domain: "test-domain", entries: entries("key2", "value2"), count: 30, unit: UnitMinute, stat: "test-domain.key2_value2"},
	// TestWildcardConfig
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("noVal", "foo1"), count: 20, unit: UnitMinute, stat: "test-domain.noVal", shares: "!foo2"},
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("wild", "foo1"), count: 20, unit: UnitMinute, stat: "test-domain.wild_foo*", shares: "!foo2"},
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("nestedWild", "val1", "wild", "goo2"), count: 20, unit: UnitMinute, stat: "test-domain.nestedWild_val1.wild_goo*"},
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("wild", "bar"), count: -1},
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("noWild", "foo1"), count: -1},
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("midWild", "barab"), count: 20, unit: UnitMinute, stat: "test-domain.midWild_bar*b"},
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("midWild", "bar123b"), count: 20, unit: UnitMinute, stat: "test-domain.midWild_bar*b"},
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("midWild", "barb"), count: 20, unit: UnitMinute, stat: "test-domain.midWild_bar*b"},
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("midWild", "bara"), count: -1},
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("midWild", "xbarb"), count: -1},
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("multiWild", "foo123bar456baz"), count: 10, unit: UnitMinute, stat: "test-domain.multiWild_foo*bar*baz"},
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("multiWild", "foobarbaz"), count: 10, unit: UnitMinute, stat: "test-domain.multiWild_foo*bar*baz"},
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("multiWild", "foo123baz"), count: -1},
	{file: "wildcard.yaml", domain: "test-domain", entries: entries("multiWild", "bar456baz"), count: -1},
	// TestShareThreshold
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("files", "files/a.pdf"), count: 100, unit: UnitMinute, stat: "test-domain.files_files/*", shares: "files/c.txt"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("files", "files/b.csv"), count: 100, unit: UnitMinute, stat: "test-domain.files_files/*", shares: "files/a.pdf"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("route", "api/v1", "method", "GET"), count: 60, unit: UnitMinute, stat: "test-domain.route_api/*.method"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("service", "svc/user", "endpoint", "get"), count: 80, unit: UnitMinute, stat: "test-domain.service_svc/*.endpoint_get"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("nested", "parent", "files", "nested/file1.txt"), count: 200, unit: UnitMinute, stat: "test-domain.nested_parent.files_nested/*", shares: "nested/x"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("files", "top/file1.txt", "files", "nested/file1.txt"), count: 300, unit: UnitMinute, stat: "test-domain.files_top/*.files_nested/*", shares: "nested/y"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("path", "path/foo", "file", "file/doc1", "type", "pdf"), count: 120, unit: UnitMinute, stat: "test-domain.path_path/*.file_file/*.type"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("user", "user/alice", "resource", "res/file1", "action", "read"), count: 150, unit: UnitMinute, stat: "test-domain.user_user/*.resource_res/*.action"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("file", "test1"), count: 50, unit: UnitMinute, stat: "test-domain.file_test1", shares: "!test2"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("file", "test2"), count: 100, unit: UnitMinute, stat: "test-domain.file_test*", shares: "test123"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("file", "test23"), count: 100, unit: UnitMinute, stat: "test-domain.file_test*", shares: "test2"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("midpath", "/api/v1"), count: 100, unit: UnitMinute, stat: "test-domain.midpath_/api*v1", shares: "/apiXYZv1"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("midpath", "/api-beta-v1"), count: 100, unit: UnitMinute, stat: "test-domain.midpath_/api*v1", shares: "/api/v1"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("midpath", "/api/v2"), count: -1},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("multiroute", "svcAepBrpc"), count: 50, unit: UnitMinute, stat: "test-domain.multiroute_svc*ep*rpc", shares: "svceprpc"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("multiroute", "svcXXXepYYYrpc"), count: 50, unit: UnitMinute, stat: "test-domain.multiroute_svc*ep*rpc", shares: "svcAepBrpc"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("multiroute", "svcABCrpc"), count: -1},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("midroute", "/api/v2"), count: 80, unit: UnitMinute, stat: "test-domain.midroute_/api*v2", shares: "/api-beta-v2"},
	{file: "share_threshold.yaml", domain: "test-domain", entries: entries("tenant", "t1prod", "resource", "resAv2"), count: 60, unit: UnitMinute, stat: "test-domain.tenant_t*prod.resource_res*v2", shares: "resBBBv2"},
	// TestDomainMerge
	{file: "merge_domain_key1.yaml+merge_domain_key2.yaml", domain: "test-domain", entries: entries("key1", "value1"), count: 10, unit: UnitMinute, stat: "test-domain.key1_value1"},
	{file: "merge_domain_key1.yaml+merge_domain_key2.yaml", domain: "test-domain", entries: entries("key2", "value2"), count: 20, unit: UnitMinute, stat: "test-domain.key2_value2"},
	// TestMetadata
	{file: "metadata.yaml", domain: "test-domain", count: -1},
	{file: "metadata.yaml", domain: "test-domain", entries: entries("key1", "value1", "subkey1", "something"), count: 5, unit: UnitSecond, stat: "test-domain.key1_value1.subkey1"},
	{file: "metadata.yaml", domain: "test-domain", entries: entries("key2", "something"), count: 20, unit: UnitMinute, stat: "test-domain.key2"},
}

func TestUpstreamConfigsMatch(t *testing.T) {
	sets := map[string]*Set{}
	for _, c := range upstreamMatches {
		r := sets[c.file]
		if r == nil {
			var err error
			if r, err = loadUpstream(t, true, strings.Split(c.file, "+")...); err != nil {
				t.Fatal(err)
			}
			sets[c.file] = r
		}
		m, ok := r.Match(c.domain, c.entries)
		if c.count < 0 {
			if ok {
				t.Errorf("%s %v: matched %s, want no rule", c.domain, c.entries, m.Rule.FullKey)
			}
			continue
		}
		if !ok {
			t.Errorf("%s %v: no rule", c.domain, c.entries)
			continue
		}
		rl := m.Rule
		if rl.Unlimited != c.unlim || !c.unlim && (int64(rl.RequestsPerUnit) != c.count || rl.Unit != c.unit) ||
			rl.Name != c.name || rl.ShadowMode != c.shadow || m.Metric != c.stat {
			t.Errorf("%s %v: %d per %v, name %q, shadow %v, unlimited %v, stat %q\nwant %d per %v, name %q, shadow %v, unlimited %v, stat %q",
				c.domain, c.entries, rl.RequestsPerUnit, rl.Unit, rl.Name, rl.ShadowMode, rl.Unlimited, m.Metric,
				c.count, c.unit, c.name, c.shadow, c.unlim, c.stat)
		}
		if c.shares == "" {
			continue
		}
		other := append([]Entry(nil), c.entries...)
		want := !strings.HasPrefix(c.shares, "!")
		other[len(other)-1].Value = strings.TrimPrefix(c.shares, "!")
		o, _ := r.Match(c.domain, other)
		if (o.Key == m.Key) != want {
			t.Errorf("%s %v: key %q and %q for %q, want shared %v", c.domain, c.entries, m.Key, o.Key, c.shares, want)
		}
	}
}

// TestMetadata of envoy's configuration tests: the metadata of the rule
// that matched, nested mappings included.
func TestUpstreamMetadata(t *testing.T) {
	r, err := loadUpstream(t, false, "metadata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		entries []Entry
		want    map[string]any
	}{
		{entries("key1", "value1", "subkey1", "something"), map[string]any{"name": "service_1"}},
		{entries("key2", "something"), map[string]any{"service_with_quota": map[string]any{"name": "service_2"}}},
		{entries("key1", "value1", "subkey1", "subvalue1"), nil},
	} {
		m, ok := r.Match("test-domain", c.entries)
		if !ok || !reflect.DeepEqual(m.Rule.Metadata, c.want) {
			t.Errorf("%v: %v %v, want %v", c.entries, ok, m.Rule.Metadata, c.want)
		}
	}
}

func TestQuotaModeAndMetadata(t *testing.T) {
	r := mustParse(t, `
domain: d
descriptors:
  - key: q
    quota_mode: true
    metadata:
      tier: &t {name: gold, weight: 2, ratio: 0.5, on: true, none: null, list: [1, "x", {a: b}]}
      <<: {extra: yes, tier: ignored}
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: r
    metadata: {}
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: s
    metadata: {copy: *t, 1: one, when: 2026-01-02}
    rate_limit: {unit: minute, requests_per_unit: 3}
`)
	q, _ := r.Match("d", entries("q", "1"))
	want := map[string]any{
		"tier":  map[string]any{"name": "gold", "weight": 2.0, "ratio": 0.5, "on": true, "none": nil, "list": []any{1.0, "x", map[string]any{"a": "b"}}},
		"extra": "yes",
	}
	if !q.Rule.QuotaMode || !reflect.DeepEqual(q.Rule.Metadata, want) {
		t.Errorf("quota %v, metadata %#v", q.Rule.QuotaMode, q.Rule.Metadata)
	}
	rr, _ := r.Match("d", entries("r", "1"))
	if rr.Rule.QuotaMode || rr.Rule.Metadata != nil {
		t.Errorf("quota %v, metadata %#v", rr.Rule.QuotaMode, rr.Rule.Metadata)
	}
	s, _ := r.Match("d", entries("s", "1"))
	if s.Rule.Metadata["1"] != "one" || s.Rule.Metadata["when"] != "2026-01-02" || !reflect.DeepEqual(s.Rule.Metadata["copy"], want["tier"]) {
		t.Errorf("metadata %#v", s.Rule.Metadata)
	}
}

// Wildcards anywhere in a value, in file order after the exact values; a
// value written with its '*' matches that wildcard exactly, before any
// other wildcard, as envoy looks it up.
func TestWildcardsAnywhere(t *testing.T) {
	r := mustParse(t, `
domain: d
descriptors:
  - key: p
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: p
    value: /api/*/action
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: p
    value: "a*b*"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 3}
`)
	for _, c := range []struct {
		value string
		want  int64
	}{
		{"/api/1/action", 1}, // "*" comes first in the file
		{"/api/*/action", 2}, // itself, exactly
		{"a*b*", 3},
		{"axxbyy", 1},
	} {
		m, ok := r.Match("d", entries("p", c.value))
		if !ok || m.Rule.Limit.Count != c.want {
			t.Errorf("%s: %v %v, want %d", c.value, ok, m.Rule, c.want)
		}
	}
	for _, c := range []struct {
		pattern, value string
		want           bool
	}{
		{"bar*b", "barb", true},
		{"ab*ba", "aba", false},
		{"ab*ba", "abba", true},
		{"*x*", "x", true},
		{"*x*", "y", false},
		{"a**b", "ab", true},
		{"a*b*c", "acb", false},
		{"a*b*c", "abbc", true},
	} {
		if got := wildcardMatch(strings.Split(c.pattern, "*"), c.value); got != c.want {
			t.Errorf("%q matches %q: %v, want %v", c.pattern, c.value, got, c.want)
		}
	}
}

func FuzzWildcardMatch(f *testing.F) {
	f.Add("foo*bar*baz", "foo1bar2baz")
	f.Add("ab*ba", "aba")
	f.Add("*", "")
	f.Fuzz(func(t *testing.T, pattern, value string) {
		if !strings.Contains(pattern, "*") {
			return
		}
		parts := strings.Split(pattern, "*")
		got := wildcardMatch(parts, value)
		// The literal pattern always matches itself.
		if !wildcardMatch(parts, pattern) {
			t.Fatalf("%q does not match itself", pattern)
		}
		// Whatever matches contains every part, in order.
		if got {
			rest := value
			for _, p := range parts {
				i := strings.Index(rest, p)
				if i < 0 {
					t.Fatalf("%q matches %q without %q", pattern, value, p)
				}
				rest = rest[i+len(p):]
			}
		}
	})
}
