package rules

import (
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// DomainConfig is the rules of one domain already decoded from another
// form than a file, such as the RateLimitConfig resources that a control
// plane sends over xDS. It has the fields of envoyproxy/ratelimit's format
// that such resources carry.
type DomainConfig struct {
	// Name says where the rules come from in errors, as a file name does.
	Name string
	// Domain is the domain the descriptors belong to.
	Domain string
	// Descriptors are the domain's descriptors.
	Descriptors []DescriptorConfig
}

// DescriptorConfig is one descriptor of a DomainConfig: the fields of the
// same names in a rules file. QuotaMode and Metadata are written as a
// file's quota_mode and metadata are, and checked as theirs are: a field
// the rules do not take is refused as a file's unknown field is.
type DescriptorConfig struct {
	Key, Value     string
	RateLimit      *RateLimitConfig // nil: none
	Descriptors    []DescriptorConfig
	ShadowMode     bool
	DetailedMetric bool
	QuotaMode      bool
	Metadata       map[string]any // nil: none
}

// RateLimitConfig is the rate_limit of a DescriptorConfig. Unit is a unit's
// name in any case ("SECOND", "minute"), or "" for none; RequestsPerUnit 0
// is written only when the rule is not unlimited.
type RateLimitConfig struct {
	Unit            string
	RequestsPerUnit uint32
	Unlimited       bool
	Name            string
	Replaces        []string
}

// Build builds a Set from decoded configurations, one domain each, as Load
// builds one from files: the same checks, the same errors (each an *Error
// whose File is the configuration's Name and whose Line is 0), the same
// rules.
func Build(configs []DomainConfig, opts Options) (*Set, error) {
	b := newBuilder(opts)
	for _, c := range configs {
		b.name = c.Name
		b.rules.files = append(b.rules.files, c.Name)
		b.domain(c.Name, mappingNode(
			"domain", strNode(c.Domain),
			"descriptors", descriptorsNode(c.Descriptors, 0),
		))
	}
	return b.finish()
}

// descriptorsNode writes descriptors as the list of a rules file; a list
// nested deeper than the builder reads is cut there, where the builder
// reports it.
func descriptorsNode(ds []DescriptorConfig, depth int) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	if depth > maxDepth+1 {
		return n
	}
	for _, d := range ds {
		var kv []any
		kv = append(kv, "key", strNode(d.Key))
		if d.Value != "" {
			kv = append(kv, "value", strNode(d.Value))
		}
		if d.RateLimit != nil {
			kv = append(kv, "rate_limit", rateLimitNode(d.RateLimit))
		}
		if len(d.Descriptors) > 0 {
			kv = append(kv, "descriptors", descriptorsNode(d.Descriptors, depth+1))
		}
		if d.ShadowMode {
			kv = append(kv, "shadow_mode", boolNode(true))
		}
		if d.DetailedMetric {
			kv = append(kv, "detailed_metric", boolNode(true))
		}
		if d.QuotaMode {
			kv = append(kv, "quota_mode", boolNode(true))
		}
		if d.Metadata != nil {
			kv = append(kv, "metadata", valueNode(d.Metadata))
		}
		n.Content = append(n.Content, mappingNode(kv...))
	}
	return n
}

// rateLimitNode writes a rate_limit block.
func rateLimitNode(r *RateLimitConfig) *yaml.Node {
	var kv []any
	if r.Unit != "" {
		kv = append(kv, "unit", strNode(r.Unit))
	}
	if !r.Unlimited || r.RequestsPerUnit != 0 {
		kv = append(kv, "requests_per_unit", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(r.RequestsPerUnit), 10)})
	}
	if r.Unlimited {
		kv = append(kv, "unlimited", boolNode(true))
	}
	if r.Name != "" {
		kv = append(kv, "name", strNode(r.Name))
	}
	if len(r.Replaces) > 0 {
		list := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, name := range r.Replaces {
			list.Content = append(list.Content, mappingNode("name", strNode(name)))
		}
		kv = append(kv, "replaces", list)
	}
	return mappingNode(kv...)
}

// mappingNode makes a mapping of key, value pairs: a string, then a node.
func mappingNode(kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(kv); i += 2 {
		n.Content = append(n.Content, strNode(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return n
}

// valueNode writes a decoded value (maps, lists, strings, numbers, bools,
// nil: what a protobuf Struct holds) as YAML would decode to it.
func valueNode(v any) *yaml.Node {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		// Only values of other kinds fail, which a Struct never holds.
		return strNode(fmt.Sprint(v))
	}
	return &n
}

func strNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func boolNode(v bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
}
