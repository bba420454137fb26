package algo

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func TestSlidingDecide(t *testing.T) {
	p := WindowParams{Count: 5, Period: 1000}
	const w0 = int64(1_795_350_508_000) // epoch's window; epoch is 971 ms into it
	const w1, w2, w3 = w0 + 1000, w0 + 2000, w0 + 3000
	at := func(ms_ int64) int64 { return ms_ * ms }
	for i, c := range []struct {
		now     int64
		st      Sliding
		q       int64
		ok      bool
		rem     int64
		retry   time.Duration
		reset   time.Duration
		want    Sliding
		wantErr error
	}{
		{now: epoch, q: 0, ok: true, rem: 5}, // a peek on an empty key changes nothing
		{now: epoch, q: 5, ok: true, rem: 0, reset: 1_028_961_989, want: Sliding{w0, 0, 5}},
		// Full: in the next window the 5 weigh ceil(5·(1000−e)/1000), so
		// one more fits at e = 200 ms (weight 4), not at 199 (weight 5).
		{now: epoch, st: Sliding{w0, 0, 5}, q: 1, retry: 228_961_989, reset: 1_028_961_989, want: Sliding{w0, 0, 5}},
		{now: at(w1+200) - 1, st: Sliding{w0, 0, 5}, q: 1, retry: 1, reset: 800_000_001, want: Sliding{w0, 0, 5}},
		{now: at(w1 + 200), st: Sliding{w0, 0, 5}, q: 1, ok: true, reset: 1800 * time.Millisecond, want: Sliding{w1, 5, 1}},
		{now: at(w1 + 200), st: Sliding{w1, 5, 1}, q: 0, ok: true, reset: 1800 * time.Millisecond, want: Sliding{w1, 5, 1}},
		{now: at(w1 + 400), st: Sliding{w1, 5, 1}, q: 1, ok: true, reset: 1600 * time.Millisecond, want: Sliding{w1, 5, 2}},
		{now: at(w1 + 400), st: Sliding{w1, 5, 2}, q: 6, retry: Never, reset: 1600 * time.Millisecond, want: Sliding{w1, 5, 2}},
		// 2 of 5 now, 3 weighted: 1 unit fits at e = 600 (3 → 2), 2 at 800.
		{now: at(w1 + 400), st: Sliding{w1, 5, 2}, q: 1, retry: 200 * time.Millisecond, reset: 1600 * time.Millisecond, want: Sliding{w1, 5, 2}},
		{now: at(w1 + 400), st: Sliding{w1, 5, 2}, q: 2, retry: 400 * time.Millisecond, reset: 1600 * time.Millisecond, want: Sliding{w1, 5, 2}},
		// The last millisecond of a window still weighs the previous one's
		// units at least 1.
		{now: at(w1+999) + 999_999, st: Sliding{w1, 5, 0}, q: 5, rem: 4, retry: 1, reset: 1, want: Sliding{w1, 5, 0}},
		{now: at(w1+999) + 999_999, st: Sliding{w1, 5, 0}, q: 4, ok: true, rem: 0, reset: time.Second + 1, want: Sliding{w1, 5, 4}},
		// The next window: the current units become the previous ones.
		{now: at(w2) + 1, st: Sliding{w1, 5, 2}, q: 3, ok: true, reset: 2*time.Second - 1, want: Sliding{w2, 2, 3}},
		{now: at(w2) + 1, st: Sliding{w1, 5, 2}, q: 4, rem: 3, retry: 500*time.Millisecond - 1, reset: time.Second - 1, want: Sliding{w1, 5, 2}},
		// Two windows later they are gone.
		{now: at(w3), st: Sliding{w1, 5, 2}, q: 1, ok: true, rem: 4, reset: 2 * time.Second, want: Sliding{w3, 0, 1}},
		{now: at(w3), st: Sliding{w1, 5, 2}, q: 0, ok: true, rem: 5, want: Sliding{w1, 5, 2}},
		{now: epoch, st: Sliding{w0, 0, 1}, q: -1, want: Sliding{w0, 0, 1}, wantErr: ErrNegative},
	} {
		got, r, err := SlidingDecide(c.now, c.st, p, c.q)
		want := Result{Allowed: c.ok, Remaining: c.rem, RetryAfter: c.retry, ResetAfter: c.reset}
		if c.wantErr != nil {
			want = Result{}
		}
		if got != c.want || r != want || !errors.Is(err, c.wantErr) {
			t.Errorf("%d: SlidingDecide(epoch%+d, %+v, q=%d) = %+v, %+v, %v; want %+v, %+v, %v",
				i, c.now-epoch, c.st, c.q, got, r, err, c.want, want, c.wantErr)
		}
	}
}

