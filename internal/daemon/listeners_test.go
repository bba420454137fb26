package daemon_test

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/funnelrl/funnel/internal/daemon"
	"github.com/funnelrl/funnel/internal/testlog"
)

// An RLS-only daemon (--resp ” --http ”): Envoy's rate-limit service
// answers, and the daemon opens no other port: the listening sockets the
// process holds are those it held before, and the gRPC one. The test is not
// parallel, so that no other test opens a listener meanwhile.
func TestDaemonRLSOnly(t *testing.T) {
	before, ok := listeningPorts(t)
	if !ok {
		t.Skip("no /proc/net/tcp to list the process's listening sockets")
	}
	cfg := testConfig()
	cfg.RESP, cfg.HTTP = "", ""
	log, _ := testlog.New(slog.LevelInfo)
	d, err := daemon.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.RESPAddr() != nil || d.HTTPAddr() != nil || d.GRPCAddr() == nil {
		t.Fatalf("RESPAddr %v, HTTPAddr %v, GRPCAddr %v", d.RESPAddr(), d.HTTPAddr(), d.GRPCAddr())
	}
	after, _ := listeningPorts(t)
	var opened []int
	for p := range after {
		if !before[p] {
			opened = append(opened, p)
		}
	}
	grpcPort := d.GRPCAddr().(*net.TCPAddr).Port
	if len(opened) != 1 || opened[0] != grpcPort {
		t.Fatalf("ports opened by New: %v, want only gRPC's %d", opened, grpcPort)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	conn, err := grpc.NewClient(d.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "api",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}},
		}},
	})
	if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v, %v", res, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// listeningPorts returns the ports of the TCP sockets this process listens
// on, from /proc (false where there is none).
func listeningPorts(t *testing.T) (map[int]bool, bool) {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, false
	}
	for _, fd := range fds {
		link, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	ports := map[int]bool{}
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			if table == "/proc/self/net/tcp" {
				return nil, false
			}
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] { // 0A: LISTEN
				continue
			}
			_, port, _ := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(port, 16, 16); err == nil {
				ports[int(p)] = true
			}
		}
		f.Close()
	}
	return ports, true
}
