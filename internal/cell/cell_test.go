package cell

import (
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

func args(s string) [][]byte {
	var out [][]byte
	for _, f := range strings.Fields(s) {
		out = append(out, []byte(f))
	}
	return out
}

// parsed is what ParseLimitInto answers for valid arguments.
type parsed struct {
	Limit    funnel.Checked
	Quantity int64
}

// parse calls ParseLimitInto as a server does.
func parse(in [][]byte) (parsed, error) {
	var got parsed
	q, err := ParseLimitInto(in, &got.Limit)
	got.Quantity = q
	return got, err
}

func TestParseLimitInto(t *testing.T) {
	for _, c := range []struct {
		in   string
		want parsed
		err  string
	}{
		{in: "user123 15 30 60", want: parsed{Quantity: 1, Limit: funnel.Checked{GCRA: gcra.Params{Burst: 15, Limit: 16, Interval: 2e9, Tolerance: 32e9}}}},
		{in: "k +15 030 60 -0", want: parsed{Quantity: 0, Limit: funnel.Checked{GCRA: gcra.Params{Burst: 15, Limit: 16, Interval: 2e9, Tolerance: 32e9}}}},
		{in: "k 0 1 1 5", want: parsed{Quantity: 5, Limit: funnel.Checked{GCRA: gcra.Params{Limit: 1, Interval: 1e9, Tolerance: 1e9}}}},
		{in: "", err: UsageError},
		{in: "k", err: UsageError},
		{in: "k 1 2", err: UsageError},
		{in: "k 1 2 3 4 5", err: UsageError},
		{in: "k 1.5 30 60", err: ParseErrorPrefix + "1.5"},
		{in: "k 15 1e3 60", err: ParseErrorPrefix + "1e3"},
		{in: "k 15 30 0x10", err: ParseErrorPrefix + "0x10"},
		{in: "k 15 30 60 q", err: ParseErrorPrefix + "q"},
		{in: "k 15 30 60 9223372036854775808", err: ParseErrorPrefix + "9223372036854775808"},
		{in: "k 15 30 60 +-1", err: ParseErrorPrefix + "+-1"},
		// Integers are parsed in order before any range check.
		{in: "k -1 x 60", err: ParseErrorPrefix + "x"},
		{in: "k 15 0 60", err: ZeroRateError},
		{in: "k 15 30 0", err: ZeroRateError},
		{in: "k -1 0 60", err: ZeroRateError},
		// A rate above 1 per ns is not a zero rate, whatever redis-cell says.
		{in: "k 0 2000000000 1", err: ErrRateTooHigh.Error()},
		{in: "k 1 9223372036854775807 1", err: ErrRateTooHigh.Error()},
		{in: "k 1 -9223372036854775807 1", err: ErrNegative.Error()},
		// Funnel's own refusals where redis-cell misbehaves.
		{in: "k -1 30 60", err: ErrNegative.Error()},
		{in: "k 1 -30 60", err: ErrNegative.Error()},
		{in: "k 1 -30 -60", err: ErrNegative.Error()},
		// A negative quantity is a refund; intervals down to 1 ns are exact.
		{in: "k 1 30 60 -1", want: parsed{Quantity: -1, Limit: funnel.Checked{GCRA: gcra.Params{Burst: 1, Limit: 2, Interval: 2e9, Tolerance: 4e9}}}},
		{in: "k 1 30 60 -9223372036854775808", want: parsed{Quantity: math.MinInt64, Limit: funnel.Checked{GCRA: gcra.Params{Burst: 1, Limit: 2, Interval: 2e9, Tolerance: 4e9}}}},
		{in: "k 5 10000000 1", want: parsed{Quantity: 1, Limit: funnel.Checked{GCRA: gcra.Params{Burst: 5, Limit: 6, Interval: 100, Tolerance: 600}}}},
		{in: "k 0 1000000000 1", want: parsed{Quantity: 1, Limit: funnel.Checked{GCRA: gcra.Params{Limit: 1, Interval: 1, Tolerance: 1}}}},
		{in: "k -1 30 60 -1", err: ErrNegative.Error()},
		{in: "k 9223372036854775807 1 1", err: ErrOverflow.Error()},
		{in: "k 0 1 9223372036854775807", err: ErrOverflow.Error()},
		{in: "k 0 1 -9223372036854775808", err: ErrNegative.Error()},
		{in: "k 5 1 3000000000", err: ErrOverflow.Error()},
	} {
		got, err := parse(args(c.in))
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("ParseLimitInto(%q) error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got.Quantity != c.want.Quantity || got.Limit.GCRA != c.want.Limit.GCRA || got.Limit.Algorithm != funnel.GCRA {
			t.Errorf("ParseLimitInto(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestParseErrorType(t *testing.T) {
	_, err := parse(args("k 1 2 x"))
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Arg != "x" {
		t.Fatalf("%#v", err)
	}
}

func TestSeconds(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want int64
	}{
		{2 * time.Second, 2}, {2001 * time.Millisecond, 3}, {10 * time.Millisecond, 1},
		{600 * time.Microsecond, 0}, {time.Second + 500, 1}, {-500 * time.Millisecond, 0},
		{-time.Second, -1}, {0, 0}, {time.Millisecond, 1}, {999 * time.Microsecond, 0},
		{2*time.Second + 999999999, 3}, {gcra.Never, 9223372037},
		// From 2^24 s on, the float64 of seconds + nanoseconds/1e9 rounds
		// a duration just under a whole second up (redis-cell's
		// as_seconds_f64), before the millisecond adds one.
		{16777215*time.Second + 999999999, 16777216},
		{16777216*time.Second + 999999999, 16777218},
		{16777216*time.Second + 999999998, 16777217},
		{72303342999999993, 72303344}, // CL.THROTTLE k 20 3 10329049 21
		{-16777216*time.Second - 999999999, -16777217},
	} {
		if got := Seconds(c.in); got != c.want {
			t.Errorf("Seconds(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestReply(t *testing.T) {
	p, _ := gcra.NewParams(15, 30, time.Minute)
	for _, c := range []struct {
		r    funnel.Result
		want [5]int64
	}{
		{funnel.Result{Allowed: true, Limit: 16, Remaining: 15, ResetAfter: 2 * time.Second}, [5]int64{0, 16, 15, -1, 2}},
		{funnel.Result{Limit: 16, RetryAfter: 2 * time.Second, ResetAfter: 32 * time.Second}, [5]int64{1, 16, 0, 2, 32}},
		{funnel.Result{Limit: 16, RetryAfter: gcra.Never, ResetAfter: 0}, [5]int64{1, 16, 16, -1, 0}},
		{funnel.Result{Limit: 16, RetryAfter: 1, ResetAfter: 30*time.Second + 1}, [5]int64{1, 16, 0, 0, 30}},
	} {
		if got := Reply(p, c.r); got != c.want {
			t.Errorf("Reply(%+v) = %v, want %v", c.r, got, c.want)
		}
	}
}

// Below 2^24 seconds a float64 holds every nanosecond apart from the next
// whole second, so Seconds is the integer rule: whole seconds, and one more
// if a whole millisecond remains.
func TestSecondsIsIntegerBelow2To24(t *testing.T) {
	integer := func(d time.Duration) int64 {
		s := int64(d / time.Second)
		if (d%time.Second)/time.Millisecond > 0 {
			s++
		}
		return s
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		d := time.Duration(r.Int64N(1 << 24 * int64(time.Second)))
		if i%2 == 1 {
			d = d - d%time.Second + time.Second - time.Duration(r.Int64N(1e6)) // just under a second
		}
		if got, want := Seconds(d), integer(d); got != want {
			t.Fatalf("Seconds(%d) = %d, integer rule %d", d, got, want)
		}
	}
}

// Remaining reproduces redis-cell's microsecond arithmetic, artefacts
// included.
func TestRemaining(t *testing.T) {
	mk := func(burst, count int64, period time.Duration) gcra.Params {
		p, err := gcra.NewParams(burst, count, period)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		p     gcra.Params
		reset time.Duration
		want  int64
	}{
		{mk(15, 30, time.Minute), 2 * time.Second, 15},
		{mk(20, 1500, time.Second), 666666, 20},
		{mk(0, 500250, time.Second), 999, 1},                  // refused, yet 1 µs free / 1 µs
		{mk(1000, 93, 10*time.Millisecond), 0, 1005},          // T = 107526 ns: above the limit
		{mk(4, 1, time.Second), 5*time.Second + 999, 0},       // free capacity just under 0
		{mk(4, 1, time.Second), 6*time.Second - 1, 0},         // next > -T: 0
		{mk(4, 1, time.Second), 500 * time.Millisecond, 4},    // 4.5 → 4
		{mk(0, 1e6, time.Second), 0, 1},                       // T = 1 µs
		{mk(0, 1, math.MaxInt64), 0, 1},                       // T = 292 years
		{mk(0, 1, math.MaxInt64), math.MaxInt64 / 2, 0},       // half of it
		{mk(9, 10, time.Second), 700*time.Millisecond - 1, 3}, // 300000 µs / 100000 µs
		// Under 1 µs, where redis-cell divides by zero: exact nanoseconds.
		{mk(5, 1e7, time.Second), 100, 5},           // CL.THROTTLE k 5 10000000 1
		{mk(100000, 1e7, time.Second), 100, 100000}, // CL.THROTTLE k 100000 10000000 1
		{mk(0, 1000001, time.Second), 0, 1},         // T = 999 ns
		{mk(2, 1e9, time.Second), 0, 3},             // T = 1 ns
		{mk(2, 1e9, time.Second), 3, 0},             // T = 1 ns, none free
		{mk(5, 1e7, time.Second), 699, 0},           // next = -99 > -T: 0
		{mk(5, 1e7, time.Second), 451, 1},           // 149 / 100
	} {
		if got := Remaining(c.p, c.reset); got != c.want {
			t.Errorf("Remaining(T=%d, tol=%d, reset=%d) = %d, want %d", c.p.Interval, c.p.Tolerance, c.reset, got, c.want)
		}
	}
}

// FuzzParseInt checks ParseInt against strconv: the same accepted strings
// (strconv also takes '_' only with base 0, which is not used here).
func FuzzParseInt(f *testing.F) {
	for _, s := range []string{"0", "-0", "+15", "015", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "", "+", "-", "1.5", "1e3", "0x10", " 1", "+-1", "--1",
		"999999999999999999", "-999999999999999999", "1000000000000000000", "-000000000000000001", "12345678901234567x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := ParseInt([]byte(s))
		want, err := strconv.ParseInt(s, 10, 64)
		if ok != (err == nil) || got != want && ok {
			t.Fatalf("ParseInt(%q) = %d, %v; strconv %d, %v", s, got, ok, want, err)
		}
	})
}

// FuzzParseLimitInto checks that ParseLimitInto never panics and that
// whatever it accepts is a valid funnel.
func FuzzParseLimitInto(f *testing.F) {
	f.Add("user123", "15", "30", "60", "")
	f.Add("k", "-1", "0", "60", "1")
	f.Add("k", "0", "1", "9223372036854775807", "")
	f.Add("\xff", "9223372036854775807", "1", "1", "9223372036854775807")
	f.Fuzz(func(t *testing.T, key, a, b, c, q string) {
		in := [][]byte{[]byte(key), []byte(a), []byte(b), []byte(c)}
		if q != "" {
			in = append(in, []byte(q))
		}
		got, err := parse(in)
		if err != nil {
			return
		}
		if p := got.Limit.GCRA; p.Interval < 1 ||
			p.Limit != p.Burst+1 || p.Tolerance/p.Limit != p.Interval {
			t.Fatalf("ParseLimitInto accepted %q into %+v", in, got)
		}
	})
}

func BenchmarkParseLimitInto(b *testing.B) {
	in := args("user:12345 15 30 60 1")
	var c funnel.Checked
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := ParseLimitInto(in, &c); err != nil {
			b.Fatal(err)
		}
	}
}
