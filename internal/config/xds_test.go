package config

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

func TestValidateRulesXDS(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.RulesXDS = "cp:18000" }, ""},
		{func(c *Config) {
			c.RulesXDS, c.RulesXDSNodeID, c.RulesXDSHeaders, c.RulesXDSNodeMetadata = "cp:18000", "n", "x-a: 1, x-b:2", "k=v"
			c.RulesXDSCA, c.RulesXDSCert, c.RulesXDSKey, c.RulesXDSServerName = "ca.crt", "c.crt", "c.key", "cp.internal"
			c.RulesXDSBackoff, c.RulesXDSBackoffMax, c.RulesXDSMaxMsgSize = time.Second, time.Second, 16<<20
		}, ""},
		{func(c *Config) { c.RulesXDS, c.Rules = "cp:18000", "rules.yaml" }, `rules "rules.yaml" and rules_xds "cp:18000": the rules come from a file or from xDS, not both`},
		{func(c *Config) { c.RulesXDS, c.GRPC = "cp:18000", "" }, `rules_xds "cp:18000": the rules serve Envoy's rate-limit service`},
		{func(c *Config) { c.RulesXDSNodeID = "n" }, "rules_xds_* settings without rules_xds"},
		{func(c *Config) { c.RulesXDSTLS = true }, "rules_xds_* settings without rules_xds"},
		{func(c *Config) { c.RulesXDSBackoff = time.Second }, "rules_xds_* settings without rules_xds"},
		{func(c *Config) { c.RulesXDSMaxMsgSize = 1 << 20 }, "rules_xds_* settings without rules_xds"},
		{func(c *Config) { c.RulesXDS, c.RulesXDSMaxMsgSize = "cp:18000", -1 }, "rules_xds_max_msg_size -1 is negative"},
		{func(c *Config) { c.RulesXDS, c.RulesXDSCert = "cp:18000", "c.crt" }, `rules_xds_cert "c.crt" without rules_xds_key`},
		{func(c *Config) { c.RulesXDS, c.RulesXDSKey = "cp:18000", "c.key" }, `rules_xds_key "c.key" without rules_xds_cert`},
		{func(c *Config) { c.RulesXDS, c.RulesXDSBackoff = "cp:18000", -time.Second }, "rules_xds_backoff -1s is negative"},
		{func(c *Config) { c.RulesXDS, c.RulesXDSBackoffMax = "cp:18000", -time.Second }, "rules_xds_backoff_max -1s is negative"},
		{func(c *Config) {
			c.RulesXDS, c.RulesXDSBackoff, c.RulesXDSBackoffMax = "cp:18000", 2*time.Second, time.Second
		}, "rules_xds_backoff 2s is more than rules_xds_backoff_max 1s"},
		{func(c *Config) { c.RulesXDS, c.RulesXDSHeaders = "cp:18000", "x-a=1" }, `rules_xds_headers "x-a=1": want name:value,name:value`},
		{func(c *Config) { c.RulesXDS, c.RulesXDSHeaders = "cp:18000", "a:1,a:2" }, `rules_xds_headers: "a" appears twice`},
		{func(c *Config) { c.RulesXDS, c.RulesXDSNodeMetadata = "cp:18000", "=v" }, `rules_xds_node_metadata "=v": want key=value,key=value`},
	} {
		cfg := Default()
		c.mod(&cfg)
		err := cfg.Validate()
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", cfg, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
}

func TestRulesXDSMaps(t *testing.T) {
	c := Config{RulesXDSHeaders: " x-token : abc:def , x-tenant:blue", RulesXDSNodeMetadata: "cluster=edge,zone = a=b"}
	h, err := c.RulesXDSHeaderMap()
	if err != nil || !maps.Equal(h, map[string]string{"x-token": "abc:def", "x-tenant": "blue"}) {
		t.Errorf("headers %v, %v", h, err)
	}
	m, err := c.RulesXDSNodeMetadataMap()
	if err != nil || !maps.Equal(m, map[string]string{"cluster": "edge", "zone": "a=b"}) {
		t.Errorf("metadata %v, %v", m, err)
	}
	if c.RulesXDSUseTLS() {
		t.Error("TLS without a TLS setting")
	}
	for _, tc := range []Config{{RulesXDSTLS: true}, {RulesXDSCA: "a"}, {RulesXDSCert: "c"}, {RulesXDSServerName: "n"}} {
		if !tc.RulesXDSUseTLS() {
			t.Errorf("%+v: no TLS", tc)
		}
	}
}

func TestParseRulesXDS(t *testing.T) {
	cfg, err := Parse(strings.NewReader("rules_xds: cp:18000\nrules_xds_node_id: edge\nrules_xds_backoff: 2s\n"), "funnel.yaml", Default())
	if err != nil || cfg.RulesXDS != "cp:18000" || cfg.RulesXDSNodeID != "edge" || cfg.RulesXDSBackoff != 2*time.Second {
		t.Fatalf("%+v, %v", cfg, err)
	}
}
