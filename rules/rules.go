package rules

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/funnelrl/funnel"
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
	// ChargeOverLimit (charge_over_limit, Funnel's) charges every hit of
	// the rule, the hits that overflow its limit too, as envoyproxy/ratelimit
	// counts hits by default (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
	// false): the key goes into debt (funnel.Limiter.Charge) and its
	// descriptor status says OVER_LIMIT while it is over its limit. It is
	// meant for costs known afterwards, such as the tokens of a response
	// that Envoy sends when its stream ends (apply_on_stream_done).
	ChargeOverLimit bool
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
// metadata, detailed_metric, value_to_metric and share_threshold (and
// Funnel's charge_over_limit: see Rule.ChargeOverLimit);
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

// child returns the child of n that e matches: the one of its key and
// value, else the first wildcard value (in file order) that matches the
// value, else the key alone; share reports a share_threshold wildcard.
func (n *node) child(e Entry) (next *node, share bool) {
	if next := n.exact[e]; next != nil {
		return next, false
	}
	for _, w := range n.wildcards {
		if w.key == e.Key && wildcardMatch(w.parts, e.Value) {
			return w, w.shareThreshold
		}
	}
	return n.keyOnly[e.Key], false
}

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
		next, share := lvl.child(e)
		if next == nil {
			break
		}
		if share && i < 64 {
			shared |= 1 << i
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
	// ones, each file's in the order they are written, then one that says
	// there were more): 0 means 20, a negative number 10,000.
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
