package respserver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/respserver"
)

// famStep is one FUNNEL.* command at an instant after the server clock's
// epoch (…8971.038011 ms: 28.961989 ms before a whole second), with its reply.
type famStep struct {
	at   time.Duration
	args []string
	want string
}

func cmd(args ...string) []string { return args }

func runFamSteps(t *testing.T, steps []famStep) {
	t.Helper()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	for i, s := range steps {
		ts.at(s.at)
		if got := c.do(s.args...); got != s.want {
			t.Errorf("step %d at %v %q:\n got %q\nwant %q", i, s.at, s.args, got, s.want)
		}
	}
}

func TestFunnelAllowFixedWindow(t *testing.T) {
	t.Parallel()
	allow := cmd("FUNNEL.ALLOW", "k", "fixed_window", "3", "1000")
	runFamSteps(t, []famStep{
		{0, allow, ints(1, 3, 2, -1, 29, 0, 0)},
		{0, allow, ints(1, 3, 1, -1, 29, 0, 0)},
		{0, allow, ints(1, 3, 0, -1, 29, 0, 0)},
		// The window ends 28.961989 ms later: retry rounds up to 29.
		{0, allow, ints(0, 3, 0, 29, 29, 0, 0)},
		{28 * ms, allow, ints(0, 3, 0, 1, 1, 0, 0)},
		{29 * ms, allow, ints(1, 3, 2, -1, 1000, 0, 0)},
		// More than the window holds: no wait admits it.
		{29 * ms, cmd("FUNNEL.ALLOW", "k", "fixed_window", "3", "1000", "QUANTITY", "4"), ints(0, 3, 2, -1, 1000, 0, 0)},
		// A peek charges nothing.
		{29 * ms, cmd("FUNNEL.ALLOW", "k", "fixed_window", "3", "1000", "QUANTITY", "0"), ints(1, 3, 2, -1, 1000, 0, 0)},
	})
}

func TestFunnelAllowLeakyBucket(t *testing.T) {
	t.Parallel()
	// T = 100 ms, burst 2: the first passes at once, the next two wait one
	// and two intervals, the fourth is refused.
	leaky := cmd("FUNNEL.ALLOW", "k", "leaky_bucket", "10", "1000", "BURST", "2")
	runFamSteps(t, []famStep{
		{0, leaky, ints(1, 3, 2, -1, 100, 0, 0)},
		{0, leaky, ints(1, 3, 1, -1, 200, 100, 0)},
		{0, leaky, ints(1, 3, 0, -1, 300, 200, 0)},
		{0, leaky, ints(0, 3, 0, 100, 300, 0, 0)},
		{100 * ms, leaky, ints(1, 3, 0, -1, 300, 200, 0)},
	})
	// DELAY 1: the first excess unit passes at once.
	d1 := cmd("FUNNEL.ALLOW", "k", "leaky_bucket", "10", "1000", "BURST", "2", "DELAY", "1")
	runFamSteps(t, []famStep{
		{0, d1, ints(1, 3, 2, -1, 100, 0, 0)},
		{0, d1, ints(1, 3, 1, -1, 200, 0, 0)},
		{0, d1, ints(1, 3, 0, -1, 300, 100, 0)},
	})
	nd := cmd("FUNNEL.ALLOW", "k", "leaky_bucket", "10", "1000", "BURST", "2", "NODELAY")
	runFamSteps(t, []famStep{
		{0, nd, ints(1, 3, 2, -1, 100, 0, 0)},
		{0, nd, ints(1, 3, 1, -1, 200, 0, 0)},
		{0, nd, ints(1, 3, 0, -1, 300, 0, 0)},
		{0, nd, ints(0, 3, 0, 100, 300, 0, 0)},
	})
}

func TestFunnelAllowSlidingLog(t *testing.T) {
	t.Parallel()
	// A unit is recorded at the millisecond at or after now (…8972) and
	// counts for one period from there.
	log := cmd("FUNNEL.ALLOW", "k", "sliding_log", "2", "1000")
	runFamSteps(t, []famStep{
		{0, log, ints(1, 2, 1, -1, 1001, 0, 0)},
		{500 * ms, log, ints(1, 2, 0, -1, 1001, 0, 0)},
		{600 * ms, log, ints(0, 2, 0, 401, 901, 0, 0)},
		{1000 * ms, log, ints(0, 2, 0, 1, 501, 0, 0)},
		{1001 * ms, log, ints(1, 2, 0, -1, 1001, 0, 0)},
	})
}

