package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/version"
)

func TestRun(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{nil, 2, "", "Usage:"},
		{[]string{"version"}, 0, "funnel " + version.Version, ""},
		{[]string{"help"}, 0, "funnel serve", ""},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"serve", "--bogus"}, 2, "", "flag provided but not defined: -bogus"},
		{[]string{"serve", "extra"}, 2, "", `unexpected argument "extra"`},
		{[]string{"serve", "--store", "redis://127.0.0.1:1/db"}, 1, "", "redis://127.0.0.1:1/db"},
		{[]string{"serve", "--store-timeout", "-1s"}, 1, "", "store_timeout -1s is negative"},
		{[]string{"serve", "--store", "etcd://x"}, 1, "", `store "etcd://x": want memory`},
		{[]string{"serve", "--max-keys", "-1"}, 1, "", "negative"},
		{[]string{"serve", "--resp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, 0, "store=memory", ""},
		{[]string{"serve", "--resp", "127.0.0.1:0", "--http", "", "--log-level", "loud"}, 1, "", `log_level "loud"`},
		{[]string{"serve", "--config", "/nonexistent/funnel.yaml"}, 1, "", "no such file"},
		{[]string{"serve", "--tls-cert", "tls.crt"}, 1, "", `tls_cert "tls.crt" without tls_key`},
		{[]string{"serve", "--tls-key", "tls.key"}, 1, "", `tls_key "tls.key" without tls_cert`},
		{[]string{"serve", "--tls-ca", "ca.crt"}, 1, "", `tls_ca "ca.crt" without tls_cert and tls_key`},
		{[]string{"serve", "--resp", "127.0.0.1:0", "--http", "", "--grpc", "", "--tls-cert", "/nonexistent/tls.crt", "--tls-key", "/nonexistent/tls.key"},
			1, "", "/nonexistent/tls.crt: no such file or directory"},
	} {
		var out, errb bytes.Buffer
		code := run(canceled, c.args, &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.stdout) || !strings.Contains(errb.String(), c.stderr) {
			t.Errorf("run(%q) = %d\nstdout: %s\nstderr: %s\nwant %d, stdout containing %q, stderr containing %q",
				c.args, code, out.String(), errb.String(), c.code, c.stdout, c.stderr)
		}
	}
}

// funnel serve --help lists the flags of credentials and TLS, with their
// arguments.
func TestServeHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"-requirepass password", "-users-file file", "-metrics-open", "-tls-cert file", "-tls-key file", "-tls-ca file", "mutual TLS"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("serve --help lacks %q:\n%s", want, errb.String())
		}
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	var out bytes.Buffer
	go func() {
		done <- run(ctx, []string{"serve", "--resp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, &out, &out)
	}()
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
}
