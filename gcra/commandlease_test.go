package gcra

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// randCommand draws the parameters of a GCRA call of one token, small
// enough to lease.
func randCommand(r *rand.Rand) CommandParams {
	for {
		p, err := NewCommandParams(r.Int64N(40), 1+r.Int64N(1000), float64(1+r.Int64N(5e6))/1e3, 1)
		if err == nil && p.Overflow == nil && p.Variance <= MaxLeaseTolerance/2 {
			return p
		}
	}
}

// A lease of k tokens at now is k calls of one token at now: DecideCommand
// admits exactly the tokens LeaseCommand grants, one by one, the TAT ends
// where LeaseCommand puts it, and one more call is refused when it granted
// fewer than asked.
func TestLeaseCommandIsCalls(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 20000; i++ {
		p := randCommand(r)
		now := (1_700_000_000_000 + r.Int64N(1e9)) * 1000
		exists := r.IntN(4) > 0
		tat := now + r.Int64N(2*p.Variance+1) - p.Variance/2
		if !exists {
			tat = 0
		}
		want := 1 + r.Int64N(p.Limit+3)
		newTAT, n, stored, err := LeaseCommand(now, tat, exists, p, LeaseRequest{Want: want, Min: 1})
		if err != nil {
			t.Fatal(err)
		}
		if stored != (n > 0) || !stored && newTAT != tat {
			t.Fatalf("p %+v tat %d: %d units, stored %v, TAT %d", p, tat, n, stored, newTAT)
		}
		cur, ex := tat, exists
		for j := int64(0); j < n; j++ {
			var rep CommandReply
			var st bool
			if cur, rep, st, err = DecideCommand(now, cur, ex, p); err != nil || rep.Limited || !st {
				t.Fatalf("p %+v tat %d: unit %d of a lease of %d refused (%v)", p, tat, j, n, err)
			}
			ex = true
		}
		if n > 0 && cur != newTAT {
			t.Fatalf("p %+v: TAT %d after the calls, the lease says %d", p, cur, newTAT)
		}
		if n < want {
			if _, rep, _, _ := DecideCommand(now, cur, ex, p); !rep.Limited {
				t.Fatalf("p %+v tat %d: lease granted %d of %d, but one more call is admitted", p, tat, n, want)
			}
		}
	}
}

func TestLeaseCommandMinAndGiveBack(t *testing.T) {
	p, _ := NewCommandParams(9, 10, 1, 1) // T = 100 ms, 10 tokens
	const now = int64(1_800_000_000_000_000)
	T := p.Interval
	if T != 100_000 || p.Variance != 1_000_000 {
		t.Fatalf("params %+v", p)
	}
	// 4 tokens spent: 6 fit. Asking for at least 7 gets nothing.
	if tat, n, st, _ := LeaseCommand(now, now+4*T, true, p, LeaseRequest{Want: 8, Min: 7}); n != 0 || st || tat != now+4*T {
		t.Fatalf("min 7 of 6: %d units, stored %v, tat %d", n, st, tat)
	}
	tat, n, _, _ := LeaseCommand(now, now+4*T, true, p, LeaseRequest{Want: 8, Min: 2})
	if n != 6 || tat != now+10*T {
		t.Fatalf("want 8, min 2: %d units to %d", n, tat)
	}
	// An absent key is a full bucket; nothing fits, nothing changes.
	if tat, n, st, _ := LeaseCommand(now, 0, false, p, LeaseRequest{Want: 3, Min: 1}); n != 3 || !st || tat != now+3*T {
		t.Fatalf("absent: %d units to %d", n, tat)
	}
	if tat, n, st, _ := LeaseCommand(now, now+10*T, true, p, LeaseRequest{Want: 1, Min: 1}); n != 0 || st || tat != now+10*T {
		t.Fatalf("full: %d units to %d", n, tat)
	}
	// Give back 3 of the 6 a moment later: they are taken again.
	later := now + 50_000
	if tat2, n2, st, _ := LeaseCommand(later, tat, true, p, LeaseRequest{Want: 9, Min: 1, BackEnd: tat, BackUnits: 3}); n2 != 3 || !st || tat2 != tat {
		t.Fatalf("give-back of 3: %d units to %d", n2, tat2)
	}
	// After another charge the give-back is forfeited.
	if tat2, n2, _, _ := LeaseCommand(later, tat+T, true, p, LeaseRequest{Want: 9, Min: 1, BackEnd: tat, BackUnits: 3}); n2 != 0 || tat2 != tat+T {
		t.Fatalf("stale give-back: %d units to %d", n2, tat2)
	}
	// Nor does it apply to an absent key (it expired: the lease's TAT passed).
	if _, n2, _, _ := LeaseCommand(tat+T, 0, false, p, LeaseRequest{Want: 1, Min: 1, BackEnd: tat, BackUnits: 3}); n2 != 1 {
		t.Fatalf("absent key: %d units", n2)
	}
	// A give-back never moves the TAT to before now; alone, it is stored.
	if tat2, n2, st, _ := LeaseCommand(now+9*T, now+10*T, true, p, LeaseRequest{Want: 1, Min: 1, BackEnd: now + 10*T, BackUnits: 5}); n2 != 1 || !st || tat2 != now+10*T {
		t.Fatalf("give-back past now: %d units to %d", n2, tat2)
	}
	if tat2, n2, st, _ := LeaseCommand(now+9*T, now+10*T, true, p, LeaseRequest{Want: 11, Min: 11, BackEnd: now + 10*T, BackUnits: 5}); n2 != 0 || !st || tat2 != now+9*T {
		t.Fatalf("give-back alone: %d units to %d, stored %v", n2, tat2, st)
	}
	// Future-dated tokens: a full bucket with a horizon of 3 intervals.
	if tat2, n2, _, _ := LeaseCommand(now, now+10*T, true, p, LeaseRequest{Want: 5, Min: 1, Horizon: 3 * T}); n2 != 3 || tat2 != now+13*T {
		t.Fatalf("horizon: %d units to %d", n2, tat2)
	}
	if s := CommandLeaseSlot(now, now+13*T, 3, 0, p); s != now+T {
		t.Fatalf("slot of the first future-dated token: %d", s-now)
	}
}