func TestFunnelAllowAll(t *testing.T) {
	t.Parallel()
	both := cmd("FUNNEL.ALLOWALL", "2",
		"LIMIT", "{u}:s", "gcra", "10", "1000", "BURST", "1",
		"LIMIT", "{u}:d", "fixed_window", "1", "60000")
	peek := cmd("FUNNEL.ALLOW", "{u}:s", "gcra", "10", "1000", "BURST", "1", "QUANTITY", "0")
	// Epoch ms …8971 is 28971 ms into its minute: the minute ends 31028.961989 ms later.
	runFamSteps(t, []famStep{
		{0, both, "*4\r\n" + integer(1) + integer(-1) + integer(-1) + array(ints(1, 2, 1, -1, 100, 0, 0), ints(1, 1, 0, -1, 31029, 0, 0))},
		// The minute limit refuses: the per-second limit is not charged, and
		// its reply shows its state as it stays.
		{0, both, "*4\r\n" + integer(0) + integer(1) + integer(31029) + array(ints(1, 2, 1, -1, 100, 0, 0), ints(0, 1, 0, 31029, 31029, 0, 0))},
		{0, peek, ints(1, 2, 1, -1, 100, 0, 0)},
	})
}

func TestFunnelLeases(t *testing.T) {
	t.Parallel()
	runFamSteps(t, []famStep{
		{0, cmd("FUNNEL.ACQUIRE", "k", "1", "5000", "ID", "x"), array(integer(1), integer(1), integer(0), integer(-1), integer(5000), bulk("x"), integer(0))},
		{0, cmd("FUNNEL.ACQUIRE", "k", "1", "5000", "ID", "y"), array(integer(0), integer(1), integer(0), integer(5000), integer(5000), "$-1\r\n", integer(0))},
		{0, cmd("FUNNEL.RELEASE", "k", "x"), integer(1)},
		{0, cmd("FUNNEL.RELEASE", "k", "x"), integer(0)},
		{0, cmd("FUNNEL.ACQUIRE", "k", "1", "5000", "ID", "y"), array(integer(1), integer(1), integer(0), integer(-1), integer(5000), bulk("y"), integer(0))},
		// Never released, it expires.
		{5000 * ms, cmd("FUNNEL.ACQUIRE", "k", "1", "5000", "ID", "z"), array(integer(1), integer(1), integer(0), integer(-1), integer(5000), bulk("z"), integer(0))},
	})
	// Without an ID the server makes one up.
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	got := c.do("FUNNEL.ACQUIRE", "k", "2", "1000")
	if !strings.HasPrefix(got, "*7\r\n:1\r\n:2\r\n:1\r\n:-1\r\n:1000\r\n$32\r\n") || !strings.HasSuffix(got, "\r\n:0\r\n") {
		t.Errorf("FUNNEL.ACQUIRE without ID: %q", got)
	}
}

// FUNNEL.ACQUIRE with BURST and DELAY queues (limit.conn): 2 at once, 3
// more told to wait; FUNNEL.RELEASE's LATENCY moves the unit delay.
func TestFunnelLeasesQueue(t *testing.T) {
	t.Parallel()
	acq := func(id string) []string {
		return cmd("FUNNEL.ACQUIRE", "q", "2", "5000", "ID", id, "BURST", "3", "DELAY", "100")
	}
	granted := func(rem, delay int64, id string) string {
		return array(integer(1), integer(5), integer(rem), integer(-1), integer(5000), bulk(id), integer(delay))
	}
	runFamSteps(t, []famStep{
		{0, acq("a"), granted(4, 0, "a")},
		{0, cmd("FUNNEL.ACQUIRE", "q", "2", "5000", "BURST", "3", "ID", "b", "DELAY", "100"), granted(3, 0, "b")},
		{0, acq("c"), granted(2, 100, "c")},
		{0, acq("d"), granted(1, 100, "d")},
		{0, acq("e"), granted(0, 200, "e")},
		{0, acq("f"), array(integer(0), integer(5), integer(0), integer(5000), integer(5000), "$-1\r\n", integer(0))},
		// a took 300 ms: the unit delay is now 200 ms.
		{0, cmd("FUNNEL.RELEASE", "q", "a", "LATENCY", "300"), integer(1)},
		{0, cmd("FUNNEL.RELEASE", "q", "a", "LATENCY", "300"), errr("ERR the lease is not held (released, expired or never taken): lease \"a\" of key \"q\"")},
		{0, cmd("FUNNEL.RELEASE", "q", "b", "latency", "-1"), errr("ERR latency must not be negative")},
		{0, cmd("FUNNEL.RELEASE", "q", "b", "LATENCY", "86400001"), errr("ERR invalid quantity: latency 24h0m0.001s is above the largest, 24h0m0s")},
		{0, cmd("FUNNEL.RELEASE", "q", "b", "LATENCY", "2147483648"), errr("ERR invalid quantity: latency 596h31m23.648s is above the largest, 24h0m0s")},
		{0, cmd("FUNNEL.RELEASE", "q", "b", "WAIT", "1"), errr("ERR syntax error")},
		{0, cmd("FUNNEL.RELEASE", "q", "b", "LATENCY"), errr("ERR wrong number of arguments for 'funnel.release' command")},
		{0, acq("g"), granted(0, 400, "g")},
	})
}

