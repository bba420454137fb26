package gcra

import (
	"errors"
	"math"
	"math/big"
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

// FuzzCharge drives random takes and charges (some of them huge) through
// Decide and Charge, and checks every TAT against the same recursion in
// big integers (max(now, TAT) + T·q for each charge and admitted take): no
// unit is lost or added (a charge of 0 leaves the TAT as it is), a debt beyond int64 nanoseconds is ErrOverflow
// and changes nothing (never a wrap-around), and a charge's result is the
// peek at the TAT it leaves.
func FuzzCharge(f *testing.F) {
	f.Add(int64(4), int64(5), int64(5e9), []byte{0, 1, 8, 0, 3, 2, 100, 1, 1})
	f.Add(int64(0), int64(1), int64(3600e9), []byte{0, 1, 60, 0, 1, 61, 0, 1, 62})
	f.Add(int64(0), int64(1), int64(3600e9), []byte{0, 1, 22, 0, 1, 20, 0, 1, 20}) // a TAT beyond int64
	f.Add(int64(999), int64(1000), int64(1e9), []byte{1, 0, 10, 2, 1, 255, 3, 0, 5})
	f.Fuzz(func(t *testing.T, burst, count, period int64, steps []byte) {
		p, err := NewParams(burst%100000, count, time.Duration(period))
		if err != nil {
			return
		}
		const start = int64(1_795_350_508_971_038_011)
		now, tat := start, int64(0)
		ref := new(big.Int)
		maxTAT := big.NewInt(math.MaxInt64)
		for i := 0; i+2 < len(steps); i += 3 {
			now += min(int64(steps[i])*(p.Interval/4), 1e17)
			// A charge of up to 2^62 units, or a take of up to limit+2.
			charge := steps[i+1]%2 == 1
			q := int64(steps[i+2]) % (p.Limit + 3)
			if charge {
				q = int64(1) << (steps[i+2] % 63) >> (steps[i+1] % 7)
			}
			base := new(big.Int).SetInt64(max(now, tat))
			want := new(big.Int).Add(base, new(big.Int).Mul(big.NewInt(p.Interval), big.NewInt(q)))
			var got int64
			var r Result
			if charge {
				got, r, err = Charge(now, tat, p, q)
			} else {
				got, r, err = Decide(now, tat, p, q)
			}
			if want.Cmp(maxTAT) > 0 {
				if charge && !errors.Is(err, ErrOverflow) || got != tat {
					t.Fatalf("charge %v q %d: TAT %s beyond int64: got %d, %v", charge, q, want, got, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("charge %v q %d: %v", charge, q, err)
			}
			if charge && q > 0 || !charge && r.Allowed {
				ref.Set(want)
			} else {
				ref.SetInt64(tat)
			}
			// (TATs at or before now are all the same state: empty.)
			if ref.Int64() != got && (ref.Int64() > now || got > now) {
				t.Fatalf("charge %v q %d at now+%d: TAT %d, want %s", charge, q, now-start, got, ref)
			}
			if charge {
				_, peek, _ := Decide(now, got, p, 0)
				if r != peek || r.Allowed != (got-now <= p.Tolerance) || int64(r.ResetAfter) != max(got-now, 0) {
					t.Fatalf("charge q %d: %+v, peek %+v, TAT now+%d", q, r, peek, got-now)
				}
				if !r.Allowed && (r.Remaining != 0 || int64(r.RetryAfter) != got-now-p.Tolerance) {
					t.Fatalf("charge into debt: %+v, TAT now+%d", r, got-now)
				}
			}
			tat = got
		}
	})
}
