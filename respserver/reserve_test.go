package respserver_test

import (
	"context"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/respserver"
	"github.com/funnelrl/funnel/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// reservationID matches the reply of an admitted FUNNEL.RESERVE: seven
// integers, then the id as a bulk string.
var reservationID = regexp.MustCompile(`^\*8\r\n(?::-?\d+\r\n){7}\$(\d+)\r\n([^\r\n]+)\r\n$`)

// reserve sends FUNNEL.RESERVE args, checks that its reply is want (its
// first seven elements) followed by an id, and returns the id.
func reserve(t *testing.T, c *client, want string, args ...string) string {
	t.Helper()
	got := c.do(append([]string{"FUNNEL.RESERVE"}, args...)...)
	m := reservationID.FindStringSubmatch(got)
	if m == nil || "*7\r\n"+strings.TrimPrefix(got[:len(got)-len("$"+m[1]+"\r\n"+m[2]+"\r\n")], "*8\r\n") != want {
		t.Fatalf("FUNNEL.RESERVE %q:\n got %q\nwant %q and an id", args, got, want)
	}
	return m[2]
}

// withAgain is the reply of FUNNEL.SETTLE: the seven integers of want, then
// again.
func withAgain(want string, again int64) string {
	return "*8\r\n" + strings.TrimPrefix(want, "*7\r\n") + integer(again)
}

// A reservation settled below and above its estimate, twice, and an
// unknown, another key's and an expired one, on a funnel of 10 a second
// (T = 100 ms, 10 at once).
func TestFunnelReserveAndSettle(t *testing.T) {
	t.Parallel()
	runReserveAndSettle(t, startServer(t, respserver.Config{}))
}

func runReserveAndSettle(t *testing.T, ts *testServer) {
	t.Helper()
	c := ts.dial(t)
	lim := []string{"gcra", "10", "1000", "BURST", "9"}
	args := func(key string, extra ...string) []string { return append(append([]string{key}, lim...), extra...) }

	// 5 of 10 reserved; settled at 2, 3 are given back.
	id := reserve(t, c, ints(1, 10, 5, -1, 500, 0, 0), args("k", "QUANTITY", "5")...)
	if got, want := c.do("FUNNEL.SETTLE", "k", id, "2"), withAgain(ints(1, 10, 8, -1, 200, 0, 0), 0); got != want {
		t.Fatalf("settle at 2:\n got %q\nwant %q", got, want)
	}
	// Settled again, at any amount: nothing changes, and again is 1.
	for _, actual := range []string{"2", "9"} {
		if got, want := c.do("FUNNEL.SETTLE", "k", id, actual), withAgain(ints(1, 10, 8, -1, 200, 0, 0), 1); got != want {
			t.Fatalf("settle again at %s:\n got %q\nwant %q", actual, got, want)
		}
	}
	// 5 more reserved, settled at 20: 15 units of debt, as FUNNEL.CHARGE
	// would record them. The key is over its limit until its TAT (2.2 s)
	// is within the tolerance (0.9 s) of a unit's interval: 1.2 s.
	id = reserve(t, c, ints(1, 10, 3, -1, 700, 0, 0), args("k", "QUANTITY", "5")...)
	if got, want := c.do("FUNNEL.SETTLE", "k", id, "20"), withAgain(ints(0, 10, 0, 1200, 2200, 0, 0), 0); got != want {
		t.Fatalf("settle at 20:\n got %q\nwant %q", got, want)
	}
	if got, want := c.do(append([]string{"FUNNEL.ALLOW"}, args("k", "PEEK")...)...), ints(0, 10, 0, 1300, 2200, 0, 0); got != want {
		t.Fatalf("a probe after the debt:\n got %q\nwant %q", got, want)
	}
	// Refused: no reservation, a nil id.
	if got, want := c.do(append([]string{"FUNNEL.RESERVE"}, args("k", "QUANTITY", "1")...)...), "*8\r\n"+strings.TrimPrefix(ints(0, 10, 0, 1300, 2200, 0, 0), "*7\r\n")+"$-1\r\n"; got != want {
		t.Fatalf("a refused reserve:\n got %q\nwant %q", got, want)
	}

	// Unknown ids, another key's, an expired one: an error that changes
	// nothing.
	ts.at(10 * time.Second)
	id = reserve(t, c, ints(1, 10, 9, -1, 100, 0, 0), args("j", "QUANTITY", "1", "TTL", "1000")...)
	for _, s := range [][]string{{"j", "nosuch", "1"}, {"k", id, "1"}, {"j", "", "1"}, {"j", strings.Repeat("x", 300), "1"}} {
		if got := c.do("FUNNEL.SETTLE", s[0], s[1], s[2]); !strings.HasPrefix(got, "-ERR unknown or expired reservation") {
			t.Errorf("FUNNEL.SETTLE %q: %q, want the unknown reservation's error", s, got)
		}
	}
	ts.at(12 * time.Second)
	if got := c.do("FUNNEL.SETTLE", "j", id, "1"); !strings.HasPrefix(got, "-ERR unknown or expired reservation") {
		t.Errorf("FUNNEL.SETTLE of an expired reservation: %q", got)
	}
}

// The reservation's limit is the one Settle applies: the reply of a settle
// is what FUNNEL.CHARGE (above the estimate) or FUNNEL.REFUND and a probe
// (below it) leave on a twin key that took the estimate with FUNNEL.ALLOW,
// on every algorithm. The settle comes at the reserve's instant, where each
// algorithm's give-back is a refund (the store's conformance cases hold the
// later instants).
func TestFunnelSettleLikeChargeAndRefund(t *testing.T) {
	t.Parallel()
	runSettleLikeChargeAndRefund(t, startServer(t, respserver.Config{}))
}

func runSettleLikeChargeAndRefund(t *testing.T, ts *testServer) {
	t.Helper()
	c := ts.dial(t)
	for i, tc := range []struct {
		limit            []string
		estimate, actual string
	}{
		{[]string{"gcra", "10", "1000"}, "4", "9"},
		{[]string{"gcra", "10", "1000", "BURST", "2"}, "3", "1"},
		{[]string{"gcra", "100", "60000"}, "100", "0"},
		{[]string{"gcra", "100", "60000"}, "50", "50"},
		{[]string{"leaky_bucket", "10", "1000", "BURST", "5"}, "3", "1"},
		{[]string{"leaky_bucket", "10", "1000", "BURST", "5", "NODELAY"}, "3", "8"},
		{[]string{"fixed_window", "10", "1000"}, "6", "2"},
		{[]string{"fixed_window", "10", "1000", "BAN", "5000"}, "6", "12"},
		{[]string{"sliding_window", "10", "1000"}, "6", "1"},
		{[]string{"sliding_window", "10", "1000"}, "6", "30"},
		{[]string{"sliding_log", "10", "1000"}, "6", "4"},
		{[]string{"sliding_log", "10", "1000"}, "6", "11"},
	} {
		k, twin := "r"+string(rune('a'+i)), "t"+string(rune('a'+i))
		on := func(cmd, key string, extra ...string) []string {
			return append(append([]string{cmd, key}, tc.limit...), extra...)
		}
		want := c.do(on("FUNNEL.ALLOW", twin, "QUANTITY", tc.estimate)...)
		id := reserve(t, c, want, on("FUNNEL.RESERVE", k, "QUANTITY", tc.estimate)[1:]...)
		var after string
		switch e, a := atoi(t, tc.estimate), atoi(t, tc.actual); {
		case a > e:
			after = c.do(on("FUNNEL.CHARGE", twin, "QUANTITY", itoa(a-e))...)
		case a < e:
			c.do(on("FUNNEL.REFUND", twin, "QUANTITY", itoa(e-a))...)
			after = c.do(on("FUNNEL.CHARGE", twin, "QUANTITY", "0")...)
		default:
			after = c.do(on("FUNNEL.CHARGE", twin, "QUANTITY", "0")...)
		}
		if got := c.do("FUNNEL.SETTLE", k, id, tc.actual); got != withAgain(after, 0) {
			t.Errorf("%q estimate %s, actual %s:\n got %q\nwant %q", tc.limit, tc.estimate, tc.actual, got, withAgain(after, 0))
		}
	}
}

// Bad input to FUNNEL.RESERVE and FUNNEL.SETTLE: a clear error that changes
// nothing, and a reservation whose settle failed can still be settled.
func TestFunnelReserveBadInput(t *testing.T) {
	t.Parallel()
	runReserveBadInput(t, startServer(t, respserver.Config{}))
}

func runReserveBadInput(t *testing.T, ts *testServer) {
	t.Helper()
	c := ts.dial(t)
	r := func(extra ...string) []string {
		return append([]string{"FUNNEL.RESERVE", "k", "gcra", "10", "1000"}, extra...)
	}
	needQ := errr("ERR FUNNEL.RESERVE needs QUANTITY n, the estimate reserved: at least 1")
	badTTL := errr("ERR ttl must be whole milliseconds from 1 to 86400000")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{r(), errr("ERR wrong number of arguments for 'funnel.reserve' command")},
		{r("QUANTITY"), errr("ERR wrong number of arguments for 'funnel.reserve' command")},
		{r("BURST", "1"), needQ},
		{r("QUANTITY", "0"), needQ},
		{r("QUANTITY", "-1"), errr("ERR quantity must not be negative")},
		{r("QUANTITY", "x"), errr("ERR quantity is not an integer or out of range")},
		{r("QUANTITY", "18446744073709551616"), errr("ERR quantity is not an integer or out of range")},
		{r("QUANTITY", "1", "TTL"), errr("ERR syntax error")},
		{r("QUANTITY", "1", "TTL", "0"), badTTL},
		{r("QUANTITY", "1", "TTL", "-1"), badTTL},
		{r("QUANTITY", "1", "TTL", "1.5"), badTTL},
		{r("QUANTITY", "1", "TTL", "86400001"), badTTL},
		{r("QUANTITY", "1", "TTL", "9223372036854775808"), badTTL},
		{r("QUANTITY", "1", "PEEK"), errr("ERR PEEK is an option of FUNNEL.ALLOW only")},
		{r("QUANTITY", "1", "NOPE", "1"), errr("ERR syntax error")},
		{[]string{"FUNNEL.RESERVE", "c", "concurrency", "3", "1000", "QUANTITY", "1"},
			errr("ERR unknown algorithm 'concurrency' (gcra, leaky_bucket, fixed_window, sliding_window, sliding_log)")},
		{[]string{"FUNNEL.RESERVE", "g", "gcra", "3", "1000", "QUANTITY", "9223372036854775807"},
			errr("ERR invalid quantity 9223372036854775807: gcra: value overflows int64 nanoseconds")},
		{[]string{"FUNNEL.CHARGE", "k", "gcra", "10", "1000", "QUANTITY", "1", "TTL", "5"}, errr("ERR TTL is an option of FUNNEL.RESERVE only")},
		{[]string{"FUNNEL.ALLOW", "k", "gcra", "10", "1000", "TTL", "5"}, errr("ERR TTL is an option of FUNNEL.RESERVE only")},
		{[]string{"FUNNEL.SETTLE", "k", "id"}, errr("ERR wrong number of arguments for 'funnel.settle' command")},
		{[]string{"FUNNEL.SETTLE", "k", "id", "1", "2"}, errr("ERR wrong number of arguments for 'funnel.settle' command")},
		{[]string{"FUNNEL.SETTLE", "k", "id", "-1"}, errr("ERR actual must not be negative")},
		{[]string{"FUNNEL.SETTLE", "k", "id", "x"}, errr("ERR actual is not an integer or out of range")},
		{[]string{"FUNNEL.SETTLE", "k", "id", "18446744073709551616"}, errr("ERR actual is not an integer or out of range")},
	} {
		if got := c.do(tc.args...); got != tc.want {
			t.Errorf("%q:\n got %q\nwant %q", tc.args, got, tc.want)
		}
	}
	// Nothing was taken.
	if got, want := c.do("FUNNEL.ALLOW", "k", "gcra", "10", "1000", "PEEK"), ints(1, 10, 10, -1, 0, 0, 0); got != want {
		t.Fatalf("the key after bad input: %q, want %q", got, want)
	}
	// A TTL of 24 h is taken.
	reserve(t, c, ints(1, 10, 9, -1, 100, 0, 0), "k", "gcra", "10", "1000", "QUANTITY", "1", "TTL", "86400000")
	// An actual whose debt overflows is refused, and the reservation can
	// still be settled.
	id := reserve(t, c, ints(1, 10, 8, -1, 200, 0, 0), "k", "gcra", "10", "1000", "QUANTITY", "1")
	if got := c.do("FUNNEL.SETTLE", "k", id, "9223372036854775807"); !strings.HasPrefix(got, "-ERR invalid quantity") {
		t.Fatalf("an overflowing actual: %q", got)
	}
	if got, want := c.do("FUNNEL.SETTLE", "k", id, "1"), withAgain(ints(1, 10, 8, -1, 200, 0, 0), 0); got != want {
		t.Fatalf("the settle after a refused one:\n got %q\nwant %q", got, want)
	}
	// A key that holds another algorithm's state.
	c.do("FUNNEL.ALLOW", "w", "fixed_window", "3", "1000")
	if got := c.do("FUNNEL.RESERVE", "w", "gcra", "3", "1000", "QUANTITY", "1"); !strings.HasPrefix(got, "-WRONGTYPE") {
		t.Fatalf("a reserve on a key of another algorithm: %q", got)
	}
}

