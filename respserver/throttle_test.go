package respserver_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funnelrl/funnel/respserver"
)

const (
	sec = time.Second
	ms  = time.Millisecond
	us  = time.Microsecond
)

// wireStep is one CL.THROTTLE at an instant after the epoch of the server's
// clock, with redis-cell's reply (spec/cl-throttle.md §5-6).
type wireStep struct {
	at       time.Duration
	quantity string // "" leaves the argument out (quantity 1)
	want     [5]int64
}

// wireCases are the step cases of the core conformance suite, sent through
// the wire: max_burst, count and period as CL.THROTTLE's arguments.
var wireCases = []struct {
	name  string
	args  [3]string
	steps []wireStep
}{
	{
		// redis-cell's README: T = 2 s, tolerance 32 s.
		name: "ReadmeBurstThenRate", args: [3]string{"15", "30", "60"},
		steps: []wireStep{
			{0, "", [5]int64{0, 16, 15, -1, 2}},
			{0, "14", [5]int64{0, 16, 1, -1, 30}},
			{0, "1", [5]int64{0, 16, 0, -1, 32}},
			{0, "1", [5]int64{1, 16, 0, 2, 32}},
			// 1 ns before the slot opens: a wait under 1 ms shows 0.
			{2*sec - 1, "1", [5]int64{1, 16, 0, 0, 30}},
			// The tie is allowed.
			{2 * sec, "1", [5]int64{0, 16, 0, -1, 32}},
			{3 * sec, "1", [5]int64{1, 16, 0, 1, 31}},
			// Ten seconds later five units have leaked; a peek shows them.
			{12 * sec, "0", [5]int64{0, 16, 5, -1, 22}},
			{12 * sec, "5", [5]int64{0, 16, 0, -1, 32}},
			{44 * sec, "0", [5]int64{0, 16, 16, -1, 0}},
			{44 * sec, "1", [5]int64{0, 16, 15, -1, 2}},
		},
	},
	{
		// A peek on a fresh key shows remaining = limit and reset 0, and
		// does not move the TAT.
		name: "PeekFreshKey", args: [3]string{"4", "1", "1"},
		steps: []wireStep{
			{0, "0", [5]int64{0, 5, 5, -1, 0}},
			{0, "0", [5]int64{0, 5, 5, -1, 0}},
			{0, "1", [5]int64{0, 5, 4, -1, 1}},
			{500 * ms, "0", [5]int64{0, 5, 4, -1, 1}},
			{500 * ms, "-0", [5]int64{0, 5, 4, -1, 1}},
		},
	},
	{
		// A quantity above the limit can never pass: retry -1, nothing
		// consumed.
		name: "QuantityAboveLimit", args: [3]string{"4", "1", "1"},
		steps: []wireStep{
			{0, "6", [5]int64{1, 5, 5, -1, 0}},
			{0, "2", [5]int64{0, 5, 3, -1, 2}},
			{0, "100", [5]int64{1, 5, 3, -1, 2}},
			{0, "3", [5]int64{0, 5, 0, -1, 5}},
		},
	},
	{
		// Within the limit but above what is free now: limited, with the
		// real wait, nothing consumed.
		name: "QuantityWaits", args: [3]string{"4", "1", "1"},
		steps: []wireStep{
			{0, "4", [5]int64{0, 5, 1, -1, 4}},
			{0, "3", [5]int64{1, 5, 1, 2, 4}},
			{1500 * ms, "3", [5]int64{1, 5, 2, 1, 3}},
			{2 * sec, "3", [5]int64{0, 5, 0, -1, 5}},
			{7 * sec, "5", [5]int64{0, 5, 0, -1, 5}},
		},
	},
	{
		// T = 666666 ns: durations under 1 ms are 0 s.
		name: "FastRate", args: [3]string{"20", "1500", "1"},
		steps: []wireStep{
			{0, "1", [5]int64{0, 21, 20, -1, 0}},
			{0, "20", [5]int64{0, 21, 0, -1, 1}},
			{0, "1", [5]int64{1, 21, 0, 0, 1}},
			{666666, "1", [5]int64{0, 21, 0, -1, 1}},
		},
	},
	{
		// T = 1999 ns: limited with remaining 1, as redis-cell divides
		// whole microseconds.
		name: "RoundingArtefact", args: [3]string{"0", "500250", "1"},
		steps: []wireStep{
			{0, "1", [5]int64{0, 1, 0, -1, 0}},
			{1000, "1", [5]int64{1, 1, 1, 0, 0}},
			{1999, "1", [5]int64{0, 1, 0, -1, 0}},
		},
	},
	{
		name: "NoBurst", args: [3]string{"0", "1", "60"},
		steps: []wireStep{
			{0, "1", [5]int64{0, 1, 0, -1, 60}},
			{59*sec + 999*ms, "1", [5]int64{1, 1, 0, 1, 1}},
			{59*sec + 999*ms + 999*us, "1", [5]int64{1, 1, 0, 0, 0}},
			{60 * sec, "1", [5]int64{0, 1, 0, -1, 60}},
			{120*sec - 1, "1", [5]int64{1, 1, 0, 0, 0}},
			{120 * sec, "1", [5]int64{0, 1, 0, -1, 60}},
			{120*sec + 1, "1", [5]int64{1, 1, 0, 60, 60}},
		},
	},
	{
		// Seconds on the wire: 2.000 s -> 2, 2.001 s -> 3, 2.0005 s -> 2.
		name: "WireRounding", args: [3]string{"0", "1", "3"},
		steps: []wireStep{
			{0, "1", [5]int64{0, 1, 0, -1, 3}},
			{1 * sec, "1", [5]int64{1, 1, 0, 2, 2}},
			{999 * ms, "1", [5]int64{1, 1, 0, 3, 3}},
			{999*ms + 500*us, "1", [5]int64{1, 1, 0, 2, 2}},
		},
	},
	{
		// One per 222 years.
		name: "LongPeriod", args: [3]string{"0", "1", "7000000000"},
		steps: []wireStep{
			{0, "1", [5]int64{0, 1, 0, -1, 7_000_000_000}},
			// 1 ns under 7e9 s is 7e9 s as a float64 (redis-cell's
			// as_seconds_f64), and its 999 ms add one.
			{1, "1", [5]int64{1, 1, 0, 7_000_000_001, 7_000_000_001}},
		},
	},
	{
		// Integers as Rust parses them: a leading '+', leading zeros.
		name: "IntegerForms", args: [3]string{"+15", "030", "060"},
		steps: []wireStep{
			{0, "+01", [5]int64{0, 16, 15, -1, 2}},
		},
	},
	{
		// redis-cell's refund idiom (its issue #22): a negative quantity
		// gives units back, redis-cell's reply while the TAT stays at or
		// after now, a full bucket where redis-cell would write a TAT in
		// the past and answer an error.
		name: "Refund", args: [3]string{"15", "30", "60"},
		steps: []wireStep{
			{0, "", [5]int64{0, 16, 15, -1, 2}},
			{0, "", [5]int64{0, 16, 14, -1, 4}},
			{0, "", [5]int64{0, 16, 13, -1, 6}},
			{0, "-2", [5]int64{0, 16, 15, -1, 2}},
			{0, "-5", [5]int64{0, 16, 16, -1, 0}},
			{0, "0", [5]int64{0, 16, 16, -1, 0}},
			{10 * sec, "16", [5]int64{0, 16, 0, -1, 32}},
			{11 * sec, "-1", [5]int64{0, 16, 1, -1, 29}},
			{11 * sec, "2", [5]int64{1, 16, 1, 1, 29}},
		},
	},
	{
		// redis-cell leaves this key without an expiry and answers 7 of 6.
		name: "RefundFreshKey", args: [3]string{"5", "2000", "3"},
		steps: []wireStep{
			{0, "-1", [5]int64{0, 6, 6, -1, 0}},
			{0, "0", [5]int64{0, 6, 6, -1, 0}},
		},
	},
	{
		// From 2^24 s on, seconds go through a float64, as redis-cell's.
		name: "LongPeriodFloatRounding", args: [3]string{"20", "3", "10329049"},
		steps: []wireStep{
			{0, "21", [5]int64{0, 21, 0, -1, 72303344}},
		},
	},
	{
		name: "LongPeriodFloatRounding2", args: [3]string{"2", "3", "1230631900"},
		steps: []wireStep{
			{0, "3", [5]int64{0, 3, 0, -1, 1230631901}},
		},
	},
	{
		// T = 100 ns: exact, remaining in nanoseconds.
		name: "SubMicrosecondInterval", args: [3]string{"5", "10000000", "1"},
		steps: []wireStep{
			{0, "", [5]int64{0, 6, 5, -1, 0}},
			{0, "5", [5]int64{0, 6, 0, -1, 0}},
			{0, "", [5]int64{1, 6, 0, 0, 0}},
			{100, "", [5]int64{0, 6, 0, -1, 0}},
			{350, "0", [5]int64{0, 6, 2, -1, 0}},
		},
	},
	{
		name: "SubMicrosecondLargeBurst", args: [3]string{"100000", "10000000", "1"},
		steps: []wireStep{
			{0, "", [5]int64{0, 100001, 100000, -1, 0}},
		},
	},
	{
		name: "OneNanosecondInterval", args: [3]string{"2", "1000000000", "1"},
		steps: []wireStep{
			{0, "3", [5]int64{0, 3, 0, -1, 0}},
			{0, "", [5]int64{1, 3, 0, 0, 0}},
			{1, "", [5]int64{0, 3, 0, -1, 0}},
			{10, "0", [5]int64{0, 3, 3, -1, 0}},
		},
	},
}

