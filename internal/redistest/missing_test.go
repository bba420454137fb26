package redistest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/funnelrl/funnel/internal/redistest"
)

// helperEnv names the variable that makes TestMissingHelper do its work: it
// runs only as the subprocess of TestMissingBinary.
const helperEnv = "REDISTEST_MISSING_HELPER"

// TestMissingHelper starts what $REDISTEST_MISSING_HELPER names, in a
// subprocess whose PATH lacks the programs it needs.
func TestMissingHelper(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "":
		t.Skip("runs only as a subprocess of TestMissingBinary")
	case "server":
		redistest.StartServer(t)
	case "cluster":
		redistest.StartCluster(t, 3, 0)
	}
	t.Log("helper: started")
}

// A missing redis-server (or redis-cli) skips a Redis test outside CI and
// fails it under CI, with a message that names the program.
func TestMissingBinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// onlyServer is a PATH that has redis-server but not redis-cli.
	onlyServer := t.TempDir()
	if srv, err := exec.LookPath("redis-server"); err == nil {
		if err := os.Symlink(srv, filepath.Join(onlyServer, "redis-server")); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, what, path, ci string
		missing              string // the program the message must name
		fail                 bool
	}{
		{"server/no CI", "server", "", "", "redis-server", false},
		{"server/CI=false", "server", "", "false", "redis-server", false},
		{"server/CI=true", "server", "", "true", "redis-server", true},
		{"server/CI=1", "server", "", "1", "redis-server", true},
		{"cluster/no CI", "cluster", "", "", "redis-server", false},
		{"cluster/CI=true", "cluster", "", "true", "redis-server", true},
		{"cluster without redis-cli/no CI", "cluster", onlyServer, "", "redis-cli", false},
		{"cluster without redis-cli/CI=true", "cluster", onlyServer, "true", "redis-cli", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.path == onlyServer && tc.missing == "redis-cli" {
				if _, err := os.Stat(filepath.Join(onlyServer, "redis-server")); err != nil {
					redistest.Missing(t, "redis-server is not on PATH: cannot build a PATH with redis-server alone")
				}
			}
			cmd := exec.Command(exe, "-test.run=^TestMissingHelper$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"="+tc.what, "PATH="+tc.path, "CI="+tc.ci,
				"GORACE=atexit_sleep_ms=0")
			out, err := cmd.CombinedOutput()
			_, exitErr := err.(*exec.ExitError)
			if err != nil && !exitErr {
				t.Fatalf("running the helper: %v", err)
			}
			text := string(out)
			if strings.Contains(text, "helper: started") {
				t.Fatalf("the helper started without %s on PATH:\n%s", tc.missing, text)
			}
			if !strings.Contains(text, tc.missing+" is not on PATH") {
				t.Errorf("the message does not name %s:\n%s", tc.missing, text)
			}
			if tc.fail {
				if err == nil || !strings.Contains(text, "--- FAIL: TestMissingHelper") {
					t.Errorf("CI=%q: the test did not fail (exit %v):\n%s", tc.ci, err, text)
				}
			} else if err != nil || !strings.Contains(text, "--- SKIP: TestMissingHelper") {
				t.Errorf("CI=%q: the test was not skipped (exit %v):\n%s", tc.ci, err, text)
			}
		})
	}
}
