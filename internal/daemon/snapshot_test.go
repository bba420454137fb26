package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel/internal/daemon"
	"github.com/funnelrl/funnel/internal/eventually"
)

// A daemon with a snapshot restores it before it serves, writes it every
// interval and at shutdown, and shows it on /metrics and in INFO.
func TestDaemonSnapshots(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Snapshot = filepath.Join(t.TempDir(), "snapshot")
	cfg.SnapshotInterval = 10 * time.Millisecond
	cfg.MetricsOpen = true
	d, logs, stop := start(t, cfg)
	if !strings.Contains(logs.String(), "no snapshot yet") {
		t.Errorf("a first start does not say so:\n%s", logs.String())
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: d.RESPAddr().String()})
	defer rdb.Close()
	for i := range 3 {
		if err := rdb.Do(ctx, "CL.THROTTLE", fmt.Sprint("k", i), "0", "1", "3600").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Every snapshot written from now on holds the three keys.
	metrics := func() string {
		res, err := http.Get("http://" + d.HTTPAddr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	eventually.True(t, "a snapshot of the 3 keys on /metrics", func() bool {
		return strings.Contains(metrics(), "funnel_snapshot_last_keys 3\n")
	})
	info, err := rdb.Info(ctx, "persistence").Result()
	if err != nil || !strings.Contains(info, "rdb_last_bgsave_status:ok") || !strings.Contains(info, "funnel_snapshot_last_keys:3") {
		t.Fatalf("INFO persistence: %q, %v", info, err)
	}
	rdb.Do(ctx, "CL.THROTTLE", "last", "0", "1", "3600")
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// The next daemon on the file holds the four keys, the last one
	// decided included.
	cfg.SnapshotInterval = 0
	d2, logs2, _ := start(t, cfg)
	if !strings.Contains(logs2.String(), "restored the snapshot") || !strings.Contains(logs2.String(), "keys=4 ") {
		t.Errorf("the restart logged:\n%s", logs2.String())
	}
	if ttl, ok, _ := d2.Store().TTL(ctx, "last"); !ok || ttl <= 0 {
		t.Errorf("the last key decided before the stop was not restored")
	}
}

// A snapshot file that cannot be read (a directory here) stops the start,
// as a corrupt one does; an unwritable directory too.
func TestDaemonSnapshotRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Snapshot = dir // a directory: reading it fails
	if _, err := daemon.New(cfg, quiet); err == nil {
		t.Error("a snapshot that is a directory was accepted")
	}
	cfg.Snapshot = filepath.Join(dir, "snap")
	os.WriteFile(cfg.Snapshot, []byte("not a snapshot at all, but long enough for a header"), 0o600)
	_, err := daemon.New(cfg, quiet)
	if err == nil || !strings.Contains(err.Error(), cfg.Snapshot) || !strings.Contains(err.Error(), "not a Funnel snapshot") {
		t.Errorf("a foreign file: %v", err)
	}
}

func TestSnapshotCause(t *testing.T) {
	for err, want := range map[error]string{
		&fs.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}: "no_space",
		&fs.PathError{Op: "open", Path: "x", Err: syscall.EACCES}:  "permission",
		&fs.PathError{Op: "open", Path: "x", Err: syscall.EROFS}:   "permission",
		errors.New("short write"):                                  "io",
	} {
		if got := daemon.SnapshotCause(err); got != want {
			t.Errorf("SnapshotCause(%v) = %s, want %s", err, got, want)
		}
	}
}
