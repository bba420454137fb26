package rules

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A decoded configuration builds the same rules as the file that says the
// same, and matches the same descriptors to the same keys.
func TestBuildAsParse(t *testing.T) {
	const file = `domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: path
    value: /admin
    shadow_mode: true
    rate_limit:
      unit: SECOND
      requests_per_unit: 0
  - key: tenant
    descriptors:
      - key: plan
        value: free
        detailed_metric: true
        rate_limit:
          name: free
          unit: hour
          requests_per_unit: 10
      - key: plan
        value: paid
        rate_limit:
          unlimited: true
      - key: plan
        value: gold
        rate_limit:
          name: gold
          unit: day
          requests_per_unit: 100
          replaces:
            - name: free
`
	parsed, err := Parse(strings.NewReader(file), "api.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	built, err := Build([]DomainConfig{{Name: "xds:api", Domain: "api", Descriptors: []DescriptorConfig{
		{Key: "user", RateLimit: &RateLimitConfig{Unit: "MINUTE", RequestsPerUnit: 3}},
		{Key: "path", Value: "/admin", ShadowMode: true, RateLimit: &RateLimitConfig{Unit: "SECOND"}},
		{Key: "tenant", Descriptors: []DescriptorConfig{
			{Key: "plan", Value: "free", DetailedMetric: true, RateLimit: &RateLimitConfig{Name: "free", Unit: "HOUR", RequestsPerUnit: 10}},
			{Key: "plan", Value: "paid", RateLimit: &RateLimitConfig{Unlimited: true}},
			{Key: "plan", Value: "gold", RateLimit: &RateLimitConfig{Name: "gold", Unit: "DAY", RequestsPerUnit: 100, Replaces: []string{"free"}}},
		}},
	}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := built.Files(); len(got) != 1 || got[0] != "xds:api" {
		t.Errorf("Files() = %q", got)
	}
	p, b := parsed.All(), built.All()
	if len(p) != len(b) {
		t.Fatalf("%d rules built, %d parsed", len(b), len(p))
	}
	for i := range p {
		pr, br := *p[i], *b[i]
		pr.File, pr.Line, br.File, br.Line = "", 0, "", 0
		if !reflect.DeepEqual(pr, br) {
			t.Errorf("rule %d:\nbuilt  %+v\nparsed %+v", i, br, pr)
		}
	}
	for _, es := range [][]Entry{
		entries("user", "alice"), entries("path", "/admin"), entries("path", "/x"),
		entries("tenant", "t1", "plan", "free"), entries("tenant", "t1", "plan", "paid"), entries("tenant", "t1", "plan", "gold"),
	} {
		pm, pok := parsed.Match("api", es)
		bm, bok := built.Match("api", es)
		if pok != bok || pok && (pm.Key != bm.Key || pm.Metric != bm.Metric || pm.Rule.FullKey != bm.Rule.FullKey) {
			t.Errorf("%v: built %+v %v, parsed %+v %v", es, bm, bok, pm, pok)
		}
	}
}

