package tlsfiles

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/funnelrl/funnel/internal/testcerts"
)

// files are the paths a Watcher reads, in a temporary directory.
type files struct{ dir, cert, key, ca string }

func newFiles(t *testing.T) files {
	dir := t.TempDir()
	return files{dir: dir, cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key"), ca: filepath.Join(dir, "ca.crt")}
}

// write writes the files in place (the same inodes, truncated and
// rewritten); a nil ca leaves the CA file alone.
func (f files) write(t *testing.T, p testcerts.Pair, ca []byte) {
	t.Helper()
	writeFile(t, f.cert, p.Cert)
	writeFile(t, f.key, p.Key)
	if ca != nil {
		writeFile(t, f.ca, ca)
	}
}

func writeFile(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// secretVolume lays files out as the kubelet does in a Secret volume:
// each file is a symbolic link through ..data, a link to a directory
// named after the time of the update, which an update replaces whole.
type secretVolume struct {
	dir     string
	version int
}

func newSecretVolume(t *testing.T) *secretVolume { return &secretVolume{dir: t.TempDir()} }

// files returns the paths a Watcher reads from the volume.
func (v *secretVolume) files() files {
	return files{dir: v.dir, cert: filepath.Join(v.dir, "tls.crt"), key: filepath.Join(v.dir, "tls.key"), ca: filepath.Join(v.dir, "ca.crt")}
}

// update makes the volume hold p and ca as the kubelet's atomic writer
// does: a new timestamped directory, a ..data_tmp link to it renamed over
// ..data, the old directory removed.
func (v *secretVolume) update(t *testing.T, p testcerts.Pair, ca []byte) {
	t.Helper()
	v.version++
	ts := filepath.Join(v.dir, fmt.Sprintf("..2026_11_25_08_00_%02d.%d", v.version, 1000+v.version))
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ts, "tls.crt"), p.Cert)
	writeFile(t, filepath.Join(ts, "tls.key"), p.Key)
	writeFile(t, filepath.Join(ts, "ca.crt"), ca)
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}
