package algo

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

func TestLogDecide(t *testing.T) {
	p := WindowParams{Count: 3, Period: 1000}
	const e = int64(1_795_350_508_972) // ⌈epoch⌉ in ms
	const m = int64(1_795_350_600_123) // a millisecond
	for i, c := range []struct {
		now     int64
		p       WindowParams
		times   []int64
		q       int64
		ok      bool
		rem     int64
		retry   time.Duration
		reset   time.Duration
		want    []int64
		wantErr error
	}{
		{now: epoch, q: 0, ok: true, rem: 3}, // a peek on an empty key changes nothing
		{now: epoch, q: 2, ok: true, rem: 1, reset: 1_000_961_989, want: []int64{e, e}},
		{now: epoch + ms, times: []int64{e, e}, q: 1, ok: true, reset: 1_000_961_989, want: []int64{e, e, e + 1}},
		{now: epoch + ms, times: []int64{e, e, e + 1}, q: 0, ok: true, reset: 1_000_961_989, want: []int64{e, e, e + 1}},
		// Full: the oldest units leave one period after the millisecond
		// they were recorded at.
		{now: epoch + ms, times: []int64{e, e, e + 1}, q: 1, retry: 999_961_989, reset: 1_000_961_989, want: []int64{e, e, e + 1}},
		{now: epoch + ms, times: []int64{e, e, e + 1}, q: 2, retry: 999_961_989, reset: 1_000_961_989, want: []int64{e, e, e + 1}},
		{now: epoch + ms, times: []int64{e, e, e + 1}, q: 3, retry: 1_000_961_989, reset: 1_000_961_989, want: []int64{e, e, e + 1}},
		{now: epoch + ms, times: []int64{e, e, e + 1}, q: 4, retry: Never, reset: 1_000_961_989, want: []int64{e, e, e + 1}},
		{now: epoch, q: 4, rem: 3, retry: Never},
		{now: (e+1000)*ms - 1, times: []int64{e, e, e + 1}, q: 1, retry: 1, reset: time.Millisecond + 1, want: []int64{e, e, e + 1}},
		{now: (e + 1000) * ms, times: []int64{e, e, e + 1}, q: 0, ok: true, rem: 2, reset: time.Millisecond, want: []int64{e + 1}},
		{now: (e + 1000) * ms, times: []int64{e, e, e + 1}, q: 2, ok: true, reset: time.Second, want: []int64{e + 1, e + 1000, e + 1000}},
		// Exact in nanoseconds: a unit late in one millisecond and another
		// early in the millisecond one period later are less than a period
		// apart, so the second waits for the next millisecond.
		{now: m*ms + 999_999, p: WindowParams{Count: 1, Period: 1000}, q: 1, ok: true, reset: time.Second + 1, want: []int64{m + 1}},
		{now: (m+1000)*ms + 1, p: WindowParams{Count: 1, Period: 1000}, times: []int64{m + 1}, q: 1, retry: time.Millisecond - 1, reset: time.Millisecond - 1, want: []int64{m + 1}},
		{now: (m + 1001) * ms, p: WindowParams{Count: 1, Period: 1000}, times: []int64{m + 1}, q: 1, ok: true, reset: time.Second, want: []int64{m + 1001}},
		// Stale entries are dropped: the key reads as empty.
		{now: epoch + 10*int64(time.Second), times: []int64{e, e, e + 1}, q: 1, ok: true, rem: 2, reset: 1_000_961_989, want: []int64{e + 10_000}},
		// A clock that went back keeps the log ascending.
		{now: epoch, times: []int64{e + 5}, q: 1, ok: true, rem: 1, reset: 1_005_961_989, want: []int64{e + 5, e + 5}},
		{now: epoch, times: []int64{e}, q: -1, want: []int64{e}, wantErr: ErrNegative},
	} {
		if c.p == (WindowParams{}) {
			c.p = p
		}
		in := slices.Clip(slices.Clone(c.times))
		got, r, err := LogDecide(c.now, in, c.p, c.q)
		want := Result{Allowed: c.ok, Remaining: c.rem, RetryAfter: c.retry, ResetAfter: c.reset}
		if c.wantErr != nil {
			want = Result{}
		}
		if !slices.Equal(got, c.want) || r != want || !errors.Is(err, c.wantErr) {
			t.Errorf("%d: LogDecide(epoch%+d, %v, q=%d) = %v, %+v, %v; want %v, %+v, %v",
				i, c.now-epoch, c.times, c.q, got, r, err, c.want, want, c.wantErr)
		}
		if !slices.Equal(in, c.times) {
			t.Errorf("%d: LogDecide modified its argument: %v, was %v", i, in, c.times)
		}
	}
}

