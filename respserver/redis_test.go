package respserver_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/respserver"
	"github.com/funnelrl/funnel/storetest"
)

// redisServers counts the servers startRedisServer builds, so that each
// store gets its own key prefix on the shared redis-server.
var redisServers atomic.Int64

// startRedisServer starts a server configured by cfg over a Redis store on
// the real redis-server srv, with an injected clock, so that CL.THROTTLE
// replies are exact there too; it is closed when the test ends.
func startRedisServer(t *testing.T, srv *redistest.Server, cfg respserver.Config) *testServer {
	t.Helper()
	return startRedisServerOpts(t, srv, cfg, redisstore.Options{Timeout: 20 * time.Second})
}

// startRedisServerOpts is startRedisServer with the store's options opts
// (their clock and prefix are set here).
func startRedisServerOpts(t *testing.T, srv *redistest.Server, cfg respserver.Config, opts redisstore.Options) *testServer {
	t.Helper()
	client := srv.Client()
	clock := storetest.NewClock(storetest.Epoch)
	opts.Now = clock.Now
	opts.Prefix = fmt.Sprintf("resp%d:", redisServers.Add(1))
	st := redisstore.New(client, opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.EventLoops == 0 {
		cfg.EventLoops = -1 // a store that waits on the network
	}
	return serveStore(t, ln, cfg, st, clock)
}

// TestServerThrottleConformanceRedis runs the wire cases of CL.THROTTLE over
// a Redis store: the same replies as over the memory store.
func TestServerThrottleConformanceRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	runWireCases(t, func(t *testing.T) *testServer { return startRedisServer(t, srv, respserver.Config{}) })
}

// On the Redis store, whose keys share the database with others, DBSIZE
// says that the store does not count its keys rather than a number.
func TestServerDBSizeRedis(t *testing.T) {
	t.Parallel()
	ts := startRedisServer(t, redistest.StartServer(t), respserver.Config{})
	c := ts.dial(t)
	if got := c.do("DBSIZE"); !strings.HasPrefix(got, "-ERR DBSIZE is not supported by this store") {
		t.Errorf("DBSIZE = %q", got)
	}
}

// countingHandler is a slog handler that counts the records at or above
// Warn, so that a test can check that client errors are not logged.
type countingHandler struct{ n atomic.Int64 }

func (h *countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *countingHandler) Handle(context.Context, slog.Record) error    { h.n.Add(1); return nil }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *countingHandler) WithGroup(string) slog.Handler                { return h }

// A CL.THROTTLE on a key that holds anything but a funnel's TAT answers
// Redis's WRONGTYPE error, changes nothing and logs nothing (any client
// could otherwise flood the log), over both stores.
func TestServerThrottleWrongType(t *testing.T) {
	t.Parallel()
	const wrongType = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
	t.Run("Memory", func(t *testing.T) {
		t.Parallel()
		logs := &countingHandler{}
		ts := startServer(t, respserver.Config{Logger: slog.New(logs)})
		c := ts.dial(t)
		if got := c.do("FUNNEL.ALLOW", "w", "fixed_window", "3", "1000"); got != ints(1, 3, 2, -1, 29, 0, 0) {
			t.Fatalf("setup: %q", got)
		}
		for i := 0; i < 100; i++ {
			if got := c.do("CL.THROTTLE", "w", "15", "30", "60"); got != wrongType {
				t.Fatalf("CL.THROTTLE on a fixed window: %q", got)
			}
		}
		if got := c.do("FUNNEL.ALLOW", "w", "fixed_window", "3", "1000", "QUANTITY", "0"); got != ints(1, 3, 2, -1, 29, 0, 0) {
			t.Errorf("the fixed window changed: %q", got)
		}
		if n := logs.n.Load(); n != 0 {
			t.Errorf("%d log records for client errors", n)
		}
	})
	t.Run("Redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.StartServer(t)
		logs := &countingHandler{}
		ts := startRedisServer(t, srv, respserver.Config{Logger: slog.New(logs)})
		prefix := fmt.Sprintf("resp%d:", redisServers.Load())
		rc := srv.Client()
		ctx := context.Background()
		values := map[string]string{"word": "notanumber", "neg": "-5", "empty": "", "big": "18446744073709551616"}
		for k, v := range values {
			rc.Set(ctx, prefix+k, v, 0)
		}
		rc.RPush(ctx, prefix+"list", "x")
		c := ts.dial(t)
		for _, k := range []string{"word", "neg", "empty", "big", "list"} {
			for i := 0; i < 20; i++ {
				if got := c.do("CL.THROTTLE", k, "15", "30", "60"); got != wrongType {
					t.Fatalf("CL.THROTTLE on %s: %q", k, got)
				}
			}
		}
		for k, v := range values {
			if got, err := rc.Get(ctx, prefix+k).Result(); err != nil || got != v {
				t.Errorf("%s holds %q, %v; want %q", k, got, err, v)
			}
		}
		if got := rc.LRange(ctx, prefix+"list", 0, -1).Val(); len(got) != 1 || got[0] != "x" {
			t.Errorf("list holds %q", got)
		}
		if n := logs.n.Load(); n != 0 {
			t.Errorf("%d log records for client errors", n)
		}
	})
}