// What a file may not say, a decoded configuration may not either: each
// problem is an *Error naming the configuration and the field.
func TestBuildErrors(t *testing.T) {
	for _, c := range []struct {
		cfgs []DomainConfig
		want []string
	}{
		{[]DomainConfig{{Name: "a", Descriptors: []DescriptorConfig{{Key: "k"}}}}, []string{"rules: a: domain: a domain is required"}},
		{[]DomainConfig{{Name: "a", Domain: "d", Descriptors: []DescriptorConfig{{Key: "k", RateLimit: &RateLimitConfig{Unit: "UNKNOWN", RequestsPerUnit: 1}}}}},
			[]string{`rules: a: descriptors[0].rate_limit.unit: invalid rate limit unit "UNKNOWN"`}},
		{[]DomainConfig{{Name: "a", Domain: "d", Descriptors: []DescriptorConfig{{Key: "k", RateLimit: &RateLimitConfig{RequestsPerUnit: 1}}}}},
			[]string{"rules: a: descriptors[0].rate_limit.unit: a rate limit needs a unit"}},
		{[]DomainConfig{{Name: "a", Domain: "d", Descriptors: []DescriptorConfig{{Value: "v"}}}},
			[]string{"rules: a: descriptors[0].key: a descriptor needs a key"}},
		{[]DomainConfig{{Name: "a", Domain: "d", Descriptors: []DescriptorConfig{{Key: "k", RateLimit: &RateLimitConfig{Unlimited: true, Unit: "SECOND"}}}}},
			[]string{"rules: a: descriptors[0].rate_limit.unit: an unlimited rule takes no unit"}},
		{[]DomainConfig{{Name: "a", Domain: "d", Descriptors: []DescriptorConfig{{Key: "k", Value: "v"}, {Key: "k", Value: "v"}}}},
			[]string{"rules: a: descriptors[1]: descriptor k_v is already defined\n"}},
		{[]DomainConfig{{Name: "a", Domain: "d"}, {Name: "b", Domain: "d"}},
			[]string{`rules: b: domain: domain "d" is already defined in a`}},
	} {
		_, err := Build(c.cfgs, Options{})
		if err != nil {
			err = fmt.Errorf("%w\n", err) // so that a want can end with the problem
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", c.cfgs, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v, want %q", c.cfgs, err, w)
			}
		}
	}
	// Merged domains, as files may be.
	if _, err := Build([]DomainConfig{{Name: "a", Domain: "d"}, {Name: "b", Domain: "d"}}, Options{MergeDomains: true}); err != nil {
		t.Error(err)
	}
	// Nesting as deep as a file may not have.
	deep := DescriptorConfig{Key: "k"}
	for range 40 {
		deep = DescriptorConfig{Key: "k", Descriptors: []DescriptorConfig{deep}}
	}
	if _, err := Build([]DomainConfig{{Name: "a", Domain: "d", Descriptors: []DescriptorConfig{deep}}}, Options{}); err == nil || !strings.Contains(err.Error(), "nested deeper than") {
		t.Errorf("deep nesting: %v", err)
	}
}

// quota_mode and metadata in a decoded configuration are what they are in
// a file: the same errors (field and reason), or the same rules.
func TestBuildAsParseQuotaModeMetadata(t *testing.T) {
	const file = `domain: ai
descriptors:
  - key: model
    quota_mode: true
    metadata:
      tier: gold
      weights: [0.5, 2.5]
      nested: {on: true}
    rate_limit:
      unit: minute
      requests_per_unit: 3
`
	parsed, perr := Parse(strings.NewReader(file), "ai.yaml", Options{})
	built, berr := Build([]DomainConfig{{Name: "xds:ai", Domain: "ai", Descriptors: []DescriptorConfig{{
		Key: "model", QuotaMode: true,
		Metadata:  map[string]any{"tier": "gold", "weights": []any{0.5, 2.5}, "nested": map[string]any{"on": true}},
		RateLimit: &RateLimitConfig{Unit: "MINUTE", RequestsPerUnit: 3},
	}}}}, Options{})
	if (perr == nil) != (berr == nil) {
		t.Fatalf("parsed: %v; built: %v", perr, berr)
	}
	if perr != nil {
		t.Logf("both refused: %v", berr)
		pe, be := problems(perr), problems(berr)
		if strings.Join(pe, "\n") != strings.Join(be, "\n") {
			t.Fatalf("parsed:\n%s\nbuilt:\n%s", strings.Join(pe, "\n"), strings.Join(be, "\n"))
		}
		return
	}
	p, b := parsed.All(), built.All()
	if len(p) != len(b) {
		t.Fatalf("%d rules built, %d parsed", len(b), len(p))
	}
	for i := range p {
		pr, br := *p[i], *b[i]
		pr.File, pr.Line, br.File, br.Line = "", 0, "", 0
		if !reflect.DeepEqual(pr, br) {
			t.Errorf("rule %d:\nbuilt  %+v\nparsed %+v", i, br, pr)
		}
	}
}