// TestServerThrottleConformance runs the conformance suite's cases through
// the wire, each on its own server with its own clock, in RESP2 and RESP3
// (the reply is the same five integers).
func TestServerThrottleConformance(t *testing.T) {
	t.Parallel()
	runWireCases(t, func(t *testing.T) *testServer { return startServer(t, respserver.Config{}) })
}

// runWireCases runs wireCases, each on a server of its own that start
// returns, in RESP2 and RESP3.
func runWireCases(t *testing.T, start func(t *testing.T) *testServer) {
	for _, proto := range []string{"2", "3"} {
		for _, tc := range wireCases {
			t.Run(tc.name+"/RESP"+proto, func(t *testing.T) {
				t.Parallel()
				ts := start(t)
				c := ts.dial(t)
				if proto == "3" {
					c.do("HELLO", "3")
				}
				key := "key:" + tc.name
				for i, st := range tc.steps {
					ts.at(st.at)
					args := []string{"CL.THROTTLE", key, tc.args[0], tc.args[1], tc.args[2]}
					if st.quantity != "" {
						args = append(args, st.quantity)
					}
					if got, want := c.do(args...), ints(st.want[:]...); got != want {
						t.Fatalf("step %d at %v, %q:\n got %q\nwant %q", i, st.at, args, got, want)
					}
				}
			})
		}
	}
}

