package storetest

import (
	"context"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/cell"
)

// A refund (a negative quantity) past an empty bucket leaves a full bucket:
// no state at all, nothing that outlives the bucket.
func testRefundState(t *testing.T, newStore NewStore) {
	clock := NewClock(Epoch)
	st := newStore(t, clock.Now)
	ctx := context.Background()
	p := mustParams(t, 15, 30, time.Minute) // T = 2 s
	if r, err := Throttle(ctx, st, "r", p, 3); err != nil || r != allowed(16, 13, 6*s) {
		t.Fatalf("charge: %+v, %v", r, err)
	}
	if r, err := Throttle(ctx, st, "r", p, -2); err != nil || r != allowed(16, 15, 2*s) {
		t.Fatalf("refund of 2: %+v, %v", r, err)
	}
	if ttl, ok, err := st.TTL(ctx, "r"); err != nil || !ok || ttl != 2*s {
		t.Fatalf("TTL after a refund = %v, %v, %v; want 2s, true", ttl, ok, err)
	}
	if r, err := Throttle(ctx, st, "r", p, -5); err != nil || r != allowed(16, 16, 0) {
		t.Fatalf("refund past an empty bucket: %+v, %v", r, err)
	}
	if ttl, ok, err := st.TTL(ctx, "r"); err != nil || ok || ttl != 0 {
		t.Fatalf("TTL after a refund to a full bucket = %v, %v, %v; want 0, false", ttl, ok, err)
	}
	if existed, err := st.Reset(ctx, "r"); err != nil || existed {
		t.Fatalf("Reset after a refund to a full bucket = %v, %v; want false", existed, err)
	}
	// On a fresh key: nothing is written.
	if r, err := Throttle(ctx, st, "fresh", mustParams(t, 5, 2000, 3*s), -1); err != nil || r != allowed(6, 6, 0) {
		t.Fatalf("refund on a fresh key: %+v, %v", r, err)
	}
	if ttl, ok, err := st.TTL(ctx, "fresh"); err != nil || ok || ttl != 0 {
		t.Fatalf("TTL after a refund on a fresh key = %v, %v, %v; want 0, false", ttl, ok, err)
	}
	// A key charged under a larger limit stays beyond a smaller limit's
	// tolerance after a small refund: refused, with the real wait, and
	// unchanged.
	if _, err := Throttle(ctx, st, "big", mustParams(t, 99, 1, s), 50); err != nil {
		t.Fatal(err)
	}
	small := mustParams(t, 9, 1, s)
	if r, err := Throttle(ctx, st, "big", small, -30); err != nil || r != refused(10, 0, 10*s, 50*s) {
		t.Fatalf("refund beyond the tolerance: %+v, %v", r, err)
	}
	// An OpRefund is Allowed (Store.Do), even where it leaves the state
	// beyond the limit's tolerance.
	if _, err := Throttle(ctx, st, "big2", mustParams(t, 99, 1, s), 50); err != nil {
		t.Fatal(err)
	}
	sc := funnel.Checked{Limit: funnel.Limit{Count: 1, Period: s, Burst: 9}, GCRA: small}
	res := make([]funnel.Result, 1)
	if err := st.Do(ctx, []funnel.Op{{Kind: funnel.OpRefund, Key: "big2", Limit: sc, N: 1}}, res); err != nil || !res[0].Allowed || res[0].ResetAfter != 49*s {
		t.Fatalf("OpRefund beyond the tolerance: %+v, %v", res[0], err)
	}
	if r, err := Throttle(ctx, st, "big", small, -45); err != nil || r != allowed(10, 5, 5*s) {
		t.Fatalf("refund back within the tolerance: %+v, %v", r, err)
	}
}

// diffParams are CL.THROTTLE's arguments (max_burst, count, period in
// seconds) that the differential test draws from: ordinary rates, the
// microsecond rounding of remaining, intervals under a microsecond down to
// one nanosecond, and periods long enough that seconds round through a
// float64.
var diffParams = [][3]int64{
	{15, 30, 60}, {0, 1, 1}, {4, 1, 1}, {20, 1500, 1}, {0, 500250, 1}, {1000, 93, 1},
	{9, 10, 1}, {5, 2000, 3}, {2, 7, 3600},
	{5, 10_000_000, 1}, {100_000, 10_000_000, 1}, {0, 1_000_001, 1}, {2, 1_000_000_000, 1}, {7, 333_333_333, 1},
	{20, 3, 10_329_049}, {2, 3, 1_230_631_900}, {0, 1, 7_000_000_000}, {1, 1, 16_777_216},
}