// problems lists the field and reason of each *Error in err.
func problems(err error) []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		var e *Error
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
		} else if errors.As(err, &e) {
			out = append(out, e.Field+": "+e.Msg)
		}
	}
	walk(err)
	return out
}

// A decoded configuration's metadata is what a protobuf Struct holds;
// other numbers are taken as float64, other values refused, and text must
// be valid UTF-8, as in a file.
func TestBuildMetadata(t *testing.T) {
	build := func(md map[string]any) (*Set, error) {
		return Build([]DomainConfig{{Name: "xds:m", Domain: "m", Descriptors: []DescriptorConfig{{
			Key: "k", Metadata: md, RateLimit: &RateLimitConfig{Unit: "SECOND", RequestsPerUnit: 1},
		}}}}, Options{})
	}
	r, err := build(map[string]any{"n": 3, "u": uint8(4), "f": float32(0.5), "l": []any{nil, true, "x"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"n": 3.0, "u": 4.0, "f": 0.5, "l": []any{nil, true, "x"}}
	if got := r.All()[0].Metadata; !reflect.DeepEqual(got, want) {
		t.Errorf("metadata %#v, want %#v", got, want)
	}
	if r, err := build(map[string]any{}); err != nil || r.All()[0].Metadata != nil {
		t.Errorf("empty metadata: %v, %v", r, err)
	}
	for _, c := range []struct {
		md   map[string]any
		want string
	}{
		{map[string]any{"a": map[string]any{"b": struct{}{}}}, "rules: xds:m: descriptors[0].metadata.a.b: unsupported metadata value struct {}"},
		{map[string]any{"a": []any{"\xff"}}, "rules: xds:m: descriptors[0].metadata.a[0]: text is not valid UTF-8"},
	} {
		if _, err := build(c.md); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.md, err, c.want)
		}
	}
	deep := map[string]any{}
	for range 40 {
		deep = map[string]any{"a": deep}
	}
	if _, err := build(deep); err == nil || !strings.Contains(err.Error(), "metadata nested deeper than 32 levels") {
		t.Errorf("deep metadata: %v", err)
	}
}

// fuzzConfig reads a domain's descriptors from data, a few bytes each, and
// writes them as a rules file would, so that Build and Parse can be
// compared on the same rules.
type fuzzConfig struct {
	data []byte
	yaml strings.Builder
}

func (f *fuzzConfig) next(n int) int {
	if len(f.data) == 0 {
		return 0
	}
	b := f.data[0]
	f.data = f.data[1:]
	return int(b) % n
}

