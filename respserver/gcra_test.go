package respserver_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/respserver"
	"github.com/funnelrl/funnel/storetest"
)

// gcraWire is the wire reply of a GCRA call of the vectors.
func gcraWire(c storetest.GCRACall) string {
	if c.WantErr != "" {
		return "-" + c.WantErr + "\r\n"
	}
	return ints(c.Want[:]...)
}

// runGCRAWire runs the GCRA command's worked examples (storetest's
// GCRAVectors) on the wire, in RESP2 and RESP3, against servers that start
// builds, and every argument error.
func runGCRAWire(t *testing.T, start func(t *testing.T) *testServer) {
	for _, proto := range []string{"2", "3"} {
		for _, v := range storetest.GCRAVectors {
			t.Run(v.Name+"/RESP"+proto, func(t *testing.T) {
				t.Parallel()
				ts := start(t)
				c := ts.dial(t)
				if proto == "3" {
					c.do("HELLO", "3")
				}
				for i, call := range v.Calls {
					ts.clock.Set(storetest.GCRAEpoch + int64(call.At))
					if got, want := c.do(call.Args()...), gcraWire(call); got != want {
						t.Fatalf("call %d at +%v, %q:\n got %q\nwant %q", i, call.At, call.Args(), got, want)
					}
				}
			})
		}
	}
	t.Run("KeyCommands", func(t *testing.T) {
		t.Parallel()
		ts := start(t)
		c := ts.dial(t)
		ts.clock.Set(storetest.GCRAEpoch)
		c.do("GCRA", "k", "5", "10", "60")
		ts.clock.Set(storetest.GCRAEpoch + int64(time.Second+500*time.Microsecond))
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"EXISTS", "k"}, ":1\r\n"},
			{[]string{"PTTL", "k"}, ":5000\r\n"}, // Redis's: the TAT's ms (t0+6000) - now's (t0+1000)
			{[]string{"TTL", "k"}, ":5\r\n"},
			{[]string{"DEL", "k"}, ":1\r\n"},
			{[]string{"EXISTS", "k"}, ":0\r\n"},
			{[]string{"PTTL", "k"}, ":-2\r\n"},
		} {
			if got := c.do(tc.args...); got != tc.want {
				t.Errorf("%q: %q, want %q", tc.args, got, tc.want)
			}
		}
	})
	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		ts := start(t)
		c := ts.dial(t)
		for _, tc := range gcraErrorCases {
			if got, want := c.do(tc.args...), "-"+tc.want+"\r\n"; got != want {
				t.Errorf("%q:\n got %q\nwant %q", tc.args, got, want)
			}
		}
		// Nothing was stored by the errors: the key is fresh.
		if got, want := c.do("GCRA", "k", "5", "10", "60"), ints(0, 6, 5, -1, 6); got != want {
			t.Errorf("after the errors: %q, want %q", got, want)
		}
	})
}

// gcraErrorCases are GCRA's argument errors, each as Redis words it, in the
// order the command checks them.
var gcraErrorCases = []struct {
	args []string
	want string
}{
	{[]string{"GCRA", "k", "5", "10"}, "ERR wrong number of arguments for 'gcra' command"},
	{[]string{"gcra", "k", "5", "10", "60", "TOKENS", "1", "x"}, "ERR wrong number of arguments for 'gcra' command"},
	{[]string{"GCRA", "k", "x", "10", "60", "TOKENS", "1", "x"}, "ERR wrong number of arguments for 'gcra' command"},
	{[]string{"GCRA", "k", "x", "0", "0"}, "ERR value is not an integer or out of range"},
	{[]string{"GCRA", "k", "+5", "10", "60"}, "ERR value is not an integer or out of range"},
	{[]string{"GCRA", "k", "05", "10", "60"}, "ERR value is not an integer or out of range"},
	{[]string{"GCRA", "k", "9223372036854775808", "10", "60"}, "ERR value is not an integer or out of range"},
	{[]string{"GCRA", "k", "-1", "0", "0"}, "ERR value is out of range, must be positive"},
	{[]string{"GCRA", "k", "5", "1.5", "60"}, "ERR value is not an integer or out of range"},
	{[]string{"GCRA", "k", "5", "0", "x"}, "ERR value is out of range, value must between 1 and 9223372036854775807"},
	{[]string{"GCRA", "k", "5", "10", "x"}, "ERR value is not a valid float"},
	{[]string{"GCRA", "k", "5", "10", "0x10"}, "ERR value is not a valid float"},
	{[]string{"GCRA", "k", "5", "10", " 60"}, "ERR value is not a valid float"},
	{[]string{"GCRA", "k", "5", "10", "nan"}, "ERR value is not a valid float"},
	{[]string{"GCRA", "k", "5", "10", "0"}, "ERR period must be > 0 and < 1e12"},
	{[]string{"GCRA", "k", "5", "10", "-1"}, "ERR period must be > 0 and < 1e12"},
	{[]string{"GCRA", "k", "5", "10", "1e12"}, "ERR period must be > 0 and < 1e12"},
	{[]string{"GCRA", "k", "5", "10", "inf"}, "ERR period must be > 0 and < 1e12"},
	{[]string{"GCRA", "k", "5", "10", "1e400"}, "ERR period must be > 0 and < 1e12"},
	{[]string{"GCRA", "k", "5", "10", "1e-400"}, "ERR period must be > 0 and < 1e12"},
	{[]string{"GCRA", "k", "5", "10", "60", "COUNT", "x"}, "ERR syntax error"},
	{[]string{"GCRA", "k", "5", "10", "60", "NUM_REQUESTS", "2"}, "ERR syntax error"},
	{[]string{"GCRA", "k", "5", "10", "60", "TOKENS"}, "ERR Missing TOKENS value"},
	{[]string{"GCRA", "k", "5", "10", "60", "FOO"}, "ERR syntax error"},
	{[]string{"GCRA", "k", "5", "10", "60", "tokens", "0"}, "ERR value is out of range, value must between 1 and 9223372036854775807"},
	{[]string{"GCRA", "k", "5", "10", "60", "Tokens", "-2"}, "ERR value is out of range, value must between 1 and 9223372036854775807"},
	{[]string{"GCRA", "k", "5", "10", "60", "TOKENS", "1.0"}, "ERR value is not an integer or out of range"},
	{[]string{"GCRA", "k", "9223372036854775807", "1", "999999999999"},
		"ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and max_burst would cause an overflow"},
	{[]string{"GCRA", "k", "0", "1", "1", "TOKENS", "9223372036854775807"},
		"ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and TOKENS would cause an overflow"},
}

