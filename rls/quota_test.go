package rls_test

import (
	"strings"
	"testing"

	ratelimit "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
)

// quotaRules has, in domain q, regular limits (regular, other) and quotas
// (quota1, quota2) of one request a minute each, and rules that refuse
// everything, as a quota and not.
const quotaRules = `
domain: q
descriptors:
  - key: regular
    metadata: {name: service_1}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: other
    metadata: {name: service_3, nested: {a: 1, b: 2}}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota1
    quota_mode: true
    metadata: {name: service_2, nested: {a: 9, c: 3}}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota2
    quota_mode: true
    metadata: {some_other_name: service_2}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shadow_quota
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: quota_block
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: unlimited
    quota_mode: true
    rate_limit: {unlimited: true}
`

func quotaEnv(t *testing.T, opts rls.Options) *env {
	t.Helper()
	r, err := rules.Parse(strings.NewReader(quotaRules), "q.yaml", rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return start(t, nil, rls.Static(r), opts)
}

// The cases of envoyproxy/ratelimit's service tests for quota mode
// (test/service/ratelimit_test.go), decided by a real store: a limit is
// put over by asking for it alone first.
func TestPerDescriptorQuotaMode(t *testing.T) {
	for _, c := range []struct {
		name  string
		fill  []string // descriptors asked for alone first
		ask   []string
		want  string
		shade bool // global shadow mode
	}{
		// TestServicePerDescriptorQuotaMode: a regular limit over refuses.
		{name: "regular over", fill: []string{"regular"}, ask: []string{"regular", "quota1"}, want: "OVER_LIMIT OVER_LIMIT OK"},
		// TestServiceMixedPerDescriptorModes: the only quota over refuses.
		{name: "only quota over", fill: []string{"quota1"}, ask: []string{"regular", "quota1"}, want: "OVER_LIMIT OK OVER_LIMIT"},
		// TestServiceMixedPerDescriptorModesUnderLimit
		{name: "both under", ask: []string{"regular", "quota1"}, want: "OK OK OK"},
		// TestServiceQuotaModeOnlyAllOverTheLimit
		{name: "all quotas over", fill: []string{"quota1", "quota2"}, ask: []string{"quota1", "quota2"}, want: "OVER_LIMIT OVER_LIMIT OVER_LIMIT"},
		// TestServiceQuotaModeOnlySomeOverTheLimit
		{name: "some quotas over", fill: []string{"quota1"}, ask: []string{"quota1", "quota2"}, want: "OK OVER_LIMIT OK"},
		// TestServiceQuotaModeWithShadowMode
		{name: "global shadow", fill: []string{"quota1", "quota2"}, ask: []string{"quota1", "quota2"}, want: "OK OVER_LIMIT OVER_LIMIT", shade: true},
		// A quota that refuses everything is one more quota over.
		{name: "quota block", ask: []string{"quota_block", "quota2"}, want: "OK OVER_LIMIT OK"},
		{name: "quota block alone", ask: []string{"quota_block"}, want: "OVER_LIMIT OVER_LIMIT"},
		{name: "quota block and quota over", fill: []string{"quota2"}, ask: []string{"quota_block", "quota2"}, want: "OVER_LIMIT OVER_LIMIT OVER_LIMIT"},
		// A quota in shadow mode passes, so the quotas never all refuse.
		{name: "shadow quota", fill: []string{"quota1"}, ask: []string{"quota1", "shadow_quota"}, want: "OK OVER_LIMIT OK"},
		// An unlimited rule is not a quota.
		{name: "unlimited", fill: []string{"quota1"}, ask: []string{"quota1", "unlimited"}, want: "OVER_LIMIT OVER_LIMIT OK"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := quotaEnv(t, rls.Options{ShadowMode: c.shade})
			for _, k := range c.fill {
				e.expectCodes(t, 1, "OK OK", "q", desc(k, "x"))
			}
			var ds []*ratelimit.RateLimitDescriptor
			for _, k := range c.ask {
				ds = append(ds, desc(k, "x"))
			}
			e.expectCodes(t, 1, c.want, "q", ds...)
		})
	}
}

// A request that quotas let through is charged to the limits that
// admitted it; one they refuse is charged to none.
func TestQuotaCharges(t *testing.T) {
	e := quotaEnv(t, rls.Options{})
	e.expectCodes(t, 1, "OK OK", "q", desc("quota1", "x"))
	e.expectCodes(t, 1, "OK OVER_LIMIT OK", "q", desc("quota1", "x"), desc("quota2", "x"))
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT OVER_LIMIT", "q", desc("quota1", "x"), desc("quota2", "x"))
	// All quotas over, the regular limit admitted but was not charged.
	e.expectCodes(t, 1, "OVER_LIMIT OK OVER_LIMIT", "q", desc("regular", "y"), desc("quota1", "x"))
	e.expectCodes(t, 1, "OK OK", "q", desc("regular", "y"))
}

