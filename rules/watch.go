package rules

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/funnelrl/funnel/internal/filewatch"
)

// WatchOptions configure a Watcher. The zero value is a good default.
type WatchOptions struct {
	// Options apply to every load.
	Options
	// Logger receives a line for each reload and each refused file; nil
	// means slog.Default().
	Logger *slog.Logger
	// OnReload, when set, is called after every reload attempt that found
	// the files changed: with the new rules and a nil error when they are
	// now in force, or with nil and the error when they were refused (the
	// last good rules stay in force). It is called from the watcher's
	// goroutine (or Reload's caller) and must not block for long; it is
	// where a metric of reload successes and failures is counted.
	OnReload func(*Set, error)
	// Debounce is how long the watcher waits after the first change of a
	// burst before it reloads, so that a file being written or a
	// ConfigMap being swapped is read once, whole; 0 means 50 ms.
	Debounce time.Duration
	// Poll, when positive, also rereads the files at that interval, for
	// file systems that do not report changes (some network mounts). An
	// unchanged set of files is not reloaded.
	Poll time.Duration
}

// Watcher keeps the rules at a path (a file or a directory, as
// Load reads it) loaded, and reloads them when the files change: an
// edit in place, a file replaced by a rename, or a Kubernetes ConfigMap
// update (the ..data symbolic link replaced atomically). A new set of files
// that does not load is refused and logged, and the last good rules stay in
// force. It is safe for concurrent use.
type Watcher struct {
	path string
	opts WatchOptions
	log  *slog.Logger
	cur  atomic.Pointer[Set]

	fw     *filewatch.Watcher
	stop   context.CancelFunc
	exited chan struct{}
	close  sync.Once

	mu      sync.Mutex        // serializes reloads; guards what follows
	digest  [sha256.Size]byte // of the files last read
	lastErr error             // why they were refused, or nil
}

// Watch loads the rules at path and watches them until Close. It
// fails if the first load fails.
func Watch(path string, opts WatchOptions) (*Watcher, error) {
	if opts.Debounce <= 0 {
		opts.Debounce = 50 * time.Millisecond
	}
	w := &Watcher{path: path, opts: opts, log: opts.Logger, exited: make(chan struct{})}
	if w.log == nil {
		w.log = slog.Default()
	}
	fw, err := filewatch.New(filewatch.Options{Name: "rules watch", Debounce: opts.Debounce, Poll: opts.Poll, Logger: w.log})
	if err != nil {
		fw.Close()
		return nil, fmt.Errorf("rules: watching %s: %w", path, err)
	}
	w.fw = fw
	w.mu.Lock()
	r, files, digest, err := w.load()
	if err == nil {
		w.cur.Store(r)
		w.digest = digest
	}
	w.sync(files)
	w.mu.Unlock()
	if err != nil {
		fw.Close()
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	w.stop = stop
	go func() {
		defer close(w.exited)
		fw.Run(ctx, func() { w.Reload() })
	}()
	return w, nil
}

// Rules returns the rules in force. It never returns nil.
func (w *Watcher) Rules() *Set { return w.cur.Load() }

// Reload rereads the files now, as a change would, and reports whether
// the rules they hold were refused. Unchanged files are not reloaded.
func (w *Watcher) Reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reload()
}

// Close stops watching. The rules in force stay readable.
func (w *Watcher) Close() error {
	var err error
	w.close.Do(func() {
		w.stop()
		<-w.exited
		err = w.fw.Close()
	})
	return err
}

// reload loads the files if they changed and puts them in force, or logs
// and reports why they were refused. Files that are those last read are
// not loaded again, and a refusal is logged once, not at every event.
// w.mu is held.
func (w *Watcher) reload() error {
	r, files, digest, err := w.load()
	w.sync(files)
	if errors.Is(err, errUnchanged) || err != nil && digest == w.digest {
		return w.lastErr
	}
	w.digest, w.lastErr = digest, err
	if err != nil {
		w.log.Error("rules refused; the last good rules stay in force", "path", w.path, "err", err)
		if w.opts.OnReload != nil {
			w.opts.OnReload(nil, err)
		}
		return err
	}
	w.cur.Store(r)
	w.log.Info("rules reloaded", "path", w.path, "files", len(r.Files()), "domains", len(r.domains), "rules", len(r.rules))
	if w.opts.OnReload != nil {
		w.opts.OnReload(r, nil)
	}
	return nil
}

// errUnchanged reports that the files are those last loaded.
var errUnchanged = errors.New("rules: rules unchanged")

// load reads the files and, unless their names and contents are those
// last read (errUnchanged), builds the rules. It returns the files it read,
// to be watched, and their digest.
func (w *Watcher) load() (*Set, []string, [sha256.Size]byte, error) {
	var digest [sha256.Size]byte
	files, err := ruleFiles(w.path)
	if err != nil {
		return nil, nil, sha256.Sum256([]byte(err.Error())), err
	}
	h := sha256.New()
	datas := make([][]byte, len(files))
	for i, f := range files {
		if datas[i], err = readRulesFile(f); err != nil {
			return nil, files, sha256.Sum256([]byte(err.Error())), err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(datas[i]))
		h.Write(datas[i])
	}
	h.Sum(digest[:0])
	if digest == w.digest && w.cur.Load() != nil {
		return nil, files, digest, errUnchanged
	}
	b := newBuilder(w.opts.Options)
	for i, f := range files {
		b.file(f, datas[i])
	}
	r, err := b.finish()
	return r, files, digest, err
}

// sync watches the directories whose changes can change the rules: the
// path's own directory (where a file or a directory link is replaced), the
// path itself when it is a directory (where a ConfigMap's ..data link is
// swapped and files come and go), and the directory each file resolves to
// (where it is edited in place). Directories no longer needed are
// forgotten. w.mu is held.
func (w *Watcher) sync(files []string) {
	dirs := append(filewatch.Dirs(files...), filepath.Dir(w.path))
	if fi, err := os.Stat(w.path); err == nil && fi.IsDir() {
		dirs = append(dirs, w.path)
	}
	w.fw.Set(dirs)
}