func TestGCRA(t *testing.T) {
	t.Parallel()
	runGCRAWire(t, func(t *testing.T) *testServer { return startServer(t, respserver.Config{}) })
}

func TestGCRARedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	runGCRAWire(t, func(t *testing.T) *testServer { return startRedisServer(t, srv, respserver.Config{}) })
}

// A key of the funnel (CL.THROTTLE) and one of GCRA are not the same state
// in memory: either command on the other's key is WRONGTYPE.
func TestGCRAWrongType(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	const wrongType = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
	c.do("CL.THROTTLE", "f", "5", "10", "60")
	c.do("GCRA", "g", "5", "10", "60")
	if got := c.do("GCRA", "f", "5", "10", "60"); got != wrongType {
		t.Errorf("GCRA on a funnel: %q", got)
	}
	if got := c.do("CL.THROTTLE", "g", "5", "10", "60"); got != wrongType {
		t.Errorf("CL.THROTTLE on a GCRA key: %q", got)
	}
	if got := c.do("EXISTS", "g"); got != ":1\r\n" {
		t.Errorf("EXISTS: %q", got)
	}
	if got := c.do("DEL", "g"); got != ":1\r\n" {
		t.Errorf("DEL: %q", got)
	}
	if got := c.do("CL.THROTTLE", "g", "5", "10", "60"); got != ints(0, 6, 5, -1, 6) {
		t.Errorf("CL.THROTTLE on a deleted GCRA key: %q", got)
	}
}

// rueidis's own builder of GCRA (B().Gcra()), as a client of Redis 8.8
// sends it.
func TestGCRARueidisBuilder(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ts := startServer(t, respserver.Config{})
	ts.clock.Set(storetest.GCRAEpoch)
	c, err := ts.rueidis(t, rueidis.ClientOption{})
	if err != nil {
		t.Fatal(err)
	}
	gcra := func(key string, tokens int64) rueidis.Completed {
		b := c.B().Gcra().Key(key).MaxBurst(5).TokensPerPeriod(10).Period(60)
		if tokens > 0 {
			return b.Count(tokens).Build()
		}
		return b.Build()
	}
	for i, tc := range []struct {
		tokens int64
		want   []int64
	}{
		{0, []int64{0, 6, 5, -1, 6}},
		{0, []int64{0, 6, 4, -1, 12}},
		{4, []int64{0, 6, 0, -1, 36}},
		{1, []int64{1, 6, 0, 6, 36}},
		{7, []int64{1, 6, 0, -1, 36}},
	} {
		if got, err := c.Do(ctx, gcra("user123", tc.tokens)).AsIntSlice(); err != nil || !slices.Equal(got, tc.want) {
			t.Fatalf("call %d: %v, %v; want %v", i, got, err, tc.want)
		}
	}
	// A fractional period, as the builder formats it.
	b := c.B().Gcra().Key("frac").MaxBurst(1).TokensPerPeriod(1).Period(0.25).Build()
	if got, err := c.Do(ctx, b).AsIntSlice(); err != nil || !slices.Equal(got, []int64{0, 2, 1, -1, 1}) {
		t.Fatalf("period 0.25: %v, %v", got, err)
	}
	err = c.Do(ctx, c.B().Gcra().Key("k").MaxBurst(-1).TokensPerPeriod(1).Period(1).Build()).Error()
	if err == nil || err.Error() != "value is out of range, must be positive" { // rueidis drops the ERR
		t.Fatalf("max_burst -1: %v", err)
	}
}

