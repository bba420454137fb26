package algo

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// epoch is the instant the step tables start from: 2026-11-22
// 12:28:28.971038011 UTC, 28,961,989 ns before a second boundary.
const epoch = int64(1_795_350_508_971_038_011)

const ms = int64(time.Millisecond)

func TestMillis(t *testing.T) {
	for _, c := range []struct{ now, floor, ceil int64 }{
		{0, 0, 0}, {1, 0, 1}, {ms - 1, 0, 1}, {ms, 1, 1}, {ms + 1, 1, 2},
		{-1, -1, 0}, {-ms, -1, -1}, {-ms - 1, -2, -1},
		{epoch, 1_795_350_508_971, 1_795_350_508_972},
		{math.MaxInt64, math.MaxInt64 / ms, math.MaxInt64/ms + 1},
		{math.MinInt64, math.MinInt64/ms - 1, math.MinInt64 / ms},
	} {
		if got := Millis(c.now); got != c.floor {
			t.Errorf("Millis(%d) = %d, want %d", c.now, got, c.floor)
		}
		if got := CeilMillis(c.now); got != c.ceil {
			t.Errorf("ceilMillis(%d) = %d, want %d", c.now, got, c.ceil)
		}
	}
}

func TestUntil(t *testing.T) {
	for _, c := range []struct {
		now, ms int64
		want    time.Duration
	}{
		{epoch, 1_795_350_508_972, 961_989},
		{epoch, 1_795_350_508_971, 0}, // a boundary in the past
		{epoch, 0, 0},
		{0, 5, 5 * time.Millisecond},
		{5 * ms, 5, 0},
		{5*ms - 1, 5, 1},
		{epoch, math.MaxInt64 / ms, time.Duration(math.MaxInt64/ms*ms - epoch)},
		{epoch, math.MaxInt64/ms + 1, Never},
		{epoch, math.MaxInt64, Never},
		{-epoch, math.MaxInt64 / ms, Never}, // the difference overflows
		{epoch, math.MinInt64, 0},
	} {
		if got := Until(c.now, c.ms); got != c.want {
			t.Errorf("until(%d, %d) = %d, want %d", c.now, c.ms, got, c.want)
		}
	}
}

func TestNewWindowParams(t *testing.T) {
	for _, c := range []struct {
		count  int64
		period time.Duration
		want   WindowParams
		err    error
	}{
		{3, time.Second, WindowParams{Count: 3, Period: 1000}, nil},
		{1, time.Millisecond, WindowParams{Count: 1, Period: 1}, nil},
		{MaxCount, MaxPeriod, WindowParams{Count: MaxCount, Period: int64(MaxPeriod / time.Millisecond)}, nil},
		{0, time.Second, WindowParams{}, ErrZeroSize},
		{1, 0, WindowParams{}, ErrZeroSize},
		{-1, 0, WindowParams{}, ErrZeroSize},
		{-1, time.Second, WindowParams{}, ErrNegative},
		{1, -time.Second, WindowParams{}, ErrNegative},
		{1, time.Millisecond - 1, WindowParams{}, ErrPeriodTooShort},
		{1, time.Millisecond + 1, WindowParams{}, ErrPeriodTooShort},
		{1, 1500 * time.Microsecond, WindowParams{}, ErrPeriodTooShort},
		{MaxCount + 1, time.Second, WindowParams{}, ErrOverflow},
		{1, MaxPeriod + time.Millisecond, WindowParams{}, ErrOverflow},
		{math.MaxInt64, math.MaxInt64 / time.Millisecond * time.Millisecond, WindowParams{}, ErrOverflow},
	} {
		got, err := NewWindowParams(c.count, c.period)
		if !errors.Is(err, c.err) || got != c.want {
			t.Errorf("NewWindowParams(%d, %v) = %+v, %v; want %+v, %v", c.count, c.period, got, err, c.want, c.err)
		}
	}
}