// TestServerThrottleErrors checks every error text of CL.THROTTLE: redis-
// cell's for usage, integers and zero rates, Funnel's for the inputs it
// refuses; and that a refused request changes nothing.
func TestServerThrottleErrors(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	const (
		usage    = "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"
		parse    = "Cell error: Store error: Couldn't parse as integer: "
		zero     = "Cell error: Store error: Zero rates are not supported"
		negative = "Cell error: max_burst, count and period must not be negative"
		overflow = "Cell error: value overflows 64-bit nanoseconds"
		tooHigh  = "Cell error: rate too high: count per period must be at most 1000000000 per second (an emission interval period/count of at least 1ns)"
	)
	if got := c.do("CL.THROTTLE", "k", "4", "1", "1", "2"); got != ints(0, 5, 3, -1, 2) {
		t.Fatalf("setup: %q", got)
	}
	for _, tc := range []struct {
		args []string // after the command name
		want string
	}{
		// Arity: redis-cell's usage, with the name in lower case.
		{[]string{}, usage},
		{[]string{"k"}, usage},
		{[]string{"k", "1", "2"}, usage},
		{[]string{"k", "1", "2", "3", "4", "5"}, usage},
		// The first argument that is not an i64, verbatim.
		{[]string{"k", "x", "y", "z"}, parse + "x"},
		{[]string{"k", "1", "2", "z"}, parse + "z"},
		{[]string{"k", "1", "2", "3", "q"}, parse + "q"},
		{[]string{"k", "", "1", "1"}, parse},
		{[]string{"k", " 1", "1", "1"}, parse + " 1"},
		{[]string{"k", "1 ", "1", "1"}, parse + "1 "},
		{[]string{"k", "1.5", "1", "1"}, parse + "1.5"},
		{[]string{"k", "1e3", "1", "1"}, parse + "1e3"},
		{[]string{"k", "0x10", "1", "1"}, parse + "0x10"},
		{[]string{"k", "++1", "1", "1"}, parse + "++1"},
		{[]string{"k", "-", "1", "1"}, parse + "-"},
		{[]string{"k", "9223372036854775808", "1", "1"}, parse + "9223372036854775808"},
		{[]string{"k", "1", "-9223372036854775809", "1"}, parse + "-9223372036854775809"},
		{[]string{"k", "\xff\x00", "1", "1"}, parse + "\xff\x00"},
		{[]string{"k", "1\r\n2", "1", "1"}, parse + "1  2"},
		// Integers are all parsed before the rate is checked.
		{[]string{"k", "1", "0", "x"}, parse + "x"},
		{[]string{"k", "1", "0", "60"}, zero},
		{[]string{"k", "1", "30", "0"}, zero},
		{[]string{"k", "1", "0", "0"}, zero},
		{[]string{"k", "1", "-0", "60"}, zero},
		// period/count under 1 ns truncates to 0, which redis-cell calls
		// a zero rate: the rate is too high.
		{[]string{"k", "1", "2000000000", "1"}, tooHigh},
		{[]string{"k", "1", "9223372036854775807", "1"}, tooHigh},
		// Funnel's refusals, where redis-cell computes nonsense.
		{[]string{"k", "-1", "1", "1"}, negative},
		{[]string{"k", "1", "-1", "60"}, negative},
		{[]string{"k", "1", "1", "-60"}, negative},
		{[]string{"k", "1", "-1", "-60"}, negative},
		{[]string{"k", "-1", "1", "1", "-1"}, negative},
		{[]string{"k", "9223372036854775807", "1", "1"}, overflow},
		{[]string{"k", "1", "1", "9223372036854775807"}, overflow},
		{[]string{"k", "1", "1", "-9223372036854775808"}, negative},
		// The cost quantity*T overflows, for a charge or a refund.
		{[]string{"k", "4", "1", "1", "92233720368"}, overflow},
		{[]string{"k", "4", "1", "1", "-92233720368"}, overflow},
		{[]string{"k", "4", "1", "1", "-9223372036854775808"}, overflow},
		// The new TAT would pass 2^63 ns.
		{[]string{"fresh", "1", "1", "4000000000", "2"}, overflow},
	} {
		args := append([]string{"CL.THROTTLE"}, tc.args...)
		if got := c.do(args...); got != errr(tc.want) {
			t.Errorf("%q:\n got %q\nwant %q", args, got, errr(tc.want))
		}
	}
	// Nothing changed.
	if got := c.do("CL.THROTTLE", "k", "4", "1", "1", "0"); got != ints(0, 5, 3, -1, 2) {
		t.Errorf("k after the refused requests: %q", got)
	}
	if got := c.do("EXISTS", "fresh"); got != integer(0) {
		t.Errorf("a refused request wrote its key: EXISTS = %q", got)
	}
	// Intervals under a microsecond are exact, down to 1 ns.
	if got := c.do("CL.THROTTLE", "us", "0", "1000000", "1"); got != ints(0, 1, 0, -1, 0) {
		t.Errorf("T = 1 µs: %q", got)
	}
	if got := c.do("CL.THROTTLE", "ns", "5", "10000000", "1"); got != ints(0, 6, 5, -1, 0) {
		t.Errorf("T = 100 ns: %q", got)
	}
	if got := c.do("CL.THROTTLE", "ns1", "100000", "10000000", "1"); got != ints(0, 100001, 100000, -1, 0) {
		t.Errorf("T = 100 ns, burst 100000: %q", got)
	}
}

