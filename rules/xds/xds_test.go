package xds_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/testcerts"
	"github.com/funnelrl/funnel/internal/tlsfiles"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
	"github.com/funnelrl/funnel/rules/xds"
)

// waitFor bounds every wait for an event; no test waits for time to pass.
const waitFor = 10 * time.Second

const nodeID = "funnel-test"

// controlPlane is a go-control-plane SotW server (ADS) on 127.0.0.1, with
// a snapshot cache, that records the requests it receives and the headers
// of each stream.
type controlPlane struct {
	t     *testing.T
	addr  string
	cache cache.SnapshotCache
	gs    *grpc.Server
	reqs  chan *discoveryv3.DiscoveryRequest
	mu    sync.Mutex
	heads []metadata.MD
}

// startControlPlane serves on addr ("127.0.0.1:0" for a free port), with
// creds when not nil.
func startControlPlane(t *testing.T, addr string, creds credentials.TransportCredentials) *controlPlane {
	t.Helper()
	cp := &controlPlane{t: t, cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil), reqs: make(chan *discoveryv3.DiscoveryRequest, 100)}
	cb := server.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			cp.mu.Lock()
			cp.heads = append(cp.heads, md)
			cp.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			cp.reqs <- req
			return nil
		},
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cp.addr = ln.Addr().String()
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	cp.gs = grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(cp.gs, server.NewServer(context.Background(), cp.cache, cb))
	go cp.gs.Serve(ln)
	t.Cleanup(cp.gs.Stop)
	return cp
}

// push sets the node's snapshot: version, and the resources.
func (cp *controlPlane) push(version string, confs ...*rlsconfv3.RateLimitConfig) {
	cp.t.Helper()
	res := make([]types.Resource, len(confs))
	for i, c := range confs {
		res[i] = c
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		cp.t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), nodeID, snap); err != nil {
		cp.t.Fatal(err)
	}
}

// request returns the next request the server receives.
func (cp *controlPlane) request() *discoveryv3.DiscoveryRequest {
	cp.t.Helper()
	select {
	case r := <-cp.reqs:
		return r
	case <-time.After(waitFor):
		cp.t.Fatal("no request from the client")
		return nil
	}
}

// perMinute is a RateLimitConfig of domain api: key user, n a minute.
func perMinute(name string, n uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: name, Domain: "api", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key:       "user",
		RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n},
	}}}
}

// manualWait is Options.Wait under the test's control: each wait is
// reported on asked, and ends when the test sends on proceed.
type manualWait struct {
	asked   chan time.Duration
	proceed chan struct{}
}

func newManualWait() *manualWait {
	return &manualWait{asked: make(chan time.Duration, 10), proceed: make(chan struct{})}
}

