package rules

import "fmt"

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
// same names in a rules file. QuotaMode and Metadata are taken as a file's
// quota_mode and metadata are, and checked as theirs are.
type DescriptorConfig struct {
	Key, Value  string
	RateLimit   *RateLimitConfig // nil: none
	Descriptors []DescriptorConfig
	ShadowMode  bool
	// DetailedMetric is the descriptor's detailed_metric.
	DetailedMetric bool
	QuotaMode      bool
	// Metadata holds what a protobuf Struct holds: nil, bool, float64,
	// string, []any and map[string]any; other numbers are taken as
	// float64 and other values refused. nil or empty is none. Build
	// copies it.
	Metadata map[string]any
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
		d := fileDomain{
			Domain:      given(c.Domain, c.Domain != ""),
			Descriptors: given(b.fromConfigs(c.Descriptors, "descriptors"), true),
		}
		b.domain(c.Name, &d, pos{})
	}
	return b.finish()
}

// fromConfigs converts descriptors into the form a file is decoded into,
// checking their metadata as a file's is.
func (b *builder) fromConfigs(ds []DescriptorConfig, path string) descriptorList {
	out := make(descriptorList, len(ds))
	for i, c := range ds {
		d := &out[i]
		p := fmt.Sprintf("%s[%d]", path, i)
		d.Key, d.Value = given(c.Key, c.Key != ""), given(c.Value, c.Value != "")
		d.ShadowMode, d.DetailedMetric, d.QuotaMode = given(c.ShadowMode, c.ShadowMode), given(c.DetailedMetric, c.DetailedMetric), given(c.QuotaMode, c.QuotaMode)
		if len(c.Descriptors) > 0 {
			d.Descriptors = given(b.fromConfigs(c.Descriptors, join(p, "descriptors")), true)
		}
		if c.Metadata != nil {
			m, ok := b.metaDecoded(c.Metadata, join(p, "metadata"))
			d.Metadata = field[metadata]{V: m, Set: ok, Bad: !ok}
		}
		if r := c.RateLimit; r != nil {
			rl := fileRateLimit{
				Unit:            given(r.Unit, r.Unit != ""),
				RequestsPerUnit: given(r.RequestsPerUnit, !r.Unlimited || r.RequestsPerUnit != 0),
				Unlimited:       given(r.Unlimited, r.Unlimited),
				Name:            given(r.Name, r.Name != ""),
			}
			for _, name := range r.Replaces {
				rl.Replaces.V = append(rl.Replaces.V, given(fileReplace{Name: given(name, name != "")}, true))
			}
			rl.Replaces.Set = len(r.Replaces) > 0
			d.RateLimit = given(rl, true)
		}
	}
	return out
}
