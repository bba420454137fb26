package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/eventually"
	"github.com/funnelrl/funnel/internal/redistest"
)

func TestServerStopStart(t *testing.T) {
	s := redistest.StartServer(t, "--maxmemory", "10mb")
	ctx := context.Background()
	if got := s.Do("CONFIG", "GET", "maxmemory"); len(got.([]any)) != 2 || got.([]any)[1] != "10485760" {
		t.Fatalf("extra arguments not applied: %v", got)
	}
	if got := s.Do("CONFIG", "GET", "save"); got.([]any)[1] != "" {
		t.Fatalf("persistence on: save %q", got.([]any)[1])
	}
	s.Do("SET", "k", "v")
	s.Stop()
	if s.Running() {
		t.Fatal("running after Stop")
	}
	if err := s.Client().Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.MustStart()
	if n := s.Client().Exists(ctx, "k").Val(); n != 0 {
		t.Fatal("a restarted server kept its data")
	}
	if err := s.Start(); err == nil {
		t.Fatal("Start of a running server succeeded")
	}
	s.Pause()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := s.Client().Ping(short).Err(); err == nil {
		t.Fatal("a paused server answered")
	}
	s.Resume()
	eventually.True(t, "an answer after Resume", func() bool { return s.Client().Ping(ctx).Err() == nil })
}

func TestServersAreSeparate(t *testing.T) {
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	if a.Addr == b.Addr {
		t.Fatal("two servers on one address")
	}
	a.Do("SET", "k", "a")
	if n := b.Do("EXISTS", "k"); n != int64(0) {
		t.Fatal("servers share data")
	}
}

// A replica follows its master, a Sentinel knows both, and promotes the
// replica when the master dies.
func TestSentinelFailsOver(t *testing.T) {
	t.Parallel()
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	master.Do("SET", "k", "v")
	eventually.True(t, "the replica to get the key", func() bool { return replica.Do("EXISTS", "k") == int64(1) })
	s := redistest.StartSentinel(t, "m", master)
	if got, err := s.Master("m"); err != nil || got != master.Addr {
		t.Fatalf("Sentinel reports master %q, %v; want %s", got, err, master.Addr)
	}
	master.Stop()
	if err := s.WaitMaster("m", replica.Addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if role := replica.Do("ROLE").([]any); role[0] != "master" {
		t.Fatalf("the promoted replica's role: %v", role)
	}
}