func (w *manualWait) wait(ctx context.Context, d time.Duration) error {
	w.asked <- d
	select {
	case <-w.proceed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next returns the delay of the next wait.
func (w *manualWait) next(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-w.asked:
		return d
	case <-time.After(waitFor):
		t.Fatal("the client did not wait")
		return 0
	}
}

// updates collects OnUpdate's calls.
type updates chan error

func (u updates) next(t *testing.T) error {
	t.Helper()
	select {
	case err := <-u:
		return err
	case <-time.After(waitFor):
		t.Fatal("no update")
		return nil
	}
}

// rlsFront serves Envoy's rate-limit service on the client's rules, over a
// memory store, and returns a function that asks it for user's descriptor.
func rlsFront(t *testing.T, src rls.RulesSource) func(user string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	gs := grpc.NewServer()
	rls.New(funnel.New(store), src, rls.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).Register(gs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)
	return func(user string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.OverallCode
	}
}

// askN asks n times for user and returns the answers, as a string of
// O (OK) and X (over the limit).
func askN(ask func(string) rlsv3.RateLimitResponse_Code, user string, n int) string {
	var b strings.Builder
	for range n {
		if ask(user) == rlsv3.RateLimitResponse_OK {
			b.WriteByte('O')
		} else {
			b.WriteByte('X')
		}
	}
	return b.String()
}

// The whole life of a subscription against a real go-control-plane server:
// the first snapshot is ACKed and its rules decide; a bad one is NACKed
// with the reason and the last good rules stay; the same bad version, sent
// again at once, is NACKed again only after the backoff; a good one
// replaces them; the server goes away and comes back, and the client
// reconnects after an exponential backoff and resumes from the version it
// holds.
func TestClientLifecycle(t *testing.T) {
	t.Parallel()
	cp := startControlPlane(t, "127.0.0.1:0", nil)
	cp.push("1", perMinute("api-rules", 2))
	w := newManualWait()
	ups := make(updates, 10)
	c, err := xds.Start(xds.Options{
		Addr:     cp.addr,
		NodeID:   nodeID,
		Headers:  map[string]string{"x-tenant": "blue"},
		Backoff:  xds.Backoff{Initial: time.Second, Max: 3 * time.Second},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnUpdate: func(_ *rules.Set, err error) { ups <- err },
		Wait:     w.wait,
		Rand:     func() float64 { return 0 }, // no jitter: the delays are exact
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ask := rlsFront(t, c)

	first := cp.request()
	if first.GetNode().GetId() != nodeID || first.TypeUrl != xds.TypeURL || first.VersionInfo != "" || first.ResponseNonce != "" {
		t.Fatalf("first request: %v", first)
	}
	if err := ups.next(t); err != nil {
		t.Fatal(err)
	}
	if ack := cp.request(); ack.VersionInfo != "1" || ack.ResponseNonce == "" || ack.ErrorDetail != nil {
		t.Fatalf("ACK of version 1: %v", ack)
	}
	if got := askN(ask, "alice", 3); got != "OOX" {
		t.Fatalf("version 1 (2 a minute): %s", got)
	}
	cp.mu.Lock()
	if h := cp.heads[0].Get("x-tenant"); len(h) != 1 || h[0] != "blue" {
		t.Errorf("stream headers: %v", cp.heads[0])
	}
	cp.mu.Unlock()

	// A bad snapshot: a limit without a unit.
	bad := perMinute("api-rules", 5)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	cp.push("2", bad)
	if err := ups.next(t); err == nil || !strings.Contains(err.Error(), `xds:api-rules: descriptors[0].rate_limit.unit: invalid rate limit unit "UNKNOWN"`) {
		t.Fatalf("update of version 2: %v", err)
	}
	nack := cp.request()
	if nack.VersionInfo != "1" || nack.ResponseNonce == "" || nack.ErrorDetail == nil || !strings.Contains(nack.ErrorDetail.Message, "UNKNOWN") {
		t.Fatalf("NACK of version 2: %v", nack)
	}
	if got := askN(ask, "bob", 3); got != "OOX" {
		t.Fatalf("after the bad version, the last good rules: %s", got)
	}
	// The server answers the NACK with version 2 again; the second NACK
	// waits for the backoff.
	if d := w.next(t); d != time.Second {
		t.Fatalf("wait before NACKing version 2 again: %v", d)
	}
	cp.push("3", perMinute("api-rules", 3))
	w.proceed <- struct{}{}
	if nack := cp.request(); nack.VersionInfo != "1" || nack.ErrorDetail == nil {
		t.Fatalf("second NACK of version 2: %v", nack)
	}
	if err := ups.next(t); err != nil {
		t.Fatal(err)
	}
	if ack := cp.request(); ack.VersionInfo != "3" || ack.ErrorDetail != nil {
		t.Fatalf("ACK of version 3: %v", ack)
	}
	if got := askN(ask, "carol", 4); got != "OOOX" {
		t.Fatalf("version 3 (3 a minute): %s", got)
	}

	// The server goes away: the client waits 1s, fails to connect, waits
	// 2s; the server comes back on the same address with a new version.
	cp.gs.Stop()
	if d := w.next(t); d != time.Second {
		t.Fatalf("first reconnection delay: %v", d)
	}
	w.proceed <- struct{}{}
	if d := w.next(t); d != 2*time.Second {
		t.Fatalf("second reconnection delay: %v", d)
	}
	cp2 := startControlPlane(t, cp.addr, nil)
	cp2.push("4", perMinute("api-rules", 1))
	w.proceed <- struct{}{}
	if r := cp2.request(); r.GetNode().GetId() != nodeID || r.VersionInfo != "3" || r.ResponseNonce != "" {
		t.Fatalf("first request after the reconnection: %v", r)
	}
	if err := ups.next(t); err != nil {
		t.Fatal(err)
	}
	if got := askN(ask, "dave", 2); got != "OX" {
		t.Fatalf("version 4 (1 a minute): %s", got)
	}
	// The stream delivered: the next failure starts the backoff over.
	cp2.gs.Stop()
	if d := w.next(t); d != time.Second {
		t.Fatalf("delay after a stream that delivered: %v", d)
	}
}

// Over TLS with client certificates (mutual TLS): the client verifies the
// server against the CA file and presents its certificate from files.
func TestClientTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "xds CA")
	srvCert := ca.Server(t, "localhost").TLS(t)
	cp := startControlPlane(t, "127.0.0.1:0", credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{srvCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
		MinVersion:   tls.VersionTLS12,
	}))
	cp.push("1", perMinute("api-rules", 2))
	caFile := ca.Write(t, dir, "ca")
	certFile, keyFile := ca.Client(t, "funnel").Write(t, dir, "client")
	cw, err := tlsfiles.New(tlsfiles.Options{CertFile: certFile, KeyFile: keyFile, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	roots, err := tlsfiles.LoadCAs(caFile)
	if err != nil {
		t.Fatal(err)
	}
	start := func(tc *tls.Config, wait func(context.Context, time.Duration) error) (*xds.Client, updates) {
		ups := make(updates, 10)
		c, err := xds.Start(xds.Options{
			Addr: cp.addr, NodeID: nodeID, TLS: tc, Wait: wait,
			Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnUpdate: func(_ *rules.Set, err error) { ups <- err },
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, ups
	}
	tc := cw.ClientConfig()
	tc.RootCAs, tc.ServerName = roots, "localhost"
	c, ups := start(tc, nil)
	if err := ups.next(t); err != nil {
		t.Fatal(err)
	}
	if !c.Rules().HasDomain("api") {
		t.Fatal("no rules over TLS")
	}

	// Without the client certificate, the server refuses the handshake:
	// the stream fails, the client waits to try again, and has heard of
	// no rules.
	cp.mu.Lock()
	opened := len(cp.heads)
	cp.mu.Unlock()
	w := newManualWait()
	c2, ups2 := start(&tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}, w.wait)
	w.next(t)
	c2.Close()
	select {
	case err := <-ups2:
		t.Fatalf("an update without a client certificate: %v", err)
	default:
	}
	if c2.Rules().HasDomain("api") {
		t.Fatal("rules without a client certificate")
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if len(cp.heads) != opened {
		t.Fatalf("a stream opened without a client certificate")
	}
}

// Convert never panics on the bytes of a resource, and what it accepts
// is a RateLimitConfig whose rules build.
func FuzzConvert(f *testing.F) {
	for _, c := range []*rlsconfv3.RateLimitConfig{
		perMinute("a", 1),
		{Name: "b", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", Value: "v*", ShadowMode: true,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true},
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "n", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: 9, Name: "x",
				Replaces: []*rlsconfv3.RateLimitReplace{{Name: "y"}}}}}}}},
	} {
		a, err := anypb.New(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(a.Value)
	}
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		resp := &discoveryv3.DiscoveryResponse{TypeUrl: xds.TypeURL, Resources: []*anypb.Any{{TypeUrl: xds.TypeURL, Value: data}}}
		set, err := xds.Convert(resp, rules.Options{})
		if err == nil && set == nil {
			t.Fatal("no rules and no error")
		}
	})
}