func TestCheckSlidingAndLog(t *testing.T) {
	for _, c := range []struct {
		p             WindowParams
		sliding, slog error
	}{
		{WindowParams{Count: 100, Period: 60_000}, nil, nil},
		{WindowParams{Count: MaxLogCount, Period: 1}, nil, nil},
		{WindowParams{Count: MaxLogCount + 1, Period: 1}, nil, ErrTooManyEvents},
		{WindowParams{Count: MaxCount - 1, Period: MaxWeight / MaxCount}, nil, ErrTooManyEvents},
		{WindowParams{Count: MaxCount, Period: MaxWeight / MaxCount}, ErrOverflow, ErrTooManyEvents},
		{WindowParams{Count: MaxCount, Period: MaxWeight/MaxCount + 1}, ErrOverflow, ErrTooManyEvents},
		{WindowParams{Count: 1 << 20, Period: int64(MaxPeriod / time.Millisecond)}, ErrOverflow, nil},
		{WindowParams{Count: 28_560, Period: int64(MaxPeriod / time.Millisecond)}, nil, nil},
		{WindowParams{Count: 28_561, Period: int64(MaxPeriod / time.Millisecond)}, ErrOverflow, nil},
	} {
		if err := c.p.CheckSliding(); !errors.Is(err, c.sliding) {
			t.Errorf("%+v.CheckSliding() = %v, want %v", c.p, err, c.sliding)
		}
		if err := c.p.CheckLog(); !errors.Is(err, c.slog) {
			t.Errorf("%+v.CheckLog() = %v, want %v", c.p, err, c.slog)
		}
	}
}

// A clock drives the arrivals of the property and fuzz tests. Each byte
// chooses the next instant: at the same instant, 1 ns later, on either side
// of the next millisecond boundary, on either side of the next edge that
// the algorithm reports (a window's end, a RetryAfter, a lease's expiry),
// or a fraction of the period later (up to about three periods, so that
// windows also go stale).
type clock struct {
	now    int64
	period int64 // ns
}

func (c *clock) advance(b byte, edge int64) {
	k := int64(b / 12)
	next := (Millis(c.now) + 1) * ms
	switch b % 12 {
	case 0:
	case 1:
		c.now++
	case 2:
		c.now = next
	case 3:
		c.now = max(c.now, next-1)
	case 4, 5, 6:
		if edge > c.now+1 && edge < c.now+1<<50 {
			c.now = edge + int64(b%12) - 5
		} else {
			c.now += k
		}
	case 7:
		c.now += c.period * k / 8
	case 8:
		c.now += k * 7919 * 1000
	case 9:
		c.now += 2*c.period + 1
	case 10:
		c.now += c.period - 1
	case 11:
		c.now += k * 104_729
	}
}

// randomSteps returns n random fuzz-style bytes for the property tests.
func randomSteps(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// maxInInterval returns the largest number of the sorted times that lie in
// one half-open interval [t, t+d).
func maxInInterval(times []int64, d int64) (most int, at int64) {
	j := 0
	for i := range times {
		for j < len(times) && times[j] < times[i]+d {
			j++
		}
		if j-i > most {
			most, at = j-i, times[i]
		}
	}
	return most, at
}

// checkExact checks that a refused request's RetryAfter is exact: decide,
// called on the same state with no other request, refuses 1 ns before
// now+RetryAfter and admits at it.
func checkExact(t *testing.T, name string, now int64, r Result, decide func(now int64) bool) {
	if r.Allowed || r.RetryAfter == Never {
		return
	}
	if r.RetryAfter <= 0 {
		t.Fatalf("%s at %d: refused with RetryAfter %v", name, now-epoch, r.RetryAfter)
	}
	at := now + int64(r.RetryAfter)
	if decide(at - 1) {
		t.Fatalf("%s at epoch%+d: admitted 1 ns before RetryAfter %v", name, now-epoch, r.RetryAfter)
	}
	if !decide(at) {
		t.Fatalf("%s at epoch%+d: refused at RetryAfter %v", name, now-epoch, r.RetryAfter)
	}
}

// events are the admitted units of a run, one time (ns) per unit, in order.
type events []int64

func (e *events) add(now, q int64) {
	for range q {
		*e = append(*e, now)
	}
}

// dropNewest removes up to q of the newest units at or after from.
func (e *events) dropNewest(q, from int64) {
	for q > 0 && len(*e) > 0 && (*e)[len(*e)-1] >= from {
		*e = (*e)[:len(*e)-1]
		q--
	}
}
