package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// entries returns the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "snap")
	for _, content := range []string{"first", "second, longer"} {
		n, err := Write(path, 0o640, func(w io.Writer) error {
			_, err := io.WriteString(w, content)
			return err
		})
		if err != nil || n != int64(len(content)) {
			t.Fatalf("Write = %d, %v", n, err)
		}
		if got := read(t, path); got != content {
			t.Fatalf("read %q, want %q", got, content)
		}
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode())
	}
	if es := entries(t, dir); len(es) != 1 {
		t.Errorf("the directory holds %q, want the file alone", es)
	}
}

// A write that fails, half way, leaves the old file whole and no
// temporary file.
func TestWriteFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "snap")
	if _, err := Write(path, 0o600, func(w io.Writer) error { _, err := io.WriteString(w, "good"); return err }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	_, err := Write(path, 0o600, func(w io.Writer) error {
		io.WriteString(w, "half of a")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if got := read(t, path); got != "good" {
		t.Fatalf("read %q after a failed write, want the old content", got)
	}
	if es := entries(t, dir); len(es) != 1 {
		t.Errorf("the directory holds %q, want the file alone", es)
	}
}

func TestCheckDir(t *testing.T) {
	dir := t.TempDir()
	if err := CheckDir(filepath.Join(dir, "snap")); err != nil {
		t.Fatal(err)
	}
	if es := entries(t, dir); len(es) != 0 {
		t.Errorf("the check left %q", es)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	for _, bad := range []string{filepath.Join(dir, "missing", "snap"), filepath.Join(file, "snap")} {
		if err := CheckDir(bad); err == nil {
			t.Errorf("CheckDir(%s) = nil, want an error", bad)
		}
	}
}

// The temporary files of writes that a crash cut short are removed; other
// files are not.
func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s[1]*.snap")
	for _, n := range []string{"s[1]*.snap", "s[1]*.snap.tmp-123", "s[1]*.snap.tmp-456", "other.tmp-1", "s[1]*.snapx"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o600)
	}
	n, err := RemoveTemps(path)
	if err != nil || n != 2 {
		t.Fatalf("RemoveTemps = %d, %v; want 2", n, err)
	}
	if es := entries(t, dir); strings.Join(es, " ") != "other.tmp-1 s[1]*.snap s[1]*.snapx" {
		t.Errorf("left %q", es)
	}
}

func TestMoveAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "snap")
	os.WriteFile(path, []byte("bad"), 0o600)
	to, err := MoveAside(path, time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if want := path + ".corrupt-20260102T030405.000000006Z"; to != want {
		t.Errorf("moved to %s, want %s", to, want)
	}
	if got := read(t, to); got != "bad" {
		t.Errorf("moved file holds %q", got)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file is still there: %v", err)
	}
}