func TestSlidingRefund(t *testing.T) {
	p := WindowParams{Count: 5, Period: 1000}
	const w0 = int64(1_795_350_508_000)
	const w1 = w0 + 1000
	for _, c := range []struct {
		now  int64
		st   Sliding
		q    int64
		want Sliding
	}{
		{epoch, Sliding{w0, 3, 5}, 2, Sliding{w0, 3, 3}},
		{epoch, Sliding{w0, 3, 5}, 7, Sliding{w0, 3, 0}}, // never below zero
		{epoch, Sliding{w0, 0, 5}, 5, Sliding{}},         // empty: no state
		{epoch, Sliding{w0, 0, 5}, 0, Sliding{w0, 0, 5}},
		{epoch, Sliding{w0, 0, 5}, -1, Sliding{w0, 0, 5}},
		{w1 * ms, Sliding{w0, 0, 5}, 2, Sliding{w1, 5, 0}}, // the previous window's units are not given back
		{w1*ms - 1, Sliding{w0, 0, 5}, 2, Sliding{w0, 0, 3}},
		{(w1 + 1000) * ms, Sliding{w0, 4, 5}, 1, Sliding{}}, // stale
	} {
		if got := SlidingRefund(c.now, c.st, p, c.q); got != c.want {
			t.Errorf("SlidingRefund(epoch%+d, %+v, %d) = %+v, want %+v", c.now-epoch, c.st, c.q, got, c.want)
		}
	}
	// Refund then take: the units given back can be taken again, and no more.
	st, _, _ := SlidingDecide(epoch, Sliding{}, p, 5)
	st = SlidingRefund(epoch, st, p, 2)
	if _, r, _ := SlidingDecide(epoch, st, p, 3); r.Allowed {
		t.Errorf("3 units admitted after a refund of 2")
	}
	if st, r, _ := SlidingDecide(epoch, st, p, 2); !r.Allowed || st.Cur != 5 || r.Remaining != 0 {
		t.Errorf("2 units after a refund of 2: %+v %+v", st, r)
	}
}

// The documented worst case, 2·Count − ⌈Count/Period⌉ units in one period, is
// reached: Count late in the last millisecond of a window, the rest early in
// the last millisecond of the next.
func TestSlidingWorstCase(t *testing.T) {
	for _, c := range []struct{ count, period, want int64 }{
		{5, 1000, 9},    // 2·Count − 1
		{1, 1, 1},       // 2·1 − 1
		{3, 3, 5},       // 2·3 − 1
		{10, 4, 17},     // 2·10 − 3
		{1000, 1, 1000}, // a window of 1 ms is a fixed window
	} {
		p := WindowParams{Count: c.count, Period: c.period}
		w1 := EpochSpan(epoch, c.period).End // a window's start, in ms
		var units events
		st, r, _ := SlidingDecide(w1*ms-1, Sliding{}, p, c.count)
		if !r.Allowed {
			t.Fatalf("%+v: the first window refused %d", p, c.count)
		}
		units.add(w1*ms-1, c.count)
		now := (w1 + c.period - 1) * ms
		rest := c.want - c.count
		if _, r, _ := SlidingDecide(now, st, p, rest+1); r.Allowed {
			t.Errorf("%+v: %d admitted in the next window's last ms, want %d", p, rest+1, rest)
		}
		_, r, _ = SlidingDecide(now, st, p, rest)
		if !r.Allowed {
			t.Errorf("%+v: %d refused in the next window's last ms", p, rest)
		}
		units.add(now, rest)
		if most, _ := maxInInterval(units, c.period*ms); int64(most) != c.want {
			t.Errorf("%+v: %d units in one period, want %d", p, most, c.want)
		}
	}
}

