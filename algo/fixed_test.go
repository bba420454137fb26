package algo

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // the zones of the tests, whatever the machine has
)

var zones sync.Map // name → *time.Location, loaded once

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	zones.Store(name, loc)
	return loc
}

func TestEpochSpan(t *testing.T) {
	const sec = 1_795_350_508_000 // epoch's second, in ms
	for _, c := range []struct {
		now, period int64
		want        Span
	}{
		{epoch, 1000, Span{sec, sec + 1000}},
		{epoch, 1, Span{sec + 971, sec + 972}},
		{sec * ms, 1000, Span{sec, sec + 1000}},          // on the edge: the window it opens
		{sec*ms - 1, 1000, Span{sec - 1000, sec}},        // 1 ns before: the window before
		{(sec+1000)*ms - 1, 1000, Span{sec, sec + 1000}}, // 1 ns before the end
		{epoch, 60_000, Span{1_795_350_480_000, 1_795_350_540_000}},
		{epoch, 86_400_000, Span{1_795_305_600_000, 1_795_392_000_000}}, // midnight UTC
		{epoch, 7, Span{sec + 971 - (sec+971)%7, sec + 971 - (sec+971)%7 + 7}},
		{0, 1000, Span{0, 1000}},
		{-1, 1000, Span{-1000, 0}},
	} {
		if got := EpochSpan(c.now, c.period); got != c.want {
			t.Errorf("EpochSpan(%d, %d) = %+v, want %+v", c.now, c.period, got, c.want)
		}
	}
}

