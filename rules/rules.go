package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/funnelrl/funnel"
	"go.yaml.in/yaml/v3"
)

// MaxFileSize bounds each rules file.
const MaxFileSize = 4 << 20

// Unit is the time unit of a rule, as the rate-limit protocol reports it.
type Unit uint8

// Units, in the order of envoy's RateLimitResponse.RateLimit.Unit names.
const (
	UnitUnknown Unit = iota
	UnitSecond
	UnitMinute
	UnitHour
	UnitDay
	UnitWeek
	UnitMonth
	UnitYear
)

var unitNames = [...]string{"unknown", "second", "minute", "hour", "day", "week", "month", "year"}

// unitDurations are envoy's: a week of 7 days, a month of 30 and a year of
// 365, each aligned to the Unix epoch.
var unitDurations = [...]time.Duration{0, time.Second, time.Minute, time.Hour, 24 * time.Hour,
	7 * 24 * time.Hour, 30 * 24 * time.Hour, 365 * 24 * time.Hour}

// String returns the unit's name as the rules file spells it.
func (u Unit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return "Unit(" + strconv.Itoa(int(u)) + ")"
}

// Duration returns the unit's length: a week is 7 days, a month 30 and a
// year 365, as envoy counts them.
func (u Unit) Duration() time.Duration {
	if int(u) < len(unitDurations) {
		return unitDurations[u]
	}
	return 0
}

// parseUnit accepts a unit name in any case, as envoy does.
func parseUnit(s string) (Unit, bool) {
	for i, n := range unitNames[1:] {
		if strings.EqualFold(s, n) {
			return Unit(i + 1), true
		}
	}
	return UnitUnknown, false
}

// Rule is the rate_limit of one descriptor.
type Rule struct {
	// Domain is the domain the rule belongs to.
	Domain string
	// FullKey is the rule's place in the tree as envoy names it in its
	// statistics: "domain.key_value.subkey". It is unique in a Set.
	FullKey string
	// Path is the rule's place in the tree as entries: the key and value
	// of each descriptor from the domain's first level down to the rule's
	// own (Value empty for a descriptor that matches any value of its
	// key). It must not be modified.
	Path []Entry
	// Name is rate_limit.name, used by replaces.
	Name string
	// Replaces lists the names of the rules this one replaces.
	Replaces []string
	// Unlimited rules admit everything without asking the store.
	Unlimited bool
	// RequestsPerUnit is rate_limit.requests_per_unit: the limit's count.
	RequestsPerUnit uint32
	// Unit and UnitMultiplier are how the limit is reported to clients
	// (RateLimit.unit and unit_multiplier): the period is UnitMultiplier
	// Units. A period that is not a whole number of seconds is reported
	// as the closest whole number of requests per second, with
	// UnitMultiplier 1; a calendar window as its day, week or month.
	Unit           Unit
	UnitMultiplier uint32
	// Limit is the limit a request that matches the rule is charged to.
	// It is validated; for RequestsPerUnit 0 and Unlimited it is the zero
	// Limit.
	Limit funnel.Limit
	// ShadowMode makes the rule never refuse the request: it reports OK in
	// its descriptor status, as envoy's service does, and its refusals show
	// in the metrics.
	ShadowMode bool
	// DetailedMetric names the rule's metric after the request's values
	// (detailed_metric): unbounded cardinality, as the user chose.
	DetailedMetric bool
	// QuotaMode makes the rule a quota (quota_mode): when it is over its
	// limit the request is refused only if every quota of the request is
	// over too, as envoy's service decides. Its descriptor status still
	// says OVER_LIMIT.
	QuotaMode bool
	// Metadata is the descriptor's metadata, which the rate-limit service
	// can merge into its response's dynamic metadata when the rule passes.
	// Its values are as encoding/json decodes into an any: nil, bool,
	// float64, string, []any and map[string]any. It is nil when the
	// descriptor has none, and must not be modified.
	Metadata map[string]any
	// File and Line are where the rule's descriptor is written.
	File string
	Line int
}

// Deny reports whether the rule refuses every request (requests_per_unit
// 0 and not unlimited).
func (r *Rule) Deny() bool { return !r.Unlimited && r.RequestsPerUnit == 0 }

// Entry is one key/value pair of a request's descriptor.
type Entry struct {
	Key, Value string
}

