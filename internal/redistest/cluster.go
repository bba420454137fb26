package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// NodeTimeout is the cluster-node-timeout of the clusters StartCluster
// builds: a master that does not answer for this long is failed over to one
// of its replicas (which takes one to three times as long in all).
const NodeTimeout = 1000 * time.Millisecond

// Cluster is a Redis Cluster of redis-server processes started by a test.
type Cluster struct {
	// Nodes are the cluster's servers, masters first as redis-cli created
	// them; a failover changes which of them are masters (see Masters).
	Nodes []*Server

	tb testing.TB
}

// StartCluster starts masters·(1+replicasPerMaster) cluster-enabled servers
// on free ports (their cluster bus ports too), joins them with
// `redis-cli --cluster create`, waits until every node reports the cluster
// ok and every replica is in sync, and stops them when the test ends. If
// redis-server or redis-cli is not on PATH it skips the test, or fails it
// under CI (see Missing).
func StartCluster(tb testing.TB, masters, replicasPerMaster int) *Cluster {
	tb.Helper()
	return StartClusterWith(tb, masters, replicasPerMaster)
}

// StartClusterWith is StartCluster with extra arguments for every node's
// redis-server (e.g. "--loadmodule", path).
func StartClusterWith(tb testing.TB, masters, replicasPerMaster int, extra ...string) *Cluster {
	tb.Helper()
	bin := lookPath(tb)
	cli := Binary(tb, "redis-cli")
	if masters < 3 {
		tb.Fatalf("redistest: a Redis Cluster needs at least 3 masters, not %d", masters)
	}
	c := &Cluster{tb: tb}
	n := masters * (1 + replicasPerMaster)
	for i := 0; i < n; i++ {
		var s *Server
		var lastErr error
		for try := 0; try < 5 && s == nil; try++ {
			port, err1 := FreePort()
			bus, err2 := FreePort()
			if err1 != nil || err2 != nil || port == bus {
				lastErr = fmt.Errorf("no free ports: %v %v", err1, err2)
				continue
			}
			cand := newServer(tb, bin, port, append([]string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", strconv.FormatInt(NodeTimeout.Milliseconds(), 10),
				"--cluster-port", strconv.Itoa(bus),
			}, extra...))
			if lastErr = cand.Start(); lastErr == nil {
				s = cand
			}
		}
		if s == nil {
			tb.Fatalf("redistest: cluster node %d: %v", i, lastErr)
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return c
}

// Addrs returns the addresses of all the nodes, in order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// Kill kills node i (SIGKILL, as a crash). Its replica takes over after
// NodeTimeout and an election.
func (c *Cluster) Kill(i int) { c.Nodes[i].Stop() }

// Masters returns the indices of the running nodes that are masters now.
func (c *Cluster) Masters() []int {
	var m []int
	for i, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		role, err := s.Client().Do(context.Background(), "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			m = append(m, i)
		}
	}
	return m
}

// MasterOf returns the index of the running node that masters key's slot,
// as that node itself says (CLUSTER NODES, "myself"), or -1 if none does
// (during a failover).
func (c *Cluster) MasterOf(key string) int {
	ctx := context.Background()
	slot := int64(-1)
	for _, s := range c.Nodes {
		if s.Running() {
			if v, err := s.Client().ClusterKeySlot(ctx, key).Result(); err == nil {
				slot = v
				break
			}
		}
	}
	if slot < 0 {
		return -1
	}
	for i, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		txt, err := s.Client().ClusterNodes(ctx).Result()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(txt, "\n") {
			f := strings.Fields(line)
			if len(f) < 8 || !strings.Contains(f[2], "myself") || !strings.Contains(f[2], "master") {
				continue
			}
			for _, r := range f[8:] {
				lo, hi, isRange := strings.Cut(r, "-")
				if !isRange {
					hi = lo
				}
				a, err1 := strconv.ParseInt(lo, 10, 64)
				b, err2 := strconv.ParseInt(hi, 10, 64)
				if err1 == nil && err2 == nil && a <= slot && slot <= b {
					return i
				}
			}
		}
	}
	return -1
}

// WaitHealthy waits until every running node reports cluster_state:ok with
// all 16384 slots assigned and every running replica's link to its master
// is up, or timeout passes.
func (c *Cluster) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var why string
	for {
		if why = c.unhealthy(); why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not healthy within %v: %s", timeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unhealthy returns why the cluster is not healthy, or "".
func (c *Cluster) unhealthy() string {
	ctx := context.Background()
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		txt, err := s.Client().ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER INFO: %v", s.Addr, err)
		}
		f := parseFields(txt, ':')
		if f["cluster_state"] != "ok" || f["cluster_slots_assigned"] != "16384" {
			return fmt.Sprintf("%s: cluster_state %s, %s slots assigned", s.Addr, f["cluster_state"], f["cluster_slots_assigned"])
		}
		repl, err := s.Info("replication")
		if err != nil {
			return fmt.Sprintf("%s: INFO replication: %v", s.Addr, err)
		}
		if repl["role"] == "slave" && repl["master_link_status"] != "up" {
			return fmt.Sprintf("%s: replica link %s", s.Addr, repl["master_link_status"])
		}
	}
	return ""
}

// Client returns a cluster client of all the nodes for the test's own
// commands, closed when the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        c.Addrs(),
		DialTimeout:  2 * time.Second,
		ReadTimeout:  5 * time.Second,
		WriteTimeout: 5 * time.Second,
		Protocol:     2,
	})
	c.tb.Cleanup(func() { cc.Close() })
	return cc
}
