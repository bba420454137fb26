package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/funnelrl/funnel/internal/atomicfile"
	"github.com/funnelrl/funnel/internal/lograte"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/metrics"
)

// snapshots keeps the memory store in a file: restored at start, written
// every interval and at a graceful shutdown. A nil *snapshots does nothing.
type snapshots struct {
	path     string
	interval time.Duration
	store    *memstore.Store
	log      *slog.Logger
	metrics  *metrics.Snapshots
	failLog  *lograte.Sometimes

	mu      sync.Mutex // one write at a time, and the fields below
	writing bool
	saves   int64
	last    time.Time // of the last write that succeeded
	lastDur time.Duration
	bytes   int64
	keys    int64
	lastErr error // of the last write; nil when it succeeded

	stop chan struct{}
	done chan struct{}
}

// openSnapshots checks that the snapshot's directory can be written, and
// restores the store from the snapshot, if there is one: before any
// listener is bound.
func (d *Daemon) openSnapshots(s *memstore.Store) error {
	m, err := d.metrics.Snapshots()
	if err != nil {
		return err
	}
	sn := &snapshots{path: d.cfg.Snapshot, interval: d.cfg.SnapshotInterval, store: s, log: d.log, metrics: m,
		failLog: lograte.New(time.Minute)}
	// A directory that cannot be written would fail the first snapshot,
	// an interval (or a whole run) from now: refuse it at once.
	if err := atomicfile.CheckDir(sn.path); err != nil {
		return fmt.Errorf("daemon: snapshot %s: its directory cannot be written: %w", sn.path, err)
	}
	if n, err := atomicfile.RemoveTemps(sn.path); err != nil {
		return fmt.Errorf("daemon: snapshot %s: %w", sn.path, err)
	} else if n > 0 {
		d.log.Info("removed the temporary files of snapshots cut short", "snapshot", sn.path, "files", n)
	}
	if err := sn.restore(d.cfg.SnapshotIgnoreCorrupt); err != nil {
		return err
	}
	d.snap = sn
	return nil
}

// restore reads the snapshot into the store. A missing file is a first
// start; a bad one is an error, or, when ignoreCorrupt, moved aside.
func (sn *snapshots) restore(ignoreCorrupt bool) error {
	f, err := os.Open(sn.path)
	if errors.Is(err, fs.ErrNotExist) {
		sn.log.Info("no snapshot yet: starting empty", "snapshot", sn.path)
		return nil
	}
	if err != nil {
		return fmt.Errorf("daemon: snapshot: %w", err)
	}
	start := time.Now()
	st, err := sn.store.ReadSnapshot(bufio.NewReaderSize(f, 1<<20))
	f.Close()
	switch {
	case errors.Is(err, memstore.ErrCorruptSnapshot) && ignoreCorrupt:
		to, merr := atomicfile.MoveAside(sn.path, time.Now())
		if merr != nil {
			return fmt.Errorf("daemon: snapshot %s: %w; moving it aside: %w", sn.path, err, merr)
		}
		sn.metrics.Failed(metrics.SnapshotCorrupt)
		sn.log.Error("the snapshot is bad: moved it aside and starting empty", "snapshot", sn.path, "moved_to", to, "err", err)
		return nil
	case errors.Is(err, memstore.ErrCorruptSnapshot):
		return fmt.Errorf("daemon: snapshot %s: %w (with --snapshot-ignore-corrupt, Funnel moves it aside and starts empty)", sn.path, err)
	case err != nil:
		return fmt.Errorf("daemon: snapshot %s: %w", sn.path, err)
	}
	sn.metrics.Restored(st.Keys)
	attrs := []any{"snapshot", sn.path, "keys", st.Keys, "bans", st.Bans, "empty_by_now", st.Dropped,
		"bytes", st.Bytes, "written", st.Written.UTC().Format(time.RFC3339), "took", time.Since(start).Round(time.Millisecond)}
	switch {
	case st.Proven && (st.Stepped > time.Second || st.Stepped < -time.Second):
		// (The wall and monotonic clocks, read apart, differ by a little
		// always.)
		sn.log.Warn("the wall clock was stepped between the snapshot's write and now: restored with the time this boot's monotonic clock measured", append(attrs, "step", st.Stepped)...)
		return nil
	case st.Clamped > 0 && !st.Proven:
		sn.log.Warn("the snapshot was written in the future (the clock was stepped back): restored as if written now", append(attrs, "ahead", st.Clamped)...)
		return nil
	case st.Bounded > 0:
		sn.log.Warn("the time since the snapshot cannot be proven (another boot) and is longer than --snapshot-max-elapsed: restored as if written that long ago", append(attrs, "not_counted", st.Bounded)...)
		return nil
	}
	sn.log.Info("restored the snapshot", attrs...)
	return nil
}

