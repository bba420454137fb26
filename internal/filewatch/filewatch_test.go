package filewatch

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// run starts w.Run with a reload that reports on the returned channel, and
// stops it when the test ends.
func run(t *testing.T, w *Watcher) <-chan struct{} {
	t.Helper()
	reloads := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx, func() { reloads <- struct{}{} })
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return reloads
}

func wait(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("no reload after %s", what)
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestEventsReloadOncePerBurst(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	write(t, path, "0")
	// A long debounce: the whole burst below falls inside it.
	w, err := New(Options{Name: "test", Debounce: 300 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	w.Set(Dirs(path))
	reloads := run(t, w)
	for i := range 20 {
		write(t, path, string(rune('a'+i)))
	}
	wait(t, "a burst of writes", reloads)
	// The reload came once for the burst: a write now starts a new wait.
	write(t, path, "again")
	wait(t, "a later write", reloads)
	if n := len(reloads); n != 0 {
		t.Fatalf("%d more reloads for two bursts", n)
	}
}

func TestReplacedDirectoryIsWatchedAgain(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "d")
	os.Mkdir(dir, 0o700)
	w, err := New(Options{Name: "test", Debounce: time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	w.Set([]string{dir})
	reloads := run(t, w)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	wait(t, "the directory removed", reloads)
	os.Mkdir(dir, 0o700)
	w.Set([]string{dir}) // as a reload does
	write(t, filepath.Join(dir, "f"), "1")
	wait(t, "a write in the directory made again", reloads)
}

func TestSetForgetsDirectories(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	w, err := New(Options{Name: "test", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Set([]string{a, b, a})
	w.Set([]string{b, filepath.Join(a, "missing")})
	w.mu.Lock()
	var got []string
	for d := range w.dirs {
		got = append(got, d)
	}
	w.mu.Unlock()
	if !slices.Equal(got, []string{b}) {
		t.Fatalf("watching %v, want only %s", got, b)
	}
	if list := w.fs.WatchList(); !slices.Equal(list, []string{b}) {
		t.Fatalf("the file system watches %v", list)
	}
}

func TestPoll(t *testing.T) {
	w, err := New(Options{Name: "test", Poll: 10 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	reloads := run(t, w) // nothing watched: only the poll reloads
	wait(t, "a poll", reloads)
	wait(t, "a second poll", reloads)
}

func TestDirs(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	os.Mkdir(real, 0o700)
	write(t, filepath.Join(real, "f"), "x")
	link := filepath.Join(dir, "f")
	if err := os.Symlink(filepath.Join(real, "f"), link); err != nil {
		t.Fatal(err)
	}
	got := Dirs("", link, filepath.Join(dir, "missing"))
	want := []string{dir, real, dir}
	if !slices.Equal(got, want) {
		t.Fatalf("Dirs = %v, want %v", got, want)
	}
}

func TestCloseTwiceAndAfterRun(t *testing.T) {
	w, err := New(Options{Name: "test", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w.Run(ctx, func() { t.Error("reload without a change") })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
