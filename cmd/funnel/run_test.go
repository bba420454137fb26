package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/config"
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

// The configuration comes from the defaults, then the file, then the flags
// given on the command line, whatever their value: a flag given its
// default value still overrides the file.
func TestServeConfigPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "funnel.yaml")
	yaml := `resp: 127.0.0.1:7000
http: 127.0.0.1:7001
log_level: warn
fail_open: true
metrics_open: true
max_keys: 100
max_clients: 50
shutdown_timeout: 30s
idle_timeout: 1m
`
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--resp", "127.0.0.1:6380", // the default value, over the file's
		"--log-level", "debug",
		"--fail-open=false", // the default value, over the file's
		"--shadow-mode",
		"--max-keys", "0", // the default value, over the file's
		"--event-loops", "-1",
		"--shutdown-timeout", "10s", // the default value, over the file's
		"--store-timeout", "250ms",
		"--config", file, // after flags, as anywhere
	}
	got, err := serveConfig(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := config.Default()
	// From the file alone.
	want.HTTP = "127.0.0.1:7001"
	want.MetricsOpen = true
	want.MaxClients = 50
	want.IdleTimeout = time.Minute
	// From the command line, over the file or the default.
	want.RESP = "127.0.0.1:6380"
	want.LogLevel = "debug"
	want.FailOpen = false
	want.ShadowMode = true
	want.MaxKeys = 0
	want.EventLoops = -1
	want.ShutdownTimeout = 10 * time.Second
	want.StoreTimeout = 250 * time.Millisecond
	if got != want {
		t.Errorf("config\n got %+v\nwant %+v", got, want)
	}

	// Without a file, the flags go over the defaults.
	got, err = serveConfig([]string{"--http", "", "--rls-headers", "--max-clients", "9", "--idle-timeout", "5s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want = config.Default()
	want.HTTP, want.RLSHeaders, want.MaxClients, want.IdleTimeout = "", true, 9, 5*time.Second
	if got != want {
		t.Errorf("config without a file\n got %+v\nwant %+v", got, want)
	}
}

// Every field of the configuration has a flag, and every flag but --config
// sets a field of its own, over the file as over the defaults.
func TestServeFlagsCoverConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("funnel serve", flag.ContinueOnError)
	var scratch config.Config
	serveFlags(fs, &scratch)
	def := reflect.ValueOf(config.Default())
	set := map[string]string{} // field name -> flag name
	fs.VisitAll(func(fl *flag.Flag) {
		if fl.Name == "config" {
			return
		}
		var v string
		switch d := fl.Value.(flag.Getter).Get().(type) {
		case string:
			v = d + "x"
		case bool:
			v = strconv.FormatBool(!d)
		case int:
			v = strconv.Itoa(d + 7)
		case int64:
			v = strconv.FormatInt(d+7, 10)
		case time.Duration:
			v = (d + 7*time.Second).String()
		case float64:
			v = strconv.FormatFloat(d/2+0.125, 'g', -1, 64)
		default:
			t.Fatalf("--%s: a flag of type %T", fl.Name, d)
		}
		for _, args := range [][]string{{"--" + fl.Name + "=" + v}, {"--config", file, "--" + fl.Name + "=" + v}} {
			cfg, err := serveConfig(args, io.Discard)
			if err != nil {
				t.Fatalf("%q: %v", args, err)
			}
			got := reflect.ValueOf(cfg)
			var changed []string
			for i := range got.NumField() {
				if got.Field(i).Interface() != def.Field(i).Interface() {
					changed = append(changed, got.Type().Field(i).Name)
				}
			}
			if len(changed) != 1 {
				t.Fatalf("%q changes the fields %v, want one", args, changed)
			}
			if prev, dup := set[changed[0]]; dup && prev != fl.Name {
				t.Fatalf("--%s and --%s both set %s", prev, fl.Name, changed[0])
			}
			set[changed[0]] = fl.Name
		}
	})
	for i := range def.NumField() {
		if name := def.Type().Field(i).Name; set[name] == "" {
			t.Errorf("config field %s has no flag", name)
		}
	}
}

// Every flag is an environment variable too (FUNNEL_ and the file's key in
// upper case): over the file, under the command line.
func TestServeConfigEnv(t *testing.T) {
	file := filepath.Join(t.TempDir(), "funnel.yaml")
	if err := os.WriteFile(file, []byte("max_keys: 100\nlog_level: warn\nidle_timeout: 1m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FUNNEL_MAX_KEYS", "200")
	t.Setenv("FUNNEL_LOG_LEVEL", "error")
	t.Setenv("FUNNEL_FAIL_OPEN", "true")
	t.Setenv("FUNNEL_CONFIG", file)
	got, err := serveConfig([]string{"--log-level", "debug"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := config.Default()
	want.MaxKeys, want.LogLevel, want.FailOpen, want.IdleTimeout = 200, "debug", true, time.Minute
	if got != want {
		t.Errorf("config\n got %+v\nwant %+v", got, want)
	}

	t.Setenv("FUNNEL_MAX_KEYS", "many")
	if _, err := serveConfig(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "FUNNEL_MAX_KEYS") {
		t.Errorf("a bad environment variable: %v", err)
	}
}
