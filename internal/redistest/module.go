package redistest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// moduleBuild is the build of Funnel's Redis module, once per process.
var moduleBuild struct {
	once sync.Once
	path string
	err  error
}

// Module returns the path of Funnel's Redis module (module/funnel.c of this
// repository), built with the C compiler cc, for redis-server's
// --loadmodule. A build is kept in the system's temporary directory under
// the hash of the source, so that test runs of the same source build it
// once. If cc is not on PATH it skips the test, or fails it under CI (see
// Missing).
func Module(tb testing.TB) string {
	tb.Helper()
	cc := Binary(tb, "cc")
	moduleBuild.once.Do(func() { moduleBuild.path, moduleBuild.err = buildModule(cc) })
	if moduleBuild.err != nil {
		tb.Fatalf("redistest: Funnel's module: %v", moduleBuild.err)
	}
	return moduleBuild.path
}

// ModuleSource returns the path of the module's source.
func ModuleSource() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "module", "funnel.c")
}

func buildModule(cc string) (string, error) {
	src := ModuleSource()
	code, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(code)
	dir := filepath.Join(os.TempDir(), "funnel-module-"+hex.EncodeToString(sum[:8]))
	path := filepath.Join(dir, "funnel.so")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Another test process may build it at the same time: each builds
	// its own file, then renames it into place.
	tmp, err := os.CreateTemp(dir, "build-*.so")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	out, err := exec.Command(cc, "-O2", "-Wall", "-Wextra", "-fPIC", "-shared", "-ffp-contract=off", "-o", tmp.Name(), src).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s", cc, src, err, out)
	}
	return path, os.Rename(tmp.Name(), path)
}