// Match is the rule a descriptor matched.
type Match struct {
	// Rule is the matched rule.
	Rule *Rule
	// Key is the store key the request is charged to: envoy's cache key
	// without its time window, domain_key1_value1_key2_value2_ (a value
	// matched by a share_threshold wildcard is written as the wildcard, so
	// that every value it matches shares one limit), followed by the
	// algorithm's name when the rule is not a fixed window (so that a
	// reload that changes a rule's algorithm starts new keys rather than
	// meeting another algorithm's state).
	Key string
	// Metric is the name to count the decision under: Rule.FullKey, or
	// with detailed_metric or value_to_metric the key envoy's statistics
	// use for them.
	Metric string
}

// Set is the rate-limit rules of one or more domains, loaded from one file
// or a directory of files. It is immutable once loaded and safe for concurrent
// use. A nil *Set has no domains.
//
// The rules are written in envoyproxy/ratelimit's configuration format, so
// that an existing file loads unchanged and answers as envoy's service does:
//
//	domain: messaging
//	descriptors:
//	  - key: message_type
//	    value: marketing
//	    descriptors:
//	      - key: to_number
//	        rate_limit:
//	          unit: day
//	          requests_per_unit: 5
//
// Every field of that format is read: domain; descriptors with key, value
// (each '*' in it matches any run of characters, so that "foo*" is a
// prefix, "/api/*/action" a prefix and a suffix, and "foo*bar*baz" three
// parts in order), rate_limit, descriptors, shadow_mode, quota_mode,
// metadata, detailed_metric, value_to_metric and share_threshold;
// rate_limit with unit (second, minute, hour, day, week, month, year),
// requests_per_unit, unlimited, name and replaces. A rule written in that
// format is a fixed window of one unit aligned to the Unix epoch (a month is
// 30 days and a year 365, as in envoy), exactly envoy's semantics.
//
// Funnel extends rate_limit with:
//
//	algorithm: gcra | funnel | leaky_bucket | fixed_window | sliding_window | sliding_log
//	period:    any Go duration (1m30s, 250ms), instead of unit
//	burst:     for gcra and leaky_bucket: units beyond the first a full bucket admits
//	           at once (default requests_per_unit-1)
//	delay:     for leaky_bucket: excess units that pass at once, or nodelay
//	ban:       a Go duration: once a key overflows it is refused that long
//	calendar:  for fixed_window, instead of unit or period: day, week (from
//	           Monday) or month, in time_zone
//	time_zone: an IANA time zone name for calendar windows (default UTC)
//
// requests_per_unit 0 refuses every request (envoy's way to block a value).
// Concurrency limits are not available in rules: Envoy's rate-limit
// protocol (ShouldRateLimit) asks once per request and has no way to
// release a lease when the request ends, nor to report its latency, which
// a concurrency limit that queues (burst and unit delay) follows. Take
// leases with FUNNEL.ACQUIRE and FUNNEL.RELEASE, POST /v1/acquire and
// /v1/release, or the net/http middleware instead. Time zones are read from the system's time
// zone database (or the one a binary embeds with time/tzdata).
//
// Funnel checks each level of the file for the fields that belong there,
// where envoy's service accepts any of its field names at any level and
// ignores those out of place.
type Set struct {
	domains map[string]*node
	rules   []*Rule
	files   []string
}

// node is a descriptor of the tree (a domain's root has no key).
type node struct {
	key, value     string
	wildcard       bool     // value has a '*'
	parts          []string // value split at each '*', for a wildcard
	rule           *Rule
	shareThreshold bool
	valueToMetric  bool
	detailedMetric bool
	line           int
	path           []Entry // from the domain's first level down to this one

	exact     map[Entry]*node // children with a value, wildcards by their literal value too
	keyOnly   map[string]*node
	wildcards []*node // children with a wildcard value, in file order
}

func (n *node) leaf() bool { return len(n.exact) == 0 && len(n.keyOnly) == 0 && len(n.wildcards) == 0 }

