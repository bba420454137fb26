package algo

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestFixedCharge(t *testing.T) {
	const now = int64(10_500 * msNS) // 10.5 s: in the window [10 s, 20 s)
	span := EpochSpan(now, 10_000)
	st, r, err := FixedCharge(now, Fixed{Start: 10_000, N: 4}, 5, span, 3)
	want := Result{RetryAfter: 9500 * time.Millisecond, ResetAfter: 9500 * time.Millisecond}
	if err != nil || st != (Fixed{Start: 10_000, N: 7}) || r != want {
		t.Fatalf("into debt: %+v, %+v, %v", st, r, err)
	}
	// Refused until the window ends, to the nanosecond; the next window is
	// fresh.
	if _, r, _ := FixedDecide(20_000*msNS-1, st, 5, span, 1); r.Allowed || r.RetryAfter != 1 {
		t.Errorf("1ns before the window's end: %+v", r)
	}
	if _, r, _ := FixedDecide(20_000*msNS, st, 5, EpochSpan(20_000*msNS, 10_000), 1); !r.Allowed {
		t.Errorf("in the next window: %+v", r)
	}
	// A charge the take admits answers what the take answers.
	st1, r1, _ := FixedCharge(now, Fixed{}, 5, span, 2)
	st2, r2, _ := FixedDecide(now, Fixed{}, 5, span, 2)
	if st1 != st2 || r1 != r2 {
		t.Errorf("charge %+v %+v, take %+v %+v", st1, r1, st2, r2)
	}
	// An earlier window's count does not count.
	if st, _, _ := FixedCharge(now, Fixed{Start: 0, N: 9}, 5, span, 1); st != (Fixed{Start: 10_000, N: 1}) {
		t.Errorf("over an earlier window: %+v", st)
	}
	for _, q := range []int64{-1, MaxCount - 3} {
		old := Fixed{Start: 10_000, N: 4}
		if st, _, err := FixedCharge(now, old, 5, span, q); err == nil || st != old {
			t.Errorf("FixedCharge(%d) = %+v, %v", q, st, err)
		}
	}
	if _, _, err := FixedCharge(now, Fixed{Start: 10_000, N: 4}, 5, span, MaxCount-4); err != nil {
		t.Errorf("up to MaxCount: %v", err)
	}
}

func TestSlidingCharge(t *testing.T) {
	p := WindowParams{Count: 10, Period: 1000}
	now := int64(5_250 * msNS) // 250 ms into the window [5 s, 6 s)
	st, r, err := SlidingCharge(now, Sliding{Start: 5000, Prev: 4, Cur: 2}, p, 12)
	if err != nil || st != (Sliding{Start: 5000, Prev: 4, Cur: 14}) || r.Allowed || r.Remaining != 0 {
		t.Fatalf("into debt: %+v, %+v, %v", st, r, err)
	}
	if r.ResetAfter != 1750*time.Millisecond {
		t.Errorf("ResetAfter %v", r.ResetAfter)
	}
	// At its RetryAfter the key is at its limit again, not before.
	at := now + int64(r.RetryAfter)
	if _, r, _ := SlidingDecide(at, st, p, 0); !r.Allowed {
		t.Errorf("at RetryAfter %v: %+v", r.RetryAfter, r)
	}
	if _, r, _ := SlidingDecide(at-msNS, st, p, 0); r.Allowed {
		t.Errorf("1ms before RetryAfter: %+v", r)
	}
	st1, r1, _ := SlidingCharge(now, Sliding{}, p, 3)
	st2, r2, _ := SlidingDecide(now, Sliding{}, p, 3)
	if st1 != st2 || r1 != r2 {
		t.Errorf("charge %+v %+v, take %+v %+v", st1, r1, st2, r2)
	}
	old := Sliding{Start: 5000, Cur: 1}
	for _, q := range []int64{-1, MaxWeight / 1000, MaxCount} {
		if st, _, err := SlidingCharge(now, old, p, q); err == nil || st != old {
			t.Errorf("SlidingCharge(%d) = %+v, %v", q, st, err)
		}
	}
}

func TestLogCharge(t *testing.T) {
	p := WindowParams{Count: 3, Period: 1000}
	now := int64(10_000*msNS + 1) // entries at ⌈now⌉ = 10,001 ms
	old := []int64{9_200, 9_500}
	times, r, err := LogCharge(now, slices.Clone(old), p, 5)
	// Only the newest Count+1 entries are kept.
	if err != nil || !slices.Equal(times, []int64{10_001, 10_001, 10_001, 10_001}) || r.Allowed {
		t.Fatalf("into debt: %v, %+v, %v", times, r, err)
	}
	if r.RetryAfter != time.Duration(11_001*msNS-now) || r.ResetAfter != r.RetryAfter {
		t.Errorf("RetryAfter %v, ResetAfter %v", r.RetryAfter, r.ResetAfter)
	}
	// The same decisions as with the whole log.
	whole := append(slices.Clone(old), 10_001, 10_001, 10_001, 10_001, 10_001)
	for _, at := range []int64{now, 10_200 * msNS, 10_600 * msNS, 11_001*msNS - 1, 11_001 * msNS} {
		for q := int64(0); q <= 4; q++ {
			_, a, _ := LogDecide(at, times, p, q)
			_, b, _ := LogDecide(at, whole, p, q)
			if a != b {
				t.Errorf("at %d, q %d: kept %+v, whole %+v", at, q, a, b)
			}
		}
	}
	// A smaller debt keeps older entries.
	times, r, _ = LogCharge(now, slices.Clone(old), p, 2)
	if !slices.Equal(times, []int64{9_200, 9_500, 10_001, 10_001}) || r.Allowed || r.RetryAfter != time.Duration(10_200*msNS-now) {
		t.Errorf("a debt of one: %v, %+v", times, r)
	}
	times, r1, _ := LogCharge(now, slices.Clone(old), p, 1)
	_, r2, _ := LogDecide(now, slices.Clone(old), p, 1)
	if len(times) != 3 || r1 != r2 {
		t.Errorf("charge %v %+v, take %+v", times, r1, r2)
	}
	if got, _, err := LogCharge(now, old, p, -1); !errors.Is(err, ErrNegative) || !slices.Equal(got, old) {
		t.Errorf("LogCharge(-1) = %v, %v", got, err)
	}
}

func TestLogProbe(t *testing.T) {
	p := WindowParams{Count: 3, Period: 1000}
	now := int64(10_000*msNS + 1)
	times := []int64{9_200, 9_500} // full capacity: an append would reallocate
	for q := int64(0); q <= 4; q++ {
		got, err := LogProbe(now, times, p, q)
		_, want, _ := LogDecide(now, slices.Clone(times), p, q)
		if want.Allowed {
			_, want, _ = LogDecide(now, times, p, 0)
		}
		if err != nil || got != want {
			t.Errorf("q %d: LogProbe %+v, %v; want %+v", q, got, err, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { LogProbe(now, times, p, 1) }); n != 0 {
		t.Errorf("LogProbe allocates %v times", n)
	}
	if _, err := LogProbe(now, times, p, -1); !errors.Is(err, ErrNegative) {
		t.Errorf("LogProbe(-1): %v", err)
	}
}
