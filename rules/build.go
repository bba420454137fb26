package rules

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/funnelrl/funnel"
	"go.yaml.in/yaml/v3"
)

// builder accumulates domains, decoded from files or converted from
// configurations, into a Set and their problems.
type builder struct {
	opts      Options
	rules     *Set
	errs      []error
	problems  int               // problems found, reported or past MaxErrors
	name      string            // current file
	where     map[string]string // the file of each domain
	count     int               // descriptors read, against maxDescriptors
	metaCount int               // metadata values read, against maxMetadataValues
}

func newBuilder(opts Options) *builder {
	return &builder{opts: opts, rules: &Set{domains: map[string]*node{}}, where: map[string]string{}}
}

func (b *builder) finish() (*Set, error) {
	if len(b.errs) == 0 {
		return b.rules, nil
	}
	limit := b.opts.MaxErrors
	switch {
	case limit == 0:
		limit = defaultMaxErrors
	case limit < 0 || limit > maxKept:
		limit = maxKept
	}
	errs := b.errs
	if len(errs) > limit {
		errs = errs[:limit:limit]
	}
	if b.problems > len(errs) {
		file := b.name // of the first problem left out
		if len(b.errs) > len(errs) {
			file = b.errs[len(errs)].(*Error).File
		}
		errs = append(errs, &Error{File: file, Msg: "too many errors"})
	}
	return nil, errors.Join(errs...)
}

// maxKept bounds the problems kept for one load, of which Options.MaxErrors
// are reported.
const maxKept = 10000

// fail records a problem at at (zero: no place, as for the whole file or a
// configuration not read from a file).
func (b *builder) fail(at pos, field, format string, a ...any) {
	b.problems++
	if len(b.errs) < maxKept {
		b.errs = append(b.errs, &Error{File: b.name, Line: int(at.line), Column: int(at.column), Field: field, Msg: fmt.Sprintf(format, a...)})
	}
}

// sortErrors puts the problems of the current file, from the from-th on,
// in the order they are written in the file.
func (b *builder) sortErrors(from int) {
	slices.SortStableFunc(b.errs[from:], func(x, y error) int {
		ex, ey := x.(*Error), y.(*Error)
		return cmp.Or(cmp.Compare(ex.Line, ey.Line), cmp.Compare(ex.Column, ey.Column))
	})
}

