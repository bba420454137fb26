// Package atomicfile replaces files whole: a reader, or a process that
// starts after a crash, finds the old content or the new, never a part.
//
// Write writes to a temporary file in the same directory, fsyncs it,
// renames it over the file and fsyncs the directory, as etcd's fileutil
// and litestream do. A crash before the rename leaves the old file and a
// temporary one, which RemoveTemps removes; after it, the new file.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// tempInfix names the temporary files of a path: path + tempInfix + random.
const tempInfix = ".tmp-"

// Write replaces the file at path by what write writes, with permissions
// perm, and returns the number of bytes written. On any error (of write,
// or of the file system) the file at path is unchanged and the temporary
// file is removed.
func Write(path string, perm os.FileMode, write func(io.Writer) error) (n int64, err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, base+tempInfix+"*")
	if err != nil {
		return 0, fmt.Errorf("atomicfile: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	cw := &countWriter{w: f}
	if err := write(cw); err != nil {
		return cw.n, err
	}
	if err := f.Chmod(perm); err != nil {
		return cw.n, fmt.Errorf("atomicfile: %w", err)
	}
	if err := f.Sync(); err != nil {
		return cw.n, fmt.Errorf("atomicfile: %w", err)
	}
	if err := f.Close(); err != nil {
		return cw.n, fmt.Errorf("atomicfile: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return cw.n, fmt.Errorf("atomicfile: %w", err)
	}
	return cw.n, syncDir(dir)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// syncDir fsyncs the directory dir, so that a rename in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("atomicfile: sync of directory %s: %w", dir, err)
	}
	return nil
}

// CheckDir reports whether Write can replace the file at path: whether a
// file can be created, synced and removed in its directory. The file at
// path itself is not touched.
func CheckDir(path string) error {
	_, err := Write(filepath.Join(filepath.Dir(path), ".check"+tempInfix+filepath.Base(path)), 0o600, func(io.Writer) error {
		return errCheck
	})
	if errors.Is(err, errCheck) {
		return nil
	}
	return err
}

var errCheck = errors.New("atomicfile: check only")

// RemoveTemps removes the temporary files that writes of path left when
// their process ended before the rename, and returns how many it removed.
func RemoveTemps(path string) (int, error) {
	matches, err := filepath.Glob(globEscape(path) + tempInfix + "*")
	if err != nil {
		return 0, fmt.Errorf("atomicfile: %w", err)
	}
	n := 0
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
			return n, fmt.Errorf("atomicfile: %w", err)
		}
		n++
	}
	return n, nil
}

// globEscape escapes the characters of a path that filepath.Glob would
// read as a pattern.
func globEscape(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)
	return r.Replace(p)
}

// MoveAside renames the file at path to path.corrupt-<now, UTC> (a name
// that sorts by time), so that it is kept for a look but no longer read,
// and returns the new name.
func MoveAside(path string, now time.Time) (string, error) {
	to := path + ".corrupt-" + now.UTC().Format("20060102T150405.000000000Z")
	if err := os.Rename(path, to); err != nil {
		return "", fmt.Errorf("atomicfile: %w", err)
	}
	return to, syncDir(filepath.Dir(path))
}
