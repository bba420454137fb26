package respserver_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/respserver"
	"github.com/redis/go-redis/v9"
)

// chargeSteps are FUNNEL.CHARGE and FUNNEL.ALLOW … PEEK at fixed instants
// after the server clock's epoch (28.961989 ms before a whole second), with
// their replies, the same over both stores.
func chargeSteps() []famStep {
	gcra := func(extra ...string) []string {
		return append(cmd("FUNNEL.ALLOW", "k", "gcra", "10", "1000", "BURST", "0"), extra...)
	}
	charge := func(n string) []string {
		return cmd("FUNNEL.CHARGE", "k", "gcra", "10", "1000", "BURST", "0", "QUANTITY", n)
	}
	fixed := func(op string, extra ...string) []string {
		return append(cmd(op, "w", "fixed_window", "3", "1000"), extra...)
	}
	return []famStep{
		// T = 100 ms, limit 1. A charge of 5 units puts the key 4 units
		// into debt: over its limit, its debt drained in 400 ms, a request
		// of one unit admitted after 500 ms.
		{0, charge("5"), ints(0, 1, 0, 400, 500, 0, 0)},
		{0, gcra("PEEK"), ints(0, 1, 0, 500, 500, 0, 0)},
		{0, gcra(), ints(0, 1, 0, 500, 500, 0, 0)},
		// The probe charged nothing: at 499.999 ms one unit is still
		// refused, at 500 ms it is admitted.
		{499 * ms, gcra("PEEK"), ints(0, 1, 0, 1, 1, 0, 0)},
		{500 * ms, gcra("PEEK"), ints(1, 1, 1, -1, 0, 0, 0)},
		// A probe above the limit is never admitted: retry_after -1.
		{500 * ms, gcra("QUANTITY", "2", "PEEK"), ints(0, 1, 1, -1, 0, 0, 0)},
		{500 * ms, gcra(), ints(1, 1, 0, -1, 100, 0, 0)},
		// A charge that fits answers what FUNNEL.ALLOW would have.
		{600 * ms, charge("1"), ints(1, 1, 0, -1, 100, 0, 0)},
		// A charge of 0 charges nothing.
		{700 * ms, charge("0"), ints(1, 1, 1, -1, 0, 0, 0)},

		// A fixed window of 3 per second, 28.961989 ms before it ends.
		{0, fixed("FUNNEL.ALLOW", "QUANTITY", "3", "PEEK"), ints(1, 3, 3, -1, 0, 0, 0)},
		{0, fixed("FUNNEL.ALLOW", "QUANTITY", "4", "PEEK"), ints(0, 3, 3, -1, 0, 0, 0)},
		{0, fixed("FUNNEL.CHARGE", "QUANTITY", "2"), ints(1, 3, 1, -1, 29, 0, 0)},
		{0, fixed("FUNNEL.CHARGE", "QUANTITY", "2"), ints(0, 3, 0, 29, 29, 0, 0)},
		{0, fixed("FUNNEL.ALLOW", "PEEK"), ints(0, 3, 0, 29, 29, 0, 0)},
		// The window's debt ends with it.
		{29 * ms, fixed("FUNNEL.ALLOW", "QUANTITY", "3", "PEEK"), ints(1, 3, 3, -1, 0, 0, 0)},

		// Bad input: a clear error, nothing changed.
		{29 * ms, fixed("FUNNEL.CHARGE", "QUANTITY", "-1"), errr("ERR quantity must not be negative")},
		{29 * ms, fixed("FUNNEL.CHARGE", "QUANTITY", "x"), errr("ERR quantity is not an integer or out of range")},
		{29 * ms, fixed("FUNNEL.CHARGE", "QUANTITY", "18446744073709551616"), errr("ERR quantity is not an integer or out of range")},
		{29 * ms, fixed("FUNNEL.CHARGE", "QUANTITY", "1099511627777"), errr("ERR invalid quantity 1099511627777: algo: count or count×period is too large")},
		{29 * ms, cmd("FUNNEL.CHARGE", "g", "gcra", "3", "1000", "QUANTITY", "9223372036854775807"),
			errr("ERR invalid quantity 9223372036854775807: gcra: value overflows int64 nanoseconds")},
		{29 * ms, fixed("FUNNEL.CHARGE", "BURST", "1"), errr("ERR FUNNEL.CHARGE needs QUANTITY n, the units spent")},
		{29 * ms, fixed("FUNNEL.CHARGE", "BURST", "1", "QUANTITY"), errr("ERR syntax error")},
		{29 * ms, fixed("FUNNEL.CHARGE"), errr("ERR wrong number of arguments for 'funnel.charge' command")},
		{29 * ms, fixed("FUNNEL.CHARGE", "QUANTITY", "1", "PEEK"), errr("ERR PEEK is an option of FUNNEL.ALLOW only")},
		{29 * ms, cmd("FUNNEL.ALLOWALL", "1", "LIMIT", "w", "fixed_window", "3", "1000", "PEEK"), errr("ERR PEEK is an option of FUNNEL.ALLOW only")},
		{29 * ms, fixed("FUNNEL.REFUND", "PEEK"), errr("ERR PEEK is an option of FUNNEL.ALLOW only")},
		{29 * ms, fixed("FUNNEL.ALLOW", "QUANTITY", "-2", "PEEK"), errr("ERR quantity must not be negative")},
		{29 * ms, cmd("FUNNEL.CHARGE", "c", "concurrency", "3", "1000", "QUANTITY", "1"),
			errr("ERR unknown algorithm 'concurrency' (gcra, leaky_bucket, fixed_window, sliding_window, sliding_log)")},
		{29 * ms, fixed("FUNNEL.ALLOW", "QUANTITY", "3", "PEEK"), ints(1, 3, 3, -1, 0, 0, 0)},

		// A charge over a limit with a ban starts the ban.
		{29 * ms, cmd("FUNNEL.CHARGE", "b", "fixed_window", "3", "1000", "BAN", "5000", "QUANTITY", "4"), ints(0, 3, 0, 5000, 1000, 0, 1)},
		{29 * ms, cmd("FUNNEL.ALLOW", "b", "fixed_window", "3", "1000", "BAN", "5000", "PEEK"), ints(0, 3, 0, 5000, 1000, 0, 1)},
		// CL.THROTTLE is unchanged.
		{29 * ms, cmd("CL.THROTTLE", "t", "15", "30", "60"), ints(0, 16, 15, -1, 2)},
	}
}