// file adds one file's domain.
func (b *builder) file(name string, data []byte) {
	defer b.sortErrors(len(b.errs))
	b.name = name
	b.rules.files = append(b.rules.files, name)
	if len(data) > MaxFileSize {
		b.fail(pos{}, "", "larger than %d bytes", MaxFileSize)
		return
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			b.fail(pos{1, 1}, "domain", "the file is empty; a domain is required")
			return
		}
		b.yamlError(err)
		return
	}
	var more yaml.Node
	if err := dec.Decode(&more); err == nil {
		if len(more.Content) > 0 && !isNull(more.Content[0]) {
			b.fail(posOf(more.Content[0]), "", "a second YAML document; a rules file holds one domain")
		}
	} else if !errors.Is(err, io.EOF) {
		b.yamlError(err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	var d fileDomain
	if r := deref(root); r.Kind != yaml.MappingNode && !isNull(r) {
		b.fail(posOf(r), "", "want a mapping, not %s", kindOf(r))
		return
	}
	b.decodeStruct(root, "", reflect.ValueOf(&d).Elem())
	b.domain(name, &d, posOf(root))
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
	b.problems++
	if len(b.errs) < maxKept {
		b.errs = append(b.errs, e)
	}
}

// domain adds the domain of one file, or of one configuration, written at
// at.
func (b *builder) domain(name string, d *fileDomain, at pos) {
	domain := d.Domain.V
	if domain == "" {
		if !d.Domain.Bad {
			b.fail(d.Domain.At.or(at), "domain", "a domain is required")
		}
		return
	}
	dom, dup := b.rules.domains[domain]
	if dup && !b.opts.MergeDomains {
		b.fail(d.Domain.At, "domain", "domain %q is already defined in %s", domain, b.where[domain])
		return
	}
	if !dup {
		dom = &node{}
		b.rules.domains[domain] = dom
		b.where[domain] = name
	}
	b.descriptors(dom, &d.Descriptors, "descriptors", domain, domain, 1)
}

// Bounds on a domain's tree, which YAML aliases could otherwise make
// huge, and a configuration deep.
const (
	maxDepth       = 32
	maxDescriptors = 100000
)

// descriptors adds a list of descriptors under parent.
func (b *builder) descriptors(parent *node, list *field[descriptorList], path, domain, fullKey string, depth int) {
	if !list.Set {
		return
	}
	if depth > maxDepth {
		b.fail(list.At, path, "descriptors nested deeper than %d levels", maxDepth)
		return
	}
	for i := range list.V {
		d := &list.V[i]
		if b.count++; b.count > maxDescriptors {
			b.fail(d.at, path, "more than %d descriptors", maxDescriptors)
			return
		}
		if !d.bad {
			b.descriptor(parent, d, fmt.Sprintf("%s[%d]", path, i), domain, fullKey, depth)
		}
	}
}

// descriptor adds one descriptor to parent's children.
func (b *builder) descriptor(parent *node, d *fileDescriptor, path, domain, parentKey string, depth int) {
	if d.Key.V == "" {
		if !d.Key.Bad {
			b.fail(d.Key.At.or(d.at), join(path, "key"), "a descriptor needs a key")
		}
		return
	}
	n := &node{
		key: d.Key.V, value: d.Value.V, line: int(d.at.line),
		shareThreshold: d.ShareThreshold.V, valueToMetric: d.ValueToMetric.V, detailedMetric: d.DetailedMetric.V,
	}
	if strings.Contains(n.value, "*") {
		n.wildcard, n.parts = true, strings.Split(n.value, "*")
	}
	n.path = append(slices.Clip(parent.path), Entry{n.key, n.value})
	if n.shareThreshold && !n.wildcard {
		b.fail(d.ShareThreshold.At, join(path, "share_threshold"), "only a wildcard value (with a '*') can share its limit")
	}
	full := parentKey + "." + n.key
	if n.value != "" {
		full += "_" + n.value
	}
	// Duplicates: the same key and value (or the same key without value)
	// twice at one level.
	var prev *node
	if n.value != "" {
		prev = parent.exact[Entry{n.key, n.value}]
	} else {
		prev = parent.keyOnly[n.key]
	}
	if prev != nil {
		where := "" // a configuration not read from a file has no lines
		if prev.line > 0 {
			where = fmt.Sprintf(" at line %d", prev.line)
		}
		b.fail(d.Value.At.or(d.Key.At), path, "descriptor %s is already defined%s", full[len(domain)+1:], where)
		return
	}
	if d.RateLimit.Set {
		n.rule = b.rateLimit(&d.RateLimit.V, d.RateLimit.At, join(path, "rate_limit"), domain, full)
		if n.rule != nil {
			n.rule.ShadowMode, n.rule.QuotaMode, n.rule.Metadata = d.ShadowMode.V, d.QuotaMode.V, d.Metadata.V
			n.rule.ChargeOverLimit = d.ChargeOverLimit.V
			n.rule.DetailedMetric = n.detailedMetric
			n.rule.File, n.rule.Line = b.name, int(d.at.line)
			n.rule.Path = n.path
			b.rules.rules = append(b.rules.rules, n.rule)
		}
	}
	if n.wildcard {
		parent.wildcards = append(parent.wildcards, n)
	}
	if n.value != "" {
		if parent.exact == nil {
			parent.exact = map[Entry]*node{}
		}
		parent.exact[Entry{n.key, n.value}] = n
	} else {
		if parent.keyOnly == nil {
			parent.keyOnly = map[string]*node{}
		}
		parent.keyOnly[n.key] = n
	}
	b.descriptors(n, &d.Descriptors, join(path, "descriptors"), domain, full, depth+1)
}

// rateLimit builds a rate_limit block, written at at, into a validated
// Rule (nil on error).
func (b *builder) rateLimit(rl *fileRateLimit, at pos, path, domain, fullKey string) *Rule {
	before := b.problems
	r := &Rule{Domain: domain, FullKey: fullKey, Name: rl.Name.V, Unlimited: rl.Unlimited.V, RequestsPerUnit: rl.RequestsPerUnit.V}
	b.replaces(r, &rl.Replaces, path)
	if r.Unlimited {
		for _, k := range limitFields {
			if f := fieldNamed(rl, k); f.given() {
				b.fail(f.where(), join(path, k), "an unlimited rule takes no %s", k)
			}
		}
		if b.problems > before {
			return nil
		}
		return r
	}

	// The limit's fields go into a funnel.Spec, which builds it as every
	// edge builds a limit; here only the window's forms (unit, period or
	// calendar) and the rule's own checks are read.
	spec := funnel.Spec{Algorithm: "fixed_window", Count: int64(r.RequestsPerUnit)} // before unitOf rescales it
	if rl.Algorithm.Set {
		spec.Algorithm = rl.Algorithm.V
		if a, err := funnel.ParseAlgorithm(spec.Algorithm); err == nil && a == funnel.Concurrency {
			b.fail(rl.Algorithm.At, join(path, "algorithm"), "concurrency limits need a release (with the request's latency, for their delay), which Envoy's rate-limit protocol cannot send: take leases with FUNNEL.ACQUIRE/FUNNEL.RELEASE, /v1/acquire and /v1/release, or the middleware")
		}
	}
	b.window(r, &spec, rl, at, path)
	spec.TimeZone, spec.Ban = rl.TimeZone.V, rl.Ban.V
	if rl.Burst.Set {
		spec.Burst = &rl.Burst.V
	}
	switch {
	case rl.Delay.V.nodelay:
		spec.NoDelay = true
	case rl.Delay.Set:
		spec.Delay = &rl.Delay.V.n
	}
	if b.problems > before || !b.limit(r, spec, rl, at, path) {
		return nil
	}
	return r
}

// replaces reads rate_limit.replaces into r.Replaces.
func (b *builder) replaces(r *Rule, list *field[replaceList], path string) {
	for i, it := range list.V {
		p := fmt.Sprintf("%s.replaces[%d].name", path, i)
		switch name := it.V.Name; {
		case name.V == "":
			b.fail(name.At.or(it.At), p, "a replaced rule needs a name")
		case name.V == r.Name:
			b.fail(name.At, p, "a rule cannot replace itself")
		default:
			r.Replaces = append(r.Replaces, name.V)
		}
	}
}

// limitFields are the fields of rate_limit that an unlimited rule does not
// take.
var limitFields = []string{"unit", "period", "calendar", "time_zone", "algorithm", "burst", "delay", "ban"}

// window reads the window, exactly one of unit, period and calendar, into
// spec, and how it is reported into r.
func (b *builder) window(r *Rule, spec *funnel.Spec, rl *fileRateLimit, at pos, path string) {
	set := 0
	for _, given := range []bool{rl.Unit.Set, rl.Period.Set, rl.Calendar.Set} {
		if given {
			set++
		}
	}
	switch {
	case set == 0:
		b.fail(at, join(path, "unit"), "a rate limit needs a unit (second, minute, hour, day, week, month or year), a period or a calendar")
	case set > 1:
		b.fail(at, path, "give only one of unit, period and calendar")
	case rl.Unit.Set:
		u, ok := parseUnit(rl.Unit.V)
		if !ok {
			b.fail(rl.Unit.At, join(path, "unit"), "invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", rl.Unit.V)
			break
		}
		spec.Period, r.Unit, r.UnitMultiplier = u.Duration(), u, 1
	case rl.Period.Set:
		spec.Period = rl.Period.V
		r.Unit, r.UnitMultiplier, r.RequestsPerUnit = unitOf(rl.Period.V, r.RequestsPerUnit)
	default:
		spec.Calendar = rl.Calendar.V
		r.UnitMultiplier = 1
	}
}

// limit builds spec's limit into r, reporting a calendar window's unit, and
// reports the spec's error at the field it names. A rule of 0 requests per
// unit refuses everything and keeps no limit; its fields are checked all
// the same.
func (b *builder) limit(r *Rule, spec funnel.Spec, rl *fileRateLimit, at pos, path string) bool {
	count := spec.Count
	spec.Count = max(count, 1)
	lim, err := spec.Limit()
	if err != nil {
		var se *funnel.SpecError
		errors.As(err, &se)
		field := path
		if se != nil && se.Field != "" {
			key := se.Field
			if key == "nodelay" {
				key = "delay"
			}
			if f := fieldNamed(rl, key); f != nil {
				at = f.where().or(at)
			}
			field, err = join(path, key), se.Reason
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

// aField is a field[T] of any T.
type aField interface {
	given() bool
	where() pos
}

func (f *field[T]) given() bool { return f.Set }
func (f *field[T]) where() pos  { return f.At }

// fieldNamed returns the field of *s (a struct of the file's form) named
// name in the file, or nil.
func fieldNamed(s any, name string) aField {
	v := reflect.ValueOf(s).Elem()
	for _, f := range fieldsOf(v.Type()) {
		if f.name == name {
			return v.Field(f.index).Addr().Interface().(aField)
		}
	}
	return nil
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