func TestFunnelBadInput(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{cmd("FUNNEL.ALLOW", "k", "gcra", "1"), "ERR wrong number of arguments for 'funnel.allow' command"},
		{cmd("FUNNEL.ALLOW", "k", "nosuch", "1", "1000"), "ERR unknown algorithm 'nosuch' (gcra, leaky_bucket, fixed_window, sliding_window, sliding_log)"},
		{cmd("FUNNEL.ALLOW", "k", "concurrency", "1", "1000"), "ERR unknown algorithm 'concurrency' (gcra, leaky_bucket, fixed_window, sliding_window, sliding_log)"},
		{cmd("FUNNEL.ALLOW", "k", "fixed_window", "x", "1000"), "ERR count is not an integer or out of range"},
		{cmd("FUNNEL.ALLOW", "k", "fixed_window", "-1", "1000"), "ERR count must not be negative"},
		{cmd("FUNNEL.ALLOW", "k", "fixed_window", "1", "99999999999999999999"), "ERR period is not an integer or out of range"},
		{cmd("FUNNEL.ALLOW", "k", "fixed_window", "1", "9223372036854775807"), "ERR period is out of range"},
		{cmd("FUNNEL.ALLOW", "k", "fixed_window", "0", "1000"), "ERR invalid limit fixed_window 0 per 1s: algo: count and period must be positive"},
		{cmd("FUNNEL.ALLOW", "k", "fixed_window", "1", "0"), "ERR invalid limit fixed_window 1 per 0s: algo: count and period must be positive"},
		{cmd("FUNNEL.ALLOW", "k", "fixed_window", "1", "1000", "BURST", "3"), "ERR invalid limit: burst: only gcra, leaky_bucket and concurrency take a burst"},
		{cmd("FUNNEL.ALLOW", "k", "gcra", "1", "1000", "DELAY", "3"), "ERR invalid limit: delay: only leaky_bucket takes a delay"},
		{cmd("FUNNEL.ALLOW", "k", "gcra", "1", "1000", "CALENDAR", "day"), "ERR invalid limit: calendar: only fixed_window takes a calendar"},
		{cmd("FUNNEL.ALLOW", "k", "fixed_window", "1", "0", "CALENDAR", "year"), `ERR invalid limit: calendar: unknown calendar "year" (want day, week or month)`},
		{cmd("FUNNEL.ALLOW", "k", "fixed_window", "1", "0", "CALENDAR", "day", "TZ", "Mars/Olympus"), `ERR invalid limit: time_zone: unknown time zone "Mars/Olympus"`},
		{cmd("FUNNEL.ALLOW", "k", "fixed_window", "1", "1000", "QUANTITY"), "ERR syntax error"},
		{cmd("FUNNEL.ALLOW", "k", "fixed_window", "1", "1000", "WHAT", "1"), "ERR syntax error"},
		{cmd("FUNNEL.ALLOWALL", "2", "LIMIT", "a", "gcra", "1", "1000"), "ERR numlimits is 2 but 1 LIMIT blocks were given"},
		{cmd("FUNNEL.ALLOWALL", "0", "LIMIT", "a", "gcra", "1", "1000"), "ERR numlimits must be between 1 and 64"},
		{cmd("FUNNEL.ALLOWALL", "1", "LIMOT", "a", "gcra", "1", "1000"), "ERR syntax error"},
		{cmd("FUNNEL.ALLOWALL", "2", "LIMIT", "a", "gcra", "1", "1000", "LIMIT", "a", "gcra", "1", "1000"), `ERR a key appears twice in one call: "a"`},
		{cmd("FUNNEL.ACQUIRE", "k", "0", "1000"), "ERR invalid limit concurrency 0, lease 1s: algo: count and period must be positive"},
		{cmd("FUNNEL.ACQUIRE", "k", "1", "1000", "ID"), "ERR wrong number of arguments for 'funnel.acquire' command"},
		{cmd("FUNNEL.ACQUIRE", "k", "1", "1000", "ID", ""), "ERR lease id must be 1 to 1024 bytes"},
		{cmd("FUNNEL.ACQUIRE", "k", "1", "1000", "ID", strings.Repeat("i", funnel.MaxLeaseIDLen+1)), "ERR lease id must be 1 to 1024 bytes"},
		{cmd("FUNNEL.ACQUIRE", "k", "1", "1000", "NAME", "x"), "ERR syntax error"},
		{cmd("FUNNEL.ACQUIRE", "k", "1", "1000", "BURST", "-1"), "ERR burst must not be negative"},
		{cmd("FUNNEL.ACQUIRE", "k", "1", "1000", "BURST", "1099511627776"), "ERR invalid limit concurrency 1, lease 1s, burst 1099511627776, unit delay 0s: algo: count or count×period is too large"},
		{cmd("FUNNEL.ACQUIRE", "k", "1", "1000", "DELAY", "x"), "ERR delay is not an integer or out of range"},
		{cmd("FUNNEL.ACQUIRE", "k", "1", "1000", "DELAY", "9223372036854775807"), "ERR delay is out of range"},
		{cmd("FUNNEL.ACQUIRE", "k", "1", "1000", "DELAY", "86400001"), "ERR invalid limit: unit_delay: 24h0m0.001s is above the largest, 24h0m0s"},
		{cmd("FUNNEL.ACQUIRE", "k", "1", "1000", "BURST"), "ERR wrong number of arguments for 'funnel.acquire' command"},
	} {
		if got := c.do(tc.args...); got != errr(tc.want) {
			t.Errorf("%q:\n got %q\nwant %q", tc.args, got, errr(tc.want))
		}
	}
	// Another algorithm's key: WRONGTYPE, and the key keeps its state.
	if got := c.do("FUNNEL.ALLOW", "w", "fixed_window", "5", "1000"); got != ints(1, 5, 4, -1, 29, 0, 0) {
		t.Fatalf("fixed window: %q", got)
	}
	for _, alg := range []string{"sliding_window", "sliding_log", "gcra"} {
		if got := c.do("FUNNEL.ALLOW", "w", alg, "5", "1000"); !strings.HasPrefix(got, "-WRONGTYPE ") {
			t.Errorf("%s on a fixed-window key: %q", alg, got)
		}
	}
	if got := c.do("FUNNEL.ALLOW", "w", "fixed_window", "5", "1000", "QUANTITY", "0"); got != ints(1, 5, 4, -1, 29, 0, 0) {
		t.Errorf("fixed window after WRONGTYPE: %q", got)
	}
}

