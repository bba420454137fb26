package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel/internal/eventually"
)

// The tests of snapshots run `funnel serve` as a real process, built from
// this tree, and stop it as an operator or a crash would.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// funnelBinary builds funnel once for the package's tests.
func funnelBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "funnel-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "funnel")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is a running `funnel serve`.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	rdb  *redis.Client
	mu   sync.Mutex
	out  bytes.Buffer // its log
	exit chan error
}

var respAddr = regexp.MustCompile(`funnel started.* resp=(\S+)`)

// startFunnel starts `funnel serve` with a snapshot file and the given
// extra flags, and waits until it serves.
func startFunnel(t *testing.T, snapshot string, flags ...string) *proc {
	t.Helper()
	return startServe(t, append([]string{"--snapshot", snapshot}, flags...)...)
}

// startServe starts `funnel serve` with RESP on a free port, no HTTP nor
// gRPC, and the given flags, and waits until it serves.
func startServe(t *testing.T, flags ...string) *proc {
	t.Helper()
	args := append([]string{"serve", "--resp", "127.0.0.1:0", "--http", "", "--grpc", ""}, flags...)
	p := &proc{t: t, cmd: exec.Command(funnelBinary(t), args...), exit: make(chan error, 1)}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = &lockedWriter{p}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := respAddr.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		close(addr)
	}()
	go func() { p.exit <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		if p.rdb != nil {
			p.rdb.Close()
		}
	})
	var a string
	select {
	case a = <-addr:
	case <-time.After(time.Minute):
	}
	if a == "" {
		p.cmd.Process.Kill()
		<-p.exit
		t.Fatalf("funnel serve %q did not start:\n%s", args, p.log())
	}
	p.rdb = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
	return p
}

type lockedWriter struct{ p *proc }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// stop sends sig and waits for the process to end.
func (p *proc) stop(sig syscall.Signal) {
	p.t.Helper()
	p.rdb.Close()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
	err := <-p.exit
	if sig == syscall.SIGTERM && err != nil {
		p.t.Fatalf("exit after SIGTERM: %v\n%s", err, p.log())
	}
}

// ints runs a command that answers an array of integers (a nil element,
// FUNNEL.ACQUIRE's lease id, reads as 0).
func (p *proc) ints(args ...any) []int64 {
	p.t.Helper()
	v, err := p.rdb.Do(context.Background(), args...).Slice()
	if err != nil {
		p.t.Fatalf("%v: %v", args, err)
	}
	out := make([]int64, len(v))
	for i, x := range v {
		out[i], _ = x.(int64)
	}
	return out
}

// limited is a key of each algorithm, spent until refused: its command,
// and where in the reply the retry after and its unit are.
type limited struct {
	name  string
	cmd   []any
	retry int           // index of retry_after in the reply
	unit  time.Duration // of retry_after
}

// allowed reports whether reply r admitted the request: CL.THROTTLE's
// first integer is 0 when it does (redis-cell's "limited" flag), FUNNEL.*'s
// is 1.
func (l limited) allowed(r []int64) bool {
	if l.name == "cl.throttle" {
		return r[0] == 0
	}
	return r[0] == 1
}

var limits = []limited{
	{"cl.throttle", []any{"CL.THROTTLE", "ct", "0", "1", "3600"}, 3, time.Second},
	{"gcra", []any{"FUNNEL.ALLOW", "g", "gcra", "1", "3600000"}, 3, time.Millisecond},
	{"leaky_bucket", []any{"FUNNEL.ALLOW", "lb", "leaky_bucket", "1", "3600000"}, 3, time.Millisecond},
	{"fixed_window", []any{"FUNNEL.ALLOW", "fw", "fixed_window", "1", "86400000"}, 3, time.Millisecond},
	{"sliding_window", []any{"FUNNEL.ALLOW", "sw", "sliding_window", "1", "3600000"}, 3, time.Millisecond},
	{"sliding_log", []any{"FUNNEL.ALLOW", "sl", "sliding_log", "1", "3600000"}, 3, time.Millisecond},
	{"concurrency", []any{"FUNNEL.ACQUIRE", "cc", "1", "3600000", "ID", "b"}, 3, time.Millisecond},
	{"ban", []any{"FUNNEL.ALLOW", "bn", "gcra", "1", "60000", "BAN", "7200000"}, 3, time.Millisecond},
}