// go-redis has no GCRA method; Do sends it, and a pipeline of them.
func TestGCRAGoRedis(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ts := startServer(t, respserver.Config{})
	ts.clock.Set(storetest.GCRAEpoch)
	rdb := redis.NewClient(&redis.Options{Addr: ts.addr})
	defer rdb.Close()
	pipe := rdb.Pipeline()
	var cmds []*redis.Cmd
	for range 8 {
		cmds = append(cmds, pipe.Do(ctx, "GCRA", "user123", 5, 10, 60))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range cmds {
		want := []int64{0, 6, int64(5 - i), -1, int64(6 * (i + 1))}
		if i >= 6 {
			want = []int64{1, 6, 0, 6, 36}
		}
		if got, err := cmd.Int64Slice(); err != nil || !slices.Equal(got, want) {
			t.Fatalf("call %d: %v, %v; want %v", i, got, err, want)
		}
	}
	if err := rdb.Do(ctx, "GCRA", "k", 1, 1, "x").Err(); err == nil || err.Error() != "ERR value is not a valid float" {
		t.Fatalf("a bad period: %v", err)
	}
}

// COMMAND DOCS and COMMAND INFO describe GCRA as Redis's gcra.json does.
func TestGCRACommandDocs(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	docs := c.do("COMMAND", "DOCS", "gcra")
	for _, want := range []string{"Rate limit via GCRA (Generic Cell Rate Algorithm).", "8.8.0", "rate_limit", "max-burst", "tokens-per-period", "$6\r\ndouble\r\n", "$6\r\nTOKENS\r\n", "optional"} {
		if !strings.Contains(docs, want) {
			t.Errorf("COMMAND DOCS gcra lacks %q: %q", want, docs)
		}
	}
	info := c.do("COMMAND", "INFO", "GCRA")
	if !strings.HasPrefix(info, "*1\r\n*10\r\n$4\r\ngcra\r\n:-5\r\n*3\r\n+write\r\n+denyoom\r\n+fast\r\n:1\r\n:1\r\n:1\r\n") {
		t.Errorf("COMMAND INFO gcra: %q", info)
	}
}

// redis-cli, as a user types it: its raw and formatted output.
func TestGCRARedisCLI(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	ts.clock.Set(storetest.GCRAEpoch)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"GCRA", "user123", "5", "10", "60"}, "0\n6\n5\n-1\n6\n"},
		{[]string{"--no-raw", "gcra", "user123", "5", "10", "60", "TOKENS", "2"},
			"1) (integer) 0\n2) (integer) 6\n3) (integer) 3\n4) (integer) -1\n5) (integer) 18\n"},
		{[]string{"--no-raw", "GCRA", "user123", "5", "10", "60", "TOKENS", "4"},
			"1) (integer) 1\n2) (integer) 6\n3) (integer) 3\n4) (integer) 6\n5) (integer) 18\n"},
		{[]string{"--no-raw", "GCRA", "user123", "5", "10", "sixty"}, "(error) ERR value is not a valid float\n"},
	} {
		if got, code := ts.run(t, "redis-cli", "", tc.args...); got != tc.want || code != 0 {
			t.Errorf("redis-cli %q: exit %d\n%s\nwant\n%s", tc.args, code, got, tc.want)
		}
	}
}

// With Redis down, GCRA answers the store's fallback as CL.THROTTLE does:
// TRYAGAIN by default, a refusal with a retry after of one second under
// FailClosedRefuse, allowed with the whole limit remaining when failing
// open, and a reset after of -1 (failing open, it was a fresh key's reply;
// refusing, a reset after of 0).
func TestGCRAFallbacks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cfg      respserver.Config
		failOpen bool
		want     string
	}{
		{"FailClosedError", respserver.Config{}, false, storeDown},
		{"FailClosedRefuse", respserver.Config{FailClosed: respserver.FailClosedRefuse}, false, ints(1, 6, 0, 1, -1)},
		{"FailOpen", respserver.Config{}, true, ints(0, 6, 6, -1, -1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			tc.cfg.Logger = quietLogger()
			ts := startRedisServerOpts(t, srv, tc.cfg, redisstore.Options{Timeout: 5 * time.Second, Fail: failMode(tc.failOpen)})
			ts.clock.Set(storetest.GCRAEpoch)
			c := ts.dial(t)
			if got := c.do("GCRA", "k", "5", "10", "60"); got != ints(0, 6, 5, -1, 6) {
				t.Fatalf("with Redis up: %q", got)
			}
			srv.Stop()
			if got := c.do("GCRA", "k", "5", "10", "60"); got != tc.want {
				t.Errorf("GCRA: %q, want %q", got, tc.want)
			}
			if st := ts.srv.Stats(); tc.failOpen && st.FailOpen != 1 || !tc.failOpen && st.FailClosed != 1 {
				t.Errorf("Stats: %+v", st)
			}
		})
	}
}