// Convert refuses what is not a RateLimitConfig, and what does not build.
func TestConvert(t *testing.T) {
	t.Parallel()
	good, err := anypb.New(perMinute("a", 1))
	if err != nil {
		t.Fatal(err)
	}
	set, err := xds.Convert(&discoveryv3.DiscoveryResponse{TypeUrl: xds.TypeURL, Resources: []*anypb.Any{good}}, rules.Options{})
	if err != nil || !set.HasDomain("api") || set.Files()[0] != "xds:a" {
		t.Fatalf("Convert: %v, %v", set, err)
	}
	// The units of the current protocol, week (7) after day (4), month (5)
	// and year (6), are envoy's.
	for unit, want := range map[rlsconfv3.RateLimitUnit]rules.Unit{
		rlsconfv3.RateLimitUnit_SECOND: rules.UnitSecond, rlsconfv3.RateLimitUnit_DAY: rules.UnitDay,
		rlsconfv3.RateLimitUnit_WEEK: rules.UnitWeek, rlsconfv3.RateLimitUnit_MONTH: rules.UnitMonth, rlsconfv3.RateLimitUnit_YEAR: rules.UnitYear,
	} {
		c := perMinute("a", 1)
		c.Descriptors[0].RateLimit.Unit = unit
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		set, err := xds.Convert(&discoveryv3.DiscoveryResponse{TypeUrl: xds.TypeURL, Resources: []*anypb.Any{a}}, rules.Options{})
		if err != nil || set.All()[0].Unit != want {
			t.Errorf("unit %v: %v, %v", unit, set.All(), err)
		}
	}
	// quota_mode and metadata reach the rules as a file's do: in a file,
	// the rules refuse them or take them, and so here.
	qm := perMinute("q", 1)
	qm.Descriptors[0].QuotaMode = true
	a, err := anypb.New(qm)
	if err != nil {
		t.Fatal(err)
	}
	_, qerr := xds.Convert(&discoveryv3.DiscoveryResponse{TypeUrl: xds.TypeURL, Resources: []*anypb.Any{a}}, rules.Options{})
	_, ferr := rules.Parse(strings.NewReader("domain: api\ndescriptors:\n  - key: user\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"), "q.yaml", rules.Options{})
	if (qerr == nil) != (ferr == nil) || qerr != nil && !strings.Contains(qerr.Error(), "descriptors[0].quota_mode") {
		t.Errorf("quota_mode over xDS: %v; in a file: %v", qerr, ferr)
	}
	empty, err := xds.Convert(&discoveryv3.DiscoveryResponse{TypeUrl: xds.TypeURL}, rules.Options{})
	if err != nil || len(empty.Domains()) != 0 {
		t.Fatalf("no resources: %v, %v", empty, err)
	}
	for name, resp := range map[string]*discoveryv3.DiscoveryResponse{
		"response type": {TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Resources: []*anypb.Any{good}},
		"resource type": {TypeUrl: xds.TypeURL, Resources: []*anypb.Any{{TypeUrl: "type.googleapis.com/google.protobuf.Empty"}}},
		"bad bytes":     {TypeUrl: xds.TypeURL, Resources: []*anypb.Any{{TypeUrl: xds.TypeURL, Value: []byte{0xff}}}},
		"two domains":   {TypeUrl: xds.TypeURL, Resources: []*anypb.Any{good, good}},
	} {
		if _, err := xds.Convert(resp, rules.Options{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The backoff doubles from Initial up to Max, less its random part, and
// Start refuses one whose fields do not fit.
func TestBackoff(t *testing.T) {
	t.Parallel()
	b := xds.Backoff{Initial: time.Second, Max: 5 * time.Second, Jitter: 0.5}
	for _, c := range []struct {
		n    int
		r    float64
		want time.Duration
	}{
		{0, 0, time.Second}, {1, 0, 2 * time.Second}, {2, 0, 4 * time.Second}, {3, 0, 5 * time.Second}, {60, 0, 5 * time.Second},
		{0, 0.5, 750 * time.Millisecond}, {1, 0.999, 1001 * time.Millisecond}, {10, 0.5, 3750 * time.Millisecond},
	} {
		if got := b.Delay(c.n, c.r); got != c.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", c.n, c.r, got, c.want)
		}
	}
	var zero xds.Backoff
	if got := zero.Delay(0, 0); got != xds.DefaultInitial {
		t.Errorf("default first delay %v", got)
	}
	if got := zero.Delay(10, 0); got != xds.DefaultMax {
		t.Errorf("default last delay %v", got)
	}
	if got := (xds.Backoff{Jitter: -1}).Delay(0, 0.9); got != xds.DefaultInitial {
		t.Errorf("no jitter: %v", got)
	}
	for _, bad := range []xds.Backoff{{Initial: -1}, {Max: -1}, {Initial: 2 * time.Second, Max: time.Second}, {Jitter: 1.5}} {
		if _, err := xds.Start(xds.Options{Addr: "127.0.0.1:1", Backoff: bad}); !errors.Is(err, xds.ErrBackoff) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	if _, err := xds.Start(xds.Options{}); !errors.Is(err, xds.ErrNoAddr) {
		t.Errorf("no address: %v", err)
	}
}
