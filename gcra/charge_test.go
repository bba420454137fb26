package gcra

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestCharge(t *testing.T) {
	p, err := NewParams(4, 5, 5*time.Second) // T = 1s, limit 5, tolerance 5s
	if err != nil {
		t.Fatal(err)
	}
	const now = int64(1000e9)
	for _, c := range []struct {
		name    string
		tat, q  int64
		wantTAT int64
		want    Result
	}{
		{"empty, within", 0, 3, now + 3e9, Result{Allowed: true, Remaining: 2, ResetAfter: 3 * time.Second}},
		{"empty, exactly full", 0, 5, now + 5e9, Result{Allowed: true, ResetAfter: 5 * time.Second}},
		{"empty, into debt", 0, 8, now + 8e9, Result{RetryAfter: 3 * time.Second, ResetAfter: 8 * time.Second}},
		{"in debt, deeper", now + 8e9, 2, now + 10e9, Result{RetryAfter: 5 * time.Second, ResetAfter: 10 * time.Second}},
		{"a past TAT reads as empty", now - 7e9, 1, now + 1e9, Result{Allowed: true, Remaining: 4, ResetAfter: time.Second}},
		{"zero peeks", now + 2e9, 0, now + 2e9, Result{Allowed: true, Remaining: 3, ResetAfter: 2 * time.Second}},
		{"zero peeks at a debt", now + 7e9, 0, now + 7e9, Result{RetryAfter: 2 * time.Second, ResetAfter: 7 * time.Second}},
	} {
		tat, r, err := Charge(now, c.tat, p, c.q)
		if err != nil || tat != c.wantTAT || r != c.want {
			t.Errorf("%s: Charge = %d, %+v, %v; want %d, %+v", c.name, tat, r, err, c.wantTAT, c.want)
		}
		// A charge that Decide admits answers what Decide answers.
		if dt, dr, _ := Decide(now, c.tat, p, c.q); dr.Allowed && (dt != tat || dr != r) {
			t.Errorf("%s: Decide = %d, %+v; Charge = %d, %+v", c.name, dt, dr, tat, r)
		}
	}
	// The debt drains to the exact nanosecond: refused 1ns before the
	// RetryAfter of a request for one unit, admitted at it.
	tat, _, _ := Charge(now, 0, p, 8)
	_, r, _ := Decide(now, tat, p, 1)
	if r.RetryAfter != 4*time.Second {
		t.Fatalf("RetryAfter of one unit after a debt of 3: %v", r.RetryAfter)
	}
	if _, r, _ := Decide(now+4e9-1, tat, p, 1); r.Allowed || r.RetryAfter != 1 {
		t.Errorf("1ns early: %+v", r)
	}
	if _, r, _ := Decide(now+4e9, tat, p, 1); !r.Allowed {
		t.Errorf("on time: %+v", r)
	}
}

func TestChargeErrors(t *testing.T) {
	p, _ := NewParams(0, 1, time.Second)
	const tat = int64(5e9)
	for _, c := range []struct {
		now, q int64
		err    error
	}{
		{0, -1, ErrNegative},
		{0, math.MinInt64, ErrNegative},
		{0, math.MaxInt64/int64(time.Second) + 1, ErrOverflow},       // the cost
		{math.MaxInt64 - 1e9, 2, ErrOverflow},                        // the TAT
		{0, (math.MaxInt64 - tat) / int64(time.Second), nil},         // the largest debt that fits
		{0, (math.MaxInt64-tat)/int64(time.Second) + 1, ErrOverflow}, // one more
	} {
		got, _, err := Charge(c.now, tat, p, c.q)
		if !errors.Is(err, c.err) || (err != nil && got != tat) {
			t.Errorf("Charge(%d, %d, %d) = %d, %v; want %v and the TAT unchanged", c.now, tat, c.q, got, err, c.err)
		}
	}
}

func TestProbe(t *testing.T) {
	p, _ := NewParams(4, 5, 5*time.Second)
	const now = int64(1000e9)
	for _, c := range []struct {
		tat, q int64
		want   Result
	}{
		{0, 5, Result{Allowed: true, Remaining: 5}},
		{now + 3e9, 2, Result{Allowed: true, Remaining: 2, ResetAfter: 3 * time.Second}},
		{now + 3e9, 3, Result{RetryAfter: time.Second, Remaining: 2, ResetAfter: 3 * time.Second}},
		{0, 6, Result{RetryAfter: Never, Remaining: 5}},
		{now + 8e9, 1, Result{RetryAfter: 4 * time.Second, ResetAfter: 8 * time.Second}},
	} {
		r, err := Probe(now, c.tat, p, c.q)
		if err != nil || r != c.want {
			t.Errorf("Probe(tat %d, %d) = %+v, %v; want %+v", c.tat, c.q, r, err, c.want)
		}
	}
	if _, err := Probe(now, 0, p, -1); !errors.Is(err, ErrNegative) {
		t.Errorf("Probe(-1): %v", err)
	}
}
