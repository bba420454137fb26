package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/storetest"
)

// startSentinel starts a Redis Sentinel on a free port that monitors the
// master at masterAddr as "mymaster", and returns its address once it knows
// the master.
func startSentinel(t *testing.T, masterPort int) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not on PATH; make test installs it")
	}
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf") // Sentinel rewrites its file
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster 127.0.0.1 %d 1\nsentinel down-after-milliseconds mymaster 1000\n",
		port, dir, masterPort)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer s.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		got, err := s.GetMasterAddrByName(ctx, "mymaster").Result()
		cancel()
		if err == nil && len(got) == 2 && got[1] == strconv.Itoa(masterPort) {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel at %s never reported the master: %v, %v", addr, got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The store over go-redis's Sentinel-backed failover client: the client asks
// the Sentinel where the master is, and the conformance suite passes through
// it.
func TestSentinel(t *testing.T) {
	t.Parallel()
	master := redistest.StartServer(t)
	sentinel := startSentinel(t, master.Port)
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "mymaster",
		SentinelAddrs:         []string{sentinel},
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { client.Close() })
	var n atomic.Int64 // the suite builds stores from parallel subtests
	storetest.Run(t, func(t *testing.T, now func() int64) funnel.Store {
		prefix := fmt.Sprintf("sentinel%d:", n.Add(1))
		s := redisstore.New(client, redisstore.Options{Now: now, Prefix: prefix, Timeout: 5 * time.Second})
		t.Cleanup(func() { s.Close() })
		return s
	})
}