// LogDecide and LogRefund never modify the entries of the log they are
// given, even when it has room to grow in place: a store may keep the old
// log when a request of several limits is refused by another one.
func TestLogKeepsItsArgument(t *testing.T) {
	p := WindowParams{Count: 4, Period: 1000}
	old := make([]int64, 2, 16)
	old[0], old[1] = Millis(epoch)-1500, Millis(epoch)
	keep := slices.Clone(old)
	got, r, _ := LogDecide(epoch, old, p, 3)
	if !r.Allowed || len(got) != 4 || !slices.Equal(old, keep) {
		t.Fatalf("LogDecide: %v %+v; argument %v, was %v", got, r, old, keep)
	}
	got = LogRefund(epoch, got, p, 1)
	if len(got) != 3 || !slices.Equal(old, keep) {
		t.Fatalf("LogRefund: %v; argument %v, was %v", got, old, keep)
	}
}

func TestLogRefund(t *testing.T) {
	p := WindowParams{Count: 3, Period: 1000}
	const e = int64(1_795_350_508_972)
	for _, c := range []struct {
		now   int64
		times []int64
		q     int64
		want  []int64
	}{
		{epoch, []int64{e, e, e + 1}, 1, []int64{e, e}},
		{epoch, []int64{e, e, e + 1}, 3, []int64{}},
		{epoch, []int64{e, e, e + 1}, 5, []int64{}}, // never below empty
		{epoch, []int64{e, e, e + 1}, 0, []int64{e, e, e + 1}},
		{epoch, []int64{e, e, e + 1}, -1, []int64{e, e, e + 1}},
		{(e + 1000) * ms, []int64{e, e, e + 1}, 0, []int64{e + 1}}, // trimmed
		{(e + 1000) * ms, []int64{e, e, e + 1}, 2, []int64{}},      // units that left the period are not given back
		{epoch, nil, 1, nil},
	} {
		if got := LogRefund(c.now, c.times, p, c.q); !slices.Equal(got, c.want) {
			t.Errorf("LogRefund(epoch%+d, %v, %d) = %v, want %v", c.now-epoch, c.times, c.q, got, c.want)
		}
	}
	// Refund then take: the units given back can be taken again, and no more.
	log, _, _ := LogDecide(epoch, nil, p, 3)
	log = LogRefund(epoch, log, p, 2)
	if _, r, _ := LogDecide(epoch, log, p, 3); r.Allowed {
		t.Errorf("3 units admitted after a refund of 2")
	}
	if log, r, _ := LogDecide(epoch, log, p, 2); !r.Allowed || len(log) != 3 || r.Remaining != 0 {
		t.Errorf("2 units after a refund of 2: %v %+v", log, r)
	}
}