// testDifferential drives many random sequences of charges, peeks and
// refunds, at random instants of a fake clock, through the store, and checks
// each result and each CL.THROTTLE reply against spec/cl-throttle.md's
// formulas transcribed here with arbitrary-precision integers (specDecide),
// with Funnel's two departures: a refund past an empty bucket stops at a
// full bucket, and under a microsecond remaining is exact in nanoseconds.
func testDifferential(t *testing.T, newStore NewStore) {
	clock := NewClock(Epoch)
	st := newStore(t, clock.Now)
	ctx := context.Background()
	const seed = 2026
	r := rand.New(rand.NewPCG(seed, 12))
	const sequences, steps = 120, 30
	var allowedN, refusedN, refunds, full, decided int
	for sq := 0; sq < sequences; sq++ {
		args := diffParams[r.IntN(len(diffParams))]
		p := mustParams(t, args[0], args[1], time.Duration(args[2])*time.Second)
		key := "diff:" + string(rune('a'+sq%26)) + ":" + time.Duration(sq).String()
		now := Epoch + r.Int64N(int64(time.Second))
		var tat int64 // the spec's state: 0 when absent
		for i := 0; i < steps; i++ {
			// Advance by 0 to 4 intervals, in sixteenths, give or take a
			// nanosecond; stop before now + tolerance, the furthest an
			// admitted request can move the TAT, could pass int64.
			adv := new(big.Int).Mul(big.NewInt(r.Int64N(65)), big.NewInt(p.Interval/16))
			if r.IntN(3) == 0 {
				adv.Add(adv, big.NewInt(r.Int64N(3)-1))
			}
			end := new(big.Int).Add(big.NewInt(now), adv)
			end.Add(end, big.NewInt(p.Tolerance))
			if adv.Sign() < 0 || !end.IsInt64() {
				break
			}
			now += adv.Int64()
			// A quantity from -(limit+2) to limit+2, whose cost fits.
			q := r.Int64N(p.Limit+3) - 1
			switch r.IntN(5) {
			case 0:
				q = 0
			case 1:
				q = -1 - r.Int64N(p.Limit+2)
			}
			if most := math.MaxInt64 / p.Interval; q > most || q < -most {
				q %= most + 1
			}
			clock.Set(now)
			got, err := Throttle(ctx, st, key, p, q)
			if err != nil {
				t.Fatalf("seed %d, sequence %d %v, step %d (now %d, quantity %d): %v", seed, sq, args, i, now-Epoch, q, err)
			}
			newTAT, want, wire := specDecide(now, tat, args, q)
			if got != want {
				t.Fatalf("seed %d, sequence %d %v, step %d (now %d, TAT now%+d, quantity %d):\n got %+v\nspec %+v",
					seed, sq, args, i, now-Epoch, tat-now, q, got, want)
			}
			if w := cell.Reply(p, got); w != wire {
				t.Fatalf("seed %d, sequence %d %v, step %d (now %d, TAT now%+d, quantity %d): reply %v, spec %v",
					seed, sq, args, i, now-Epoch, tat-now, q, w, wire)
			}
			tat = newTAT
			decided++
			switch {
			case !got.Allowed:
				refusedN++
			case q < 0 && got.ResetAfter == 0:
				full++
				fallthrough
			case q < 0:
				refunds++
				allowedN++
			default:
				allowedN++
			}
		}
	}
	t.Logf("seed %d: %d decisions: %d allowed (%d refunds, %d of them to a full bucket), %d refused",
		seed, decided, allowedN, refunds, full, refusedN)
	if refusedN < decided/10 || refunds < decided/10 || full < decided/50 {
		t.Fatalf("the sequences do not cover each outcome well")
	}
}

// specDecide is spec/cl-throttle.md §5 and §6 for CL.THROTTLE key burst
// count period q, at now, on a key whose TAT is tat (0: absent), in
// arbitrary precision: the new TAT, the exact result, and the reply.
func specDecide(now, tat int64, args [3]int64, q int64) (int64, funnel.Result, [5]int64) {
	burst, count, period := args[0], args[1], args[2]
	periodNs := new(big.Int).Mul(big.NewInt(period), big.NewInt(1e9))
	pf, _ := new(big.Float).SetInt(periodNs).Float64()
	interval := int64(pf / float64(count)) // f64→i64, truncating
	T := big.NewInt(interval)
	limit := burst + 1
	dvt := new(big.Int).Mul(T, big.NewInt(limit))
	inc := new(big.Int).Mul(T, big.NewInt(q))
	bnow := big.NewInt(now)
	btat := big.NewInt(tat)
	if now > tat {
		btat = bnow
	}
	newTAT := new(big.Int).Add(btat, inc)
	allowAt := new(big.Int).Sub(newTAT, dvt)
	diff := new(big.Int).Sub(bnow, allowAt)
	res := funnel.Result{Limit: limit}
	var ttl *big.Int
	stored := tat
	reply := [5]int64{1, limit, 0, -1, 0}
	if diff.Sign() < 0 {
		if inc.Cmp(dvt) <= 0 {
			res.RetryAfter = time.Duration(new(big.Int).Neg(diff).Int64())
			reply[3] = specSeconds(int64(res.RetryAfter))
		} else {
			res.RetryAfter = gcra.Never
		}
		ttl = new(big.Int).Sub(btat, bnow) // the spec's tat - now, never negative here
	} else {
		res.Allowed = true
		reply[0] = 0
		if newTAT.Cmp(bnow) < 0 {
			newTAT.Set(bnow) // Funnel: a refund stops at a full bucket
		}
		stored = newTAT.Int64()
		ttl = new(big.Int).Sub(newTAT, bnow)
	}
	res.ResetAfter = time.Duration(ttl.Int64())
	reply[4] = specSeconds(ttl.Int64())
	next := new(big.Int).Sub(dvt, ttl)
	if next.Sign() > 0 {
		res.Remaining = new(big.Int).Quo(next, T).Int64()
	}
	if next.Cmp(new(big.Int).Neg(T)) > 0 {
		if interval < 1000 {
			// Funnel: exact nanoseconds where redis-cell divides by 0 µs.
			reply[2] = new(big.Int).Quo(next, T).Int64()
		} else {
			us := new(big.Int).Quo(next, big.NewInt(1000)).Int64()
			reply[2] = int64(float64(us) / float64(interval/1000))
		}
	}
	return stored, res, reply
}

// specSeconds is the spec's ceil_ms: the duration as_seconds_f64 (whole
// seconds as a float64, plus the nanoseconds / 1e9), truncated toward zero,
// plus one when its sub-second milliseconds are positive.
func specSeconds(ns int64) int64 {
	sec, sub := ns/1e9, ns%1e9
	v := int64(float64(sec) + float64(sub)/1e9)
	if sub/1e6 > 0 {
		v++
	}
	return v
}