// start writes the snapshot every interval, until final.
func (sn *snapshots) start() {
	if sn == nil || sn.interval <= 0 {
		return
	}
	sn.stop, sn.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sn.done)
		t := time.NewTicker(sn.interval)
		defer t.Stop()
		for {
			select {
			case <-sn.stop:
				return
			case <-t.C:
				sn.write()
			}
		}
	}()
}

// final stops the periodic writes and writes the snapshot once more: the
// listeners are shut down, so it holds every decision made.
func (sn *snapshots) final() error {
	if sn == nil {
		return nil
	}
	if sn.stop != nil {
		close(sn.stop)
		<-sn.done
		sn.stop = nil
	}
	return sn.write()
}

// write writes the snapshot, and records how it went.
func (sn *snapshots) write() error {
	sn.mu.Lock()
	sn.writing = true
	sn.mu.Unlock()
	start := time.Now()
	var st memstore.SnapshotStats
	n, err := atomicfile.Write(sn.path, 0o600, func(w io.Writer) error {
		var err error
		st, err = sn.store.WriteSnapshot(w)
		return err
	})
	took := time.Since(start)
	sn.mu.Lock()
	defer sn.mu.Unlock()
	sn.writing, sn.lastErr = false, err
	if err != nil {
		cause := snapshotCause(err)
		sn.metrics.Failed(cause)
		sn.failLog.Do(func(held int64) {
			sn.log.Error("the snapshot could not be written; the previous one is kept", "snapshot", sn.path, "cause", cause, "err", err, "failures_not_logged", held)
		})
		return fmt.Errorf("daemon: snapshot %s: %w", sn.path, err)
	}
	sn.saves++
	sn.last, sn.lastDur, sn.bytes, sn.keys = st.Written, took, n, st.Keys
	sn.metrics.Written(st.Written, took, n, st.Keys)
	sn.log.Debug("snapshot written", "snapshot", sn.path, "keys", st.Keys, "bans", st.Bans, "bytes", n, "took", took)
	return nil
}

// snapshotCause classifies a failed write for the failures metric.
func snapshotCause(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return metrics.SnapshotNoSpace
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return metrics.SnapshotPermission
	}
	return metrics.SnapshotIO
}

// persistence returns the function that fills INFO's Persistence section,
// or nil without snapshots.
func (sn *snapshots) persistence() func() []string {
	if sn == nil {
		return nil
	}
	return func() []string {
		sn.mu.Lock()
		defer sn.mu.Unlock()
		status, lastSec := "ok", int64(-1)
		if sn.lastErr != nil {
			status = "err"
		}
		if sn.saves > 0 {
			lastSec = int64(sn.lastDur.Round(time.Second) / time.Second)
		}
		return []string{
			"loading:0",
			"rdb_bgsave_in_progress:" + boolDigit(sn.writing),
			"rdb_last_save_time:" + strconv.FormatInt(lastSave(sn.last), 10),
			"rdb_last_bgsave_status:" + status,
			"rdb_last_bgsave_time_sec:" + strconv.FormatInt(lastSec, 10),
			"rdb_saves:" + strconv.FormatInt(sn.saves, 10),
			"funnel_snapshot_file:" + sn.path,
			"funnel_snapshot_interval_sec:" + strconv.FormatInt(int64(sn.interval/time.Second), 10),
			"funnel_snapshot_last_bytes:" + strconv.FormatInt(sn.bytes, 10),
			"funnel_snapshot_last_keys:" + strconv.FormatInt(sn.keys, 10),
		}
	}
}

func boolDigit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// lastSave is rdb_last_save_time: the Unix time of the last snapshot
// written, 0 before the first.
func lastSave(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}