// runSliding drives SlidingDecide and SlidingRefund over the arrivals steps
// encodes, against the exact comparison in integers
// (cur+q)·Period + prev·(Period−elapsed) ≤ Count·Period computed from the
// admitted units themselves, and checks that no aligned window holds more
// than Count (net of refunds), that no interval of one period holds more
// than 2·Count − ⌈Count/Period⌉, and that every RetryAfter is exact.
func runSliding(t *testing.T, p WindowParams, steps []byte) {
	c := clock{now: epoch, period: p.Period * ms}
	var (
		st    Sliding
		units events
		edge  int64
	)
	// in counts the units admitted in the window that starts at start (ms).
	in := func(start int64) (n int64) {
		for i := len(units) - 1; i >= 0 && Millis(units[i]) >= start; i-- {
			if Millis(units[i]) < start+p.Period {
				n++
			}
		}
		return n
	}
	for i := 0; i+2 < len(steps); i += 3 {
		c.advance(steps[i], edge)
		now := c.now
		span := EpochSpan(now, p.Period)
		elapsed := Millis(now) - span.Start
		if edge <= now {
			edge = span.End * ms
		}
		q := int64(steps[i+1]) % (p.Count + 2)
		cur, prev := in(span.Start), in(span.Start-p.Period)
		if steps[i+2]%5 == 0 {
			st = SlidingRefund(now, st, p, q)
			units.dropNewest(q, span.Start*ms)
			if cur = in(span.Start); st.Cur != cur || (st != Sliding{} && (st.Start != span.Start || st.Prev != prev)) {
				t.Fatalf("refund %d at epoch%+d: state %+v, want %d and %d units", q, now-epoch, st, prev, cur)
			}
			continue
		}
		before := st
		got, r, err := SlidingDecide(now, st, p, q)
		if err != nil {
			t.Fatal(err)
		}
		fits := func(cur, q int64) bool { return (cur+q)*p.Period+prev*(p.Period-elapsed) <= p.Count*p.Period }
		want := Result{Allowed: q <= p.Count && fits(cur, q)}
		if q > p.Count {
			want.RetryAfter = Never
		}
		if want.Allowed {
			cur += q
		}
		for fits(cur, want.Remaining+1) {
			want.Remaining++
		}
		switch {
		case cur > 0:
			want.ResetAfter = time.Duration((span.Start+2*p.Period)*ms - now)
		case prev > 0:
			want.ResetAfter = time.Duration(span.End*ms - now)
		}
		if !want.Allowed && want.RetryAfter == 0 {
			want.RetryAfter = r.RetryAfter // checked below
		}
		if r != want {
			t.Fatalf("%+v at epoch%+d (%d ms in), %d and %d units, q=%d: %+v, want %+v", p, now-epoch, elapsed, prev, cur, q, r, want)
		}
		if !r.Allowed || q == 0 {
			if got != before {
				t.Fatalf("a refusal or a peek changed the state: %+v to %+v", before, got)
			}
		} else if got != (Sliding{span.Start, prev, cur}) {
			t.Fatalf("state %+v, want %+v", got, Sliding{span.Start, prev, cur})
		}
		checkExact(t, "SlidingDecide", now, r, func(at int64) bool {
			_, r, _ := SlidingDecide(at, before, p, q)
			return r.Allowed
		})
		if !r.Allowed && r.RetryAfter != Never {
			edge = now + int64(r.RetryAfter)
		}
		if r.Allowed {
			units.add(now, q)
		}
		st = got
	}
	per := map[int64]int64{}
	for _, u := range units {
		if s := EpochSpan(u, p.Period); per[s.Start]+1 > p.Count {
			t.Fatalf("%+v: window %v holds more than Count", p, s)
		} else {
			per[s.Start]++
		}
	}
	bound := 2*p.Count - (p.Count+p.Period-1)/p.Period
	if most, at := maxInInterval(units, p.Period*ms); int64(most) > bound {
		t.Fatalf("%+v: %d units in one period from epoch%+d, above 2·Count − ⌈Count/Period⌉ = %d", p, most, at-epoch, bound)
	}
}

func TestSlidingProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct{ count, period int64 }{{1, 1}, {5, 1000}, {10, 4}, {7, 13}, {100, 60_000}, {3, 2}} {
		runSliding(t, WindowParams{Count: c.count, Period: c.period}, randomSteps(r, 3*5000))
	}
}

func FuzzSliding(f *testing.F) {
	f.Add(int64(5), int64(1000), []byte{4, 5, 1, 5, 1, 1, 6, 1, 1, 2, 0, 0, 7, 9, 1})
	f.Add(int64(10), int64(4), []byte{3, 10, 1, 5, 1, 1, 6, 9, 2, 4, 1, 1})
	f.Add(int64(1), int64(1), []byte{9, 1, 1, 4, 1, 1, 5, 1, 1})
	f.Fuzz(func(t *testing.T, count, period int64, steps []byte) {
		p, err := NewWindowParams(count, time.Duration(period)*time.Millisecond)
		if err != nil || count > 200 || p.CheckSliding() != nil {
			return
		}
		runSliding(t, p, steps)
	})
}

// A later window's state (a clock that went back) counts as the current
// window's: no fresh window.
func TestSlidingClockSteppedBack(t *testing.T) {
	p := WindowParams{Count: 5, Period: 1000}
	w0 := Millis(epoch) - Millis(epoch)%1000
	w2 := w0 + 2000
	if _, r, _ := SlidingDecide(epoch, Sliding{w2, 0, 5}, p, 1); r.Allowed {
		t.Fatalf("5 units of a later window, then 1: %+v", r)
	}
	st, r, _ := SlidingDecide(epoch, Sliding{w2, 0, 2}, p, 3)
	if !r.Allowed || st != (Sliding{w0, 0, 5}) {
		t.Fatalf("2 units of a later window, then 3: %+v %+v", st, r)
	}
	if got := SlidingRefund(epoch, Sliding{w2, 0, 2}, p, 1); got != (Sliding{w0, 0, 1}) {
		t.Fatalf("refund on a later window's state: %+v", got)
	}
}