func (f *fuzzConfig) descriptors(depth int, indent string) []DescriptorConfig {
	var out []DescriptorConfig
	for range f.next(4) {
		if len(f.data) == 0 {
			break
		}
		var d DescriptorConfig
		d.Key = []string{"a", "b", "", "c"}[f.next(4)]
		d.Value = []string{"", "x", "y*", "*", "x*y*z"}[f.next(5)]
		flags := f.next(256)
		d.ShadowMode, d.DetailedMetric, d.QuotaMode = flags&1 != 0, flags&2 != 0, flags&4 != 0
		fmt.Fprintf(&f.yaml, "%s- key: %q\n", indent, d.Key)
		in := indent + "  "
		if d.Value != "" {
			fmt.Fprintf(&f.yaml, "%svalue: %q\n", in, d.Value)
		}
		for _, b := range []struct {
			name string
			on   bool
		}{{"shadow_mode", d.ShadowMode}, {"detailed_metric", d.DetailedMetric}, {"quota_mode", d.QuotaMode}} {
			if b.on {
				fmt.Fprintf(&f.yaml, "%s%s: true\n", in, b.name)
			}
		}
		if flags&8 != 0 {
			d.Metadata = map[string]any{"n": float64(flags), "s": d.Value, "l": []any{true, nil}}
			fmt.Fprintf(&f.yaml, "%smetadata: {n: %d, s: %q, l: [true, null]}\n", in, flags, d.Value)
		}
		if flags&16 != 0 {
			r := &RateLimitConfig{
				Unit:            []string{"", "SECOND", "minute", "HOUR", "day", "fortnight", "UNKNOWN"}[f.next(7)],
				RequestsPerUnit: uint32(f.next(3) * 5),
				Unlimited:       flags&32 != 0,
				Name:            []string{"", "n1", "n2"}[f.next(3)],
			}
			fmt.Fprintf(&f.yaml, "%srate_limit:\n", in)
			if r.Unit != "" {
				fmt.Fprintf(&f.yaml, "%s  unit: %q\n", in, r.Unit)
			}
			if !r.Unlimited || r.RequestsPerUnit != 0 {
				fmt.Fprintf(&f.yaml, "%s  requests_per_unit: %d\n", in, r.RequestsPerUnit)
			}
			if r.Unlimited {
				fmt.Fprintf(&f.yaml, "%s  unlimited: true\n", in)
			}
			if r.Name != "" {
				fmt.Fprintf(&f.yaml, "%s  name: %q\n", in, r.Name)
			}
			if flags&64 != 0 {
				r.Replaces = []string{[]string{"", "n1", "n2"}[f.next(3)]}
				fmt.Fprintf(&f.yaml, "%s  replaces: [{name: %q}]\n", in, r.Replaces[0])
			}
			d.RateLimit = r
		}
		if flags&128 != 0 && depth < 4 {
			fmt.Fprintf(&f.yaml, "%sdescriptors:\n", in)
			if d.Descriptors = f.descriptors(depth+1, in+"  "); len(d.Descriptors) == 0 {
				f.yaml.WriteString(in + "  []\n")
			}
		}
		out = append(out, d)
	}
	return out
}

// A configuration built from descriptors makes the rules, or the problems
// (fields and reasons), that the file which says the same makes.
func FuzzBuildAsParse(f *testing.F) {
	f.Add([]byte{3, 0, 1, 16 | 8, 1, 2, 1, 1, 1, 2, 144, 2, 0, 1, 3, 1, 3, 0})
	f.Add([]byte{2, 2, 0, 16, 5, 1, 0, 0, 1, 48, 0, 0, 2})
	f.Add([]byte{3, 1, 3, 16 | 64 | 128, 4, 2, 1, 1, 2, 0, 2, 1, 0, 16 | 32, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		fc := &fuzzConfig{data: data}
		fc.yaml.WriteString("domain: d\ndescriptors:\n")
		ds := fc.descriptors(0, "  ")
		if len(ds) == 0 {
			fc.yaml.WriteString("  []\n")
		}
		parsed, perr := Parse(strings.NewReader(fc.yaml.String()), "f.yaml", Options{MaxErrors: -1})
		built, berr := Build([]DomainConfig{{Name: "xds:f", Domain: "d", Descriptors: ds}}, Options{MaxErrors: -1})
		if (perr == nil) != (berr == nil) {
			t.Fatalf("%s\nparsed: %v\nbuilt: %v", fc.yaml.String(), perr, berr)
		}
		if perr != nil {
			pe, be := problems(perr), problems(berr)
			for i, e := range pe { // a configuration has no lines to name
				pe[i] = regexp.MustCompile(` at line \d+$`).ReplaceAllString(e, "")
			}
			slices.Sort(pe)
			slices.Sort(be)
			if !slices.Equal(pe, be) {
				t.Fatalf("%s\nparsed:\n%s\nbuilt:\n%s", fc.yaml.String(), strings.Join(pe, "\n"), strings.Join(be, "\n"))
			}
			return
		}
		p, b := parsed.All(), built.All()
		if len(p) != len(b) {
			t.Fatalf("%s\n%d rules built, %d parsed", fc.yaml.String(), len(b), len(p))
		}
		for i := range p {
			pr, br := *p[i], *b[i]
			pr.File, pr.Line, br.File, br.Line = "", 0, "", 0
			if !reflect.DeepEqual(pr, br) {
				t.Fatalf("%s\nrule %d:\nbuilt  %+v\nparsed %+v", fc.yaml.String(), i, br, pr)
			}
		}
	})
}
