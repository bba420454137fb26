package rules

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/eventually"
	"github.com/funnelrl/funnel/internal/testlog"
)

func rulesYAML(domain string, count int) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: %d}\n", domain, count)
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// reloads records OnReload calls.
type reloads struct {
	mu   sync.Mutex
	ok   int
	errs []error
}

func (r *reloads) record(_ *Set, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, err)
	} else {
		r.ok++
	}
}

func (r *reloads) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok, len(r.errs)
}

func watch(t *testing.T, path string) (*Watcher, *reloads, *testlog.Buffer) {
	t.Helper()
	rec := &reloads{}
	log, logs := testlog.New(slog.LevelInfo)
	w, err := Watch(path, WatchOptions{
		Logger:   log,
		OnReload: rec.record,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w, rec, logs
}

// count returns the count of domain's rule for key k, or -1.
func count(w *Watcher, domain string) int64 {
	m, ok := w.Rules().Match(domain, []Entry{{"k", "v"}})
	if !ok {
		return -1
	}
	return m.Rule.Limit.Count
}

// waitFor waits until cond holds (eventually.True) and logs how long the
// change took to be in force.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	took := eventually.True(t, what, cond)
	t.Logf("%s after %v", what, took.Round(time.Millisecond))
}

func TestWatchFileEdits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, rulesYAML("d", 1))
	w, rec, logs := watch(t, path)
	if count(w, "d") != 1 {
		t.Fatal("first load")
	}

	// An edit in place.
	writeFile(t, path, rulesYAML("d", 2))
	waitFor(t, "edit in place", func() bool { return count(w, "d") == 2 })

	// A new file renamed over the old one, as editors save.
	tmp := filepath.Join(dir, ".rules.yaml.swp")
	writeFile(t, tmp, rulesYAML("d", 3))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rename over", func() bool { return count(w, "d") == 3 })

	// An invalid file is refused and logged; the last good rules stay.
	before := w.Rules()
	writeFile(t, path, rulesYAML("d", 4)+"    bogus: 1\n")
	waitFor(t, "refusal", func() bool { _, n := rec.counts(); return n == 1 })
	if w.Rules() != before || count(w, "d") != 3 {
		t.Fatal("the refused rules are in force")
	}
	if log := logs.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, path+":5:5: descriptors[0].bogus: unknown field") {
		t.Fatalf("log:\n%s", log)
	}
	if err := w.Reload(); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("Reload = %v, want the refusal", err)
	}
	if _, n := rec.counts(); n != 1 {
		t.Fatalf("the same refused file was reported %d times", n)
	}

	// Fixed, it loads.
	writeFile(t, path, rulesYAML("d", 5))
	// OnReload follows the rules' swap: wait for both.
	waitFor(t, "fix", func() bool { ok, _ := rec.counts(); return count(w, "d") == 5 && ok == 3 })
	ok, bad := rec.counts()
	if ok != 3 || bad != 1 {
		t.Fatalf("OnReload: %d successes, %d failures; want 3 and 1", ok, bad)
	}

	// Touching a file without changing it reloads nothing.
	now := time.Now()
	if err := os.Chtimes(path, now, now); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := rec.counts(); ok != 3 {
		t.Fatalf("an unchanged file was reloaded")
	}
}

func TestWatchDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), rulesYAML("a", 1))
	w, _, _ := watch(t, dir)

	writeFile(t, filepath.Join(dir, "b.yaml"), rulesYAML("b", 2))
	waitFor(t, "a new file", func() bool { return count(w, "b") == 2 })

	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a removed file", func() bool { return !w.Rules().HasDomain("a") })

	// A second file for the same domain is refused.
	writeFile(t, filepath.Join(dir, "c.yaml"), rulesYAML("b", 3))
	if err := w.Reload(); err == nil || !strings.Contains(err.Error(), `domain "b" is already defined`) {
		t.Fatalf("Reload = %v", err)
	}
	if count(w, "b") != 2 {
		t.Fatal("the refused rules are in force")
	}
}

// configMap lays out dir as a Kubernetes ConfigMap volume whose data is
// files: a timestamped directory holding them, the ..data link to it, and
// a link per file through ..data. It returns a function that swaps in new
// data exactly as the kubelet does.
func configMap(t *testing.T, dir string, files map[string]string) func(map[string]string) {
	t.Helper()
	gen := 0
	write := func(files map[string]string) string {
		gen++
		ts := fmt.Sprintf("..2026_11_22_%02d_00_00.%d", gen, 1000+gen)
		if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range files {
			writeFile(t, filepath.Join(dir, ts, name), body)
		}
		return ts
	}
	ts := write(files)
	if err := os.Symlink(ts, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return func(files map[string]string) {
		t.Helper()
		old := ts
		ts = write(files)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(ts, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWatchConfigMapSwap(t *testing.T) {
	for _, mode := range []string{"file", "directory"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			swap := configMap(t, dir, map[string]string{"rules.yaml": rulesYAML("d", 1)})
			path := dir
			if mode == "file" {
				path = filepath.Join(dir, "rules.yaml")
			}
			w, rec, _ := watch(t, path)
			if count(w, "d") != 1 {
				t.Fatal("first load")
			}
			for i := 2; i <= 4; i++ {
				swap(map[string]string{"rules.yaml": rulesYAML("d", i)})
				waitFor(t, fmt.Sprintf("swap %d", i), func() bool { return count(w, "d") == int64(i) })
			}
			// A swap to invalid data is refused; the next good one loads.
			swap(map[string]string{"rules.yaml": "domain: d\ndescriptors: 7\n"})
			waitFor(t, "refusal", func() bool { _, n := rec.counts(); return n == 1 })
			if count(w, "d") != 4 {
				t.Fatal("the refused rules are in force")
			}
			swap(map[string]string{"rules.yaml": rulesYAML("d", 5)})
			waitFor(t, "swap after a refusal", func() bool { return count(w, "d") == 5 })
		})
	}
}

func TestWatchRulesFirstLoadFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, "domain: d\nbogus: 1\n")
	if _, err := Watch(path, WatchOptions{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v", err)
	}
	if _, err := Watch(filepath.Join(dir, "missing.yaml"), WatchOptions{}); err == nil {
		t.Fatal("a missing file is watched")
	}
}

func TestWatchPoll(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, rulesYAML("d", 1))
	w, err := Watch(path, WatchOptions{Poll: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Stop the notifications, so that only the poll can see the change.
	w.fw.Set(nil)
	writeFile(t, path, rulesYAML("d", 2))
	waitFor(t, "poll", func() bool { return count(w, "d") == 2 })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal("a second Close:", err)
	}
}