// downStore is a memory store whose reservations cannot be reached, as a
// Redis store's when Redis is down.
type downStore struct{ *memstore.Store }

func (downStore) Reserve(context.Context, string, funnel.Checked, int64, string, time.Duration) (funnel.Result, error) {
	return funnel.Result{}, funnel.ErrUnavailable
}

func (downStore) Settle(context.Context, string, string, int64) (funnel.Settlement, error) {
	return funnel.Settlement{}, funnel.ErrUnavailable
}

// A store that cannot reserve answers the fallback, with no id; one that
// cannot settle answers the fail-closed error, even under a fail-open
// policy: a settle is never a fallback.
func TestFunnelReserveStoreDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg     respserver.Config
		reserve string
	}{
		{respserver.Config{Fail: funnel.FailOpen}, "*8\r\n" + strings.TrimPrefix(ints(1, 10, 10, -1, -1, 0, 0), "*7\r\n") + "$-1\r\n"},
		{respserver.Config{Fail: funnel.FailClosed, FailClosed: respserver.FailClosedRefuse}, "*8\r\n" + strings.TrimPrefix(ints(0, 10, 0, 1000, -1, 0, 0), "*7\r\n") + "$-1\r\n"},
		{respserver.Config{Fail: funnel.FailClosed}, storeDown},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		clock := storetest.NewClock(storetest.Epoch)
		st := downStore{memstore.New(memstore.Options{Now: clock.Now})}
		t.Cleanup(func() { st.Close() })
		tc.cfg.EventLoops = testEventLoops
		c := serveStore(t, ln, tc.cfg, st, clock).dial(t)
		if got := c.do("FUNNEL.RESERVE", "k", "gcra", "10", "1000", "QUANTITY", "1"); got != tc.reserve {
			t.Errorf("%+v: FUNNEL.RESERVE with the store down:\n got %q\nwant %q", tc.cfg, got, tc.reserve)
		}
		if got := c.do("FUNNEL.SETTLE", "k", "id", "1"); got != storeDown {
			t.Errorf("%+v: FUNNEL.SETTLE with the store down: %q, want the fail-closed error", tc.cfg, got)
		}
	}
}