// TestServerThrottleCommandName checks that the command name is
// case-insensitive and that inline commands work as multibulk ones.
func TestServerThrottleCommandName(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	for i, name := range []string{"CL.THROTTLE", "cl.throttle", "Cl.ThRoTtLe"} {
		if got, want := c.do(name, "name", "15", "30", "60"), ints(0, 16, int64(15-i), -1, int64(2+2*i)); got != want {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}
	c.send("cl.throttle name 15 30 60\r\nCL.THROTTLE \"name\" 15 30 60 0\n")
	if got, want := c.read(), ints(0, 16, 12, -1, 8); got != want {
		t.Errorf("inline: got %q, want %q", got, want)
	}
	if got, want := c.read(), ints(0, 16, 12, -1, 8); got != want {
		t.Errorf("inline with quotes and LF: got %q, want %q", got, want)
	}
}

// TestServerThrottleKeys checks that keys are binary-safe and independent,
// and that a pipeline of distinct keys keeps each (the server reads keys in
// place in its buffer; the store must copy those it keeps).
func TestServerThrottleKeys(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	keys := []string{"a", "b", "a:b", "A", "", "\x00", "\x00\x01", "\xff\xfe", "caf\xc3", "line\r\nbreak", "sp ace", strings.Repeat("\x00", 1024), strings.Repeat("k", 100_000)}
	for _, k := range keys {
		if got := c.do("CL.THROTTLE", k, "0", "1", "3600"); got != ints(0, 1, 0, -1, 3600) {
			t.Fatalf("key %.20q: first request %q", k, got)
		}
	}
	for _, k := range keys {
		if got := c.do("CL.THROTTLE", k, "0", "1", "3600"); got != ints(1, 1, 0, 3600, 3600) {
			t.Fatalf("key %.20q: second request %q", k, got)
		}
		if got := c.do("PTTL", k); got != integer(3600_000) {
			t.Fatalf("PTTL %.20q = %q", k, got)
		}
	}
	// A pipeline of 2,000 keys in one write, then each key again.
	var b strings.Builder
	for i := range 2000 {
		b.WriteString(multibulk("CL.THROTTLE", fmt.Sprintf("p:%d", i), "0", "1", "60"))
	}
	c.send(b.String())
	for i := range 2000 {
		if got := c.read(); got != ints(0, 1, 0, -1, 60) {
			t.Fatalf("pipelined key %d: %q", i, got)
		}
	}
	for i := range 2000 {
		if got := c.do("EXISTS", fmt.Sprintf("p:%d", i)); got != integer(1) {
			t.Fatalf("EXISTS p:%d = %q", i, got)
		}
	}
	if n := ts.store.Len(); n != len(keys)+2000 {
		t.Fatalf("store holds %d keys, want %d", n, len(keys)+2000)
	}
}

// TestServerKeyCommands checks DEL, EXISTS, PTTL and TTL on limiter keys:
// a key exists while its bucket is not full, and its TTL is the time until
// it is full again.
func TestServerKeyCommands(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	steps := []struct {
		at   time.Duration
		args []string
		want string
	}{
		{0, []string{"PTTL", "k"}, integer(-2)},
		{0, []string{"TTL", "k"}, integer(-2)},
		{0, []string{"EXISTS", "k"}, integer(0)},
		{0, []string{"DEL", "k"}, integer(0)},
		{0, []string{"CL.THROTTLE", "k", "15", "30", "60", "3"}, ints(0, 16, 13, -1, 6)},
		{0, []string{"PTTL", "k"}, integer(6000)},
		{0, []string{"TTL", "k"}, integer(6)},
		// Repeated keys count each time, as in Redis.
		{0, []string{"EXISTS", "k", "k", "nokey"}, integer(2)},
		// Redis rounds TTL to the nearest second and truncates PTTL.
		{1500*ms + 1, []string{"PTTL", "k"}, integer(4499)},
		{1500*ms + 1, []string{"TTL", "k"}, integer(4)},
		{1500 * ms, []string{"TTL", "k"}, integer(5)},
		{6*sec - 1, []string{"PTTL", "k"}, integer(0)},
		{6*sec - 1, []string{"EXISTS", "k"}, integer(1)},
		// A full bucket is an absent key.
		{6 * sec, []string{"PTTL", "k"}, integer(-2)},
		{6 * sec, []string{"EXISTS", "k"}, integer(0)},
		{6 * sec, []string{"DEL", "k"}, integer(0)},
		// DEL resets a key, the way redis-cell's users do it.
		{10 * sec, []string{"CL.THROTTLE", "k", "0", "1", "60"}, ints(0, 1, 0, -1, 60)},
		{10 * sec, []string{"CL.THROTTLE", "j", "0", "1", "60"}, ints(0, 1, 0, -1, 60)},
		{10 * sec, []string{"CL.THROTTLE", "k", "0", "1", "60"}, ints(1, 1, 0, 60, 60)},
		{10 * sec, []string{"DEL", "k", "j", "nokey", "k"}, integer(2)},
		{10 * sec, []string{"CL.THROTTLE", "k", "0", "1", "60"}, ints(0, 1, 0, -1, 60)},
		{10 * sec, []string{"DEL"}, errr("ERR wrong number of arguments for 'del' command")},
		{10 * sec, []string{"EXISTS"}, errr("ERR wrong number of arguments for 'exists' command")},
		{10 * sec, []string{"PTTL"}, errr("ERR wrong number of arguments for 'pttl' command")},
		{10 * sec, []string{"TTL", "a", "b"}, errr("ERR wrong number of arguments for 'ttl' command")},
	}
	for i, st := range steps {
		ts.at(st.at)
		if got := c.do(st.args...); got != st.want {
			t.Fatalf("step %d at %v, %q:\n got %q\nwant %q", i, st.at, st.args, got, st.want)
		}
	}
}

// TestServerThrottleConcurrent hammers one key from 8 connections at each
// of a series of instants: the server admits exactly limit + elapsed/T, as
// the conformance suite requires of the store.
func TestServerThrottleConcurrent(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	const (
		clients = 8
		perStep = 20
		steps   = 10
		stepLen = 250 * ms
	)
	conns := make([]*client, clients)
	for i := range conns {
		conns[i] = ts.dial(t)
	}
	var admitted, limited int
	for s := range steps {
		ts.at(time.Duration(s) * stepLen)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var b strings.Builder
				for range perStep {
					b.WriteString(multibulk("CL.THROTTLE", "hot", "4", "10", "1"))
				}
				if _, err := c.nc.Write([]byte(b.String())); err != nil {
					t.Error(err)
					return
				}
				for range perStep {
					r, err := readReply(c.br)
					mu.Lock()
					switch {
					case err != nil:
						t.Error(err)
					case strings.HasPrefix(r, "*5\r\n:0\r\n"):
						admitted++
					case strings.HasPrefix(r, "*5\r\n:1\r\n"):
						limited++
					default:
						t.Errorf("reply %q", r)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	// T = 100 ms, limit 5.
	want := 5 + int((steps-1)*stepLen/(100*ms))
	if admitted != want || admitted+limited != clients*perStep*steps {
		t.Fatalf("admitted %d, limited %d; want %d admitted of %d", admitted, limited, want, clients*perStep*steps)
	}
	c := ts.dial(t)
	info := c.do("INFO", "stats")
	if field(info, "throttle_allowed") != strconv.Itoa(admitted) || field(info, "throttle_limited") != strconv.Itoa(limited) {
		t.Fatalf("INFO stats:\n%s\nwant %d allowed, %d limited", info, admitted, limited)
	}
}
