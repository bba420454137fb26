package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

// snapshotKeys is the number of keys of the snapshot runs: redis-benchmark
// -r picks among them, and funnel starts with each of them held.
const snapshotKeys = 1_000_000

// runSnapshot measures CL.THROTTLE under redis-benchmark -P 16 on funnel
// serve holding 1,000,000 keys, without a snapshot under way (written only
// at shutdown) and while snapshots are written back to back (every 10 ms,
// each taking longer than that), and prints p50 and p99 of both.
func runSnapshot(ctx context.Context, o options) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "benchserver:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "benchserver-snapshot-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	seed := filepath.Join(dir, "seed")
	fmt.Fprintf(os.Stderr, "writing a snapshot of %d keys...\n", snapshotKeys)
	if err := seedSnapshot(seed); err != nil {
		return fail(err)
	}
	throttle := []string{"CL.THROTTLE", "key:__rand_int__", "15", "30", "3600"}
	type row struct {
		mode     string
		interval string
		res      result
		saves    int
		restored string
	}
	var rows []row
	for _, m := range []struct{ mode, interval string }{{"no snapshot under way", "0"}, {"snapshots back to back", "10ms"}} {
		snap := filepath.Join(dir, "snapshot")
		if err := copyFile(seed, snap); err != nil {
			return fail(err)
		}
		port, err := freePort()
		if err != nil {
			return fail(err)
		}
		srv, err := startServer(ctx, "funnel", port, o.funnel, "serve", "--resp", "127.0.0.1:"+strconv.Itoa(port),
			"--http", "", "--grpc", "", "--log-level", "warn", "--snapshot", snap, "--snapshot-interval", m.interval)
		if err != nil {
			return fail(err)
		}
		r := row{mode: m.mode, interval: m.interval}
		r.restored, _ = infoField(port, "keyspace", "db0")
		before := saves(port)
		fmt.Fprintf(os.Stderr, "-P 16, %s (--snapshot-interval %s, -n %d)...\n", m.mode, m.interval, o.n16)
		r.res, err = benchmark(ctx, o, port, 16, o.n16, throttle)
		r.saves = saves(port) - before
		srv.stop()
		if err != nil {
			return fail(err)
		}
		rows = append(rows, r)
	}
	fmt.Printf("funnel serve restored from a snapshot of %d keys (INFO: %s); redis-benchmark -c %d -r %d -P 16 CL.THROTTLE\n\n", snapshotKeys, rows[0].restored, o.clients, o.keys)
	fmt.Println("| run | --snapshot-interval | snapshots during the run | rps | p50 ms | p99 ms | p99 ÷ without |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %d | %.0f | %.3f | %.3f | %.2f× |\n", r.mode, r.interval, r.saves, r.res.rps, r.res.p50, r.res.p99, r.res.p99/rows[0].res.p99)
	}
	fmt.Println()
	return 0
}

// saves returns rdb_saves from funnel's INFO, or 0.
func saves(port int) int {
	v, _ := infoField(port, "persistence", "rdb_saves")
	n, _ := strconv.Atoi(v)
	return n
}

// seedSnapshot writes a snapshot of snapshotKeys keys named as
// redis-benchmark names them (key:%012d), each charged 15 units of
// CL.THROTTLE's 15 30 3600 (a wait of half an hour), to path.
func seedSnapshot(path string) error {
	s := memstore.New(memstore.Options{SweepInterval: -1})
	defer s.Close()
	c, err := funnel.Per(30, time.Hour).WithBurst(15).Check()
	if err != nil {
		return err
	}
	ctx := context.Background()
	var res [1]funnel.Result
	for i := range snapshotKeys {
		op := funnel.Op{Kind: funnel.OpTake, Key: fmt.Sprintf("key:%012d", i), Limit: c, N: 15}
		if err := s.Do(ctx, []funnel.Op{op}, res[:]); err != nil {
			return err
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := s.WriteSnapshot(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}