func TestCalendarSpan(t *testing.T) {
	for _, c := range []struct {
		zone  string
		unit  byte
		at    string // an instant of the span
		start string // the span's first instant
		hours int    // its length
	}{
		{"", 'd', "2026-11-22T12:28:28Z", "2026-11-22T00:00:00Z", 24},
		{"UTC", 'x', "2026-11-22T12:28:28Z", "2026-11-22T00:00:00Z", 24}, // an unknown unit is a day
		// Daylight saving time: days of 23 and 25 hours.
		{"Europe/Paris", 'd', "2026-03-29T12:00:00+02:00", "2026-03-29T00:00:00+01:00", 23},
		{"Europe/Paris", 'd', "2026-10-25T12:00:00+01:00", "2026-10-25T00:00:00+02:00", 25},
		{"Europe/Paris", 'd', "2026-10-25T02:30:00+01:00", "2026-10-25T00:00:00+02:00", 25}, // the second 02:30
		{"America/New_York", 'd', "2026-03-08T03:00:00-04:00", "2026-03-08T00:00:00-05:00", 23},
		{"America/New_York", 'd', "2026-11-01T01:30:00-05:00", "2026-11-01T00:00:00-04:00", 25},
		{"America/New_York", 'd', "2026-11-01T23:59:59-05:00", "2026-11-01T00:00:00-04:00", 25},
		// Clocks that jump over midnight: the day starts at the jump.
		{"America/Havana", 'd', "2026-03-08T01:00:00-04:00", "2026-03-08T01:00:00-04:00", 23},
		{"America/Havana", 'd', "2026-03-07T23:59:59-05:00", "2026-03-07T00:00:00-05:00", 24},
		{"America/Havana", 'd', "2026-11-01T00:30:00-05:00", "2026-11-01T00:00:00-04:00", 25},
		{"Atlantic/Azores", 'd', "2026-03-29T05:00:00+00:00", "2026-03-29T01:00:00+00:00", 23},
		{"Atlantic/Azores", 'd', "2026-03-28T23:30:00-01:00", "2026-03-28T00:00:00-01:00", 24},
		{"America/Santiago", 'd', "2026-09-06T01:00:00-03:00", "2026-09-06T01:00:00-03:00", 23},
		{"America/Santiago", 'd', "2026-04-04T23:30:00-04:00", "2026-04-04T00:00:00-03:00", 25},
		{"America/Santiago", 'm', "2026-09-06T12:00:00-03:00", "2026-09-01T00:00:00-04:00", 30*24 - 1},
		// Clocks that go back to midnight: the day starts at the first one.
		{"Antarctica/Casey", 'd', "2023-03-09T00:30:00+08:00", "2023-03-09T00:00:00+11:00", 27},
		// Samoa skipped 30 December 2011.
		{"Pacific/Apia", 'd', "2011-12-29T23:59:59-10:00", "2011-12-29T00:00:00-10:00", 24},
		{"Pacific/Apia", 'd', "2011-12-31T00:00:00+14:00", "2011-12-31T00:00:00+14:00", 24},
		{"Pacific/Apia", 'w', "2011-12-29T12:00:00-10:00", "2011-12-26T00:00:00-10:00", 6 * 24},
		// Months of 28 to 31 days, across a year end and a change of time.
		{"", 'm', "2026-02-14T00:00:00Z", "2026-02-01T00:00:00Z", 28 * 24},
		{"", 'm', "2028-02-29T23:59:59Z", "2028-02-01T00:00:00Z", 29 * 24},
		{"", 'm', "2026-04-30T12:00:00Z", "2026-04-01T00:00:00Z", 30 * 24},
		{"", 'm', "2026-12-31T23:59:59Z", "2026-12-01T00:00:00Z", 31 * 24},
		{"", 'm', "2027-01-01T00:00:00Z", "2027-01-01T00:00:00Z", 31 * 24},
		{"Europe/Paris", 'm', "2026-03-31T23:59:59+02:00", "2026-03-01T00:00:00+01:00", 31*24 - 1},
		{"Europe/Paris", 'm', "2026-10-01T00:00:00+02:00", "2026-10-01T00:00:00+02:00", 31*24 + 1},
		{"America/New_York", 'm', "2026-12-01T00:00:00-05:00", "2026-12-01T00:00:00-05:00", 31 * 24},
		// ISO weeks start on Monday, across a year end and a change of time.
		{"", 'w', "2026-01-01T10:00:00Z", "2025-12-29T00:00:00Z", 7 * 24},
		{"", 'w', "2027-01-03T23:59:59Z", "2026-12-28T00:00:00Z", 7 * 24},
		{"", 'w', "2027-01-04T00:00:00Z", "2027-01-04T00:00:00Z", 7 * 24},
		{"", 'w', "2026-11-22T12:28:28Z", "2026-11-16T00:00:00Z", 7 * 24}, // a Sunday
		{"Europe/Paris", 'w', "2026-03-29T03:00:00+02:00", "2026-03-23T00:00:00+01:00", 7*24 - 1},
		{"America/New_York", 'w', "2026-11-02T00:00:00-05:00", "2026-11-02T00:00:00-05:00", 7 * 24},
		{"America/New_York", 'w', "2026-11-01T23:00:00-05:00", "2026-10-26T00:00:00-04:00", 7*24 + 1},
	} {
		var loc *time.Location
		if c.zone != "" {
			loc = mustZone(t, c.zone)
		}
		at, err1 := time.Parse(time.RFC3339, c.at)
		start, err2 := time.Parse(time.RFC3339, c.start)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		want := Span{Start: start.UnixMilli(), End: start.UnixMilli() + int64(c.hours)*3_600_000}
		name := c.zone + " " + string(c.unit) + " " + c.at
		if got := CalendarSpan(at.UnixNano()+123, c.unit, loc); got != want {
			t.Errorf("%s: got %v, want %v", name, spanString(got, loc), spanString(want, loc))
			continue
		}
		checkTiling(t, name, want, c.unit, loc)
	}
}

// checkTiling checks that s is the span of its first and last nanosecond,
// and that the spans 1 ns either side of it end and start on its edges.
func checkTiling(t *testing.T, name string, s Span, unit byte, loc *time.Location) {
	t.Helper()
	for _, c := range []struct {
		now      int64
		want     Span
		startsAt bool // only the edge that touches s is known
	}{
		{s.Start * ms, s, true},
		{s.End*ms - 1, s, true},
		{s.Start*ms - 1, Span{End: s.Start}, false},
		{s.End * ms, Span{Start: s.End}, false},
	} {
		got := CalendarSpan(c.now, unit, loc)
		ok := got == c.want
		if !c.startsAt {
			ok = got.Start < got.End && (c.want.End == 0 || got.End == c.want.End) && (c.want.Start == 0 || got.Start == c.want.Start)
		}
		if !ok {
			t.Errorf("%s: at %v the span is %v", name, time.Unix(0, c.now).In(orUTC(loc)), spanString(got, loc))
		}
	}
}

