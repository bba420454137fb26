package gcra

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// A lease of k units at now is k admissions at now: Decide admits exactly
// the units Lease grants, one by one, and the TAT ends where Lease puts it.
func TestLeaseIsAdmissions(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		p, err := NewParams(r.Int64N(50), 1+r.Int64N(1000), time.Duration(1+r.Int64N(int64(time.Second))))
		if err != nil || p.Tolerance > MaxLeaseTolerance {
			continue
		}
		now := int64(1e18) + r.Int64N(1e12)
		tat := now + r.Int64N(2*p.Tolerance) - p.Tolerance/2
		want := 1 + r.Int64N(p.Limit+3)
		newTAT, n, err := Lease(now, tat, p, LeaseRequest{Want: want, Min: 1})
		if err != nil {
			t.Fatal(err)
		}
		cur := tat
		for j := int64(0); j < n; j++ {
			var res Result
			if cur, res, _ = Decide(now, cur, p, 1); !res.Allowed {
				t.Fatalf("p %+v tat %d: unit %d of a lease of %d refused", p, tat, j, n)
			}
		}
		if n > 0 && cur != newTAT {
			t.Fatalf("p %+v: TAT %d after the units, lease says %d", p, cur, newTAT)
		}
		if n < want {
			if _, res, _ := Decide(now, cur, p, 1); res.Allowed {
				t.Fatalf("p %+v tat %d: lease granted %d of %d, but one more fits", p, tat, n, want)
			}
		}
		// Giving every unit back leaves the key as it was (or full).
		// (The call takes the whole bucket or nothing after it.)
		back, n2, err := Lease(now, newTAT, p, LeaseRequest{Want: p.Limit, Min: p.Limit, BackEnd: newTAT, BackUnits: n})
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 && back-n2*p.Interval != max(tat, now) {
			t.Fatalf("p %+v tat %d now %d: give-back of %d leaves %d", p, tat, now, n, back)
		}
	}
}

func TestLeaseMinAndGiveBack(t *testing.T) {
	p, _ := NewParams(9, 10, time.Second) // T = 100 ms, 10 units
	const now = int64(1e18)
	T := p.Interval
	// 4 units spent: 6 fit. Asking for at least 7 gets nothing.
	if tat, n, _ := Lease(now, now+4*T, p, LeaseRequest{Want: 8, Min: 7}); n != 0 || tat != now+4*T {
		t.Fatalf("min 7 of 6: %d units, tat %d", n, tat)
	}
	if tat, n, _ := Lease(now, now+4*T, p, LeaseRequest{Want: 8, Min: 6}); n != 6 || tat != now+10*T {
		t.Fatalf("min 6 of 6: %d units, tat %d", n, tat)
	}
	// The give-back applies only on the lease's own end.
	if tat, n, _ := Lease(now, now+10*T, p, LeaseRequest{Want: 1, Min: 1, BackEnd: now + 10*T, BackUnits: 3}); n != 1 || tat != now+8*T {
		t.Fatalf("give back 3 then take 1: %d units, tat %d", n, tat)
	}
	if tat, n, _ := Lease(now, now+10*T, p, LeaseRequest{Want: 1, Min: 1, BackEnd: now + 9*T, BackUnits: 3}); n != 0 || tat != now+10*T {
		t.Fatalf("a stale give-back: %d units, tat %d", n, tat)
	}
	// Never before now.
	if tat, n, _ := Lease(now, now+2*T, p, LeaseRequest{Want: 10, Min: 10, BackEnd: now + 2*T, BackUnits: 5}); n != 10 || tat != now+10*T {
		t.Fatalf("give back past empty: %d units, tat %d", n, tat)
	}
}

func TestLeaseBadRequests(t *testing.T) {
	p, _ := NewParams(9, 10, time.Second)
	huge, _ := NewParams(100, 1, 24*time.Hour)
	for _, c := range []struct {
		p   Params
		req LeaseRequest
	}{
		{p, LeaseRequest{Want: 0, Min: 1}},
		{p, LeaseRequest{Want: 2, Min: 0}},
		{p, LeaseRequest{Want: 2, Min: 3}},
		{p, LeaseRequest{Want: 1, Min: 1, BackUnits: -1}},
		{p, LeaseRequest{Want: 1, Min: 1, BackUnits: 11, BackEnd: 5}},
		{p, LeaseRequest{Want: 1, Min: 1, Horizon: -1}},
		{p, LeaseRequest{Want: 1, Min: 1, Horizon: MaxLeaseTolerance}},
		{huge, LeaseRequest{Want: 1, Min: 1}},
		{Params{}, LeaseRequest{Want: 1, Min: 1}},
	} {
		if tat, n, err := Lease(5, 7, c.p, c.req); !errors.Is(err, ErrBadLease) || tat != 7 || n != 0 {
			t.Errorf("%+v %+v: %d %d %v", c.p, c.req, tat, n, err)
		}
	}
}

// Future-dated units: a grant with a horizon is k admissions, each at its
// slot (LeaseSlot), in order: every one is admitted there and none a
// nanosecond before its slot when that is after now; the slots stay
// within the horizon, and the grant takes all that fits in it.
func TestFutureUnitsAreAdmissionsAtTheirSlots(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	future := 0
	for i := 0; i < 20000; i++ {
		p, err := NewParams(r.Int64N(50), 1+r.Int64N(1000), time.Duration(1+r.Int64N(int64(time.Second))))
		if err != nil || p.Tolerance > MaxLeaseTolerance/4 {
			continue
		}
		now := int64(1e18) + r.Int64N(1e12)
		h := r.Int64N(3 * p.Tolerance)
		tat := now + r.Int64N(2*p.Tolerance+h) - p.Tolerance/2
		want := 1 + r.Int64N(p.Limit+h/p.Interval+3)
		newTAT, n, err := Lease(now, tat, p, LeaseRequest{Want: want, Min: 1, Horizon: h})
		if err != nil {
			t.Fatal(err)
		}
		cur, prev := tat, now
		for j := int64(0); j < n; j++ {
			at := LeaseSlot(now, newTAT, n, j, p)
			if at < prev || at > now+h {
				t.Fatalf("p %+v tat %d h %d: slot %d of %d at %d, after %d, now %d", p, tat, h, j, n, at, prev, now)
			}
			if at > now {
				future++
				if _, res, _ := Decide(at-1, cur, p, 1); res.Allowed {
					t.Fatalf("p %+v: unit %d of %d admitted before its slot", p, j, n)
				}
			}
			var res Result
			if cur, res, _ = Decide(at, cur, p, 1); !res.Allowed {
				t.Fatalf("p %+v tat %d h %d: unit %d of %d refused at its slot %d", p, tat, h, j, n, at)
			}
			prev = at
		}
		if n > 0 && cur != newTAT {
			t.Fatalf("p %+v: TAT %d after the units, lease says %d", p, cur, newTAT)
		}
		if n < want {
			// One more unit would have its slot beyond the horizon.
			if LeaseSlot(now, max(tat, now)+(n+1)*p.Interval, n+1, n, p) <= now+h {
				t.Fatalf("p %+v tat %d h %d: granted %d of %d, but one more fits", p, tat, h, n, want)
			}
		}
	}
	if future < 10000 {
		t.Fatalf("only %d future-dated units", future)
	}
}