// With the global quota mode (envoy's QUOTA_MODE) every descriptor is a
// quota: TestServiceGlobalQuotaMode.
func TestGlobalQuotaMode(t *testing.T) {
	e := quotaEnv(t, rls.Options{QuotaMode: true})
	e.expectCodes(t, 1, "OK OK", "q", desc("regular", "x"))
	e.expectCodes(t, 1, "OK OVER_LIMIT OK", "q", desc("regular", "x"), desc("other", "x"))
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT OVER_LIMIT", "q", desc("regular", "x"), desc("other", "x"))
	// A descriptor that no rule matches passes, and so the request does.
	e.expectCodes(t, 1, "OK OVER_LIMIT OK", "q", desc("regular", "x"), desc("nothing", "x"))
	// So does one of an unknown domain.
	e.expectCodes(t, 1, "OK OK", "elsewhere", desc("regular", "x"))
}

// askMeta asks with the global quota mode and the dynamic metadata on,
// as envoy's service tests do, and returns the response's metadata.
func askMeta(t *testing.T, e *env, req *rlsv3.RateLimitRequest) *structpb.Struct {
	t.Helper()
	resp, err := e.client.ShouldRateLimit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != OK {
		t.Fatalf("overall %v", resp.OverallCode)
	}
	return resp.DynamicMetadata
}

func jsonOf(t *testing.T, m *structpb.Struct) string {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var v structpb.Struct // normalise the spacing
	if err := protojson.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(protojson.Format(&v), " ", "")
}

// The cases of envoyproxy/ratelimit's metadata tests
// (TestMetadataReturnedForPassedDescriptors, ...AllPassedDescriptors,
// TestOverlappingMetadataReturnsTheFirstValue).
func TestDynamicMetadata(t *testing.T) {
	e := quotaEnv(t, rls.Options{QuotaMode: true, DynamicMetadata: true})
	e.expectCodes(t, 1, "OK OK", "q", desc("quota1", "x"))
	// regular passed, quota1 is over: regular's metadata only.
	m := askMeta(t, e, &rlsv3.RateLimitRequest{Domain: "q", Descriptors: []*ratelimit.RateLimitDescriptor{desc("regular", "x"), desc("quota1", "x")}})
	want := `{"descriptors":[{"entries":["regular=x"]},{"entries":["quota1=x"]}],"domain":"q","metadata":{"name":"service_1"}}`
	if got := strings.ReplaceAll(jsonOf(t, m), "\n", ""); got != want {
		t.Errorf("metadata\n%s\nwant\n%s", got, want)
	}
	// Both passed: both merged, the first value kept, nested mappings
	// merged.
	d := desc("other", "y")
	d.HitsAddend = wrapperspb.UInt64(1)
	m = askMeta(t, e, &rlsv3.RateLimitRequest{Domain: "q", HitsAddend: 1, Descriptors: []*ratelimit.RateLimitDescriptor{d, desc("quota2", "y"), desc("quota1", "y")}})
	want = `{"descriptors":[{"entries":["other=y"],"hitsAddend":1},{"entries":["quota2=y"]},{"entries":["quota1=y"]}],"domain":"q","hitsAddend":1,` +
		`"metadata":{"name":"service_3","nested":{"a":1,"b":2,"c":3},"some_other_name":"service_2"}}`
	if got := strings.ReplaceAll(jsonOf(t, m), "\n", ""); got != want {
		t.Errorf("metadata\n%s\nwant\n%s", got, want)
	}
	// A limit override is described, and has no metadata.
	o := desc("regular", "z")
	o.Limit = &ratelimit.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_HOUR}
	m = askMeta(t, e, &rlsv3.RateLimitRequest{Domain: "q", Descriptors: []*ratelimit.RateLimitDescriptor{o}})
	lim := m.Fields["descriptors"].GetListValue().Values[0].GetStructValue().Fields["limit"].GetStringValue()
	if !strings.Contains(lim, "requests_per_unit:") || !strings.Contains(lim, "HOUR") || m.Fields["metadata"] != nil {
		t.Errorf("limit %q, metadata %v", lim, m.Fields["metadata"])
	}
	// Off by default.
	e2 := quotaEnv(t, rls.Options{})
	if m := e2.ask(t, "q", desc("regular", "x")).DynamicMetadata; m != nil {
		t.Errorf("metadata %v without the option", m)
	}
}
