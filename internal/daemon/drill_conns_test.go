package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// TestDrillIdleConnections is the drill of `make chaos` for idle
// connections: under requirepass, it opens IDLE_CONNS idle connections on
// every listener (1200 in `make chaos`, 300 by default, which keeps the
// drill light beside the other packages' tests in `make test`) (RESP sockets that never authenticate, HTTP
// sockets that send nothing, gRPC sockets half silent and half with the
// HTTP/2 preface and no call), more than each listener's bound, while
// clients connected before measure the latency of their decisions; it
// prints what held: the latencies before and during the flood, the
// connections each listener refused, how long until a new client of each
// listener was served again, and until the idle connections were gone. It
// fails if a connected client gets an error, or if a listener does not
// serve new clients again, or keeps idle connections, within a minute.
func TestDrillIdleConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("a drill")
	}
	t.Parallel()
	idle := 300
	if s := os.Getenv("IDLE_CONNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("IDLE_CONNS=%q: %v", s, err)
		}
		idle = n
	}
	const pass = "sekret"
	cfg := testConfig()
	cfg.RequirePass = pass
	// Bounds below the flood: 1000, 500, 500 and 1500 for 1200.
	cfg.MaxClients, cfg.HTTPMaxConns, cfg.GRPCMaxConns, cfg.MaxConns = idle*5/6, idle*5/12, idle*5/12, idle*5/4
	cfg.HandshakeTimeout, cfg.AuthTimeout, cfg.GRPCIdleTimeout = time.Second, time.Second, 2*time.Second
	d, _, _ := start(t, cfg)
	t.Logf("bounds: resp %d, http %d, grpc %d, process %d; timeouts: handshake %v, auth %v, grpc idle %v",
		cfg.MaxClients, cfg.HTTPMaxConns, cfg.GRPCMaxConns, cfg.MaxConns, cfg.HandshakeTimeout, cfg.AuthTimeout, cfg.GRPCIdleTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The clients connected before the flood.
	rdb := redis.NewClient(&redis.Options{Addr: d.RESPAddr().String(), Password: pass, PoolSize: 1, MaxRetries: -1})
	defer rdb.Close()
	hc := &http.Client{Timeout: waitFor, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	conn, err := grpc.NewClient(d.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	gctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+pass)
	decide := map[string]func() error{
		"resp": func() error { return rdb.Do(ctx, "CL.THROTTLE", "drill", 1000000, 1000000, 1).Err() },
		"http": func() error {
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+d.HTTPAddr().String()+"/v1/throttle",
				strings.NewReader(`{"key":"drill","limit":{"count":1000000,"period":"1s","burst":1000000}}`))
			req.Header.Set("Authorization", "Bearer "+pass)
			res, err := hc.Do(req)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				return fmt.Errorf("POST /v1/throttle: %s", res.Status)
			}
			return nil
		},
		"grpc": func() error {
			_, err := rls.ShouldRateLimit(gctx, &rlsv3.RateLimitRequest{Domain: "api",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "drill"}}}}})
			return err
		},
	}
	names := []string{"resp", "http", "grpc"}
	measure := func(what string) {
		var line []string
		for _, name := range names {
			lat := make([]time.Duration, 0, 200)
			for range 200 {
				start := time.Now()
				if err := decide[name](); err != nil {
					t.Fatalf("%s: a connected %s client: %v", what, name, err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			line = append(line, fmt.Sprintf("%s p50 %v p99 %v", name, lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond)))
		}
		t.Logf("%s, 200 decisions each by a connected client: %s", what, strings.Join(line, "; "))
	}
	measure("before the flood")

	// The flood.
	addrs := map[string]net.Addr{"resp": d.RESPAddr(), "http": d.HTTPAddr(), "grpc": d.GRPCAddr()}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
		fails atomic.Int64
	)
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	floodStart := time.Now()
	for _, name := range names {
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < idle; i += 8 {
					nc, err := net.DialTimeout("tcp", addrs[name].String(), waitFor)
					if err != nil {
						fails.Add(1)
						continue
					}
					if name == "grpc" && i%2 == 1 {
						io.WriteString(nc, http2Preface)
						go io.Copy(io.Discard, nc) // take the server's frames
					}
					mu.Lock()
					conns = append(conns, nc)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	floodEnd := time.Now()
	t.Logf("flood: %d idle connections opened on each listener in %v (%d dials failed)", idle, floodEnd.Sub(floodStart).Round(time.Millisecond), fails.Load())
	peak := metricsOf(t, hc, d.HTTPAddr().String(), pass)
	var held []string
	for _, name := range names {
		held = append(held, fmt.Sprintf("%s %v (refused %v)", name, peak[`funnel_connected_clients{protocol="`+name+`"}`], peak[`funnel_connections_refused_total{listener="`+name+`"}`]))
	}
	t.Logf("connections held at the end of the flood: %s", strings.Join(held, ", "))

	// From the end of the flood on, at once: how long until a new client
	// of each listener is served, and until its idle connections are gone.
	p := probe{t: t, resp: d.RESPAddr(), http: d.HTTPAddr(), grpc: d.GRPCAddr(), pass: pass}
	newOK := map[string]func() error{"resp": p.respOK, "http": p.httpOK, "grpc": p.grpcOK}
	served := make([]time.Duration, len(names))
	var pwg sync.WaitGroup
	for i, name := range names {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for newOK[name]() != nil {
				if time.Since(floodEnd) > time.Minute {
					served[i] = -1
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			served[i] = time.Since(floodEnd)
		}()
	}
	measure("during the flood")
	gone := map[string]time.Duration{}
	for len(gone) < len(names) {
		m := metricsOf(t, hc, d.HTTPAddr().String(), pass)
		for _, name := range names {
			// The drill's own clients: one each (and the metrics request
			// on HTTP), and a probe.
			if _, ok := gone[name]; !ok && m[`funnel_connected_clients{protocol="`+name+`"}`] <= 3 {
				gone[name] = time.Since(floodEnd)
			}
		}
		if time.Since(floodEnd) > time.Minute {
			t.Fatalf("idle connections still open a minute after the flood: %v", m)
		}
		time.Sleep(100 * time.Millisecond)
	}
	pwg.Wait()
	var line []string
	for i, name := range names {
		if served[i] < 0 {
			t.Fatalf("no new %s client served for a minute after the flood", name)
		}
		line = append(line, fmt.Sprintf("%s after %v", name, served[i].Round(time.Millisecond)))
	}
	t.Logf("new clients served again: %s", strings.Join(line, ", "))
	m := metricsOf(t, hc, d.HTTPAddr().String(), pass)
	var refused []string
	for _, name := range names {
		refused = append(refused, fmt.Sprintf("%s %v after %v", name, m[`funnel_connections_refused_total{listener="`+name+`"}`], gone[name].Round(100*time.Millisecond)))
	}
	t.Logf("refused over the bounds, and idle connections gone: %s", strings.Join(refused, ", "))
	measure("after the flood")
}

// metricsOf returns the samples of /metrics, by name and labels.
func metricsOf(t *testing.T, hc *http.Client, addr, pass string) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+pass)
	res, err := hc.Do(req)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	defer res.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			m[line[:i]] = v
		}
	}
	return m
}