// go-redis sends FUNNEL.RESERVE and FUNNEL.SETTLE and reads their replies,
// in RESP2 and RESP3: an LLM call's max_tokens reserved, its real count
// settled.
func TestGoRedisReserve(t *testing.T) {
	t.Parallel()
	for _, proto := range []int{2, 3} {
		ctx := testContext(t)
		ts := startServer(t, respserver.Config{})
		rdb := ts.goRedis(t, redis.Options{Protocol: proto})
		got, err := rdb.Do(ctx, "FUNNEL.RESERVE", "tokens:alice", "sliding_window", 10000, 60000, "QUANTITY", 4096, "TTL", 120000).Slice()
		if err != nil || len(got) != 8 || got[0] != int64(1) || got[2] != int64(10000-4096) {
			t.Fatalf("RESP%d FUNNEL.RESERVE: %v, %v", proto, got, err)
		}
		id, ok := got[7].(string)
		if !ok || id == "" {
			t.Fatalf("RESP%d FUNNEL.RESERVE's id: %#v", proto, got[7])
		}
		st, err := rdb.Do(ctx, "FUNNEL.SETTLE", "tokens:alice", id, 1234).Int64Slice()
		if err != nil || len(st) != 8 || st[0] != 1 || st[7] != 0 {
			t.Fatalf("RESP%d FUNNEL.SETTLE: %v, %v", proto, st, err)
		}
		again, err := rdb.Do(ctx, "FUNNEL.SETTLE", "tokens:alice", id, 1234).Int64Slice()
		if err != nil || !slices.Equal(again[:7], st[:7]) || again[7] != 1 {
			t.Fatalf("RESP%d FUNNEL.SETTLE again: %v, %v (the first said %v)", proto, again, err, st)
		}
		refused, err := rdb.Do(ctx, "FUNNEL.RESERVE", "tokens:bob", "gcra", 10, 1000, "QUANTITY", 11).Slice()
		if err != nil || len(refused) != 8 || refused[0] != int64(0) || refused[7] != nil {
			t.Fatalf("RESP%d a refused FUNNEL.RESERVE: %#v, %v", proto, refused, err)
		}
		if err := rdb.Do(ctx, "FUNNEL.SETTLE", "tokens:alice", "nosuch", 1).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR unknown or expired reservation") {
			t.Fatalf("RESP%d an unknown reservation: %v", proto, err)
		}
		if err := rdb.Do(ctx, "FUNNEL.SETTLE", "tokens:alice", id).Err(); err == nil || err.Error() != "ERR wrong number of arguments for 'funnel.settle' command" {
			t.Fatalf("RESP%d FUNNEL.SETTLE's arity: %v", proto, err)
		}
		if err := rdb.Do(ctx, "FUNNEL.RESERVE", "k", "gcra", 10, 1000, "QUANTITY", 1, "TTL", 0).Err(); err == nil || err.Error() != "ERR ttl must be whole milliseconds from 1 to 86400000" {
			t.Fatalf("RESP%d a TTL of 0: %v", proto, err)
		}
	}
}

