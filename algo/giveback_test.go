package algo

import (
	"math"
	"slices"
	"testing"
)

// A funnel's give-back is bounded by the part of the reservation's units
// that has not drained: the TAT its take left, less now.
func TestFunnelGiveBack(t *testing.T) {
	p := mustGCRA(t, 4, 1, 1e9) // one a second, 5 at once
	const s = int64(1e9)
	for _, c := range []struct {
		name          string
		now, tat, end int64
		q             int64
		want          int64
		live          bool
	}{
		{"nothing drained", 0, 5 * s, 5 * s, 3, 2 * s, true},
		{"the whole TAT", 0, 5 * s, 5 * s, 5, 0, false},
		{"others queued behind", 0, 8 * s, 5 * s, 3, 5 * s, true},
		{"partly drained", 3 * s, 8 * s, 5 * s, 3, 6 * s, true},
		{"drained, others' units since", 5 * s, 10 * s, 5 * s, 5, 10 * s, true},
		{"drained long ago", 9 * s, 10 * s, 5 * s, 5, 10 * s, true},
		{"nothing to give", 0, 5 * s, 5 * s, 0, 5 * s, true},
		{"an empty key", 6 * s, 5 * s, 5 * s, 2, 5 * s, false},
		{"q times the interval past int64", 0, 5 * s, 5 * s, math.MaxInt64, 0, false},
		{"an end that bounds nothing", 0, 5 * s, math.MaxInt64, 2, 3 * s, true},
	} {
		got, live := FunnelGiveBack(c.now, c.tat, p, c.end, c.q)
		if got != c.want || live != c.live {
			t.Errorf("%s: %d, %v; want %d, %v", c.name, got, live, c.want, c.live)
		}
	}
}

// Window give-backs come only from the state that holds the reservation's
// units: not from a later window's (the clock stepped back).
func TestWindowGiveBackLaterState(t *testing.T) {
	const now = int64(5_200 * msNS)
	span := EpochSpan(now, 1000)
	later := Fixed{Start: 6000, N: 3}
	if got := FixedGiveBack(later, span, 5100, 2); got != later {
		t.Errorf("fixed: %+v from a later window's state", got)
	}
	if got := FixedGiveBack(Fixed{Start: 5000, N: 3}, span, 5100, 2); got != (Fixed{Start: 5000, N: 1}) {
		t.Errorf("fixed: %+v from the window's state", got)
	}
	p := WindowParams{Count: 4, Period: 1000}
	ls := Sliding{Start: 6000, Prev: 2, Cur: 2}
	if got := SlidingGiveBack(now, ls, p, 5100, 2); got != ls {
		t.Errorf("sliding: %+v from a later window's state", got)
	}
	if got := SlidingGiveBack(now, Sliding{Start: 5000, Prev: 1, Cur: 2}, p, 4100, 1); got != (Sliding{Start: 5000, Cur: 2}) {
		t.Errorf("sliding: %+v from the previous window", got)
	}
}

// A log over its count gives nothing back; one within it drops entries of
// the reservation's millisecond only, old ones included.
func TestLogGiveBack(t *testing.T) {
	p := WindowParams{Count: 3, Period: 1000}
	now := int64(2_100 * msNS)
	over := []int64{2000, 2000, 2000, 2000}
	if got := LogGiveBack(now, slices.Clone(over), p, 2000, 2); !slices.Equal(got, over) {
		t.Errorf("over its count: %v", got)
	}
	if got := LogGiveBack(now, []int64{900, 1500, 2000, 2000}, p, 2000, 1); !slices.Equal(got, []int64{900, 1500, 2000}) {
		t.Errorf("within its count: %v", got)
	}
	if got := LogGiveBack(now, []int64{900, 1500}, p, 1700, 1); !slices.Equal(got, []int64{900, 1500}) {
		t.Errorf("no entry of the millisecond: %v", got)
	}
}