// spendAll spends every key of limits and returns the retry after of
// each refusal, and when each was asked for.
func spendAll(t *testing.T, p *proc) ([]time.Duration, []time.Time) {
	t.Helper()
	var out []time.Duration
	var at []time.Time
	for _, l := range limits {
		first := l.cmd
		if l.name == "concurrency" {
			first = []any{"FUNNEL.ACQUIRE", "cc", "1", "3600000", "ID", "a"}
		}
		if r := p.ints(first...); !l.allowed(r) {
			t.Fatalf("%s: first request refused: %v", l.name, r)
		}
		at = append(at, time.Now())
		out = append(out, refusal(t, p, l))
	}
	return out, at
}

// refusal asks l's key again, which must be refused, and returns its retry
// after.
func refusal(t *testing.T, p *proc, l limited) time.Duration {
	t.Helper()
	r := p.ints(l.cmd...)
	if l.allowed(r) || r[l.retry] <= 0 {
		t.Fatalf("%s: %v, want a refusal with a retry after", l.name, r)
	}
	return time.Duration(r[l.retry]) * l.unit
}

// A graceful stop (SIGTERM) loses no decision: after a restart on the same
// file, every key is refused with the retry after it had, less the time
// that passed.
func TestSnapshotSurvivesSIGTERM(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "funnel.snapshot")
	p := startFunnel(t, snap, "--snapshot-interval", "0")
	before, asked := spendAll(t, p)
	p.stop(syscall.SIGTERM)

	p = startFunnel(t, snap, "--snapshot-interval", "0")
	if !strings.Contains(p.log(), "restored the snapshot") {
		t.Fatalf("no restore logged:\n%s", p.log())
	}
	for i, l := range limits {
		after := refusal(t, p, l)
		passed := time.Since(asked[i])
		// Retry afters are rounded up to their unit: after the restart
		// the wait is the one before, less the time that passed, within
		// one unit, and a few milliseconds for the two processes' store
		// clocks (each the wall time at its start plus monotonic time:
		// they differed by 0.9 ms once).
		const clocks = 5 * time.Millisecond
		if after > before[i] || after < before[i]-passed-l.unit-clocks {
			t.Errorf("%s: retry after %v after the restart, %v before it, %v ago", l.name, after, before[i], passed)
		}
	}
	info, err := p.rdb.Info(context.Background(), "persistence").Result()
	if err != nil || !strings.Contains(info, "rdb_last_bgsave_status:ok") || !strings.Contains(info, "funnel_snapshot_file:"+snap) {
		t.Errorf("INFO persistence: %q, %v", info, err)
	}
}

// A kill -9 loses what was decided since the last snapshot, no more: the
// keys spent before the last snapshot are still spent, the others are not.
func TestSnapshotKill9(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "funnel.snapshot")
	p := startFunnel(t, snap, "--snapshot-interval", "0")
	p.ints("CL.THROTTLE", "saved", "0", "1", "3600")
	p.stop(syscall.SIGTERM)

	p = startFunnel(t, snap, "--snapshot-interval", "1h")
	p.ints("CL.THROTTLE", "lost", "0", "1", "3600")
	p.stop(syscall.SIGKILL)

	p = startFunnel(t, snap, "--snapshot-interval", "1h")
	if r := p.ints("CL.THROTTLE", "saved", "0", "1", "3600"); r[0] != 1 {
		t.Errorf("the key saved by the last snapshot was forgotten: %v", r)
	}
	if r := p.ints("CL.THROTTLE", "lost", "0", "1", "3600"); r[0] != 0 {
		t.Errorf("the key spent after the last snapshot is still spent: %v", r)
	}
}

