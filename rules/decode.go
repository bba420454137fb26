package rules

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// The typed form of a rules file. A file's YAML nodes are decoded into
// these structs by decodeStruct, which checks the file's shape (the fields
// each level takes, each once; the kind and range of each value) and keeps
// where each value is written; a decoded configuration (Build) is
// converted into them directly. The builder reads only these structs.

// fileDomain is a rules file: one domain.
type fileDomain struct {
	Domain      field[string]         `yaml:"domain"`
	Descriptors field[descriptorList] `yaml:"descriptors"`
}

// descriptorList is a list of descriptors. In a file it may not be an
// alias, nor may its items: an alias of an ancestor would nest without end.
type descriptorList []fileDescriptor

// fileDescriptor is one descriptor.
type fileDescriptor struct {
	at          pos                   // where the descriptor starts
	bad         bool                  // not a descriptor (its problem reported)
	Key         field[string]         `yaml:"key"`
	Value       field[string]         `yaml:"value"`
	RateLimit   field[fileRateLimit]  `yaml:"rate_limit"`
	Descriptors field[descriptorList] `yaml:"descriptors"`
	ShadowMode  field[bool]           `yaml:"shadow_mode"`
	QuotaMode   field[bool]           `yaml:"quota_mode"`
	// ChargeOverLimit is Funnel's: see Rule.ChargeOverLimit.
	ChargeOverLimit field[bool]     `yaml:"charge_over_limit"`
	DetailedMetric  field[bool]     `yaml:"detailed_metric"`
	ValueToMetric   field[bool]     `yaml:"value_to_metric"`
	ShareThreshold  field[bool]     `yaml:"share_threshold"`
	Metadata        field[metadata] `yaml:"metadata"`
}

// fileRateLimit is a descriptor's rate_limit: envoy's fields, then
// Funnel's.
type fileRateLimit struct {
	Unit            field[string]        `yaml:"unit"`
	RequestsPerUnit field[uint32]        `yaml:"requests_per_unit"`
	Unlimited       field[bool]          `yaml:"unlimited"`
	Name            field[string]        `yaml:"name"`
	Replaces        field[replaceList]   `yaml:"replaces"`
	Algorithm       field[string]        `yaml:"algorithm"`
	Period          field[time.Duration] `yaml:"period"`
	Burst           field[int64]         `yaml:"burst"`
	Delay           field[delay]         `yaml:"delay"`
	Ban             field[time.Duration] `yaml:"ban"`
	Calendar        field[string]        `yaml:"calendar"`
	TimeZone        field[string]        `yaml:"time_zone"`
}

// replaceList is rate_limit.replaces: a list of {name: ...}.
type replaceList []field[fileReplace]

// fileReplace is one item of rate_limit.replaces.
type fileReplace struct {
	Name field[string] `yaml:"name"`
}

// delay is rate_limit.delay: a number of units, or nodelay.
type delay struct {
	n       int64
	nodelay bool
}

// metadata is a descriptor's metadata, as encoding/json decodes an object
// into a map[string]any.
type metadata map[string]any

// pos is where a value is written in a file: its line and column, from 1.
// A configuration that is not read from a file has none (zero).
type pos struct{ line, column int32 }

func posOf(n *yaml.Node) pos { return pos{int32(n.Line), int32(n.Column)} }

// or returns p, or def when p is zero.
func (p pos) or(def pos) pos {
	if p == (pos{}) {
		return def
	}
	return p
}

// field is one field of a rules file: its value V, whether it is given
// (Set: a null is not), whether it is given but unreadable (Bad, its
// problem reported), and where it is written.
type field[T any] struct {
	V   T
	Set bool
	Bad bool
	At  pos
}

// given returns a field of value v, given when set.
func given[T any](v T, set bool) field[T] { return field[T]{V: v, Set: set} }

// nodeDecoder is implemented by the types that read themselves from a node
// (which may be an alias).
type nodeDecoder interface {
	decodeNode(b *builder, n *yaml.Node, path string) bool
}

