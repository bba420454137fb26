package rls_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/funnelrl/funnel/rules"
)

// readmeBlock returns the first ```yaml block of the README's section
// titled title that contains marker.
func readmeBlock(t *testing.T, title, marker string) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n### "+title+"\n")
	if !ok {
		t.Fatalf("README: no section %q", title)
	}
	sec, _, _ = strings.Cut(sec, "\n### ")
	for _, part := range strings.Split(sec, "```yaml\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		if strings.Contains(block, marker) {
			return block
		}
	}
	t.Fatalf("README %q: no yaml block with %q", title, marker)
	return ""
}

// TestReadmeEnvoyLLM: the README's example of tokens charged at stream end
// holds rules that Funnel loads (charge_over_limit on) and an Envoy
// configuration that Envoy's API takes: every field known, every typed
// config resolved, every validation rule of the protos met.
func TestReadmeEnvoyLLM(t *testing.T) {
	const title = "Costs known afterwards through Envoy"
	set, err := rules.Parse(strings.NewReader(readmeBlock(t, title, "charge_over_limit")), "rules.yaml", rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := set.Match("llm", []rules.Entry{{Key: "api_key", Value: "k-42"}}); !ok || !m.Rule.ChargeOverLimit {
		t.Fatalf("the README's rule: %v %+v", ok, m.Rule)
	}

	var doc any
	if err := yaml.Unmarshal([]byte(readmeBlock(t, title, "apply_on_stream_done")), &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		t.Fatalf("Envoy's configuration: %v", err)
	}
	if err := boot.ValidateAll(); err != nil {
		t.Fatalf("Envoy's configuration: %v", err)
	}
	// The typed configs are checked by their own protos' rules.
	var hcm hcmv3.HttpConnectionManager
	if err := boot.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	if err := hcm.ValidateAll(); err != nil {
		t.Fatalf("Envoy's http_connection_manager: %v", err)
	}
	var rl ratelimitv3.RateLimit
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatal(err)
	}
	if err := rl.ValidateAll(); err != nil || rl.Domain != "llm" {
		t.Fatalf("Envoy's rate limit filter (domain %q): %v", rl.Domain, err)
	}
	if !strings.Contains(string(js), `"apply_on_stream_done":true`) || !strings.Contains(string(js), `"hits_addend":{"number":0}`) {
		t.Fatalf("the README's Envoy configuration lost its check or its charge: %s", js)
	}
}
