// Command benchserver measures `funnel serve` against a stock redis-server
// with the same redis-benchmark runs, and prints the table that `make
// bench-server` shows.
//
//	go build -o /tmp/funnel ./cmd/funnel
//	cd bench && go run ./cmd/benchserver -funnel /tmp/funnel
//
// It starts both servers on free ports of 127.0.0.1 (funnel with its memory
// store; redis-server with --save "" --appendonly no), then, for each
// pipeline depth (-P 1 and -P 16), runs
//
//	redis-benchmark -c 50 -r 100000 -n N -P P --csv GET key:__rand_int__
//
// against Redis and the same with CL.THROTTLE key:__rand_int__ 15 30 60
// against Funnel, and prints requests per second, p50 and p99 latency and
// the ratio of Funnel's rps to Redis's GET. After the runs it checks, with
// INFO, that Funnel decided every request it was sent (redis-benchmark
// counts error replies as requests too).
//
// With -perf FILE it then runs -P 1 against Funnel once more under `perf
// record` and prints the hottest symbols (kernel and Go) of funnel's
// process; the perf data stays in FILE for `perf report -i FILE`.
//
// With -snapshot it measures snapshots instead: funnel serve starts on a
// snapshot of 1,000,000 keys, and CL.THROTTLE under -P 16 (-r 1000000) is
// measured with no snapshot under way and with snapshots written back to
// back; it prints p50, p99 and the ratio of the p99s.
//
// With -redis-cpu it measures Redis's CPU per decision behind funnel serve
// --store redis://, through the script and through Funnel's module (-module),
// against redis-cell's own CL.THROTTLE (-cell): see rediscpu.go.
//
// Both servers are stopped when the runs end, when the command is
// interrupted, and (on Linux) when it dies.
package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Targets of the issue: Funnel's CL.THROTTLE rps over Redis's GET rps.
var targets = map[int]float64{1: 1.0, 16: 0.40}

type options struct {
	funnel, redisServer, redisBenchmark string
	clients, keys                       int
	n1, n16                             int
	perf                                string
	check                               bool
	snapshot                            bool
	redisCPU                            bool
	module, cell                        string
	rounds, cpuN                        int
}

