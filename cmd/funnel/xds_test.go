package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The listeners that can be turned off, the Sentinel store URL and the
// xDS flags, on the command line.
func TestServeListenersAndXDS(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"serve", "--resp", "", "--http", "", "--grpc", ""}, 1, "", "resp, http and grpc are all off: at least one listener is needed"},
		{[]string{"serve", "--resp", "", "--http", "", "--grpc", "127.0.0.1:0"}, 0, "grpc=127.0.0.1:", ""},
		{[]string{"serve", "--resp", "", "--http", "", "--grpc", "127.0.0.1:0", "--store", "redis-sentinel://127.0.0.1:1/"}, 1, "", "the path names the master"},
		{[]string{"serve", "--rules", "r.yaml", "--rules-xds", "127.0.0.1:1"}, 1, "", "the rules come from a file or from xDS, not both"},
		{[]string{"serve", "--rules-xds-node-id", "edge"}, 1, "", "rules_xds_* settings without rules_xds"},
		{[]string{"serve", "--rules-xds", "127.0.0.1:1", "--rules-xds-headers", "x"}, 1, "", `rules_xds_headers "x": want name:value,name:value`},
		{[]string{"serve", "--resp", "", "--http", "", "--grpc", "127.0.0.1:0", "--rules-xds", "127.0.0.1:1", "--rules-xds-ca", "/nonexistent/ca.crt"},
			1, "", "/nonexistent/ca.crt: no such file or directory"},
		{[]string{"serve", "--resp", "", "--http", "", "--grpc", "127.0.0.1:0", "--rules-xds", "127.0.0.1:1", "--rules-xds-node-id", "edge-1"},
			0, "rules from xDS", ""},
	} {
		var out, errb bytes.Buffer
		code := run(canceled, c.args, &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.stdout) || !strings.Contains(errb.String(), c.stderr) {
			t.Errorf("run(%q) = %d\nstdout: %s\nstderr: %s\nwant %d, stdout containing %q, stderr containing %q",
				c.args, code, out.String(), errb.String(), c.code, c.stdout, c.stderr)
		}
		if strings.Contains(out.String(), "resp=") && c.args[2] == "" {
			t.Errorf("run(%q) logged a RESP listener: %s", c.args, out.String())
		}
	}
}
