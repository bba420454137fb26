package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelDownAfter is the down-after-milliseconds of the Sentinels that
// StartSentinel starts: a master that does not answer for this long is
// failed over to a replica (which takes one to three times as long in all).
const SentinelDownAfter = 1000 * time.Millisecond

// Sentinel is a Redis Sentinel process (redis-server --sentinel) started by
// a test.
type Sentinel struct {
	// Addr is the Sentinel's address, "127.0.0.1:port".
	Addr string

	tb     testing.TB
	dir    string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	admin  *redis.SentinelClient
}

// StartReplica starts a redis-server, as StartServer does, that replicates
// master, and waits until its link to master is up. It sets master's
// repl-diskless-sync-delay to 0.
func StartReplica(tb testing.TB, master *Server, extra ...string) *Server {
	tb.Helper()
	// The master syncs a new replica at once, rather than wait 5 s (Redis
	// 7's repl-diskless-sync-delay) for others to sync with it.
	master.Do("CONFIG", "SET", "repl-diskless-sync-delay", "0")
	r := StartServer(tb, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}, extra...)...)
	deadline := time.Now().Add(StartTimeout)
	for {
		repl, err := r.Info("replication")
		if err == nil && repl["master_link_status"] == "up" {
			return r
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: replica %s of %s: link not up within %v (%v, %v)", r.Addr, master.Addr, StartTimeout, repl["master_link_status"], err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StartSentinel starts a Redis Sentinel on a free port of 127.0.0.1 that
// monitors master under name, with a quorum of one and SentinelDownAfter,
// waits until it knows the master and every replica connected to it, and
// stops it when the test ends. If redis-server is not on PATH it skips the
// test, or fails it under CI (see Missing).
func StartSentinel(tb testing.TB, name string, master *Server) *Sentinel {
	tb.Helper()
	bin := lookPath(tb)
	var s *Sentinel
	onFreePort(tb, func(port int) error {
		s = &Sentinel{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), tb: tb, dir: tb.TempDir()}
		tb.Cleanup(s.Stop)
		// Sentinel rewrites its configuration file: each gets its own.
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"+
			"sentinel monitor %s 127.0.0.1 %d 1\n"+
			"sentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s 10000\n",
			port, s.dir, filepath.Join(s.dir, "sentinel.log"),
			name, master.Port, name, SentinelDownAfter.Milliseconds(), name)
		file := filepath.Join(s.dir, "sentinel.conf")
		if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		return s.start(bin, file)
	})
	s.waitKnows(name, master)
	return s
}

func (s *Sentinel) start(bin, conf string) error {
	cmd := exec.Command(bin, conf, "--sentinel")
	cmd.Dir = s.dir
	exited, err := launch(cmd, s.Addr)
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(s.dir, "sentinel.log"))
		return fmt.Errorf("sentinel on %s: %w\n%s", s.Addr, err, b)
	}
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	return nil
}

// waitKnows waits until the Sentinel reports master as name's master and
// lists every replica that master reports connected.
func (s *Sentinel) waitKnows(name string, master *Server) {
	s.tb.Helper()
	deadline := time.Now().Add(StartTimeout)
	for {
		why := ""
		if addr, err := s.Master(name); err != nil || addr != master.Addr {
			why = fmt.Sprintf("master %q, %v", addr, err)
		} else if repl, err := master.Info("replication"); err != nil {
			why = fmt.Sprintf("INFO replication of the master: %v", err)
		} else {
			want, _ := strconv.Atoi(repl["connected_slaves"])
			got, err := s.client().Replicas(context.Background(), name).Result()
			if err != nil || len(got) < want {
				why = fmt.Sprintf("%d of %d replicas known (%v)", len(got), want, err)
			}
		}
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redistest: sentinel %s: %s after %v", s.Addr, why, StartTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Master returns the address of the master the Sentinel reports for name.
func (s *Sentinel) Master(name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	hp, err := s.client().GetMasterAddrByName(ctx, name).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME answered %q", hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// WaitMaster waits until the Sentinel reports addr as name's master, or
// timeout passes.
func (s *Sentinel) WaitMaster(name, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := s.Master(name)
		if err == nil && got == addr {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sentinel %s reports master %q (%v), not %s, after %v", s.Addr, got, err, addr, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// client returns the test's own client of the Sentinel.
func (s *Sentinel) client() *redis.SentinelClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin == nil {
		s.admin = redis.NewSentinelClient(adminOptions(s.Addr))
	}
	return s.admin
}

// Stop kills the Sentinel and waits for it to exit. Stopping a stopped
// Sentinel does nothing.
func (s *Sentinel) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd, s.exited = nil, nil
}
