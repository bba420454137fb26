// Package redistest starts real redis-server processes for tests: single
// servers and Redis Clusters, on free ports of 127.0.0.1, each in a temporary
// directory, without persistence, stopped when the test ends.
//
// Tests never touch a Redis they did not start (no port 6379, no FLUSHALL on
// a shared server). When redis-server is not on PATH the test is skipped with
// a message saying what to install, except under CI (the environment
// variable CI set to true), where it fails: CI installs every program the
// tests need (scripts/deps.sh), so a skip there would be a test that passes
// without testing. Binary and Missing apply the same rule to other tests.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartTimeout bounds the wait for a server to answer PING after it starts.
const StartTimeout = 15 * time.Second

// Server is a redis-server process started by a test. Its methods are safe
// for concurrent use.
type Server struct {
	// Addr is the server's address, "127.0.0.1:port". It stays the same
	// across Stop and Start.
	Addr string
	// Port is the port of Addr.
	Port int

	tb   testing.TB
	bin  string
	dir  string
	args []string // the arguments after --port

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	admin  *redis.Client
}

// StartServer starts a redis-server on a free port of 127.0.0.1 with
// persistence off (--save "" --appendonly no) and the extra arguments given
// (e.g. "--maxmemory", "10mb"), waits until it answers PING, and stops it when
// the test ends. If redis-server is not on PATH it skips the test, or fails
// it under CI (see Missing).
func StartServer(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	bin := lookPath(tb)
	var s *Server
	onFreePort(tb, func(port int) error {
		s = newServer(tb, bin, port, extra)
		return s.Start()
	})
	return s
}

// onFreePort calls start with a free port of 127.0.0.1 until it succeeds:
// the port may be taken between FreePort and the bind, and then another is
// tried, five times at most before the test fails.
func onFreePort(tb testing.TB, start func(port int) error) {
	tb.Helper()
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := FreePort()
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		if lastErr = start(port); lastErr == nil {
			return
		}
	}
	tb.Fatalf("redistest: %v", lastErr)
}

func lookPath(tb testing.TB) string {
	tb.Helper()
	return Binary(tb, "redis-server")
}

// installHint says which Debian package brings each program the tests run.
var installHint = map[string]string{
	"redis-server": "redis-server",
	"redis-cli":    "redis-tools",
	"curl":         "curl",
	"cc":           "gcc",
}

// Binary returns the path of the program name on PATH. When it is missing,
// Binary calls Missing with a message that says how to install it: the test
// is skipped, or fails under CI.
func Binary(tb testing.TB, name string) string {
	tb.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		hint := ""
		if pkg, ok := installHint[name]; ok {
			hint = fmt.Sprintf(" (Debian: apt-get install %s)", pkg)
		}
		Missing(tb, "redistest: %s is not on PATH; install it%s to run this test", name, hint)
	}
	return bin
}

// InCI reports whether the tests run under CI: the environment variable CI
// holds a true value as strconv.ParseBool reads it ("true", "1", ...).
func InCI() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// Missing ends a test that cannot run because something it needs is missing
// from the machine: outside CI it skips the test with the message, formatted
// as by fmt.Sprintf; under CI (see InCI) it fails the test with the same
// message, since CI is expected to provide everything the tests need.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		tb.Fatalf("%s (CI is set: a missing dependency fails the test instead of skipping it)", msg)
	}
	tb.Skip(msg)
}

func newServer(tb testing.TB, bin string, port int, extra []string) *Server {
	dir := tb.TempDir()
	s := &Server{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Port: port,
		tb:   tb,
		bin:  bin,
		dir:  dir,
		args: append([]string{
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"),
			"--daemonize", "no",
		}, extra...),
	}
	tb.Cleanup(func() {
		s.Stop()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.admin != nil {
			s.admin.Close()
		}
	})
	return s
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("no free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start starts the server again on its port after Stop (StartServer has
// already started it), and waits until it answers PING. Starting a running
// server is an error.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("redis-server %s is already running", s.Addr)
	}
	cmd := exec.Command(s.bin, append([]string{"--port", strconv.Itoa(s.Port)}, s.args...)...)
	cmd.Dir = s.dir
	exited, err := launch(cmd, s.Addr)
	if err != nil {
		return fmt.Errorf("redis-server on %s: %w\n%s", s.Addr, err, s.logTail())
	}
	s.cmd, s.exited = cmd, exited
	return nil
}

