package rules

import (
	"encoding/base64"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// maxMetadataValues bounds the values of one file's metadata, which YAML
// aliases could otherwise multiply.
const maxMetadataValues = 100000

// metadata reads a descriptor's metadata: a mapping of any YAML values,
// turned into what encoding/json decodes into an any, as envoy's service
// turns it into a protobuf Struct. An empty mapping is nil.
func (b *builder) metadata(n *yaml.Node, path string) (map[string]any, bool) {
	if n = deref(n); n.Kind != yaml.MappingNode {
		b.fail(posOf(n), path, "want a mapping, not %s", kindOf(n))
		return nil, false
	}
	m, ok := b.metaMapping(n, path, 0)
	if !ok || len(m) == 0 {
		return nil, ok
	}
	return m, true
}

// metaValue converts one metadata value at depth (aliases followed).
func (b *builder) metaValue(n *yaml.Node, path string, depth int) (any, bool) {
	n = deref(n)
	if depth > maxDepth {
		b.fail(posOf(n), path, "metadata nested deeper than %d levels", maxDepth)
		return nil, false
	}
	if b.metaCount++; b.metaCount > maxMetadataValues {
		b.fail(posOf(n), path, "more than %d metadata values", maxMetadataValues)
		return nil, false
	}
	switch n.Kind {
	case yaml.MappingNode:
		return b.metaMapping(n, path, depth)
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for i, it := range n.Content {
			v, ok := b.metaValue(it, fmt.Sprintf("%s[%d]", path, i), depth+1)
			if !ok {
				return nil, false
			}
			list = append(list, v)
		}
		return list, true
	case yaml.ScalarNode:
		return b.metaScalar(n, path)
	}
	b.fail(posOf(n), path, "unsupported metadata value %s", kindOf(n))
	return nil, false
}

// metaMapping converts a mapping of metadata; its keys are scalars, taken
// as their text, and merge keys bring in the fields of other mappings,
// which its own fields override.
func (b *builder) metaMapping(n *yaml.Node, path string, depth int) (map[string]any, bool) {
	out := make(map[string]any, len(n.Content)/2)
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			if v = deref(v); v.Kind == yaml.SequenceNode {
				merged = append(merged, v.Content...)
			} else {
				merged = append(merged, v)
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			b.fail(posOf(k), path, "a metadata key must be a scalar, not %s", kindOf(k))
			return nil, false
		}
		if _, dup := out[k.Value]; dup {
			b.fail(posOf(k), join(path, k.Value), "defined twice")
			return nil, false
		}
		val, ok := b.metaValue(v, join(path, k.Value), depth+1)
		if !ok {
			return nil, false
		}
		out[k.Value] = val
	}
	for _, m := range merged {
		if m = deref(m); m.Kind != yaml.MappingNode {
			b.fail(posOf(m), path, "a merge key wants a mapping, not %s", kindOf(m))
			return nil, false
		}
		more, ok := b.metaMapping(m, path, depth+1)
		if !ok {
			return nil, false
		}
		for k, v := range more {
			if _, set := out[k]; !set {
				out[k] = v
			}
		}
	}
	return out, true
}

// metaScalar converts a scalar of metadata: null, a boolean, a number (as
// float64, infinities and NaN included), or text; a timestamp stays text and binary is decoded, as
// envoy's service reads them. Text must be valid UTF-8, as a protobuf
// string must.
func (b *builder) metaScalar(n *yaml.Node, path string) (any, bool) {
	switch n.ShortTag() {
	case "!!null":
		return nil, true
	case "!!bool":
		var v bool
		if err := n.Decode(&v); err != nil {
			b.fail(posOf(n), path, "want true or false, not %s", kindOf(n))
			return nil, false
		}
		return v, true
	case "!!int", "!!float":
		var v float64
		if err := n.Decode(&v); err != nil {
			if u, err := strconv.ParseUint(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err == nil {
				return float64(u), true
			}
			b.fail(posOf(n), path, "not a number this service can send: %s", kindOf(n))
			return nil, false
		}
		return v, true
	case "!!binary":
		raw, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(n.Value), ""))
		if err != nil {
			b.fail(posOf(n), path, "invalid base64 in binary value")
			return nil, false
		}
		n = &yaml.Node{Kind: yaml.ScalarNode, Value: string(raw), Line: n.Line, Column: n.Column}
	}
	if !utf8.ValidString(n.Value) {
		b.fail(posOf(n), path, "text is not valid UTF-8")
		return nil, false
	}
	return n.Value, true
}

// metaDecoded checks and copies the metadata of a configuration already
// decoded, under the bounds and checks of a file's: its values are what a
// protobuf Struct holds (nil, bool, float64, string, []any and
// map[string]any), other numbers taken as float64. An empty mapping is nil.
func (b *builder) metaDecoded(m map[string]any, path string) (map[string]any, bool) {
	if len(m) == 0 {
		return nil, true
	}
	v, ok := b.metaDecodedValue(m, path, 0)
	if !ok {
		return nil, false
	}
	return v.(map[string]any), true
}

// metaDecodedValue checks and copies one decoded metadata value at depth.
func (b *builder) metaDecodedValue(v any, path string, depth int) (any, bool) {
	if depth > maxDepth {
		b.fail(pos{}, path, "metadata nested deeper than %d levels", maxDepth)
		return nil, false
	}
	if depth > 0 {
		if b.metaCount++; b.metaCount > maxMetadataValues {
			b.fail(pos{}, path, "more than %d metadata values", maxMetadataValues)
			return nil, false
		}
	}
	switch v := v.(type) {
	case nil, bool, float64:
		return v, true
	case string:
		if !utf8.ValidString(v) {
			b.fail(pos{}, path, "text is not valid UTF-8")
			return nil, false
		}
		return v, true
	case []any:
		list := make([]any, len(v))
		for i, it := range v {
			var ok bool
			if list[i], ok = b.metaDecodedValue(it, fmt.Sprintf("%s[%d]", path, i), depth+1); !ok {
				return nil, false
			}
		}
		return list, true
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, it := range v {
			var ok bool
			if out[k], ok = b.metaDecodedValue(it, join(path, k), depth+1); !ok {
				return nil, false
			}
		}
		return out, true
	}
	if f, ok := number(v); ok {
		return f, true
	}
	b.fail(pos{}, path, "unsupported metadata value %T", v)
	return nil, false
}

// number returns v, a number of a Go type, as a float64.
func number(v any) (float64, bool) {
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(rv.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return float64(rv.Uint()), true
	case reflect.Float32:
		return rv.Float(), true
	}
	return 0, false
}