// wildcardMatch reports whether value matches a wildcard value split at
// its '*'s into parts: it starts with the first part, ends with the last,
// and holds the others in order between them, each '*' standing for any
// run of characters, the empty one included.
func wildcardMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(value, first) {
		return false
	}
	rest := value[len(first):]
	if !strings.HasSuffix(rest, last) {
		return false
	}
	rest = rest[:len(rest)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// Domains returns the domains the rules define, sorted.
func (r *Set) Domains() []string {
	if r == nil {
		return nil
	}
	ds := make([]string, 0, len(r.domains))
	for d := range r.domains {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}

// HasDomain reports whether the rules define domain.
func (r *Set) HasDomain(domain string) bool {
	if r == nil {
		return false
	}
	_, ok := r.domains[domain]
	return ok
}

// All returns every rule, in file order.
func (r *Set) All() []*Rule {
	if r == nil {
		return nil
	}
	return r.rules
}

// Files returns the files the rules were read from.
func (r *Set) Files() []string {
	if r == nil {
		return nil
	}
	return r.files
}

// Match finds the rule for a request's descriptor in domain, as
// envoyproxy/ratelimit does: the entries are walked in order down the
// descriptor tree; at each level an exact key and value is preferred (a
// wildcard value written with its '*'s matches itself exactly), then the
// first wildcard value (in file order) that matches the value, then the
// key alone. The rule applies only if it sits at the level of the
// descriptor's last entry. It reports false when nothing matches (the
// request is not limited by this descriptor).
func (r *Set) Match(domain string, entries []Entry) (Match, bool) {
	if r == nil || len(entries) == 0 {
		return Match{}, false
	}
	lvl := r.domains[domain]
	if lvl == nil {
		return Match{}, false
	}
	var (
		rule   *Rule
		shared uint64 // bit i: entry i matched a share_threshold wildcard
		extra  bool   // value_to_metric on the path
		path   [8]*node
		nodes  = path[:0]
	)
	for i, e := range entries {
		next := lvl.exact[e]
		if next == nil {
			for _, w := range lvl.wildcards {
				if w.key == e.Key && wildcardMatch(w.parts, e.Value) {
					next = w
					if w.shareThreshold && i < 64 {
						shared |= 1 << i
					}
					break
				}
			}
		}
		if next == nil {
			next = lvl.keyOnly[e.Key]
		}
		if next == nil {
			break
		}
		nodes = append(nodes, next)
		extra = extra || next.valueToMetric
		if next.rule != nil && i == len(entries)-1 {
			rule = next.rule
		}
		if next.leaf() {
			break
		}
		lvl = next
	}
	if rule == nil {
		return Match{}, false
	}
	m := Match{Rule: rule, Key: storeKey(domain, entries, nodes, shared, rule.Limit.Algorithm), Metric: rule.FullKey}
	if rule.DetailedMetric || extra {
		m.Metric = metricKey(domain, entries, nodes, shared, rule.DetailedMetric)
	}
	return m, true
}

// KeyFor returns the store key of entries under a limit that is not from
// the rules (a limit override sent with the request): envoy's cache key
// without its window, like Match.Key.
func KeyFor(domain string, entries []Entry) string {
	return storeKey(domain, entries, nil, 0, funnel.FixedWindow)
}

// storeKey builds envoy's cache key (domain_k1_v1_k2_v2_) without the
// window start, with share_threshold wildcards in place of the values they
// matched, and the algorithm's name when it is not a fixed window.
func storeKey(domain string, entries []Entry, nodes []*node, shared uint64, a funnel.Algorithm) string {
	n := len(domain) + 1
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	var b strings.Builder
	b.Grow(n + 16)
	b.WriteString(domain)
	b.WriteByte('_')
	for i, e := range entries {
		b.WriteString(e.Key)
		b.WriteByte('_')
		if i < 64 && shared&(1<<i) != 0 {
			b.WriteString(nodes[i].value)
		} else {
			b.WriteString(e.Value)
		}
		b.WriteByte('_')
	}
	if a != funnel.FixedWindow {
		b.WriteString(a.String())
	}
	return b.String()
}

// metricKey builds the statistics key envoy uses with detailed_metric
// (every value) or value_to_metric (the value of the entries that ask for
// it, and of those matched exactly), share_threshold wildcards written as
// the wildcard.
func metricKey(domain string, entries []Entry, nodes []*node, shared uint64, detailed bool) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		var nd *node
		if i < len(nodes) {
			nd = nodes[i]
		}
		switch {
		case i < 64 && shared&(1<<i) != 0:
			b.WriteByte('_')
			b.WriteString(nd.value)
		case detailed:
			b.WriteByte('_')
			b.WriteString(e.Value)
		case nd == nil:
		case nd.wildcard && !nd.valueToMetric:
			b.WriteByte('_')
			b.WriteString(nd.value)
		case nd.value != "" || nd.valueToMetric:
			if e.Value != "" {
				b.WriteByte('_')
				b.WriteString(e.Value)
			}
		}
	}
	return b.String()
}

