package respserver_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funnelrl/funnel/respserver"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	t.Cleanup(cancel)
	return ctx
}

// goRedis returns a go-redis client of ts, closed when the test ends.
func (ts *testServer) goRedis(t *testing.T, opt redis.Options) *redis.Client {
	opt.Addr = ts.addr
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = waitFor, waitFor, waitFor
	opt.MaxRetries = -1 // a failure shows at once
	rdb := redis.NewClient(&opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func TestGoRedis(t *testing.T) {
	t.Parallel()
	for _, proto := range []int{2, 3} {
		t.Run("RESP"+strconv.Itoa(proto), func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			ts := startServer(t, respserver.Config{})
			rdb := ts.goRedis(t, redis.Options{Protocol: proto, ClientName: "gr-" + strconv.Itoa(proto)})

			if got, err := rdb.Ping(ctx).Result(); err != nil || got != "PONG" {
				t.Fatalf("PING: %q, %v", got, err)
			}
			got, err := rdb.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60).Int64Slice()
			if err != nil || !slices.Equal(got, []int64{0, 16, 15, -1, 2}) {
				t.Fatalf("CL.THROTTLE: %v, %v", got, err)
			}
			// A pipeline: one write, one flush of the replies.
			cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for range 20 {
					p.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60)
				}
				p.Echo(ctx, "binary\x00\r\n")
				p.Do(ctx, "CL.THROTTLE", "user123", "x", 30, 60)
				p.Exists(ctx, "user123", "nokey")
				return nil
			})
			if err == nil || err.Error() != "Cell error: Store error: Couldn't parse as integer: x" {
				t.Fatalf("pipeline's first error: %v", err)
			}
			for i := range 20 {
				want := []int64{0, 16, int64(14 - i), -1, int64(4 + 2*i)}
				if i >= 15 {
					want = []int64{1, 16, 0, 2, 32}
				}
				if got, err := cmds[i].(*redis.Cmd).Int64Slice(); err != nil || !slices.Equal(got, want) {
					t.Fatalf("pipelined CL.THROTTLE %d: %v, %v; want %v", i, got, err, want)
				}
			}
			if got, err := cmds[20].(*redis.StringCmd).Result(); err != nil || got != "binary\x00\r\n" {
				t.Fatalf("pipelined ECHO: %q, %v", got, err)
			}
			if got, err := cmds[22].(*redis.IntCmd).Result(); err != nil || got != 1 {
				t.Fatalf("pipelined EXISTS: %d, %v", got, err)
			}

			// The name set through the options (HELLO ... SETNAME and
			// CLIENT SETNAME), the library through CLIENT SETINFO.
			if name, err := rdb.ClientGetName(ctx).Result(); err != nil || name != "gr-"+strconv.Itoa(proto) {
				t.Fatalf("CLIENT GETNAME: %q, %v", name, err)
			}
			info, err := rdb.ClientInfo(ctx).Result()
			if err != nil || info.Name != "gr-"+strconv.Itoa(proto) || !strings.HasPrefix(info.LibName, "go-redis(") || info.LibVer != redis.Version() || info.Resp != proto {
				t.Fatalf("CLIENT INFO: %+v, %v", info, err)
			}
			list, err := rdb.ClientList(ctx).Result()
			if err != nil || !strings.Contains(list, "lib-name=go-redis(") {
				t.Fatalf("CLIENT LIST: %q, %v", list, err)
			}
			if id, err := rdb.ClientID(ctx).Result(); err != nil || id != info.ID {
				t.Fatalf("CLIENT ID %d, %v; CLIENT INFO says %d", id, err, info.ID)
			}

			// SELECT 0 works and SELECT 1 is refused (go-redis sends
			// SELECT on connect only for a DB above 0).
			conn := rdb.Conn()
			defer conn.Close()
			if got, err := conn.Select(ctx, 0).Result(); err != nil || got != "OK" {
				t.Fatalf("SELECT 0: %q, %v", got, err)
			}
			if err := conn.Select(ctx, 1).Err(); err == nil || err.Error() != "ERR DB index is out of range" {
				t.Fatalf("SELECT 1: %v", err)
			}

			// Keys: the TTL is the time to a full bucket.
			if d, err := rdb.PTTL(ctx, "user123").Result(); err != nil || d != 32*time.Second {
				t.Fatalf("PTTL: %v, %v", d, err)
			}
			if n, err := rdb.Del(ctx, "user123", "nokey").Result(); err != nil || n != 1 {
				t.Fatalf("DEL: %d, %v", n, err)
			}
			if d, err := rdb.TTL(ctx, "user123").Result(); err != nil || d != -2 {
				t.Fatalf("TTL of a deleted key: %v, %v", d, err)
			}

			// Errors, as go-redis reports them.
			if err := rdb.Get(ctx, "k").Err(); err == nil || err.Error() != "ERR unknown command 'get', with args beginning with: 'k' " {
				t.Fatalf("GET: %v", err)
			}
			if err := rdb.Do(ctx, "CL.THROTTLE", "k").Err(); err == nil || !strings.HasPrefix(err.Error(), "Cell error: Store error: Usage:") {
				t.Fatalf("CL.THROTTLE k: %v", err)
			}

			// Server commands whose replies go-redis parses.
			cfg, err := rdb.ConfigGet(ctx, "*").Result()
			if err != nil || cfg["maxclients"] != "10000" || cfg["databases"] != "1" {
				t.Fatalf("CONFIG GET *: %v, %v", cfg, err)
			}
			cmdInfo, err := rdb.Command(ctx).Result()
			if err != nil || cmdInfo["cl.throttle"] == nil || cmdInfo["cl.throttle"].FirstKeyPos != 1 || cmdInfo["cl.throttle"].Arity != -1 {
				t.Fatalf("COMMAND: %v, %v", cmdInfo["cl.throttle"], err)
			}
			stats, err := rdb.Info(ctx, "stats").Result()
			if err != nil || field(stats, "throttle_allowed") != "16" || field(stats, "throttle_limited") != "5" {
				t.Fatalf("INFO stats: %q, %v", stats, err)
			}
			if n, err := rdb.Do(ctx, "COMMAND", "COUNT").Int(); err != nil || n != 28 {
				t.Fatalf("COMMAND COUNT: %d, %v", n, err)
			}

			// Many goroutines share the pool.
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 50 {
						r, err := rdb.Do(ctx, "CL.THROTTLE", fmt.Sprintf("g%d:%d", g, i), 0, 1, 60).Int64Slice()
						if err != nil || !slices.Equal(r, []int64{0, 1, 0, -1, 60}) {
							errs <- fmt.Errorf("goroutine %d, request %d: %v, %v", g, i, r, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

func TestGoRedisAuth(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ts := startServer(t, respserver.Config{Password: "sekret", Users: map[string]string{"alice": "wonder"}})
	for _, proto := range []int{2, 3} {
		for _, tc := range []struct {
			name     string
			opt      redis.Options
			wantErr  string
			wantUser string
		}{
			{"Password", redis.Options{Password: "sekret"}, "", "default"},
			{"User", redis.Options{Username: "alice", Password: "wonder", ClientName: "alice-app"}, "", "alice"},
			{"DefaultUser", redis.Options{Username: "default", Password: "sekret"}, "", "default"},
			{"WrongPassword", redis.Options{Password: "wrong"}, "WRONGPASS invalid username-password pair or user is disabled.", ""},
			{"WrongUser", redis.Options{Username: "alice", Password: "sekret"}, "WRONGPASS invalid username-password pair or user is disabled.", ""},
			{"NoPassword", redis.Options{}, "NOAUTH Authentication required.", ""},
			// go-redis sends SELECT on connect for a DB above 0.
			{"DB1", redis.Options{Password: "sekret", DB: 1}, "ERR DB index is out of range", ""},
		} {
			t.Run(fmt.Sprintf("RESP%d/%s", proto, tc.name), func(t *testing.T) {
				tc.opt.Protocol = proto
				rdb := ts.goRedis(t, tc.opt)
				r, err := rdb.Do(ctx, "CL.THROTTLE", "auth:"+tc.name, 0, 1, 60).Int64Slice()
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("err = %v, want %q", err, tc.wantErr)
					}
					return
				}
				if err != nil || len(r) != 5 {
					t.Fatalf("CL.THROTTLE: %v, %v", r, err)
				}
				info, err := rdb.ClientInfo(ctx).Result()
				if err != nil || info.User != tc.wantUser || info.Resp != proto || info.Name != tc.opt.ClientName {
					t.Fatalf("CLIENT INFO: %+v, %v", info, err)
				}
			})
		}
	}
}

// ruedis returns a rueidis client of ts, closed when the test ends.
func (ts *testServer) rueidis(t *testing.T, opt rueidis.ClientOption) (rueidis.Client, error) {
	opt.InitAddress = []string{ts.addr}
	opt.Dialer.Timeout = waitFor
	c, err := rueidis.NewClient(opt)
	if err == nil {
		t.Cleanup(c.Close)
	}
	return c, err
}

// TestRueidis uses rueidis with its default options: it speaks RESP3 only
// (HELLO 3), asks for client-side caching (CLIENT TRACKING ON OPTIN) and
// sends CLIENT SETINFO; with one address it first tries CLUSTER SLOTS.
func TestRueidis(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ts := startServer(t, respserver.Config{})
	c, err := ts.rueidis(t, rueidis.ClientOption{ClientName: "rd"})
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	throttle := func(key string, args ...string) rueidis.Completed {
		return c.B().Arbitrary("CL.THROTTLE").Keys(key).Args(args...).Build()
	}
	if got, err := c.Do(ctx, c.B().Ping().Build()).ToString(); err != nil || got != "PONG" {
		t.Fatalf("PING: %q, %v", got, err)
	}
	if got, err := c.Do(ctx, throttle("user123", "15", "30", "60")).AsIntSlice(); err != nil || !slices.Equal(got, []int64{0, 16, 15, -1, 2}) {
		t.Fatalf("CL.THROTTLE: %v, %v", got, err)
	}
	// An explicit pipeline.
	var batch rueidis.Commands
	for range 20 {
		batch = append(batch, throttle("user123", "15", "30", "60"))
	}
	batch = append(batch, throttle("user123", "15", "x", "60"), c.B().Exists().Key("user123", "nokey").Build())
	res := c.DoMulti(ctx, batch...)
	for i := range 20 {
		want := []int64{0, 16, int64(14 - i), -1, int64(4 + 2*i)}
		if i >= 15 {
			want = []int64{1, 16, 0, 2, 32}
		}
		if got, err := res[i].AsIntSlice(); err != nil || !slices.Equal(got, want) {
			t.Fatalf("pipelined CL.THROTTLE %d: %v, %v; want %v", i, got, err, want)
		}
	}
	if err := res[20].Error(); err == nil || err.Error() != "Cell error: Store error: Couldn't parse as integer: x" {
		t.Fatalf("pipelined parse error: %v", err)
	}
	if n, err := res[21].AsInt64(); err != nil || n != 1 {
		t.Fatalf("pipelined EXISTS: %d, %v", n, err)
	}
	if got, err := c.Do(ctx, c.B().ClientGetname().Build()).ToString(); err != nil || got != "rd" {
		t.Fatalf("CLIENT GETNAME: %q, %v", got, err)
	}
	info, err := c.Do(ctx, c.B().ClientInfo().Build()).ToString()
	if err != nil || !strings.Contains(info, " lib-name=rueidis ") || !strings.Contains(info, " resp=3") || !strings.Contains(info, " name=rd ") {
		t.Fatalf("CLIENT INFO: %q, %v", info, err)
	}
	if got, err := c.Do(ctx, c.B().Pttl().Key("user123").Build()).AsInt64(); err != nil || got != 32000 {
		t.Fatalf("PTTL: %d, %v", got, err)
	}
	if got, err := c.Do(ctx, c.B().Del().Key("user123").Build()).AsInt64(); err != nil || got != 1 {
		t.Fatalf("DEL: %d, %v", got, err)
	}
	if err := c.Do(ctx, c.B().Get().Key("k").Build()).Error(); err == nil || err.Error() != "unknown command 'GET', with args beginning with: 'k' " { // rueidis drops the ERR
		t.Fatalf("GET: %v", err)
	}
	cfg, err := c.Do(ctx, c.B().ConfigGet().Parameter("databases").Build()).AsStrMap()
	if err != nil || cfg["databases"] != "1" {
		t.Fatalf("CONFIG GET: %v, %v", cfg, err)
	}
	// Auto-pipelining: concurrent requests share the connection.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				r, err := c.Do(ctx, throttle(fmt.Sprintf("g%d:%d", g, i), "0", "1", "60")).AsIntSlice()
				if err != nil || !slices.Equal(r, []int64{0, 1, 0, -1, 60}) {
					errs <- fmt.Errorf("goroutine %d, request %d: %v, %v", g, i, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := ts.srv.Stats(); st.Allowed != 16+400 || st.Limited != 5 {
		t.Errorf("Stats: %+v", st)
	}
}

func TestRueidisOptions(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ts := startServer(t, respserver.Config{Password: "sekret", Users: map[string]string{"alice": "wonder"}})
	for _, tc := range []struct {
		name     string
		opt      rueidis.ClientOption
		wantErr  string
		wantUser string
	}{
		{"Password", rueidis.ClientOption{Password: "sekret"}, "", "default"},
		{"User", rueidis.ClientOption{Username: "alice", Password: "wonder"}, "", "alice"},
		{"NoCache", rueidis.ClientOption{Username: "alice", Password: "wonder", DisableCache: true, ForceSingleClient: true}, "", "alice"},
		{"WrongPassword", rueidis.ClientOption{Password: "wrong"}, "WRONGPASS invalid username-password pair or user is disabled.", ""},
		{"NoPassword", rueidis.ClientOption{}, "NOAUTH HELLO must be called with the client already authenticated", ""},
		{"SelectDB1", rueidis.ClientOption{Password: "sekret", SelectDB: 1}, "DB index is out of range", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ts.rueidis(t, tc.opt)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("NewClient: err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewClient: %v", err)
			}
			if r, err := c.Do(ctx, c.B().Arbitrary("CL.THROTTLE").Keys("o:"+tc.name).Args("0", "1", "60").Build()).AsIntSlice(); err != nil || len(r) != 5 {
				t.Fatalf("CL.THROTTLE: %v, %v", r, err)
			}
			info, err := c.Do(ctx, c.B().ClientInfo().Build()).ToString()
			if err != nil || !strings.Contains(info, " user="+tc.wantUser+" ") {
				t.Fatalf("CLIENT INFO: %q, %v", info, err)
			}
			// Client-side caching is refused outright (CLIENT CACHING YES
			// fails), so nothing is cached that could go stale. Without
			// a cache, DoCache is a plain Do.
			pttl, err := c.DoCache(ctx, c.B().Pttl().Key("o:"+tc.name).Cache(), time.Minute).AsInt64()
			if tc.opt.DisableCache {
				if err != nil || pttl != 60000 {
					t.Fatalf("DoCache PTTL without a cache: %d, %v", pttl, err)
				}
			} else if err == nil {
				// rueidis sends CLIENT CACHING YES, MULTI, PTTL, PTTL,
				// EXEC and reports the refusal as an aborted EXEC.
				t.Fatalf("DoCache PTTL: %d; want client-side caching refused", pttl)
			}
		})
	}
}