// runLog drives LogDecide and LogRefund over the arrivals steps encodes and
// checks, against the admitted units themselves (in ns), that no interval
// of one period ever holds more than Count; that a refusal is never more
// than a millisecond early (admitting would put more than Count in an
// interval of Period + 1 ms); that the log records the units that count,
// remaining and reset; and that every RetryAfter is exact.
func runLog(t *testing.T, p WindowParams, steps []byte) {
	c := clock{now: epoch, period: p.Period * ms}
	var (
		log   []int64
		units events
		edge  int64
	)
	period := p.Period * ms
	for i := 0; i+2 < len(steps); i += 3 {
		c.advance(steps[i], edge)
		now := c.now
		from := (Millis(now)-p.Period)*ms + 1 // units at or after from still count
		q := int64(steps[i+1]) % (p.Count + 2)
		if steps[i+2]%5 == 0 {
			log = LogRefund(now, log, p, q)
			units.dropNewest(q, from)
		} else {
			before := log
			got, r, err := LogDecide(now, log, p, q)
			if err != nil {
				t.Fatal(err)
			}
			// Units that count; units in the last period and a millisecond.
			held := int64(len(units) - sort.Search(len(units), func(j int) bool { return units[j] >= from }))
			recent := int64(len(units) - sort.Search(len(units), func(j int) bool { return units[j] > now-period-ms }))
			want := Result{Allowed: q <= p.Count && held+q <= p.Count, RetryAfter: r.RetryAfter}
			if q > p.Count {
				want.RetryAfter = Never
			}
			if !want.Allowed && q <= p.Count && recent+q <= p.Count {
				t.Fatalf("%+v at epoch%+d: q=%d refused with %d units in the last period + 1 ms", p, now-epoch, q, recent)
			}
			if want.Allowed {
				held += q
			}
			want.Remaining = max(0, p.Count-held)
			if held > 0 {
				last := now
				if !r.Allowed || q == 0 {
					last = units[len(units)-1]
				}
				want.ResetAfter = time.Duration((CeilMillis(last)+p.Period)*ms - now)
			}
			if r != want {
				t.Fatalf("%+v at epoch%+d, %d units held, q=%d: %+v, want %+v", p, now-epoch, held, q, r, want)
			}
			checkExact(t, "LogDecide", now, r, func(at int64) bool {
				_, r, _ := LogDecide(at, before, p, q)
				return r.Allowed
			})
			if !r.Allowed && r.RetryAfter != Never {
				edge = now + int64(r.RetryAfter)
			} else if len(got) > 0 {
				edge = (got[0] + p.Period) * ms
			}
			if r.Allowed {
				units.add(now, q)
			}
			log = got
		}
		// The log holds ⌈u⌉ for each unit u that still counts, in order.
		j := len(units)
		for j > 0 && units[j-1] >= from {
			j--
		}
		if len(log) != len(units)-j {
			t.Fatalf("at epoch%+d the log holds %d entries, want %d", now-epoch, len(log), len(units)-j)
		}
		for k, u := range units[j:] {
			if log[k] != CeilMillis(u) {
				t.Fatalf("at epoch%+d entry %d is %d, want %d", now-epoch, k, log[k], CeilMillis(u))
			}
		}
	}
	if most, at := maxInInterval(units, period); int64(most) > p.Count {
		t.Fatalf("%+v: %d units in one period from epoch%+d", p, most, at-epoch)
	}
}

func TestLogProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct{ count, period int64 }{{1, 1}, {3, 1000}, {10, 4}, {7, 13}, {50, 60_000}, {2, 2}} {
		runLog(t, WindowParams{Count: c.count, Period: c.period}, randomSteps(r, 3*5000))
	}
}

func FuzzLog(f *testing.F) {
	f.Add(int64(3), int64(1000), []byte{4, 2, 1, 5, 1, 1, 6, 1, 1, 2, 0, 0, 7, 9, 1})
	f.Add(int64(10), int64(4), []byte{3, 10, 1, 5, 1, 1, 6, 9, 2, 4, 1, 1})
	f.Add(int64(1), int64(1000), []byte{3, 1, 1, 10, 1, 1, 1, 1, 1, 2, 1, 1})
	f.Fuzz(func(t *testing.T, count, period int64, steps []byte) {
		p, err := NewWindowParams(count, time.Duration(period)*time.Millisecond)
		if err != nil || count > 64 {
			return
		}
		runLog(t, p, steps)
	})
}