// Options adjust how rules are loaded.
type Options struct {
	// MergeDomains lets several files define the same domain, their
	// descriptors merged (envoy's MERGE_DOMAIN_CONFIG); by default a
	// domain defined twice is an error.
	MergeDomains bool
	// MaxErrors bounds the problems reported for one load (the first
	// ones, then one that says there were more): 0 means 20, a negative
	// number no bound.
	MaxErrors int
}

// ErrInvalid is wrapped by every error that a rules file is not valid.
var ErrInvalid = errors.New("rules: invalid")

// Error is one problem in a rules file: where it is, the path of the
// field in the file ("descriptors[1].rate_limit.unit") and what is wrong.
// It wraps ErrInvalid.
type Error struct {
	// File is the file's name as it was loaded.
	File string
	// Line and Column locate the problem, from 1; 0 when it concerns the
	// whole file.
	Line, Column int
	// Field is the path of the field, such as descriptors[1].rate_limit.unit.
	Field string
	// Msg says what is wrong.
	Msg string
}

// Error formats the problem as file:line:column: field: message.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("rules: ")
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// defaultMaxErrors bounds the problems reported for one load unless
// Options.MaxErrors says otherwise.
const defaultMaxErrors = 20

// Parse reads one rules file (one domain) from r; name is the file's
// name in errors. The error, if any, joins one *Error per problem.
func Parse(r io.Reader, name string, opts Options) (*Set, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("rules: reading %s: %w", name, err)
	}
	b := newBuilder(opts)
	b.file(name, data)
	return b.finish()
}

// Load reads the rules at path: a file, or a directory whose *.yaml
// and *.yml files (not those whose names start with a dot, and not
// subdirectories) each define a domain, as envoy loads its runtime
// directory. Symbolic links are followed, so a Kubernetes ConfigMap volume
// loads as it is mounted.
func Load(path string, opts Options) (*Set, error) {
	files, err := ruleFiles(path)
	if err != nil {
		return nil, err
	}
	b := newBuilder(opts)
	for _, f := range files {
		data, err := readRulesFile(f)
		if err != nil {
			return nil, err
		}
		b.file(f, data)
	}
	return b.finish()
}

// ruleFiles lists the files that path stands for.
func ruleFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	var files []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		p := filepath.Join(path, n)
		if fi, err := os.Stat(p); err != nil || fi.IsDir() {
			continue // a dangling link or a directory named like a file
		}
		files = append(files, p)
	}
	return files, nil
}

func readRulesFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("rules: reading %s: %w", name, err)
	}
	return data, nil
}

// builder accumulates files into a Set and their problems.
type builder struct {
	opts      Options
	rules     *Set
	errs      []error
	name      string            // current file
	where     map[string]string // the file of each domain
	count     int               // descriptors read, against maxDescriptors
	metaCount int               // metadata values read, against maxMetadataValues
}

func newBuilder(opts Options) *builder {
	return &builder{opts: opts, rules: &Set{domains: map[string]*node{}}, where: map[string]string{}}
}

func (b *builder) finish() (*Set, error) {
	if len(b.errs) > 0 {
		return nil, errors.Join(b.errs...)
	}
	return b.rules, nil
}