// saves returns rdb_saves from INFO.
func (p *proc) saves() int {
	p.t.Helper()
	info, err := p.rdb.Info(context.Background(), "persistence").Result()
	if err != nil {
		p.t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "rdb_saves:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	p.t.Fatalf("INFO persistence lacks rdb_saves: %q", info)
	return 0
}

// waitSaves waits until the process has written n more snapshots.
func (p *proc) waitSaves(n int) {
	p.t.Helper()
	want := p.saves() + n
	eventually.TrueWithin(p.t, 30*time.Second, fmt.Sprintf("%d more snapshots", n), func() bool { return p.saves() >= want })
}

// A process killed while it writes snapshots (every 10 ms, of 50,000
// keys, so that one is almost always under way) leaves the last good one:
// the restart restores every key, and no temporary file remains.
func TestSnapshotKilledMidWrite(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "funnel.snapshot")
	p := startFunnel(t, snap, "--snapshot-interval", "10ms")
	const keys = 50000
	ctx := context.Background()
	pipe := p.rdb.Pipeline()
	for i := range keys {
		pipe.Do(ctx, "CL.THROTTLE", fmt.Sprint("key:", i), "0", "1", "3600")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	p.waitSaves(2) // the last of which holds every key
	p.stop(syscall.SIGKILL)

	p = startFunnel(t, snap, "--snapshot-interval", "1h")
	if !strings.Contains(p.log(), fmt.Sprintf("keys=%d ", keys)) {
		t.Errorf("the restart did not restore %d keys:\n%s", keys, p.log())
	}
	if r := p.ints("CL.THROTTLE", "key:123", "0", "1", "3600"); r[0] != 1 {
		t.Errorf("a key spent before the last snapshot is not: %v", r)
	}
	es, _ := os.ReadDir(dir)
	if len(es) != 1 {
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		t.Errorf("the directory holds %q, want the snapshot alone", names)
	}
}

// A bad snapshot stops the start, with what is wrong and where; with
// --snapshot-ignore-corrupt, it is moved aside and the server starts empty.
// A directory that cannot be written is refused at start.
func TestSnapshotBadFiles(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "funnel.snapshot")
	p := startFunnel(t, snap, "--snapshot-interval", "0")
	p.ints("CL.THROTTLE", "k", "0", "1", "3600")
	p.stop(syscall.SIGTERM)
	good, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(snap, good[:len(good)-3], 0o600)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"serve", "--resp", "127.0.0.1:0", "--http", "", "--grpc", "", "--snapshot", snap}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), snap) || !strings.Contains(errb.String(), "truncated in block") || !strings.Contains(errb.String(), "--snapshot-ignore-corrupt") {
		t.Fatalf("a truncated snapshot: exit %d, stderr %q", code, errb.String())
	}

	out.Reset()
	errb.Reset()
	code = run(ctx, []string{"serve", "--resp", "127.0.0.1:0", "--http", "", "--grpc", "", "--snapshot", snap, "--snapshot-ignore-corrupt"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "level=ERROR") || !strings.Contains(out.String(), "moved it aside") {
		t.Fatalf("--snapshot-ignore-corrupt: exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
	moved, _ := filepath.Glob(snap + ".corrupt-*")
	if len(moved) != 1 {
		t.Fatalf("moved aside: %q", moved)
	}
	if b, _ := os.ReadFile(moved[0]); !bytes.Equal(b, good[:len(good)-3]) {
		t.Error("the file moved aside is not the bad snapshot")
	}

	errb.Reset()
	missing := filepath.Join(dir, "no", "such", "dir", "snap")
	if code := run(ctx, []string{"serve", "--resp", "127.0.0.1:0", "--http", "", "--grpc", "", "--snapshot", missing}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "cannot be written") {
		t.Fatalf("a missing directory: exit %d, stderr %q", code, errb.String())
	}
}