func TestLeaseCommandErrors(t *testing.T) {
	p, _ := NewCommandParams(9, 10, 1, 1)
	const now = int64(1_800_000_000_000_000)
	ok := LeaseRequest{Want: 1, Min: 1}
	for _, c := range []struct {
		tat    int64
		exists bool
		p      CommandParams
		req    LeaseRequest
		want   error
	}{
		{-5, true, p, ok, ErrCommandNegativeTime},
		{0, true, p, ok, ErrCommandNegativeTime},
		{now, true, CommandParams{Overflow: ErrCommandBurstOverflow}, ok, ErrCommandBurstOverflow},
		{-5, true, CommandParams{Overflow: ErrCommandBurstOverflow}, ok, ErrCommandNegativeTime}, // the key first
		{now, true, p, LeaseRequest{Want: 0, Min: 1}, ErrBadLease},
		{now, true, p, LeaseRequest{Want: 2, Min: 3}, ErrBadLease},
		{now, true, p, LeaseRequest{Want: 1, Min: 1, Horizon: -1}, ErrBadLease},
		{now, true, p, LeaseRequest{Want: 1, Min: 1, Horizon: MaxLeaseTolerance}, ErrBadLease},
		{now, true, p, LeaseRequest{Want: 1, Min: 1, BackEnd: now, BackUnits: 11}, ErrBadLease},
		{now, false, CommandParams{Interval: 10, Variance: 5}, ok, ErrBadLease},
		{now, false, CommandParams{Interval: 1, Variance: MaxLeaseTolerance + 1}, ok, ErrBadLease},
	} {
		if tat, n, st, err := LeaseCommand(now, c.tat, c.exists, c.p, c.req); !errors.Is(err, c.want) || n != 0 || st || tat != 0 {
			t.Errorf("tat %d %+v %+v: %d units, stored %v, %v; want %v", c.tat, c.p, c.req, n, st, err, c.want)
		}
	}
	// A TAT near 2^63-1 µs leaves no room; a now there would pass it.
	if _, _, _, err := LeaseCommand(1<<63-10, 0, false, p, ok); !errors.Is(err, ErrCommandTokensOverflow) {
		t.Errorf("now near 2^63-1: %v", err)
	}
}

// Leases (some future-dated, some with give-backs, tokens spent in part)
// and plain calls on one key, on a fake clock: replayed at their slots,
// one token each, through DecideCommand, every token spent is admitted. So
// k leased tokens never admit more than k calls of the command would.
func TestLeaseCommandReplay(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 300; round++ {
		p := randCommand(r)
		now := (1_700_000_000_000 + r.Int64N(1e9)) * 1000
		var tat int64
		exists := false
		var back LeaseRequest
		hz := int64(0) // the leases' horizon, the same for all (as a store's)
		if round%2 == 0 {
			hz = r.Int64N(2 * p.Variance)
		}
		var spent []int64 // the slots of the tokens spent, in order
		for step := 0; step < 200; step++ {
			now += r.Int64N(3*p.Interval) / 1000 * 1000 // whole ms, as the command's time
			if exists && tat < now && r.IntN(2) == 0 {
				exists, tat = false, 0 // expired
			}
			if r.IntN(4) == 0 {
				nt, rep, st, err := DecideCommand(now, tat, exists, p)
				if err != nil {
					t.Fatal(err)
				}
				if !rep.Limited {
					tat, exists = nt, st
					spent = append(spent, now)
					back = LeaseRequest{}
				}
				continue
			}
			req := back
			req.Want = 1 + r.Int64N(p.Limit+2)
			req.Min = 1 + r.Int64N(req.Want)
			req.Horizon = hz
			nt, n, st, err := LeaseCommand(now, tat, exists, p, req)
			if err != nil {
				t.Fatal(err)
			}
			if st {
				tat, exists = nt, true
			}
			back = LeaseRequest{}
			if n == 0 {
				continue
			}
			// Spend a prefix (maybe skipping some before the last spent),
			// give back the tail after the last one spent.
			last := r.Int64N(n + 1)
			for j := int64(0); j < last; j++ {
				if j == last-1 || r.IntN(4) > 0 {
					spent = append(spent, CommandLeaseSlot(now, nt, n, j, p))
				}
			}
			if last < n {
				back = LeaseRequest{BackEnd: nt, BackUnits: n - last}
			}
		}
		var cur int64
		ex := false
		for i, at := range spent {
			if i > 0 && at < spent[i-1] {
				t.Fatalf("p %+v: slot %d before the one before it (%d)", p, at, spent[i-1])
			}
			nt, rep, st, err := DecideCommand(at, cur, ex && cur >= at, p)
			if err != nil || rep.Limited {
				t.Fatalf("p %+v: token %d of %d, at %d, refused in the replay (%v)", p, i, len(spent), at, err)
			}
			cur, ex = nt, st
		}
	}
}