// fail records a problem at n (nil: the whole file).
func (b *builder) fail(n *yaml.Node, field, format string, a ...any) {
	limit := b.opts.MaxErrors
	if limit == 0 {
		limit = defaultMaxErrors
	}
	if len(b.errs) == limit {
		b.errs = append(b.errs, &Error{File: b.name, Msg: "too many errors"})
	}
	if limit > 0 && len(b.errs) > limit {
		return
	}
	e := &Error{File: b.name, Field: field, Msg: fmt.Sprintf(format, a...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	b.errs = append(b.errs, e)
}

// file adds one file's domain.
func (b *builder) file(name string, data []byte) {
	b.name = name
	b.rules.files = append(b.rules.files, name)
	if len(data) > MaxFileSize {
		b.fail(nil, "", "larger than %d bytes", MaxFileSize)
		return
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			b.fail(&yaml.Node{Line: 1, Column: 1}, "domain", "the file is empty; a domain is required")
			return
		}
		b.yamlError(err)
		return
	}
	var more yaml.Node
	if err := dec.Decode(&more); err == nil {
		if len(more.Content) > 0 && !isNull(more.Content[0]) {
			b.fail(more.Content[0], "", "a second YAML document; a rules file holds one domain")
		}
	} else if !errors.Is(err, io.EOF) {
		b.yamlError(err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	b.domain(name, root)
}

// domain adds the domain of one file, or of one decoded configuration,
// whose root mapping is root.
func (b *builder) domain(name string, root *yaml.Node) {
	fields := b.mapping(root, "", "domain", "descriptors")
	if fields == nil {
		return
	}
	domain := b.str(fields["domain"], "domain")
	if domain == "" {
		b.fail(orNode(fields["domain"], root), "domain", "a domain is required")
		return
	}
	dom, dup := b.rules.domains[domain]
	if dup && !b.opts.MergeDomains {
		b.fail(fields["domain"], "domain", "domain %q is already defined in %s", domain, b.where[domain])
		return
	}
	if !dup {
		dom = &node{}
		b.rules.domains[domain] = dom
		b.where[domain] = name
	}
	b.descriptors(dom, fields["descriptors"], "descriptors", domain, domain, 1)
}

// yamlError reports a syntax error from yaml.v3, which carries its line in
// the message ("yaml: line 3: ...").
func (b *builder) yamlError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &Error{File: b.name, Msg: msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if l, err := strconv.Atoi(rest[:i]); err == nil {
				e.Line, e.Column, e.Msg = l, 1, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	b.errs = append(b.errs, e)
}

func orNode(n, def *yaml.Node) *yaml.Node {
	if n != nil {
		return n
	}
	return def
}

func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// deref follows an alias to its anchored node.
func deref(n *yaml.Node) *yaml.Node {
	if n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

// mapping checks that n is a mapping whose keys are among known and appear
// once, and returns its values by key. A null n is an empty mapping. Merge
// keys (<<: *anchor, or a list of anchors) bring in the fields of other
// mappings, which the mapping's own fields override.
func (b *builder) mapping(n *yaml.Node, path string, known ...string) map[string]*yaml.Node {
	n = deref(n)
	if isNull(n) {
		return map[string]*yaml.Node{}
	}
	if n.Kind != yaml.MappingNode {
		b.fail(n, path, "want a mapping, not %s", kindOf(n))
		return nil
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	lines := map[string]int{}
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		f := join(path, k.Value)
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			v = deref(v)
			if v.Kind == yaml.SequenceNode {
				merged = append(merged, v.Content...)
			} else {
				merged = append(merged, v)
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			b.fail(k, path, "unsupported key %s", kindOf(k))
			continue
		}
		if !contains(known, k.Value) {
			b.fail(k, f, "unknown field (want one of %s)", strings.Join(known, ", "))
			continue
		}
		if l, dup := lines[k.Value]; dup {
			b.fail(k, f, "defined twice (first at line %d)", l)
			continue
		}
		lines[k.Value] = k.Line
		out[k.Value] = v
	}
	for _, m := range merged {
		if m = deref(m); m.Kind != yaml.MappingNode {
			b.fail(m, path, "a merge key wants a mapping, not %s", kindOf(m))
			continue
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				b.fail(k, path, "unsupported key %s in a merged mapping", kindOf(k))
				continue
			}
			if !contains(known, k.Value) {
				b.fail(k, join(path, k.Value), "unknown field (want one of %s)", strings.Join(known, ", "))
				continue
			}
			if _, set := out[k.Value]; !set {
				out[k.Value] = v
			}
		}
	}
	return out
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%s %q", strings.TrimPrefix(n.Tag, "!!"), n.Value)
	}
	return "an alias"
}

// str reads a scalar as text ("" when absent or null).
func (b *builder) str(n *yaml.Node, path string) string {
	n = deref(n)
	if isNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		b.fail(n, path, "want a string, not %s", kindOf(n))
		return ""
	}
	return n.Value
}

// boolean reads a true/false scalar (false when absent or null).
func (b *builder) boolean(n *yaml.Node, path string) bool {
	n = deref(n)
	if isNull(n) {
		return false
	}
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		b.fail(n, path, "want true or false, not %s", kindOf(n))
		return false
	}
	return v
}

// integer reads a non-negative integer at most max.
func (b *builder) integer(n *yaml.Node, path string, max uint64) (uint64, bool) {
	n = deref(n)
	if isNull(n) {
		return 0, false
	}
	v, err := strconv.ParseUint(n.Value, 10, 64)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil {
		b.fail(n, path, "want a whole number from 0 to %d, not %s", max, kindOf(n))
		return 0, false
	}
	if v > max {
		b.fail(n, path, "%d is more than %d", v, max)
		return 0, false
	}
	return v, true
}

// duration reads a positive Go duration ("90s", "1h30m").
func (b *builder) duration(n *yaml.Node, path string) (time.Duration, bool) {
	n = deref(n)
	if isNull(n) {
		return 0, false
	}
	d, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		b.fail(n, path, "want a duration such as 90s or 1h30m, not %s", kindOf(n))
		return 0, false
	}
	if d <= 0 {
		b.fail(n, path, "%v is not positive", d)
		return 0, false
	}
	return d, true
}