func orUTC(loc *time.Location) *time.Location {
	if loc == nil {
		return time.UTC
	}
	return loc
}

func spanString(s Span, loc *time.Location) string {
	return time.UnixMilli(s.Start).In(orUTC(loc)).String() + " to " + time.UnixMilli(s.End).In(orUTC(loc)).String()
}

// Every second of a few years in zones whose clocks change at midnight (or
// went back across it, as America/Goose_Bay's did until 2010) falls in the
// span that CalendarSpan returns, and the spans tile the time line.
func TestCalendarSpanTiles(t *testing.T) {
	zones := []string{"Europe/Paris", "America/New_York", "America/Havana", "Atlantic/Azores",
		"America/Santiago", "Antarctica/Casey", "Pacific/Apia", "America/Goose_Bay", "Australia/Lord_Howe",
		"Asia/Kathmandu", "Africa/Cairo"}
	from, to := time.Date(2009, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	if testing.Short() {
		zones = zones[:4]
		from = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	for _, z := range zones {
		loc := mustZone(t, z)
		for _, unit := range []byte{'d', 'w', 'm'} {
			s := CalendarSpan(from.UnixNano(), unit, loc)
			for s.Start < to.UnixMilli() {
				next := CalendarSpan(s.End*ms, unit, loc)
				if next.Start != s.End || next.End <= next.Start {
					t.Fatalf("%s %c: %v is followed by %v", z, unit, spanString(s, loc), spanString(next, loc))
				}
				// Around every change of offset inside the span, the span holds it.
				for u := s.Start / 1000; ; {
					_, end := time.Unix(u, 0).In(loc).ZoneBounds()
					if end.IsZero() || end.UnixMilli() >= s.End {
						break
					}
					for _, now := range []int64{end.UnixNano() - 1, end.UnixNano()} {
						if got := CalendarSpan(now, unit, loc); got != s {
							t.Fatalf("%s %c: at %v the span is %v, not %v", z, unit, time.Unix(0, now).In(loc), spanString(got, loc), spanString(s, loc))
						}
					}
					u = end.Unix()
				}
				s = next
			}
		}
	}
}

func TestFixedDecide(t *testing.T) {
	const count = 3
	span := EpochSpan(epoch, 1000) // [..508000, ..509000) ms
	end := span.End * ms           // epoch + 28,961,989 ns
	next := Span{span.End, span.End + 1000}
	for i, c := range []struct {
		now     int64
		span    Span
		st      Fixed
		q       int64
		ok      bool
		rem     int64
		retry   time.Duration
		reset   time.Duration
		want    Fixed
		wantErr error
	}{
		{now: epoch, span: span, q: 0, ok: true, rem: 3}, // a peek on an empty key changes nothing
		{now: epoch, span: span, q: 1, ok: true, rem: 2, reset: 28_961_989, want: Fixed{span.Start, 1}},
		{now: epoch, span: span, st: Fixed{span.Start, 1}, q: 2, ok: true, rem: 0, reset: 28_961_989, want: Fixed{span.Start, 3}},
		{now: epoch, span: span, st: Fixed{span.Start, 3}, q: 0, ok: true, rem: 0, reset: 28_961_989, want: Fixed{span.Start, 3}},
		{now: epoch, span: span, st: Fixed{span.Start, 3}, q: 1, retry: 28_961_989, reset: 28_961_989, want: Fixed{span.Start, 3}},
		{now: epoch, span: span, st: Fixed{span.Start, 2}, q: 2, rem: 1, retry: 28_961_989, reset: 28_961_989, want: Fixed{span.Start, 2}},
		{now: epoch, span: span, st: Fixed{span.Start, 2}, q: 4, rem: 1, retry: Never, reset: 28_961_989, want: Fixed{span.Start, 2}},
		{now: epoch, span: span, q: 4, rem: 3, retry: Never}, // more than a window holds, on an empty key
		{now: end - 1, span: span, st: Fixed{span.Start, 3}, q: 1, retry: 1, reset: 1, want: Fixed{span.Start, 3}},
		// The next window: the state of the one before reads as empty.
		{now: end, span: next, st: Fixed{span.Start, 3}, q: 1, ok: true, rem: 2, reset: time.Second, want: Fixed{next.Start, 1}},
		{now: end, span: next, st: Fixed{span.Start, 3}, q: 0, ok: true, rem: 3, want: Fixed{span.Start, 3}},
		{now: end + 1, span: next, st: Fixed{span.Start, 3}, q: 3, ok: true, rem: 0, reset: time.Second - 1, want: Fixed{next.Start, 3}},
		{now: end + 5000*ms, span: Span{next.Start + 5000, next.End + 5000}, st: Fixed{next.Start, 3}, q: 1, ok: true, rem: 2, reset: time.Second, want: Fixed{next.Start + 5000, 1}},
		// A later window's state (a clock that went back) counts as the
		// current window's: no fresh window.
		{now: epoch, span: span, st: Fixed{next.Start, 3}, q: 1, retry: 28_961_989, reset: 28_961_989, want: Fixed{next.Start, 3}},
		{now: epoch, span: span, st: Fixed{next.Start, 1}, q: 1, ok: true, rem: 1, reset: 28_961_989, want: Fixed{span.Start, 2}},
		{now: epoch, span: span, st: Fixed{span.Start, 1}, q: -1, want: Fixed{span.Start, 1}, wantErr: ErrNegative},
	} {
		got, r, err := FixedDecide(c.now, c.st, count, c.span, c.q)
		want := Result{Allowed: c.ok, Remaining: c.rem, RetryAfter: c.retry, ResetAfter: c.reset}
		if c.wantErr != nil {
			want = Result{}
		}
		if got != c.want || r != want || !errors.Is(err, c.wantErr) {
			t.Errorf("%d: FixedDecide(epoch%+d, %+v, q=%d) = %+v, %+v, %v; want %+v, %+v, %v",
				i, c.now-epoch, c.st, c.q, got, r, err, c.want, want, c.wantErr)
		}
	}
}

func TestFixedRefund(t *testing.T) {
	span := EpochSpan(epoch, 1000)
	for _, c := range []struct {
		st   Fixed
		q    int64
		want Fixed
	}{
		{Fixed{span.Start, 3}, 1, Fixed{span.Start, 2}},
		{Fixed{span.Start, 3}, 2, Fixed{span.Start, 1}},
		{Fixed{span.Start, 3}, 3, Fixed{}},
		{Fixed{span.Start, 3}, 4, Fixed{}}, // never below empty
		{Fixed{span.Start, 3}, 0, Fixed{span.Start, 3}},
		{Fixed{span.Start, 3}, -2, Fixed{span.Start, 3}},
		{Fixed{span.Start - 1000, 3}, 1, Fixed{}}, // an earlier window's units are not given back
		{Fixed{span.Start - 1000, 3}, 0, Fixed{}},
		{Fixed{}, 1, Fixed{}},
	} {
		if got := FixedRefund(c.st, span, c.q); got != c.want {
			t.Errorf("FixedRefund(%+v, %d) = %+v, want %+v", c.st, c.q, got, c.want)
		}
	}
	// Refund then take: the units given back can be taken again, and no more.
	st, _, _ := FixedDecide(epoch, Fixed{}, 5, span, 5)
	st = FixedRefund(st, span, 2)
	if _, r, _ := FixedDecide(epoch, st, 5, span, 3); r.Allowed {
		t.Errorf("3 units admitted after a refund of 2")
	}
	if st, r, _ := FixedDecide(epoch, st, 5, span, 2); !r.Allowed || st.N != 5 || r.Remaining != 0 {
		t.Errorf("2 units after a refund of 2: %+v %+v", st, r)
	}
}

// fixedLimits are the windows of the fixed-window property and fuzz tests.
var fixedLimits = []struct {
	name string
	unit byte // 0: epoch-aligned windows of period
	zone string
}{
	{"epoch", 0, ""}, {"day", 'd', "UTC"}, {"day", 'd', "Europe/Paris"}, {"day", 'd', "America/Havana"},
	{"week", 'w', "America/New_York"}, {"month", 'm', "Atlantic/Azores"},
}

// runFixed drives FixedDecide and FixedRefund over the arrivals steps
// encodes (three bytes each: the clock, the quantity, and refund or take),
// against a reference count per window, and checks that no window ever
// holds more than count units (net of refunds), that remaining and reset are
// consistent, and that every RetryAfter is exact.
func runFixed(t *testing.T, count, periodMS int64, limit int, steps []byte) {
	l := fixedLimits[limit%len(fixedLimits)]
	spanOf := func(now int64) Span { return EpochSpan(now, periodMS) }
	c := clock{now: epoch, period: periodMS * ms}
	if l.unit != 0 {
		loc := mustZone(t, l.zone)
		spanOf = func(now int64) Span { return CalendarSpan(now, l.unit, loc) }
		c.period = 24 * int64(time.Hour)
		c.now = time.Date(2026, 3, 7, 23, 0, 0, 0, loc).UnixNano() // a week of changes of time
	}
	var (
		st    Fixed
		model = map[int64]int64{} // units per window start, net of refunds
		units events
		edge  int64
	)
	for i := 0; i+2 < len(steps); i += 3 {
		c.advance(steps[i], edge)
		now := c.now
		span := spanOf(now)
		if span.Start*ms > now || now >= span.End*ms {
			t.Fatalf("%s at %d: span %v does not hold now", l.name, now, span)
		}
		edge = span.End * ms
		q := int64(steps[i+1]) % (count + 2)
		if steps[i+2]%5 == 0 { // refund
			st = FixedRefund(st, span, q)
			model[span.Start] = max(0, model[span.Start]-q)
			units.dropNewest(q, span.Start*ms)
			if want := model[span.Start]; st.N != want || (want > 0 && st.Start != span.Start) || (want == 0 && st != Fixed{}) {
				t.Fatalf("refund %d at %d: state %+v, want %d units", q, now-epoch, st, want)
			}
			continue
		}
		prev := st
		got, r, err := FixedDecide(now, st, count, span, q)
		if err != nil {
			t.Fatal(err)
		}
		n := model[span.Start]
		want := Result{Allowed: q <= count && n+q <= count}
		switch {
		case q > count:
			want.RetryAfter = Never
		case !want.Allowed:
			want.RetryAfter = time.Duration(span.End*ms - now)
		}
		if want.Allowed {
			n += q
		}
		want.Remaining = count - n
		if n > 0 {
			want.ResetAfter = time.Duration(span.End*ms - now)
		}
		if r != want {
			t.Fatalf("%s at epoch%+d, %d units held, q=%d: %+v, want %+v", l.name, now-epoch, model[span.Start], q, r, want)
		}
		if !r.Allowed || q == 0 {
			if got != prev {
				t.Fatalf("a refusal or a peek changed the state: %+v to %+v", prev, got)
			}
		} else if got != (Fixed{span.Start, n}) {
			t.Fatalf("state %+v, want %+v", got, Fixed{span.Start, n})
		}
		checkExact(t, "FixedDecide", now, r, func(at int64) bool {
			_, r, _ := FixedDecide(at, prev, count, spanOf(at), q)
			return r.Allowed
		})
		if r.Allowed {
			model[span.Start] = n
			units.add(now, q)
		}
		st = got
	}
	// No window holds more than count of the units admitted (net of refunds).
	var span Span
	n := int64(0)
	for _, u := range units {
		if u >= span.End*ms {
			span, n = spanOf(u), 0
		}
		if n++; n > count {
			t.Fatalf("window %v holds more than %d units", span, count)
		}
	}
}

func TestFixedProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ count, period int64 }{{1, 1}, {3, 1000}, {10, 7}, {100, 60_000}, {2, 86_400_000}} {
		for limit := range fixedLimits {
			runFixed(t, c.count, c.period, limit, randomSteps(r, 3*4000))
		}
	}
}

func FuzzFixed(f *testing.F) {
	f.Add(int64(3), int64(1000), uint8(0), []byte{4, 1, 1, 5, 3, 1, 4, 1, 1, 2, 0, 0, 7, 9, 1})
	f.Add(int64(2), int64(1), uint8(3), []byte{16, 1, 1, 5, 3, 1, 6, 2, 2, 64, 1, 1})
	f.Add(int64(1), int64(86_400_000), uint8(5), []byte{9, 1, 1, 4, 1, 1, 5, 1, 1})
	f.Fuzz(func(t *testing.T, count, period int64, limit uint8, steps []byte) {
		if count < 1 || count > 64 || period < 1 || period > int64(MaxPeriod/time.Millisecond) {
			return
		}
		runFixed(t, count, period, int(limit), steps)
	})
}