func TestFunnelChargeAndPeek(t *testing.T) {
	t.Parallel()
	runFamSteps(t, chargeSteps())
}

func TestFunnelChargeAndPeekRedis(t *testing.T) {
	t.Parallel()
	ts := startRedisServer(t, redistest.StartServer(t), respserver.Config{})
	c := ts.dial(t)
	for i, s := range chargeSteps() {
		ts.at(s.at)
		if got := c.do(s.args...); got != s.want {
			t.Errorf("step %d at %v %q:\n got %q\nwant %q", i, s.at, s.args, got, s.want)
		}
	}
}

// A store that cannot record a charge answers the fail-closed error, even
// under a fail-open policy: a charge is never a fallback.
func TestFunnelChargeStoreDown(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ts := startRedisServerOpts(t, srv, respserver.Config{}, redisstore.Options{Timeout: 2 * time.Second, Fail: funnel.FailOpen})
	c := ts.dial(t)
	srv.Stop()
	if got := c.do("FUNNEL.CHARGE", "k", "gcra", "10", "1000", "QUANTITY", "5"); got != storeDown {
		t.Errorf("FUNNEL.CHARGE with Redis down: %q, want the fail-closed error", got)
	}
	// A probe is a decision: it answers the fail-open fallback.
	if got := c.do("FUNNEL.ALLOW", "k", "gcra", "10", "1000", "PEEK"); !strings.HasPrefix(got, "*7\r\n:1\r\n") {
		t.Errorf("FUNNEL.ALLOW … PEEK with Redis down: %q, want the fail-open fallback", got)
	}
}

// go-redis sends FUNNEL.CHARGE and FUNNEL.ALLOW … PEEK and reads their
// replies, in RESP2 and RESP3.
func TestGoRedisCharge(t *testing.T) {
	t.Parallel()
	for _, proto := range []int{2, 3} {
		ctx := testContext(t)
		ts := startServer(t, respserver.Config{})
		rdb := ts.goRedis(t, redis.Options{Protocol: proto})
		got, err := rdb.Do(ctx, "FUNNEL.CHARGE", "tokens:alice", "fixed_window", 100, 60000, "QUANTITY", 130).Int64Slice()
		if err != nil || got[0] != 0 || got[2] != 0 || got[6] != 0 {
			t.Fatalf("RESP%d FUNNEL.CHARGE: %v, %v", proto, got, err)
		}
		peek, err := rdb.Do(ctx, "FUNNEL.ALLOW", "tokens:alice", "fixed_window", 100, 60000, "QUANTITY", 1, "PEEK").Int64Slice()
		if err != nil || peek[0] != 0 || peek[3] != got[3] {
			t.Fatalf("RESP%d FUNNEL.ALLOW … PEEK: %v, %v (the charge said %v)", proto, peek, err, got)
		}
		never, err := rdb.Do(ctx, "FUNNEL.ALLOW", "fresh", "gcra", 10, 1000, "QUANTITY", 1000, "PEEK").Int64Slice()
		if err != nil || !slices.Equal(never, []int64{0, 10, 10, -1, 0, 0, 0}) {
			t.Fatalf("RESP%d a probe above the limit: %v, %v", proto, never, err)
		}
		if err := rdb.Do(ctx, "FUNNEL.CHARGE", "k", "gcra", 10, 1000, "QUANTITY", -1).Err(); err == nil || err.Error() != "ERR quantity must not be negative" {
			t.Fatalf("RESP%d a negative charge: %v", proto, err)
		}
	}
}

// redis-cli sends FUNNEL.CHARGE and reads COMMAND DOCS's entry for it.
func TestRedisCLICharge(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	out, code := ts.run(t, "redis-cli", "", "--no-raw", "FUNNEL.CHARGE", "u", "fixed_window", "3", "1000", "QUANTITY", "5")
	want := "1) (integer) 0\n2) (integer) 3\n3) (integer) 0\n4) (integer) 29\n5) (integer) 29\n6) (integer) 0\n7) (integer) 0\n"
	if code != 0 || out != want {
		t.Errorf("redis-cli FUNNEL.CHARGE: exit %d\n%s\nwant\n%s", code, out, want)
	}
	out, code = ts.run(t, "redis-cli", "", "COMMAND", "DOCS", "funnel.charge", "funnel.allow")
	for _, want := range []string{"funnel.charge", "Records QUANTITY units", "funnel.allow", "PEEK"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("redis-cli COMMAND DOCS lacks %q: exit %d\n%s", want, code, out)
		}
	}
}
