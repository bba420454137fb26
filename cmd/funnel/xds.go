package main

import (
	"flag"

	"github.com/funnelrl/funnel/config"
)

// xdsFlags defines the flags of the rules that a control plane sends over
// xDS, as serveFlags defines the others.
func xdsFlags(fs *flag.FlagSet, c *config.Config) {
	fs.StringVar(&c.RulesXDS, "rules-xds", c.RulesXDS, "xDS management server `address` (host:port) that sends the rules (RateLimitConfig resources over ADS), instead of --rules")
	fs.StringVar(&c.RulesXDSNodeID, "rules-xds-node-id", c.RulesXDSNodeID, "xDS node `id` the server picks the rules by (empty: default)")
	fs.StringVar(&c.RulesXDSNodeMetadata, "rules-xds-node-metadata", c.RulesXDSNodeMetadata, "xDS node `metadata`: key=value,key=value")
	fs.StringVar(&c.RulesXDSHeaders, "rules-xds-headers", c.RulesXDSHeaders, "gRPC `headers` sent to the xDS server: name:value,name:value")
	fs.BoolVar(&c.RulesXDSTLS, "rules-xds-tls", c.RulesXDSTLS, "reach the xDS server over TLS (implied by --rules-xds-ca, --rules-xds-cert and --rules-xds-server-name)")
	fs.StringVar(&c.RulesXDSCA, "rules-xds-ca", c.RulesXDSCA, "PEM `file` of the CAs that verify the xDS server (default: the system's)")
	fs.StringVar(&c.RulesXDSCert, "rules-xds-cert", c.RulesXDSCert, "PEM certificate `file` presented to the xDS server (mutual TLS); reloaded when it changes")
	fs.StringVar(&c.RulesXDSKey, "rules-xds-key", c.RulesXDSKey, "PEM private key `file` of --rules-xds-cert")
	fs.StringVar(&c.RulesXDSServerName, "rules-xds-server-name", c.RulesXDSServerName, "`name` the xDS server's certificate must hold, when not the address's host")
	fs.DurationVar(&c.RulesXDSBackoff, "rules-xds-backoff", c.RulesXDSBackoff, "first delay before reconnecting to the xDS server, doubled at each failure, less a random half (0: 10s)")
	fs.DurationVar(&c.RulesXDSBackoffMax, "rules-xds-backoff-max", c.RulesXDSBackoffMax, "bound on the delays before reconnecting to the xDS server (0: 1m)")
	fs.IntVar(&c.RulesXDSMaxMsgSize, "rules-xds-max-msg-size", c.RulesXDSMaxMsgSize, "bound on a response of the xDS server, in `bytes` (0: gRPC's 4 MiB)")
}