// launch starts cmd, set to die with the test process, and waits until addr
// answers PING. It returns a channel closed when the process exits; on
// failure the process is killed and waited for.
func launch(cmd *exec.Cmd, addr string) (chan struct{}, error) {
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	if err := waitReady(addr, exited); err != nil {
		cmd.Process.Kill()
		<-exited
		return nil, err
	}
	return exited, nil
}

// MustStart is Start that fails the test on error.
func (s *Server) MustStart() {
	s.tb.Helper()
	if err := s.Start(); err != nil {
		s.tb.Fatalf("redistest: %v", err)
	}
}

// Stop kills the server (SIGKILL, like a crash: nothing is saved) and waits
// for it to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT) // in case it was paused
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd, s.exited = nil, nil
}

// Running reports whether the server process is running (it may be paused).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Pause stops the process with SIGSTOP: connections stay open but nothing is
// answered, as with a server that hangs or a network that drops packets.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.tb.Fatalf("redistest: signal %v to redis-server %s, which is not running", sig, s.Addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: signal %v to redis-server %s: %v", sig, s.Addr, err)
	}
}

// adminOptions are the options of a test's own client of the server at
// addr: short timeouts, no retries, the test's context bounding each
// command, RESP2.
func adminOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		DialTimeout:           2 * time.Second,
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		Protocol:              2,
	}
}

// Client returns a client of this server for the test's own commands (one
// per server, closed when the test ends). It has short timeouts, so that a
// command to a stopped server fails quickly.
func (s *Server) Client() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin == nil {
		o := adminOptions(s.Addr)
		// Fail at once on a stopped server, without go-redis's dial retries.
		o.DialerRetries, o.DialerRetryTimeout, o.PoolSize = 1, time.Millisecond, 4
		s.admin = redis.NewClient(o)
	}
	return s.admin
}

// Do runs one command on the server and returns its reply, failing the test
// on error.
func (s *Server) Do(args ...any) any {
	s.tb.Helper()
	v, err := s.Client().Do(context.Background(), args...).Result()
	if err != nil {
		s.tb.Fatalf("redistest: %v on %s: %v", args, s.Addr, err)
	}
	return v
}

// Info returns the fields of INFO section as a map.
func (s *Server) Info(section string) (map[string]string, error) {
	txt, err := s.Client().Info(context.Background(), section).Result()
	if err != nil {
		return nil, err
	}
	return parseFields(txt, ':'), nil
}

// logTail returns the last lines of the server's log file.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// waitReady polls addr with PING until the server answers PONG (or NOAUTH), the process
// exits, or StartTimeout passes.
func waitReady(addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(StartTimeout)
	last := errors.New("no answer yet")
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("exited before it answered PING (%v)", last)
		default:
		}
		if last = ping(addr); last == nil {
			return nil
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("no PONG within %v: %v", StartTimeout, last)
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	// A server started with --requirepass answers NOAUTH: it is up too.
	if line != "+PONG\r\n" && !strings.HasPrefix(line, "-NOAUTH ") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// parseFields reads "name<sep>value" lines (INFO, CLUSTER INFO).
func parseFields(txt string, sep byte) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(txt, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, string(sep)); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m
}

// RunTool runs the command-line tool name (found as Binary finds it) with
// args, stdin as its input and env added to its environment, bounded by
// timeout, and returns what it printed (stdout, then stderr) and its exit
// code. The tool reads no history or preferences of the machine's user. A
// tool that cannot run, or runs past the timeout, fails the test.
func RunTool(tb testing.TB, name, stdin string, timeout time.Duration, env []string, args ...string) (string, int) {
	tb.Helper()
	path := Binary(tb, name)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(append(cmd.Environ(), "REDISCLI_HISTFILE=/dev/null", "REDISCLI_RCFILE=/dev/null"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok || ctx.Err() != nil {
			tb.Fatalf("%s %q: %v\n%s%s", name, args, err, stdout.String(), stderr.String())
		}
		code = ee.ExitCode()
	}
	return stdout.String() + stderr.String(), code
}

// ScriptCalls sums the calls of EVAL and EVALSHA (and their read-only
// forms) in the text of an INFO commandstats.
func ScriptCalls(info string) int64 {
	var n int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_eval") {
			continue
		}
		if i := strings.Index(line, "calls="); i >= 0 {
			v, _ := strconv.ParseInt(strings.SplitN(line[i+6:], ",", 2)[0], 10, 64)
			n += v
		}
	}
	return n
}