// Bounds on a domain's tree, which YAML aliases could otherwise make
// infinite (an alias of an ancestor) or huge.
const (
	maxDepth       = 32
	maxDescriptors = 100000
)

// descriptors reads a list of descriptors under parent.
func (b *builder) descriptors(parent *node, n *yaml.Node, path, domain, fullKey string, depth int) {
	if isNull(n) {
		return
	}
	if n.Kind == yaml.AliasNode {
		b.fail(n, path, "an alias cannot stand for descriptors (only for values and rate_limit blocks)")
		return
	}
	if depth > maxDepth {
		b.fail(n, path, "descriptors nested deeper than %d levels", maxDepth)
		return
	}
	if n.Kind != yaml.SequenceNode {
		b.fail(n, path, "want a list of descriptors, not %s", kindOf(n))
		return
	}
	for i, item := range n.Content {
		if b.count++; b.count > maxDescriptors {
			b.fail(item, path, "more than %d descriptors", maxDescriptors)
			return
		}
		b.descriptor(parent, item, fmt.Sprintf("%s[%d]", path, i), domain, fullKey, depth)
	}
}

var descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode",
	"quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata"}

var rateLimitFields = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces",
	"algorithm", "period", "burst", "delay", "ban", "calendar", "time_zone"}

// descriptor reads one descriptor into parent's children.
func (b *builder) descriptor(parent *node, n *yaml.Node, path, domain, parentKey string, depth int) {
	if n.Kind == yaml.AliasNode {
		b.fail(n, path, "an alias cannot stand for a descriptor (only for values and rate_limit blocks)")
		return
	}
	f := b.mapping(n, path, descriptorFields...)
	if f == nil {
		return
	}
	d := &node{line: n.Line}
	d.key = b.str(f["key"], join(path, "key"))
	if d.key == "" {
		b.fail(orNode(f["key"], n), join(path, "key"), "a descriptor needs a key")
		return
	}
	d.value = b.str(f["value"], join(path, "value"))
	if strings.Contains(d.value, "*") {
		d.wildcard, d.parts = true, strings.Split(d.value, "*")
	}
	d.path = append(slices.Clip(parent.path), Entry{d.key, d.value})
	d.shareThreshold = b.boolean(f["share_threshold"], join(path, "share_threshold"))
	d.valueToMetric = b.boolean(f["value_to_metric"], join(path, "value_to_metric"))
	d.detailedMetric = b.boolean(f["detailed_metric"], join(path, "detailed_metric"))
	shadow := b.boolean(f["shadow_mode"], join(path, "shadow_mode"))
	quota := b.boolean(f["quota_mode"], join(path, "quota_mode"))
	metadata := b.metadata(f["metadata"], join(path, "metadata"))
	if d.shareThreshold && !d.wildcard {
		b.fail(f["share_threshold"], join(path, "share_threshold"), "only a wildcard value (with a '*') can share its limit")
	}
	full := parentKey + "." + d.key
	if d.value != "" {
		full += "_" + d.value
	}
	// Duplicates: the same key and value (or the same key without value)
	// twice at one level.
	var prev *node
	if d.value != "" {
		prev = parent.exact[Entry{d.key, d.value}]
	} else {
		prev = parent.keyOnly[d.key]
	}
	if prev != nil {
		b.fail(orNode(f["value"], f["key"]), path, "descriptor %s is already defined at line %d", full[len(domain)+1:], prev.line)
		return
	}
	if rl := f["rate_limit"]; !isNull(rl) {
		d.rule = b.rateLimit(rl, join(path, "rate_limit"), domain, full)
		if d.rule != nil {
			d.rule.ShadowMode, d.rule.QuotaMode, d.rule.Metadata = shadow, quota, metadata
			d.rule.DetailedMetric = d.detailedMetric
			d.rule.File, d.rule.Line = b.name, n.Line
			d.rule.Path = d.path
			b.rules.rules = append(b.rules.rules, d.rule)
		}
	}
	if d.wildcard {
		parent.wildcards = append(parent.wildcards, d)
	}
	switch {
	case d.value != "":
		if parent.exact == nil {
			parent.exact = map[Entry]*node{}
		}
		parent.exact[Entry{d.key, d.value}] = d
	default:
		if parent.keyOnly == nil {
			parent.keyOnly = map[string]*node{}
		}
		parent.keyOnly[d.key] = d
	}
	b.descriptors(d, f["descriptors"], join(path, "descriptors"), domain, full, depth+1)
}