// redis-cli sends FUNNEL.RESERVE and FUNNEL.SETTLE and reads COMMAND
// DOCS's entries for them.
func TestRedisCLIReserve(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	out, code := ts.run(t, "redis-cli", "", "--no-raw", "FUNNEL.RESERVE", "u", "fixed_window", "3", "1000", "QUANTITY", "2")
	m := regexp.MustCompile(`^1\) \(integer\) 1\n2\) \(integer\) 3\n3\) \(integer\) 1\n4\) \(integer\) -1\n5\) \(integer\) 29\n6\) \(integer\) 0\n7\) \(integer\) 0\n8\) "([0-9a-f]+)"\n$`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("redis-cli FUNNEL.RESERVE: exit %d\n%s", code, out)
	}
	out, code = ts.run(t, "redis-cli", "", "--no-raw", "FUNNEL.SETTLE", "u", m[1], "1")
	want := "1) (integer) 1\n2) (integer) 3\n3) (integer) 2\n4) (integer) -1\n5) (integer) 29\n6) (integer) 0\n7) (integer) 0\n8) (integer) 0\n"
	if code != 0 || out != want {
		t.Errorf("redis-cli FUNNEL.SETTLE: exit %d\n%s\nwant\n%s", code, out, want)
	}
	out, _ = ts.run(t, "redis-cli", "", "--no-raw", "FUNNEL.SETTLE", "u", "nosuch", "1")
	if !strings.HasPrefix(out, "(error) ERR unknown or expired reservation") {
		t.Errorf("redis-cli FUNNEL.SETTLE of an unknown id:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"FUNNEL.SETTLE", "u", m[1]}, "(error) ERR wrong number of arguments for 'funnel.settle' command\n"},
		{[]string{"FUNNEL.RESERVE", "u", "fixed_window", "3", "1000"}, "(error) ERR wrong number of arguments for 'funnel.reserve' command\n"},
		{[]string{"FUNNEL.RESERVE", "u", "fixed_window", "3", "1000", "QUANTITY", "1", "TTL", "0"}, "(error) ERR ttl must be whole milliseconds from 1 to 86400000\n"},
		{[]string{"FUNNEL.SETTLE", "u", m[1], "-1"}, "(error) ERR actual must not be negative\n"},
	} {
		if out, _ := ts.run(t, "redis-cli", "", append([]string{"--no-raw"}, tc.args...)...); out != tc.want {
			t.Errorf("redis-cli %q:\n got %q\nwant %q", tc.args, out, tc.want)
		}
	}
	out, code = ts.run(t, "redis-cli", "", "COMMAND", "DOCS", "funnel.reserve", "funnel.settle")
	for _, want := range []string{"funnel.reserve", "Reserves QUANTITY units", "ttl_ms", "TTL", "funnel.settle", "reservation_id", "again"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("redis-cli COMMAND DOCS lacks %q: exit %d\n%s", want, code, out)
		}
	}
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestFunnelReserveRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	t.Run("ReserveAndSettle", func(t *testing.T) { runReserveAndSettle(t, startRedisServer(t, srv, respserver.Config{})) })
	t.Run("SettleLikeChargeAndRefund", func(t *testing.T) { runSettleLikeChargeAndRefund(t, startRedisServer(t, srv, respserver.Config{})) })
	t.Run("BadInput", func(t *testing.T) { runReserveBadInput(t, startRedisServer(t, srv, respserver.Config{})) })
}