// With Redis down, a fail-closed fallback is never a reply that looks like
// a decision: by default the error TRYAGAIN, or with FailClosedRefuse a
// refusal with a retry after of one second (not 0). A fail-open fallback
// answers allowed, the whole limit remaining, on every command (FUNNEL.*
// answered 0 remaining). Every fallback's reset after is -1, which no decision
// answers (a fail-open CL.THROTTLE was [0,16,16,-1,0], a peek of a full
// bucket). Each is counted in Stats, and none is logged per call.
func TestServerFallbacks(t *testing.T) {
	t.Parallel()
	const tryAgain = storeDown
	for _, tc := range []struct {
		name     string
		cfg      respserver.Config
		failOpen bool
		throttle string
		allow    string
		acquire  string
	}{
		{"FailClosedError", respserver.Config{}, false, tryAgain, tryAgain, tryAgain},
		{"FailClosedRefuse", respserver.Config{FailClosed: respserver.FailClosedRefuse}, false,
			ints(1, 16, 0, 1, -1), ints(0, 10, 0, 1000, -1, 0, 0), "*7\r\n:0\r\n:3\r\n:0\r\n:1000\r\n:-1\r\n$-1\r\n:0\r\n"},
		{"FailOpen", respserver.Config{}, true,
			ints(0, 16, 16, -1, -1), ints(1, 10, 10, -1, -1, 0, 0), "*7\r\n:1\r\n:3\r\n:3\r\n:-1\r\n:-1\r\n$32\r\n"}, // and a random id
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			logs := &countingHandler{}
			tc.cfg.Logger = slog.New(logs)
			// A stopped Redis refuses connections at once: the timeout only
			// keeps a loaded machine's first decision from falling back.
			ts := startRedisServerOpts(t, srv, tc.cfg, redisstore.Options{Timeout: 5 * time.Second, Fail: failMode(tc.failOpen)})
			c := ts.dial(t)
			if got := c.do("CL.THROTTLE", "k", "15", "30", "60"); got != ints(0, 16, 15, -1, 2) {
				t.Fatalf("with Redis up: %q", got)
			}
			srv.Stop()
			if got := c.do("CL.THROTTLE", "k", "15", "30", "60"); got != tc.throttle {
				t.Errorf("CL.THROTTLE: %q, want %q", got, tc.throttle)
			}
			if got := c.do("FUNNEL.ALLOW", "f", "fixed_window", "10", "1000"); got != tc.allow {
				t.Errorf("FUNNEL.ALLOW: %q, want %q", got, tc.allow)
			}
			if tc.acquire != "" {
				if got := c.do("FUNNEL.ACQUIRE", "c", "3", "1000"); !strings.HasPrefix(got, tc.acquire) {
					t.Errorf("FUNNEL.ACQUIRE: %q, want %q", got, tc.acquire)
				}
			}
			if got := c.do("FUNNEL.ALLOWALL", "2", "LIMIT", "{a}1", "fixed_window", "10", "1000", "LIMIT", "{a}2", "gcra", "10", "1000"); tc.throttle == tryAgain && got != tryAgain {
				t.Errorf("FUNNEL.ALLOWALL: %q, want %q", got, tryAgain)
			}
			st := ts.srv.Stats()
			if tc.failOpen && (st.FailOpen < 2 || st.FailClosed != 0) || !tc.failOpen && (st.FailClosed < 3 || st.FailOpen != 0) {
				t.Errorf("Stats: %+v", st)
			}
			if n := logs.n.Load(); n > 1 {
				t.Errorf("%d log records for %d fallbacks", n, st.FailOpen+st.FailClosed)
			}
		})
	}
}

// failMode is funnel.FailOpen when open, else funnel.FailClosed.
func failMode(open bool) funnel.FailMode {
	if open {
		return funnel.FailOpen
	}
	return funnel.FailClosed
}