// rateLimit reads a rate_limit block into a validated Rule (nil on error).
func (b *builder) rateLimit(n *yaml.Node, path, domain, fullKey string) *Rule {
	before := len(b.errs)
	f := b.mapping(n, path, rateLimitFields...)
	if f == nil {
		return nil
	}
	r := &Rule{Domain: domain, FullKey: fullKey}
	r.Name = b.str(f["name"], join(path, "name"))
	r.Unlimited = b.boolean(f["unlimited"], join(path, "unlimited"))
	b.replaces(r, f["replaces"], path)
	if rpu, ok := b.integer(f["requests_per_unit"], join(path, "requests_per_unit"), math.MaxUint32); ok {
		r.RequestsPerUnit = uint32(rpu)
	}
	if r.Unlimited {
		b.unlimitedTakesNoLimit(f, path)
		if len(b.errs) > before {
			return nil
		}
		return r
	}

	// The limit's fields go into a funnel.Spec, which builds it as every
	// edge builds a limit; here only the window's forms (unit, period or
	// calendar) and the rule's own checks are read.
	spec := funnel.Spec{Algorithm: "fixed_window", Count: int64(r.RequestsPerUnit)} // before unitOf rescales it
	b.algorithm(&spec, f["algorithm"], path)
	b.window(r, &spec, n, f, path)
	b.limitOptions(&spec, f, path)
	if len(b.errs) > before {
		return nil
	}
	if !b.limit(r, spec, n, f, path) {
		return nil
	}
	return r
}

// replaces reads rate_limit.replaces, a list of {name: ...}, into
// r.Replaces.
func (b *builder) replaces(r *Rule, n *yaml.Node, path string) {
	rep := deref(n)
	if isNull(rep) {
		return
	}
	if rep.Kind != yaml.SequenceNode {
		b.fail(rep, join(path, "replaces"), "want a list of {name: ...}, not %s", kindOf(rep))
		return
	}
	for i, it := range rep.Content {
		p := fmt.Sprintf("%s.replaces[%d]", path, i)
		rf := b.mapping(it, p, "name")
		if rf == nil {
			continue
		}
		name := b.str(rf["name"], join(p, "name"))
		switch {
		case name == "":
			b.fail(orNode(rf["name"], it), join(p, "name"), "a replaced rule needs a name")
		case name == r.Name:
			b.fail(rf["name"], join(p, "name"), "a rule cannot replace itself")
		default:
			r.Replaces = append(r.Replaces, name)
		}
	}
}

// limitFields are the fields of rate_limit that an unlimited rule does not
// take.
var limitFields = []string{"unit", "period", "calendar", "time_zone", "algorithm", "burst", "delay", "ban"}

// unlimitedTakesNoLimit reports each field of a limit that an unlimited
// rule sets.
func (b *builder) unlimitedTakesNoLimit(f map[string]*yaml.Node, path string) {
	for _, k := range limitFields {
		if !isNull(f[k]) {
			b.fail(f[k], join(path, k), "an unlimited rule takes no %s", k)
		}
	}
}

// algorithm reads rate_limit.algorithm into spec; a concurrency limit is
// refused.
func (b *builder) algorithm(spec *funnel.Spec, n *yaml.Node, path string) {
	if isNull(n) {
		return
	}
	spec.Algorithm = b.str(n, join(path, "algorithm"))
	if a, err := funnel.ParseAlgorithm(spec.Algorithm); err == nil && a == funnel.Concurrency {
		b.fail(n, join(path, "algorithm"), "concurrency limits need a release (with the request's latency, for their delay), which Envoy's rate-limit protocol cannot send: take leases with FUNNEL.ACQUIRE/FUNNEL.RELEASE, /v1/acquire and /v1/release, or the middleware")
	}
}