// With Redis down, a reserve answers the store's fallback (here fail-open:
// allowed, with no reservation) and a settle the fail-closed error.
func TestFunnelReserveRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ts := startRedisServerOpts(t, srv, respserver.Config{}, redisstore.Options{Timeout: 2 * time.Second, Fail: funnel.FailOpen})
	c := ts.dial(t)
	id := reserve(t, c, ints(1, 10, 9, -1, 100, 0, 0), "k", "gcra", "10", "1000", "QUANTITY", "1")
	srv.Stop()
	if got, want := c.do("FUNNEL.RESERVE", "k", "gcra", "10", "1000", "QUANTITY", "1"), "*8\r\n"+strings.TrimPrefix(ints(1, 10, 10, -1, -1, 0, 0), "*7\r\n")+"$-1\r\n"; got != want {
		t.Errorf("FUNNEL.RESERVE with Redis down:\n got %q\nwant %q", got, want)
	}
	if got := c.do("FUNNEL.SETTLE", "k", id, "1"); got != storeDown {
		t.Errorf("FUNNEL.SETTLE with Redis down: %q, want the fail-closed error", got)
	}
}

// rueidis (RESP3 only) reads FUNNEL.RESERVE's id, and its nil when
// refused, and FUNNEL.SETTLE's reply.
func TestRueidisReserve(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ts := startServer(t, respserver.Config{})
	c, err := ts.rueidis(t, rueidis.ClientOption{})
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	do := func(cmd, key string, args ...string) rueidis.RedisResult {
		return c.Do(ctx, c.B().Arbitrary(cmd).Keys(key).Args(args...).Build())
	}
	got, err := do("FUNNEL.RESERVE", "tokens:alice", "gcra", "100", "60000", "QUANTITY", "40").ToArray()
	if err != nil || len(got) != 8 {
		t.Fatalf("FUNNEL.RESERVE: %v, %v", got, err)
	}
	id, err := got[7].ToString()
	if err != nil || id == "" {
		t.Fatalf("FUNNEL.RESERVE's id: %q, %v", id, err)
	}
	st, err := do("FUNNEL.SETTLE", "tokens:alice", id, "10").AsIntSlice()
	if want := []int64{1, 100, 90, -1, 6000, 0, 0, 0}; err != nil || !slices.Equal(st, want) {
		t.Fatalf("FUNNEL.SETTLE: %v, %v; want %v", st, err, want)
	}
	refused, err := do("FUNNEL.RESERVE", "tokens:alice", "gcra", "100", "60000", "QUANTITY", "101").ToArray()
	if err != nil || len(refused) != 8 || !refused[7].IsNil() {
		t.Fatalf("a refused FUNNEL.RESERVE: %v, %v", refused, err)
	}
	if err := do("FUNNEL.SETTLE", "tokens:alice", "nosuch", "1").Error(); err == nil || !strings.HasPrefix(err.Error(), "unknown or expired reservation") { // rueidis drops the ERR
		t.Fatalf("an unknown reservation: %v", err)
	}
}