func (f *field[T]) decodeNode(b *builder, n *yaml.Node, path string) bool {
	f.At = posOf(n)
	if isNull(n) {
		return true
	}
	if !b.decodeValue(n, path, reflect.ValueOf(&f.V).Elem()) {
		f.Bad = true
		return false
	}
	f.Set = true
	return true
}

// decodeValue reads n into v, which a nodeDecoder reads itself; others
// see n with its alias followed.
func (b *builder) decodeValue(n *yaml.Node, path string, v reflect.Value) bool {
	if d, ok := v.Addr().Interface().(nodeDecoder); ok {
		return d.decodeNode(b, n, path)
	}
	n = deref(n)
	switch p := v.Addr().Interface().(type) {
	case *string:
		if n.Kind != yaml.ScalarNode {
			b.fail(posOf(n), path, "want a string, not %s", kindOf(n))
			return false
		}
		*p = n.Value
	case *bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(p) != nil {
			b.fail(posOf(n), path, "want true or false, not %s", kindOf(n))
			return false
		}
	case *uint32:
		u, ok := b.integer(n, path, 1<<32-1)
		*p = uint32(u)
		return ok
	case *int64:
		u, ok := b.integer(n, path, 1<<63-1)
		*p = int64(u)
		return ok
	case *time.Duration:
		return b.duration(n, path, p)
	default:
		return b.decodeStruct(n, path, v)
	}
	return true
}

// integer reads a non-negative integer at most max.
func (b *builder) integer(n *yaml.Node, path string, max uint64) (uint64, bool) {
	v, err := strconv.ParseUint(n.Value, 10, 64)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil {
		b.fail(posOf(n), path, "want a whole number from 0 to %d, not %s", max, kindOf(n))
		return 0, false
	}
	if v > max {
		b.fail(posOf(n), path, "%d is more than %d", v, max)
		return 0, false
	}
	return v, true
}

// duration reads a positive Go duration ("90s", "1h30m").
func (b *builder) duration(n *yaml.Node, path string, d *time.Duration) bool {
	var err error
	*d, err = time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		b.fail(posOf(n), path, "want a duration such as 90s or 1h30m, not %s", kindOf(n))
		return false
	}
	if *d <= 0 {
		b.fail(posOf(n), path, "%v is not positive", *d)
		return false
	}
	return true
}

func (d *delay) decodeNode(b *builder, n *yaml.Node, path string) bool {
	if n = deref(n); n.Value == "nodelay" {
		d.nodelay = true
		return true
	}
	v, ok := b.integer(n, path, 1<<63-1)
	d.n = int64(v)
	return ok
}

func (m *metadata) decodeNode(b *builder, n *yaml.Node, path string) bool {
	v, ok := b.metadata(n, path)
	*m = v
	return ok
}

func (l *descriptorList) decodeNode(b *builder, n *yaml.Node, path string) bool {
	if n.Kind == yaml.AliasNode {
		b.fail(posOf(n), path, "an alias cannot stand for descriptors (only for values and rate_limit blocks)")
		return false
	}
	if n.Kind != yaml.SequenceNode {
		b.fail(posOf(n), path, "want a list of descriptors, not %s", kindOf(n))
		return false
	}
	*l = make(descriptorList, len(n.Content))
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d := &(*l)[i]
		d.at = posOf(item)
		switch {
		case item.Kind == yaml.AliasNode:
			b.fail(posOf(item), p, "an alias cannot stand for a descriptor (only for values and rate_limit blocks)")
			d.bad = true
		case item.Kind != yaml.MappingNode && !isNull(item):
			b.fail(posOf(item), p, "want a mapping, not %s", kindOf(item))
			d.bad = true
		default:
			// Read with the fields it has, to report what more is wrong.
			b.decodeStruct(item, p, reflect.ValueOf(d).Elem())
		}
	}
	return true
}

