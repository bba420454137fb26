package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestMain lets a test run this test binary as the funnel command itself
// (with FUNNEL_RUN_MAIN=1 in its environment), to see a real exit status.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const upstreamConfigs = "../../rules/testdata/upstream/config/"

func TestRulesCheck(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", "domain: d\ndescriptors:\n  - key: a\n    quota_mode: true\n    metadata: {tier: gold}\n    value: x*y\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	bad := writeFile(t, dir, "bad.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - value: b\n    shadow_mode: yes\n")
	many := "domain: d\n"
	for i := range 30 {
		many += "x" + strconv.Itoa(i) + ": 1\n"
	}
	manyFile := writeFile(t, dir, "many.yaml", many)
	merge := t.TempDir()
	for _, f := range []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"} {
		data, err := os.ReadFile(upstreamConfigs + f)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, merge, f, string(data))
	}
	for _, c := range []struct {
		args   []string
		code   int
		stdout string
		stderr []string // each a whole line, in order
	}{
		{args: []string{"rules", "check", good}, stdout: good + ": ok: 1 domain, 1 rule\n"},
		{args: []string{"rules", "check", "../../rules/testdata/envoy"}, stdout: "../../rules/testdata/envoy: ok: 10 domains, 21 rules\n"},
		{args: []string{"rules", "check", bad}, code: 1, stderr: []string{
			bad + `:4:24: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight" (want second, minute, hour, day, week, month or year)`,
			bad + `:5:5: descriptors[1].key: a descriptor needs a key`,
			bad + `:6:18: descriptors[1].shadow_mode: want true or false, not str "yes"`,
		}},
		{args: []string{"rules", "check", good, bad, upstreamConfigs + "bad_yaml.yaml"}, code: 1, stdout: good + ": ok", stderr: []string{
			bad + `:4:24: descriptors[0].rate_limit.unit: invalid rate limit unit`,
			bad + `:5:5: descriptors[1].key: a descriptor needs a key`,
			bad + `:6:18: descriptors[1].shadow_mode: want true or false`,
			upstreamConfigs + "bad_yaml.yaml:2:1: found unexpected end of stream",
		}},
		{args: []string{"rules", "check", upstreamConfigs + "misspelled_key2.yaml"}, code: 1, stderr: []string{
			upstreamConfigs + "misspelled_key2.yaml:7:7: descriptors[0].rate_limit.requestsperunit: unknown field (want one of",
		}},
		{args: []string{"rules", "check", filepath.Join(dir, "none.yaml")}, code: 1, stderr: []string{"stat " + filepath.Join(dir, "none.yaml") + ": no such file or directory"}},
		{args: []string{"rules", "check", merge}, code: 1, stderr: []string{filepath.Join(merge, "merge_domain_key2.yaml") + `:2:9: domain: domain "test-domain" is already defined in`}},
		{args: []string{"rules", "check", "--merge-domains", merge}, stdout: merge + ": ok: 1 domain, 2 rules\n"},
		{args: []string{"rules", "check"}, code: 2, stderr: []string{"funnel rules check: no FILE or DIR given"}},
		{args: []string{"rules", "check", "--bogus", good}, code: 2, stderr: []string{"flag provided but not defined: -bogus"}},
		{args: []string{"rules", "lint"}, code: 2, stderr: []string{`funnel rules: unknown command "lint"`}},
		{args: []string{"rules"}, code: 2, stderr: []string{"Usage:"}},
		{args: []string{"rules", "check", "--help"}, stderr: []string{"Usage:"}},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb)
		if code != c.code || !strings.HasPrefix(out.String(), c.stdout) || c.stdout == "" && out.Len() > 0 {
			t.Errorf("run(%q) = %d, stdout %q; want %d, %q\nstderr: %s", c.args, code, out.String(), c.code, c.stdout, errb.String())
			continue
		}
		lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
		if len(c.stderr) == 0 && errb.Len() > 0 || len(c.stderr) > 0 && len(lines) < len(c.stderr) {
			t.Errorf("run(%q): stderr\n%s\nwant lines starting with %q", c.args, errb.String(), c.stderr)
			continue
		}
		for i, want := range c.stderr {
			if !strings.HasPrefix(lines[i], want) {
				t.Errorf("run(%q): stderr line %d\n%s\nwant it to start with\n%s", c.args, i+1, lines[i], want)
			}
		}
	}
	// Every problem is reported, not the first 20.
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"rules", "check", manyFile}, &out, &errb); code != 1 {
		t.Fatalf("exit %d", code)
	}
	if n := strings.Count(errb.String(), ": unknown field"); n != 30 || strings.Contains(errb.String(), "too many") {
		t.Errorf("%d problems reported, want 30:\n%s", n, errb.String())
	}
}

// Each of envoyproxy/ratelimit's test configurations that it refuses on
// its own is refused by the command, with the position of the problem.
func TestRulesCheckUpstreamConfigs(t *testing.T) {
	for _, c := range []struct {
		file string
		code int
		at   string
	}{
		{"basic_config.yaml", 0, ""},
		{"metadata.yaml", 0, ""},
		{"share_threshold.yaml", 0, ""},
		{"wildcard.yaml", 0, ""},
		{"bad_limit_unit.yaml", 1, ":6:13: "},
		{"bad_yaml.yaml", 1, ":2:1: "},
		{"duplicate_key.yaml", 1, ":7:12: "},
		{"empty_domain.yaml", 1, ":1:1: "},
		{"empty_key.yaml", 1, ":3:5: "},
		{"misspelled_key.yaml", 1, ":5:5: "},
		{"non_map_list.yaml", 1, ":3:5: "},
		{"non_string_key.yaml", 1, ":1:1: "},
		{"replaces_empty.yaml", 1, ":10:20: "},
		{"replaces_self.yaml", 1, ":10:21: "},
		{"unlimited_with_unit.yaml", 1, ":6:13: "},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"rules", "check", upstreamConfigs + c.file}, &out, &errb)
		if code != c.code || c.at != "" && !strings.HasPrefix(errb.String(), upstreamConfigs+c.file+c.at) {
			t.Errorf("%s: exit %d, stderr %q; want %d, starting with %q", c.file, code, errb.String(), c.code, c.at)
		}
	}
}

// The command as a process: its exit status and streams.
func TestRulesCheckProcess(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", "domain: d\n")
	bad := writeFile(t, dir, "bad.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n    quota_mode: 1\n")
	for _, c := range []struct {
		file   string
		code   int
		stderr string
	}{
		{good, 0, ""},
		{bad, 1, bad + ":5:17: descriptors[0].quota_mode: want true or false, not int \"1\"\n"},
	} {
		cmd := exec.Command(os.Args[0], "rules", "check", c.file)
		cmd.Env = append(os.Environ(), "FUNNEL_RUN_MAIN=1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || errb.String() != c.stderr {
			t.Errorf("funnel rules check %s: exit %d, stderr %q; want %d, %q (stdout %q)", c.file, code, errb.String(), c.code, c.stderr, out.String())
		}
	}
}

// serve's switches for envoy's QUOTA_MODE and RESPONSE_DYNAMIC_METADATA.
func TestServeQuotaAndMetadataFlags(t *testing.T) {
	cfg, err := serveConfig([]string{"--quota-mode", "--rls-dynamic-metadata"}, io.Discard)
	if err != nil || !cfg.QuotaMode || !cfg.RLSDynamicMetadata {
		t.Fatalf("%+v, %v", cfg, err)
	}
}
