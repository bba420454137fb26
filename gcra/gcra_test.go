package gcra

import (
	"errors"
	"math"
	"math/big"
	"testing"
	"time"
)

func TestNewParams(t *testing.T) {
	for _, c := range []struct {
		burst, count int64
		period       time.Duration
		want         Params
		err          error
	}{
		{15, 30, time.Minute, Params{Burst: 15, Limit: 16, Interval: 2e9, Tolerance: 32e9}, nil},
		{0, 1, time.Second, Params{Burst: 0, Limit: 1, Interval: 1e9, Tolerance: 1e9}, nil},
		{20, 1500, time.Second, Params{Burst: 20, Limit: 21, Interval: 666666, Tolerance: 21 * 666666}, nil},
		{0, 1e6, time.Second, Params{Limit: 1, Interval: 1000, Tolerance: 1000}, nil},
		// Errors, in redis-cell's order: zero rates first.
		{0, 0, time.Second, Params{}, ErrZeroRate},
		{0, 1, 0, Params{}, ErrZeroRate},
		{-1, 0, time.Second, Params{}, ErrZeroRate},
		{0, 2e9, time.Second, Params{}, ErrZeroRate}, // T truncates to 0 ns
		{-1, 1, time.Second, Params{}, ErrNegative},
		{0, -1, time.Second, Params{}, ErrNegative},
		{0, 1, -time.Second, Params{}, ErrNegative},
		{0, -1, -time.Second, Params{}, ErrNegative},
		// Intervals under a microsecond, down to one nanosecond.
		{5, 1e7, time.Second, Params{Burst: 5, Limit: 6, Interval: 100, Tolerance: 600}, nil},
		{0, 1000001, time.Second, Params{Limit: 1, Interval: 999, Tolerance: 999}, nil},
		{2, 1e9, time.Second, Params{Burst: 2, Limit: 3, Interval: 1, Tolerance: 3}, nil},
		{math.MaxInt64, 1, time.Second, Params{}, ErrOverflow},
		{1 << 40, 1, time.Hour, Params{}, ErrOverflow},
		{1, 1, math.MaxInt64, Params{}, ErrOverflow},
		{0, 1, math.MaxInt64, Params{Limit: 1, Interval: math.MaxInt64, Tolerance: math.MaxInt64}, nil},
	} {
		got, err := NewParams(c.burst, c.count, c.period)
		if !errors.Is(err, c.err) || got != c.want {
			t.Errorf("NewParams(%d, %d, %v) = %+v, %v; want %+v, %v", c.burst, c.count, c.period, got, err, c.want, c.err)
		}
	}
}

// The float64 quotient redis-cell computes equals the integer quotient for
// every period under 2^53 ns (about 104 days).
func TestIntervalIsIntegerQuotient(t *testing.T) {
	periods := []int64{1, 999, 1e9, 60e9, 3600e9, 86400e9, 1<<53 - 1}
	counts := []int64{1, 3, 7, 1000, 1500, 500250, 999999937}
	for _, p := range periods {
		for _, c := range counts {
			f := truncFloat(float64(p) / float64(c))
			if f != p/c {
				t.Errorf("period %d count %d: float %d, integer %d", p, c, f, p/c)
			}
		}
	}
}

