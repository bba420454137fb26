package daemon_test

import (
	"context"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// receiver is an OTLP trace collector over gRPC, in the test: it keeps
// every span it is sent.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	attrs map[string]string // the resource's string attributes
}

func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			r.attrs[kv.Key] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func startReceiver(t *testing.T) (*receiver, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{attrs: map[string]string{}}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, r)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return r, ln.Addr().String()
}

// A span of each decision, over gRPC, HTTP and RESP, sent to an OTLP
// collector: the gRPC and HTTP ones in the caller's trace, under the
// edge's span, which is the child of the caller's (traceparent).
func TestDaemonTracing(t *testing.T) {
	t.Parallel()
	rec, addr := startReceiver(t)
	cfg := testConfig()
	cfg.Rules = filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(cfg.Rules, []byte("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.TraceEndpoint, cfg.TraceProtocol, cfg.TraceInsecure = addr, "grpc", true
	cfg.TraceServiceName = "funnel-test"
	d, _, stop := start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()

	const grpcTrace, grpcParent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	const httpTrace, httpParent = "1bf7651916cd43dd8448eb211c80319d", "c7ad6b7169203332"
	conn, err := grpc.NewClient(d.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gctx := metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+grpcTrace+"-"+grpcParent+"-01")
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(gctx, &rlsv3.RateLimitRequest{
		Domain: "api",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}},
		}},
	}); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+d.HTTPAddr().String()+"/v1/throttle",
		strings.NewReader(`{"key":"k","limit":{"count":1,"period":"60s","burst":1}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+httpTrace+"-"+httpParent+"-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("POST /v1/throttle: %v %v", res, err)
	}
	res.Body.Close()
	rc := redis.NewClient(&redis.Options{Addr: d.RESPAddr().String()})
	defer rc.Close()
	if err := rc.Do(ctx, "CL.THROTTLE", "r", 1, 1, 60).Err(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil { // the daemon sends what it holds as it stops
		t.Fatal(err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	byID := map[string]*tracepb.Span{}
	var decisions []*tracepb.Span
	for _, s := range rec.spans {
		byID[hex.EncodeToString(s.SpanId)] = s
		if s.Name == "funnel.decide" {
			decisions = append(decisions, s)
		}
	}
	if rec.attrs["service.name"] != "funnel-test" {
		t.Errorf("resource %v", rec.attrs)
	}
	found := map[string]bool{}
	for _, s := range decisions {
		trace := hex.EncodeToString(s.TraceId)
		edge := byID[hex.EncodeToString(s.ParentSpanId)]
		switch trace {
		case grpcTrace, httpTrace:
			want := map[string]string{grpcTrace: grpcParent, httpTrace: httpParent}[trace]
			if edge == nil || hex.EncodeToString(edge.ParentSpanId) != want || edge.Kind != tracepb.Span_SPAN_KIND_SERVER {
				t.Errorf("decision of trace %s: its parent %v is not the server span under the caller's %s", trace, edge, want)
			}
			found[trace] = true
		default:
			if len(s.ParentSpanId) == 0 {
				found["resp"] = true // RESP carries no trace: a root span
			}
		}
		var outcome, rule string
		for _, kv := range s.Attributes {
			switch kv.Key {
			case "funnel.outcome":
				outcome = kv.GetValue().GetStringValue()
			case "funnel.rule":
				rule = kv.GetValue().GetStringValue()
			}
		}
		if trace == grpcTrace && rule != "api.user" {
			t.Errorf("the gRPC decision's rule: %q, want api.user", rule)
		}
		if outcome != "allowed" {
			t.Errorf("decision span without its outcome: %v", s.Attributes)
		}
		if d := time.Duration(s.EndTimeUnixNano - s.StartTimeUnixNano); d <= 0 || d > 10*time.Second {
			t.Errorf("store time %v", d)
		}
	}
	if !found[grpcTrace] || !found[httpTrace] || !found["resp"] {
		t.Fatalf("decisions traced: %v, of %d spans", found, len(rec.spans))
	}
}

// Tracing off: no exporter, and the daemon says nothing of traces.
func TestDaemonTracingOff(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("TRACING_ENABLED", "")
	_, logs, stop := start(t, testConfig())
	stop()
	if strings.Contains(logs.String(), "tracing decisions") {
		t.Fatal("tracing is on without an endpoint")
	}
}

// A collector that accepts connections and never answers holds the
// process no longer than the shutdown's timeout: the spans still buffered
// get what is left of it (they held it about 11 s, the exporter's own
// timeout, after "funnel stopped").
func TestDaemonTracingCollectorSilent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept and hold every connection, saying nothing
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	cfg := testConfig()
	cfg.TraceEndpoint, cfg.TraceProtocol, cfg.TraceInsecure = ln.Addr().String(), "grpc", true
	cfg.ShutdownTimeout = 300 * time.Millisecond
	d, _, stop := start(t, cfg)
	rc := redis.NewClient(&redis.Options{Addr: d.RESPAddr().String()})
	defer rc.Close()
	if err := rc.Do(context.Background(), "CL.THROTTLE", "r", 1, 1, 60).Err(); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	stop()
	// Far below the exporter's own 10 s, far above the 300 ms asked for.
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("the daemon took %v to stop and close, with a shutdown timeout of 300ms", took)
	}
}
