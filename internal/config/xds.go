package config

import (
	"fmt"
	"strings"
)

// The rules that a control plane sends over xDS (see package rules/xds)
// are set by the RulesXDS* fields of Config, which follow
// envoyproxy/ratelimit's CONFIG_GRPC_XDS_* and XDS_CLIENT_BACKOFF_*
// settings.

// RulesXDSUseTLS reports whether the management server is reached over
// TLS.
func (c Config) RulesXDSUseTLS() bool {
	return c.RulesXDSTLS || c.RulesXDSCA != "" || c.RulesXDSCert != "" || c.RulesXDSServerName != ""
}

// RulesXDSHeaderMap returns RulesXDSHeaders as a map.
func (c Config) RulesXDSHeaderMap() (map[string]string, error) {
	return pairs(c.RulesXDSHeaders, ':', "rules_xds_headers", "name:value,name:value")
}

// RulesXDSNodeMetadataMap returns RulesXDSNodeMetadata as a map.
func (c Config) RulesXDSNodeMetadataMap() (map[string]string, error) {
	return pairs(c.RulesXDSNodeMetadata, '=', "rules_xds_node_metadata", "key=value,key=value")
}

// pairs parses "k<sep>v,k<sep>v"; spaces around each part are dropped.
func pairs(s string, sep byte, field, form string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, p := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(p, string(sep))
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: %s %q: want %s", ErrInvalid, field, s, form)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%w: %s: %q appears twice", ErrInvalid, field, k)
		}
		out[k] = v
	}
	return out, nil
}

// validateXDS reports settings of the xDS rules that do not fit together.
func (c Config) validateXDS() error {
	x := c
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
	}
	switch {
	case x.RulesXDS == "" && (x.RulesXDSNodeID != "" || x.RulesXDSNodeMetadata != "" || x.RulesXDSHeaders != "" ||
		x.RulesXDSUseTLS() || x.RulesXDSKey != "" || x.RulesXDSBackoff != 0 || x.RulesXDSBackoffMax != 0 || x.RulesXDSMaxMsgSize != 0):
		return bad("rules_xds_* settings without rules_xds: the management server's address is required")
	case x.RulesXDS == "":
		return nil
	case c.Rules != "":
		return bad("rules %q and rules_xds %q: the rules come from a file or from xDS, not both", c.Rules, x.RulesXDS)
	case c.GRPC == "":
		return bad("rules_xds %q: the rules serve Envoy's rate-limit service, which an empty grpc address turns off", x.RulesXDS)
	case x.RulesXDSCert != "" && x.RulesXDSKey == "":
		return bad("rules_xds_cert %q without rules_xds_key", x.RulesXDSCert)
	case x.RulesXDSKey != "" && x.RulesXDSCert == "":
		return bad("rules_xds_key %q without rules_xds_cert", x.RulesXDSKey)
	case x.RulesXDSBackoff < 0:
		return bad("rules_xds_backoff %v is negative", x.RulesXDSBackoff)
	case x.RulesXDSBackoffMax < 0:
		return bad("rules_xds_backoff_max %v is negative", x.RulesXDSBackoffMax)
	case x.RulesXDSMaxMsgSize < 0:
		return bad("rules_xds_max_msg_size %d is negative", x.RulesXDSMaxMsgSize)
	case x.RulesXDSBackoffMax > 0 && x.RulesXDSBackoff > x.RulesXDSBackoffMax:
		return bad("rules_xds_backoff %v is more than rules_xds_backoff_max %v", x.RulesXDSBackoff, x.RulesXDSBackoffMax)
	}
	if _, err := c.RulesXDSHeaderMap(); err != nil {
		return err
	}
	_, err := c.RulesXDSNodeMetadataMap()
	return err
}