func TestTruncFloat(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want int64
	}{
		{1.9, 1}, {-1.9, -1}, {math.NaN(), 0}, {math.Inf(1), math.MaxInt64},
		{math.Inf(-1), math.MinInt64}, {9.3e18, math.MaxInt64}, {-9.3e18, math.MinInt64},
	} {
		if got := truncFloat(c.in); got != c.want {
			t.Errorf("truncFloat(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestDecideRejects(t *testing.T) {
	p, _ := NewParams(4, 1, time.Second)
	const now, tat = 1e18, 1e18 + 2e9
	for _, c := range []struct {
		p   Params
		q   int64
		err error
	}{
		{p, math.MinInt64, ErrOverflow},
		{p, math.MaxInt64/int64(time.Second) + 1, ErrOverflow},
		{p, -(math.MaxInt64/int64(time.Second) + 1), ErrOverflow},
	} {
		got, r, err := Decide(now, tat, c.p, c.q)
		if !errors.Is(err, c.err) || got != tat || r != (Result{}) {
			t.Errorf("Decide(q=%d) = %d, %+v, %v; want unchanged TAT and %v", c.q, got, r, err, c.err)
		}
	}
	big, _ := NewParams(1, 1, 4e18)
	if got, _, err := Decide(2e18, 0, big, 2); !errors.Is(err, ErrOverflow) || got != 0 {
		t.Errorf("TAT past 2^63: %d, %v", got, err)
	}
}

// A TAT in the past is the same as no state at all.
func TestPastTATIsAbsent(t *testing.T) {
	p, _ := NewParams(3, 2, time.Second)
	const now = 1e18
	for _, q := range []int64{0, 1, 4, 5} {
		t0, r0, _ := Decide(now, 0, p, q)
		t1, r1, _ := Decide(now, now-12345, p, q)
		if r0 != r1 || (r0.Allowed && t0 != t1) {
			t.Errorf("q=%d: absent %d %+v, past %d %+v", q, t0, r0, t1, r1)
		}
	}
}

// reference is spec/cl-throttle.md §5 transcribed literally, with
// arbitrary-precision integers so that it cannot overflow, and with a
// refund's TAT clamped at now; remaining is the exact floor((tolerance -
// ttl) / T) (package cell tests redis-cell's microsecond form of it).
func reference(now, tat int64, p Params, q int64) (newTAT int64, r Result) {
	newTAT = tat // unchanged when refused
	if tat < now {
		tat = now
	}
	bnow, btat := big.NewInt(now), big.NewInt(tat)
	inc := new(big.Int).Mul(big.NewInt(p.Interval), big.NewInt(q))
	dvt := big.NewInt(p.Tolerance)
	nt := new(big.Int).Add(btat, inc) // max(now, tat) + increment
	allowAt := new(big.Int).Sub(nt, dvt)
	diff := new(big.Int).Sub(bnow, allowAt)
	var ttl int64
	if diff.Sign() < 0 {
		if inc.Cmp(dvt) <= 0 {
			r.RetryAfter = time.Duration(-diff.Int64())
		} else {
			r.RetryAfter = Never
		}
		ttl = tat - now
	} else {
		r.Allowed = true
		newTAT = nt.Int64()
		if newTAT < now {
			// Funnel's one departure: a refund past an empty bucket
			// leaves a full one (redis-cell writes a TAT in the past).
			newTAT = now
		}
		ttl = newTAT - now
	}
	if next := new(big.Int).Sub(dvt, big.NewInt(ttl)); next.Sign() > 0 {
		r.Remaining = next.Div(next, big.NewInt(p.Interval)).Int64()
	}
	r.ResetAfter = time.Duration(ttl)
	return newTAT, r
}

// FuzzDecide checks Decide against the spec's literal formulas and its
// invariants over random sequences of arrivals and refunds: the time charged
// (costs less what refunds really gave back) never exceeds the tolerance
// plus the time elapsed, so the units admitted never exceed limit +
// elapsed/T; remaining never exceeds the limit; the state never leads now by
// more than the tolerance, and a refund never leaves it before now.
func FuzzDecide(f *testing.F) {
	f.Add(int64(15), int64(30), int64(60e9), []byte{1, 0, 1, 3, 200, 1, 7})
	f.Add(int64(0), int64(1), int64(1e9), []byte{0, 0, 0, 255, 255, 1})
	f.Add(int64(20), int64(1500), int64(1e9), []byte{5, 1, 9, 0, 4, 4, 4, 4})
	f.Add(int64(0), int64(500250), int64(1e9), []byte{1, 10, 1, 1, 20})
	f.Add(int64(1000), int64(7), int64(10e6), []byte{100, 2, 0, 50})
	f.Add(int64(15), int64(30), int64(60e9), []byte{0, 1, 0, 1, 0, 1, 0, 254, 0, 251})
	f.Add(int64(5), int64(1e7), int64(1e9), []byte{0, 1, 3, 2, 0, 255, 9, 6})
	f.Add(int64(2), int64(1e9), int64(1e9), []byte{0, 3, 0, 1, 1, 253, 0, 2})
	f.Fuzz(func(t *testing.T, burst, count, period int64, steps []byte) {
		p, err := NewParams(burst%100000, count, time.Duration(period))
		if err != nil {
			return
		}
		const start = int64(1_795_350_508_971_038_011)
		now, tat := start, int64(0)
		var charged int64 // ns: costs admitted less what refunds gave back
		for i := 0; i+1 < len(steps); i += 2 {
			// Advance by a fraction of T (possibly 0, possibly many T), then
			// ask for a quantity from -(limit+2) to limit+2.
			adv := int64(steps[i]) * (p.Interval / 16)
			if adv > 1e17 {
				adv = 1e17
			}
			now += adv
			q := int64(int8(steps[i+1])) % (p.Limit + 3)
			before := max(tat, now)
			got, r, err := Decide(now, tat, p, q)
			if err != nil {
				if !errors.Is(err, ErrOverflow) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			wantTAT, want := reference(now, tat, p, q)
			if got != wantTAT || r != want {
				t.Fatalf("now+%d tat %d q %d: got %d %+v, spec says %d %+v", now-start, tat, q, got, r, wantTAT, want)
			}
			// DecideNoRemaining is the same decision, Remaining left to
			// Params.Remaining.
			bare := r
			bare.Remaining = 0
			if got2, r2, err2 := DecideNoRemaining(now, tat, p, q); got2 != got || r2 != bare || err2 != nil {
				t.Fatalf("DecideNoRemaining = %d, %+v, %v; Decide %d, %+v", got2, r2, err2, got, r)
			}
			if rem := p.Remaining(r.ResetAfter); rem != r.Remaining {
				t.Fatalf("Remaining(%v) = %d, Decide says %d", r.ResetAfter, rem, r.Remaining)
			}
			if !r.Allowed && got != tat {
				t.Fatalf("refused request moved the TAT")
			}
			if r.Allowed {
				charged += got - before
			}
			tat = got
			if bound := p.Tolerance + (now - start); charged > bound {
				t.Fatalf("charged %d ns > tolerance + elapsed = %d", charged, bound)
			}
			if r.Remaining > p.Limit || r.Remaining < 0 {
				t.Fatalf("remaining %d outside [0, %d]", r.Remaining, p.Limit)
			}
			if r.Allowed && q > 0 && (tat <= now || tat > now+p.Tolerance) {
				t.Fatalf("TAT after a charge at now%+d, outside (now, now+tolerance]", tat-now)
			}
			if r.Allowed && q < 0 && (tat < now || tat > before) {
				t.Fatalf("TAT after a refund at now%+d, before now or after it was", tat-now)
			}
			if tat > now+p.Tolerance {
				t.Fatalf("TAT at now%+d, beyond the tolerance", tat-now)
			}
			if r.ResetAfter < 0 || int64(r.ResetAfter) > p.Tolerance {
				t.Fatalf("reset %v outside [0, tolerance]", r.ResetAfter)
			}
		}
	})
}

// FuzzAdmitOne holds AdmitOne to DecideNoRemaining's decision of one unit,
// for any now, TAT and parameters, those near int64's ends and those no
// NewParams makes included: where it admits, DecideNoRemaining admits with
// the same TAT and ResetAfter; where it does not, DecideNoRemaining
// refuses or answers an error.
func FuzzAdmitOne(f *testing.F) {
	f.Add(int64(1_795_350_508_971_038_011), int64(0), int64(2e9), int64(30e9))
	f.Add(int64(1_795_350_508_971_038_011), int64(1_795_350_538_971_038_011), int64(2e9), int64(30e9))
	f.Add(int64(1_795_350_508_971_038_011), int64(1_795_350_536_971_038_011), int64(2e9), int64(30e9))
	f.Add(int64(math.MaxInt64-5), int64(math.MaxInt64-1), int64(3), int64(9))
	f.Add(int64(0), int64(0), int64(-1), int64(5))
	f.Add(int64(-5), int64(math.MaxInt64), int64(1), int64(math.MaxInt64))
	f.Add(int64(7), int64(3), int64(0), int64(0))
	f.Add(int64(7), int64(3), int64(9), int64(-3))
	f.Fuzz(func(t *testing.T, now, tat, interval, tolerance int64) {
		p := Params{Interval: interval, Tolerance: tolerance}
		newTAT, resetAfter, ok := AdmitOne(now, tat, p)
		wantTAT, want, err := DecideNoRemaining(now, tat, p, 1)
		if ok && (err != nil || !want.Allowed || newTAT != wantTAT || resetAfter != want.ResetAfter) {
			t.Fatalf("AdmitOne(%d, %d, %+v) = %d, %v; DecideNoRemaining %d, %+v, %v", now, tat, p, newTAT, resetAfter, wantTAT, want, err)
		}
		if !ok && (err == nil && want.Allowed || newTAT != tat) {
			t.Fatalf("AdmitOne(%d, %d, %+v) does not admit; DecideNoRemaining %d, %+v", now, tat, p, wantTAT, want)
		}
	})
}

// A negative quantity gives units back, never past a full bucket.
func TestRefund(t *testing.T) {
	p, _ := NewParams(15, 30, time.Minute) // T = 2 s, tolerance 32 s
	const now = int64(1e18)
	tat := int64(0)
	for i := 0; i < 3; i++ {
		tat, _, _ = Decide(now, tat, p, 1)
	}
	for _, c := range []struct {
		q       int64
		wantTAT int64
		want    Result
	}{
		// 6 s charged; give back 2 units: 2 s left, 15 remain.
		{-2, now + 2e9, Result{Allowed: true, Remaining: 15, ResetAfter: 2e9}},
		// Give back 5 more than were charged: a full bucket, no more.
		{-5, now, Result{Allowed: true, Remaining: 16}},
		// Nothing to give back: still full.
		{-1, now, Result{Allowed: true, Remaining: 16}},
	} {
		got, r, err := Decide(now, tat, p, c.q)
		if err != nil || got != c.wantTAT || r != c.want {
			t.Fatalf("Decide(q=%d) = %d, %+v, %v; want %d, %+v", c.q, got-now, r, err, c.wantTAT-now, c.want)
		}
		tat = got
	}
	// A refund on a key whose state is beyond this limit's tolerance (it
	// was charged under a larger limit) is refused while it stays beyond.
	big, _ := NewParams(99, 1, time.Second)
	tat, _, _ = Decide(now, 0, big, 50) // 50 s ahead
	small, _ := NewParams(9, 1, time.Second)
	if got, r, err := Decide(now, tat, small, -30); err != nil || got != tat || r != (Result{RetryAfter: 10e9, ResetAfter: 50e9}) {
		t.Fatalf("refund beyond the tolerance: %d, %+v, %v", got-now, r, err)
	}
	if got, r, err := Decide(now, tat, small, -45); err != nil || got != now+5e9 || r != (Result{Allowed: true, Remaining: 5, ResetAfter: 5e9}) {
		t.Fatalf("refund back within the tolerance: %d, %+v, %v", got-now, r, err)
	}
}

func BenchmarkDecide(b *testing.B) {
	p, _ := NewParams(1<<20, 1e6, time.Second)
	now, tat := int64(1e18), int64(0)
	for i := 0; i < b.N; i++ {
		now += 1000
		tat, _, _ = Decide(now, tat, p, 1)
	}
}

func TestMul(t *testing.T) {
	for _, c := range []struct {
		a, b, want int64
		ok         bool
	}{
		{0, 0, 0, true}, {0, math.MaxInt64, 0, true}, {1, math.MaxInt64, math.MaxInt64, true},
		{2, math.MaxInt64 / 2, math.MaxInt64 - 1, true}, {2, math.MaxInt64/2 + 1, 0, false},
		{1 << 32, 1 << 31, 0, false}, {1 << 31, 1<<31 - 1, (1 << 62) - (1 << 31), true},
		{math.MaxInt64, math.MaxInt64, 0, false}, {3037000499, 3037000499, 9223372030926249001, true},
		{3037000500, 3037000500, 0, false},
	} {
		got, ok := mul(c.a, c.b)
		if got != c.want || ok != c.ok {
			t.Errorf("mul(%d, %d) = %d, %v; want %d, %v", c.a, c.b, got, ok, c.want, c.ok)
		}
	}
}