// window reads the window, exactly one of unit, period and calendar, into
// spec, and how it is reported into r.
func (b *builder) window(r *Rule, spec *funnel.Spec, n *yaml.Node, f map[string]*yaml.Node, path string) {
	un, pn, cn := f["unit"], f["period"], f["calendar"]
	set := 0
	for _, x := range []*yaml.Node{un, pn, cn} {
		if !isNull(x) {
			set++
		}
	}
	switch {
	case set == 0:
		b.fail(n, join(path, "unit"), "a rate limit needs a unit (second, minute, hour, day, week, month or year), a period or a calendar")
	case set > 1:
		b.fail(n, path, "give only one of unit, period and calendar")
	case !isNull(un):
		name := b.str(un, join(path, "unit"))
		u, ok := parseUnit(name)
		if !ok {
			b.fail(un, join(path, "unit"), "invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", name)
			break
		}
		spec.Period, r.Unit, r.UnitMultiplier = u.Duration(), u, 1
	case !isNull(pn):
		if d, ok := b.duration(pn, join(path, "period")); ok {
			spec.Period = d
			r.Unit, r.UnitMultiplier, r.RequestsPerUnit = unitOf(d, r.RequestsPerUnit)
		}
	default:
		spec.Calendar = b.str(cn, join(path, "calendar"))
		r.UnitMultiplier = 1
	}
}

// limitOptions reads the limit's other fields into spec: time_zone, burst,
// delay (a number, or nodelay) and ban.
func (b *builder) limitOptions(spec *funnel.Spec, f map[string]*yaml.Node, path string) {
	if tz := f["time_zone"]; !isNull(tz) {
		spec.TimeZone = b.str(tz, join(path, "time_zone"))
	}
	if bn := f["burst"]; !isNull(bn) {
		if v, ok := b.integer(bn, join(path, "burst"), math.MaxInt64); ok {
			burst := int64(v)
			spec.Burst = &burst
		}
	}
	if dn := deref(f["delay"]); !isNull(dn) {
		if dn.Value == "nodelay" {
			spec.NoDelay = true
		} else if v, ok := b.integer(dn, join(path, "delay"), math.MaxInt64); ok {
			delay := int64(v)
			spec.Delay = &delay
		}
	}
	if bn := f["ban"]; !isNull(bn) {
		if d, ok := b.duration(bn, join(path, "ban")); ok {
			spec.Ban = d
		}
	}
}

// limit builds spec's limit into r, reporting a calendar window's unit, and
// reports the spec's error at the field it names. A rule of 0 requests per
// unit refuses everything and keeps no limit; its fields are checked all
// the same.
func (b *builder) limit(r *Rule, spec funnel.Spec, n *yaml.Node, f map[string]*yaml.Node, path string) bool {
	count := spec.Count
	spec.Count = max(count, 1)
	lim, err := spec.Limit()
	if err != nil {
		var se *funnel.SpecError
		errors.As(err, &se)
		at, field := n, path
		if se != nil && se.Field != "" {
			key := se.Field
			if key == "nodelay" {
				key = "delay"
			}
			at, field = orNode(f[key], n), join(path, key)
			err = se.Reason
		}
		b.fail(at, field, "%s", strings.TrimPrefix(err.Error(), "funnel: "))
		return false
	}
	switch lim.Calendar {
	case funnel.Daily:
		r.Unit = UnitDay
	case funnel.Weekly:
		r.Unit = UnitWeek
	case funnel.Monthly:
		r.Unit = UnitMonth
	}
	if count > 0 {
		r.Limit = lim
	}
	return true
}

// unitOf picks how a period is reported: the largest unit that divides it,
// with the number of units as multiplier; a period that is not a whole
// number of seconds is reported per second, its count scaled to the
// closest whole number (at least 1 when count is not 0).
func unitOf(period time.Duration, count uint32) (Unit, uint32, uint32) {
	if period%time.Second == 0 {
		for u := UnitYear; u >= UnitSecond; u-- {
			d := u.Duration()
			if period%d == 0 && period/d <= math.MaxUint32 {
				return u, uint32(period / d), count
			}
		}
	}
	perSecond := math.Round(float64(count) * float64(time.Second) / float64(period))
	switch {
	case count == 0:
		perSecond = 0
	case perSecond < 1:
		perSecond = 1
	case perSecond > math.MaxUint32:
		perSecond = math.MaxUint32
	}
	return UnitSecond, 1, uint32(perSecond)
}
