// Package filewatch calls a reload function when files may have changed:
// on the file system's events in the directories that hold them, debounced,
// and on a poll interval for file systems that report nothing (some
// network mounts). It is the one watching loop of the daemon's reloadable
// files (the rules, the TLS certificates); what a reload reads, and whether
// anything really changed, is the caller's.
//
// Directories are watched rather than files, because files that matter
// are replaced rather than edited: an editor's rename, a Kubernetes
// ConfigMap or Secret volume whose ..data symbolic link is swapped. Dirs
// gives the directories to watch for a set of files.
package filewatch

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Options configure a Watcher.
type Options struct {
	// Name says what is watched in log lines ("rules", "tls").
	Name string
	// Debounce is how long Run waits after the first event of a burst
	// before it reloads, so that a file being written, or a volume being
	// swapped, is read once, whole; 0 means 50 ms. Later events of the
	// burst do not extend the wait, so that a stream of events cannot put
	// a reload off for ever.
	Debounce time.Duration
	// Poll, when positive, also reloads at that interval.
	Poll time.Duration
	// Logger receives watch errors; nil means slog.Default().
	Logger *slog.Logger
}

// Watcher watches a set of directories. Set may be called from any
// goroutine; Run is called once.
type Watcher struct {
	opts Options
	log  *slog.Logger
	fs   *fsnotify.Watcher // nil when the file system cannot be watched

	mu   sync.Mutex
	dirs map[string]bool // watched now

	closeOnce sync.Once
	closeErr  error
}

// New returns a Watcher. When the file system's events cannot be watched
// it returns the error together with a Watcher that only polls (or, without
// Options.Poll, only stops with its context), for a caller that would
// rather poll than fail.
func New(opts Options) (*Watcher, error) {
	if opts.Debounce <= 0 {
		opts.Debounce = 50 * time.Millisecond
	}
	w := &Watcher{opts: opts, log: opts.Logger, dirs: map[string]bool{}}
	if w.log == nil {
		w.log = slog.Default()
	}
	fs, err := fsnotify.NewWatcher()
	if err != nil {
		return w, err
	}
	w.fs = fs
	return w, nil
}

// Dirs returns the directories whose changes can change files: the
// directory of each file (where it is replaced, or a volume's link
// swapped) and the directory it resolves to through symbolic links (where
// it is edited in place). Empty names are skipped.
func Dirs(files ...string) []string {
	var dirs []string
	for _, f := range files {
		if f == "" {
			continue
		}
		dirs = append(dirs, filepath.Dir(f))
		if real, err := filepath.EvalSymlinks(f); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
	}
	return dirs
}

// Set makes dirs the directories watched: those no longer wanted are
// forgotten, and each wanted one is added again, which is harmless for
// one watched already and watches one that was removed and made again.
// A directory that cannot be watched is logged and skipped.
func (w *Watcher) Set(dirs []string) {
	if w.fs == nil {
		return
	}
	want := make(map[string]bool, len(dirs))
	for _, d := range dirs {
		want[d] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for d := range w.dirs {
		if !want[d] {
			w.fs.Remove(d) // it may be gone already, taking its watch with it
			delete(w.dirs, d)
		}
	}
	for d := range want {
		if err := w.fs.Add(d); err != nil {
			w.log.Warn(w.opts.Name+": cannot watch a directory", "dir", d, "err", err)
			delete(w.dirs, d)
			continue
		}
		w.dirs[d] = true
	}
}

// Close stops watching the file system, for a Watcher whose Run was never
// started (Run closes its Watcher when it returns). Calling it again does
// nothing.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		if w.fs != nil {
			w.closeErr = w.fs.Close()
		}
	})
	return w.closeErr
}

// Run calls reload after each burst of events and every Options.Poll,
// until ctx ends, then stops watching (closes w) and returns. reload runs on Run's
// goroutine, one call at a time; it is where the caller reads the files
// and, typically, calls Set again with the directories they now need.
func (w *Watcher) Run(ctx context.Context, reload func()) {
	var (
		events <-chan fsnotify.Event
		errs   <-chan error
	)
	defer w.Close()
	if w.fs != nil {
		events, errs = w.fs.Events, w.fs.Errors
	}
	var poll <-chan time.Time
	if w.opts.Poll > 0 {
		t := time.NewTicker(w.opts.Poll)
		defer t.Stop()
		poll = t.C
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	pending := false
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if !pending {
				pending = true
				debounce.Reset(w.opts.Debounce)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			w.log.Warn(w.opts.Name+": watch error", "err", err)
		case <-debounce.C:
			pending = false
			reload()
		case <-poll:
			reload()
		}
	}
}