func (l *replaceList) decodeNode(b *builder, n *yaml.Node, path string) bool {
	if n = deref(n); n.Kind != yaml.SequenceNode {
		b.fail(posOf(n), path, "want a list of {name: ...}, not %s", kindOf(n))
		return false
	}
	ok := true
	for i, item := range n.Content {
		var r field[fileReplace]
		ok = r.decodeNode(b, item, fmt.Sprintf("%s[%d]", path, i)) && ok
		*l = append(*l, r)
	}
	return ok
}

// structField is a field of a struct of the file's form: its name in the
// file and its index.
type structField struct {
	name  string
	index int
}

// structFields caches the fields of each struct type, by reflect.Type.
var structFields sync.Map

// fieldsOf returns the fields of struct type t that have a yaml tag, in
// their order.
func fieldsOf(t reflect.Type) []structField {
	if fs, ok := structFields.Load(t); ok {
		return fs.([]structField)
	}
	var fs []structField
	for i := range t.NumField() {
		if name := t.Field(i).Tag.Get("yaml"); name != "" {
			fs = append(fs, structField{name, i})
		}
	}
	structFields.Store(t, fs)
	return fs
}

// decodeStruct reads the mapping n into the struct v, whose fields are
// field[T]s tagged with their names in the file. Each key must name a field
// and appear once; a null n is an empty mapping. Merge keys (<<: *anchor,
// or a list of anchors) bring in the fields of other mappings, which the
// mapping's own fields override. It reports whether everything was read.
func (b *builder) decodeStruct(n *yaml.Node, path string, v reflect.Value) bool {
	n = deref(n)
	if isNull(n) {
		return true
	}
	if n.Kind != yaml.MappingNode {
		b.fail(posOf(n), path, "want a mapping, not %s", kindOf(n))
		return false
	}
	s := structDecoder{b: b, path: path, v: v, fields: fieldsOf(v.Type()), lines: map[string]int{}}
	ok := true
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			if val = deref(val); val.Kind == yaml.SequenceNode {
				merged = append(merged, val.Content...)
			} else {
				merged = append(merged, val)
			}
			continue
		}
		ok = s.field(k, val, false) && ok
	}
	for _, m := range merged {
		if m = deref(m); m.Kind != yaml.MappingNode {
			b.fail(posOf(m), path, "a merge key wants a mapping, not %s", kindOf(m))
			ok = false
			continue
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			ok = s.field(m.Content[i], m.Content[i+1], true) && ok
		}
	}
	return ok
}

// structDecoder is decodeStruct's state for one mapping.
type structDecoder struct {
	b      *builder
	path   string
	v      reflect.Value
	fields []structField
	lines  map[string]int // the line of each field read
}

// field reads the value val of key k, of the mapping itself or of a
// mapping merged into it (whose fields do not override those read).
func (s *structDecoder) field(k, val *yaml.Node, merged bool) bool {
	switch {
	case merged && (k.Kind != yaml.ScalarNode || k.Tag == "!!merge"):
		s.b.fail(posOf(k), s.path, "unsupported key %s in a merged mapping", kindOf(k))
		return false
	case k.Kind != yaml.ScalarNode:
		s.b.fail(posOf(k), s.path, "unsupported key %s", kindOf(k))
		return false
	}
	path := join(s.path, k.Value)
	i := len(s.fields) - 1
	for i >= 0 && s.fields[i].name != k.Value {
		i--
	}
	if i < 0 {
		names := make([]string, len(s.fields))
		for i, f := range s.fields {
			names[i] = f.name
		}
		s.b.fail(posOf(k), path, "unknown field (want one of %s)", strings.Join(names, ", "))
		return false
	}
	if l, dup := s.lines[k.Value]; dup {
		if merged {
			return true
		}
		s.b.fail(posOf(k), path, "defined twice (first at line %d)", l)
		return false
	}
	s.lines[k.Value] = k.Line
	return s.b.decodeValue(val, path, s.v.Field(s.fields[i].index))
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
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

// deref follows an alias to its anchored node.
func deref(n *yaml.Node) *yaml.Node {
	if n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}