func main() {
	var o options
	flag.StringVar(&o.funnel, "funnel", "", "path of the funnel binary to measure (required)")
	flag.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary")
	flag.StringVar(&o.redisBenchmark, "redis-benchmark", "redis-benchmark", "redis-benchmark binary")
	flag.IntVar(&o.clients, "c", 50, "redis-benchmark clients")
	flag.IntVar(&o.keys, "r", 100000, "redis-benchmark random keys")
	flag.IntVar(&o.n1, "n1", 500000, "requests of each -P 1 run")
	flag.IntVar(&o.n16, "n16", 6000000, "requests of each -P 16 run")
	flag.StringVar(&o.perf, "perf", "", "write a perf profile of funnel under -P 1 to `file` and print its top")
	flag.BoolVar(&o.check, "check", false, "exit 1 when a target is missed")
	flag.BoolVar(&o.snapshot, "snapshot", false, "measure CL.THROTTLE -P 16 on 1,000,000 keys with and without snapshots being written, instead")
	flag.BoolVar(&o.redisCPU, "redis-cpu", false, "measure Redis's CPU per decision behind funnel serve --store redis:// instead (see rediscpu.go)")
	flag.StringVar(&o.module, "module", "", "with -redis-cpu: the path of Funnel's Redis module (make module), for its rows")
	flag.StringVar(&o.cell, "cell", "", "with -redis-cpu: the path of redis-cell's libredis_cell.so, for its row")
	flag.IntVar(&o.rounds, "rounds", 4, "with -redis-cpu: rounds of every variant, alternating")
	flag.IntVar(&o.cpuN, "cpu-n", 400000, "with -redis-cpu: decisions of each run")
	flag.Parse()
	if o.funnel == "" {
		fmt.Fprintln(os.Stderr, "benchserver: -funnel is required")
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var code int
	switch {
	case o.snapshot:
		code = runSnapshot(ctx, o)
	case o.redisCPU:
		code = runRedisCPU(ctx, o)
	default:
		code = run(ctx, o)
	}
	stop()
	os.Exit(code)
}

// result is one redis-benchmark run.
type result struct {
	rps, p50, p99 float64
	elapsed       time.Duration
}

func run(ctx context.Context, o options) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "benchserver:", err)
		return 1
	}
	for _, bin := range []string{o.funnel, o.redisServer, o.redisBenchmark} {
		if _, err := exec.LookPath(bin); err != nil {
			return fail(fmt.Errorf("%s: %w (redis-server and redis-benchmark are Debian's redis-server and redis-tools)", bin, err))
		}
	}
	redisPort, err := freePort()
	if err != nil {
		return fail(err)
	}
	redisSrv, err := startServer(ctx, "redis-server", redisPort, o.redisServer,
		"--port", strconv.Itoa(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no")
	if err != nil {
		return fail(err)
	}
	defer redisSrv.stop()
	funnelPort, err := freePort()
	if err != nil {
		return fail(err)
	}
	funnelSrv, err := startServer(ctx, "funnel", funnelPort, o.funnel,
		"serve", "--resp", "127.0.0.1:"+strconv.Itoa(funnelPort), "--log-level", "warn")
	if err != nil {
		return fail(err)
	}
	defer funnelSrv.stop()

	redisVersion, _ := infoField(redisPort, "server", "redis_version")
	funnelVersion, _ := infoField(funnelPort, "server", "funnel_version")
	fmt.Printf("redis-server %s on :%d, funnel %s (memory store) on :%d; redis-benchmark -c %d -r %d\n\n",
		redisVersion, redisPort, funnelVersion, funnelPort, o.clients, o.keys)

	get := []string{"GET", "key:__rand_int__"}
	throttle := []string{"CL.THROTTLE", "key:__rand_int__", "15", "30", "60"}
	type row struct {
		p        int
		n        int
		get, fun result
	}
	var rows []row
	sent := 0
	for _, p := range []int{1, 16} {
		n := o.n1
		if p == 16 {
			n = o.n16
		}
		r := row{p: p, n: n}
		fmt.Fprintf(os.Stderr, "-P %d: GET on redis-server (-n %d)...\n", p, n)
		if r.get, err = benchmark(ctx, o, redisPort, p, n, get); err != nil {
			return fail(err)
		}
		fmt.Fprintf(os.Stderr, "-P %d: CL.THROTTLE on funnel (-n %d)...\n", p, n)
		if r.fun, err = benchmark(ctx, o, funnelPort, p, n, throttle); err != nil {
			return fail(err)
		}
		sent += n
		rows = append(rows, r)
	}
	if err := checkDecisions(funnelPort, sent, o.clients*16); err != nil {
		return fail(err)
	}

	fmt.Println("| -P | -n | Redis GET rps | p50 ms | p99 ms | Funnel CL.THROTTLE rps | p50 ms | p99 ms | Funnel/GET | target |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	missed := false
	for _, r := range rows {
		ratio := r.fun.rps / r.get.rps
		verdict := "met"
		if ratio < targets[r.p] {
			verdict, missed = "missed", true
		}
		fmt.Printf("| %d | %d | %.0f | %.3f | %.3f | %.0f | %.3f | %.3f | %.2f× | ≥ %.2f×: %s |\n",
			r.p, r.n, r.get.rps, r.get.p50, r.get.p99, r.fun.rps, r.fun.p50, r.fun.p99, ratio, targets[r.p], verdict)
	}
	fmt.Println()
	for _, r := range rows {
		fmt.Printf("-P %d took %.1f s on Redis and %.1f s on Funnel.\n", r.p, r.get.elapsed.Seconds(), r.fun.elapsed.Seconds())
	}

	if o.perf != "" {
		if err := profile(ctx, o, funnelSrv, funnelPort, throttle); err != nil {
			return fail(err)
		}
	}
	if missed && o.check {
		return 1
	}
	return 0
}

// freePort returns a port of 127.0.0.1 that is free now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// server is a server process started for the runs.
type server struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	out  *strings.Builder
}

// startServer starts a server and waits until it answers PING on port.
func startServer(ctx context.Context, name string, port int, bin string, args ...string) (*server, error) {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = dieWithParent()
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s := &server{name: name, cmd: cmd, done: make(chan struct{}), out: &out}
	go func() { cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if reply, err := command(port, "PING"); err == nil && reply == "+PONG" {
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("%s exited at start: %s", name, out.String())
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("%s does not answer PING on port %d", name, port)
		}
	}
}

// stop ends the server: SIGTERM, then SIGKILL if it lingers.
func (s *server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}

// command sends one inline command and returns the first line of the reply.
func command(port int, cmd string) (string, error) {
	nc, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(nc, cmd+"\r\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(nc).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// infoField returns one field of INFO section.
func infoField(port int, section, name string) (string, error) {
	nc, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(nc, "INFO "+section+"\r\n"); err != nil {
		return "", err
	}
	br := bufio.NewReader(nc)
	head, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("INFO: %q, %v", head, err)
	}
	size, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return "", err
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(br, body); err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO %s has no %s", section, name)
}

// benchmark runs redis-benchmark against port and parses its CSV line.
func benchmark(ctx context.Context, o options, port, pipeline, n int, cmdArgs []string) (result, error) {
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-c", strconv.Itoa(o.clients),
		"-n", strconv.Itoa(n), "-r", strconv.Itoa(o.keys), "-P", strconv.Itoa(pipeline), "--csv"}
	cmd := exec.CommandContext(ctx, o.redisBenchmark, append(args, cmdArgs...)...)
	cmd.SysProcAttr = dieWithParent()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	elapsed := time.Since(start)
	if err != nil {
		return result{}, fmt.Errorf("redis-benchmark %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil || len(recs) != 2 {
		return result{}, fmt.Errorf("redis-benchmark: unexpected output (%v):\n%s", err, out)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	r := result{elapsed: elapsed}
	for name, dst := range map[string]*float64{"rps": &r.rps, "p50_latency_ms": &r.p50, "p99_latency_ms": &r.p99} {
		i, ok := col[name]
		if !ok {
			return result{}, fmt.Errorf("redis-benchmark: no %s column in:\n%s", name, out)
		}
		if *dst, err = strconv.ParseFloat(recs[1][i], 64); err != nil {
			return result{}, fmt.Errorf("redis-benchmark: %s %q: %v", name, recs[1][i], err)
		}
	}
	return r, nil
}

// checkDecisions checks that Funnel decided at least sent requests (and at
// most slack more: with -P, redis-benchmark may send a pipeline more per
// client than -n).
func checkDecisions(port, sent, slack int) error {
	var total int
	for _, f := range []string{"throttle_allowed", "throttle_limited"} {
		v, err := infoField(port, "stats", f)
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("INFO %s = %q", f, v)
		}
		total += n
	}
	if total < sent || total > sent+2*slack {
		return fmt.Errorf("funnel decided %d requests, but %d were sent: were some answered with errors?", total, sent)
	}
	return nil
}

// profile runs -P 1 against funnel again under perf record, and prints the
// hottest symbols of its process.
func profile(ctx context.Context, o options, funnel *server, port int, cmdArgs []string) error {
	if _, err := exec.LookPath("perf"); err != nil {
		return errors.New("-perf needs perf (Debian's linux-perf)")
	}
	pid := strconv.Itoa(funnel.cmd.Process.Pid)
	rec := exec.Command("perf", "record", "-F", "999", "-g", "-p", pid, "-o", o.perf)
	rec.SysProcAttr = dieWithParent()
	var recOut strings.Builder
	rec.Stdout, rec.Stderr = &recOut, &recOut
	if err := rec.Start(); err != nil {
		return fmt.Errorf("perf record: %w", err)
	}
	fmt.Fprintln(os.Stderr, "-P 1 again, under perf record...")
	// Let perf attach before the load starts.
	time.Sleep(500 * time.Millisecond)
	res, err := benchmark(ctx, o, port, 1, o.n1, cmdArgs)
	rec.Process.Signal(os.Interrupt)
	if werr := rec.Wait(); werr != nil && err == nil && !interrupted(werr) {
		err = fmt.Errorf("perf record: %v\n%s", werr, recOut.String())
	}
	if err != nil {
		return err
	}
	fmt.Printf("\nProfile of funnel under -P 1 (%.0f rps while profiled), perf data in %s.\n", res.rps, o.perf)
	for _, mode := range []struct{ title, flag, limit string }{
		{"Hottest symbols, self time", "--no-children", "0.7"},
		{"Hottest symbols, with their callees", "--children", "4"},
	} {
		rep := exec.Command("perf", "report", "-i", o.perf, "--stdio", mode.flag, "-g", "none", "--percent-limit", mode.limit, "--sort", "dso,symbol")
		out, err := rep.Output()
		if err != nil {
			return fmt.Errorf("perf report: %w", err)
		}
		fmt.Printf("\n%s:\n", mode.title)
		for _, l := range strings.Split(string(out), "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				fmt.Println(l)
			}
		}
	}
	return nil
}

// interrupted reports whether a command ended by the SIGINT that stopped it
// (perf record ends so, with its data written).
func interrupted(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGINT
}