func TestFunnelBans(t *testing.T) {
	t.Parallel()
	ban := cmd("FUNNEL.ALLOW", "k", "gcra", "1", "1000", "BAN", "5000")
	// The ban ends 5 s after the refusal: at …13971.038011 ms, rounded up.
	const until = 1_795_350_513_972
	runFamSteps(t, []famStep{
		{0, ban, ints(1, 1, 0, -1, 1000, 0, 0)},
		{0, ban, ints(0, 1, 0, 5000, 1000, 0, 1)},
		{0, cmd("FUNNEL.BANS"), array(array(bulk("k"), integer(until)))},
		// The bucket has room again, but the ban holds.
		{2 * sec, ban, ints(0, 1, 0, 3000, 0, 0, 1)},
		// A limit without a ban does not look for bans.
		{2 * sec, cmd("FUNNEL.ALLOW", "k", "gcra", "1", "1000", "QUANTITY", "0"), ints(1, 1, 1, -1, 0, 0, 0)},
		{2 * sec, cmd("FUNNEL.UNBAN", "k"), integer(1)},
		{2 * sec, cmd("FUNNEL.UNBAN", "k"), integer(0)},
		{2 * sec, cmd("FUNNEL.BANS"), array()},
		{2 * sec, ban, ints(1, 1, 0, -1, 1000, 0, 0)},
	})
}
