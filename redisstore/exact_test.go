package redisstore_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/storetest"
)

// exactCase is one decision checked against gcra.Decide: the key holds tat
// (written by hand with SET, in redis-cell's format) or nothing (tat < 0).
type exactCase struct {
	name     string
	now, tat int64
	p        gcra.Params
	quantity int64
}

func mkParams(t testing.TB, burst, count int64, period time.Duration) gcra.Params {
	t.Helper()
	p, err := gcra.NewParams(burst, count, period)
	if err != nil {
		t.Fatalf("NewParams(%d, %d, %v): %v", burst, count, period, err)
	}
	return p
}

const (
	year   = 365 * 24 * time.Hour
	maxI64 = math.MaxInt64
)

// edgeCases are decisions near the limits: periods of years and centuries,
// arrivals one nanosecond apart around the boundary, 19-digit TATs, TATs and
// new TATs at 2^63-1, and the smallest interval.
func edgeCases(t *testing.T) []exactCase {
	const now = 1_795_350_508_971_038_011 // 19 digits
	years := mkParams(t, 3, 1, 20*year)   // T = 20 years, tolerance 80 years
	micro := mkParams(t, 0, 1, time.Microsecond)
	slow := mkParams(t, 9, 1, time.Hour) // T = 1 h, tolerance 10 h
	odd := mkParams(t, 6, 7, time.Second+1)
	tol := slow.Tolerance
	cs := []exactCase{
		{"FreshKey", now, -1, slow, 1},
		{"FreshKeyYears", now, -1, years, 4},
		{"FreshKeyYearsAllButOne", now, -1, years, 3},
		{"FreshKeyYearsTooMany", now, -1, years, 5},
		{"BoundaryExact", now, now + tol - slow.Interval, slow, 1},
		{"BoundaryOneNsEarly", now - 1, now + tol - slow.Interval, slow, 1},
		{"BoundaryOneNsLate", now + 1, now + tol - slow.Interval, slow, 1},
		{"FullTolerance", now, now + tol, slow, 1},
		{"FullTolerancePeek", now, now + tol, slow, 0},
		{"TATOneNsAhead", now, now + 1, slow, 1},
		{"TATOneNsAheadPeek", now, now + 1, slow, 0},
		{"TATEqualsNow", now, now, slow, 1},
		{"TATEqualsNowPeek", now, now, slow, 0},
		{"TATOneNsBehindPeek", now, now - 1, slow, 0},
		{"TATInThePast", now, 123, slow, 2},
		{"TATZero", now, 0, slow, 10},
		{"TATZeroPeek", now, 0, slow, 0},
		{"LimbCarry", 1_999_999_999, 1_999_999_999 + 999_999_999, odd, 1},
		{"LimbBorrow", 2_000_000_001, 2_999_999_999, odd, 3},
		{"NowZero", 0, -1, slow, 1},
		{"NowSmall", 999_999_999, 1_000_000_000, micro, 1},
		{"MicroInterval", now, now + micro.Interval - 1, micro, 1},
		{"MaxTATRefused", now, maxI64, slow, 1},
		{"MaxTATPeek", now, maxI64, slow, 0},
		{"NewTATIsMax", maxI64 - tol, maxI64 - slow.Interval, slow, 1},
		{"NewTATOverflowsByOne", maxI64 - tol + 1, maxI64 - slow.Interval + 1, slow, 1},
		{"NowNearMax", maxI64 - slow.Interval, -1, slow, 1},
		{"NowNearMaxOverflow", maxI64 - slow.Interval + 1, -1, slow, 1},
		{"NowIsMaxPeek", maxI64, -1, slow, 0},
		{"YearsOverflow", maxI64 - 5*int64(year), -1, years, 1},
		{"CenturyOverflow", maxI64 - 99*int64(year), -1, mkParams(t, 1, 1, 100*year), 1},
		{"HugeToleranceFresh", now, -1, mkParams(t, 1, 1, 4e18), 1},
		{"HugeToleranceOverflow", now, -1, mkParams(t, 1, 1, 4e18), 2},
	}
	// Arrivals one nanosecond apart across a whole interval boundary.
	for d := int64(-3); d <= 3; d++ {
		cs = append(cs, exactCase{"NsApart" + strconv.FormatInt(d, 10), now + d, now + tol, slow, 1})
	}
	return cs
}

// randomCases draws decisions over the whole int64 range, with the TAT near
// the boundaries more often than not.
func randomCases(t *testing.T, n int) []exactCase {
	r := rand.New(rand.NewPCG(4, 2026))
	cs := make([]exactCase, 0, n)
	for len(cs) < n {
		// Intervals from 1 ns to centuries, bursts from 0 to a million.
		interval := time.Duration(1 + r.Int64N(int64(1)<<r.IntN(62)))
		burst := r.Int64N(int64(1) << r.IntN(21))
		p, err := gcra.NewParams(burst, 1, interval)
		if err != nil {
			continue // tolerance overflows int64
		}
		var now int64
		switch r.IntN(4) {
		case 0:
			now = r.Int64()
		case 1:
			now = 1_700_000_000_000_000_000 + r.Int64N(1e17)
		case 2:
			now = r.Int64N(1e12)
		default:
			now = maxI64 - r.Int64N(p.Tolerance+1)
		}
		var tat int64
		switch r.IntN(6) {
		case 0:
			tat = -1 // absent
		case 1:
			tat = r.Int64()
		case 2: // anywhere within the tolerance around now
			tat = sat(sat(now, -p.Tolerance), 2*r.Int64N(p.Tolerance/2+1))
		default: // on the boundary of some quantity, give or take a few ns
			q := r.Int64N(p.Limit + 1)
			tat = sat(sat(now, p.Tolerance-q*p.Interval), r.Int64N(7)-3)
		}
		if tat < 0 {
			tat = -1
		}
		q := r.Int64N(p.Limit + 2)
		switch r.IntN(10) {
		case 0:
			q = 0
		case 1, 2:
			// A refund, often past an empty bucket.
			q = -1 - r.Int64N(2*p.Limit+1)
		case 3:
			if r.IntN(10) == 0 {
				q = -r.Int64() // a refund whose cost overflows, mostly
			}
		}
		cs = append(cs, exactCase{"Random", now, tat, p, q})
	}
	return cs
}

// sat returns a+b, saturated at the int64 bounds.
func sat(a, b int64) int64 {
	switch {
	case b > 0 && a > maxI64-b:
		return maxI64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// TestExactAgainstDecide writes a TAT by hand, runs one decision at an
// injected time, and checks the result, the error and the key's new value
// against gcra.Decide, for cases near the limits and thousands of random
// ones over the whole int64 range.
func TestExactAgainstDecide(t *testing.T) {
	t.Parallel()
	for _, path := range redisstore.FunnelPaths {
		t.Run(path.Name, func(t *testing.T) {
			t.Parallel()
			testExactAgainstDecide(t, path.Start(t))
		})
	}
}

func testExactAgainstDecide(t *testing.T, srv *redistest.Server) {
	c := srv.Client()
	ctx := context.Background()
	var now atomic.Int64
	st := redisstore.New(c, redisstore.Options{Now: now.Load, Prefix: "exact:", Timeout: 20 * time.Second})
	cases := append(edgeCases(t), randomCases(t, 3000)...)
	allowed, refused, overflowed := 0, 0, 0
	for i, tc := range cases {
		key := "k" + strconv.Itoa(i)
		if tc.tat >= 0 {
			if err := c.Set(ctx, "exact:"+key, strconv.FormatInt(tc.tat, 10), time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
		}
		now.Store(tc.now)
		got, err := storetest.Throttle(ctx, st, key, tc.p, tc.quantity)
		old := tc.tat
		if old < 0 {
			old = 0
		}
		wantTAT, want, wantErr := gcra.Decide(tc.now, old, tc.p, tc.quantity)
		if !errors.Is(err, wantErr) || (err == nil) != (wantErr == nil) {
			t.Fatalf("case %d %s %+v: err %v, want %v", i, tc.name, tc, err, wantErr)
		}
		stored, gerr := c.Get(ctx, "exact:"+key).Result()
		switch {
		case wantErr != nil:
			overflowed++
			if g := funnel.ResultOf(tc.p, want); got != (funnel.Result{}) {
				t.Fatalf("case %d %s: result %+v with error (Decide: %+v)", i, tc.name, got, g)
			}
		case got != funnel.ResultOf(tc.p, want):
			t.Fatalf("case %d %s %+v:\n got %+v\nwant %+v", i, tc.name, tc, got, funnel.ResultOf(tc.p, want))
		case want.Allowed:
			allowed++
		default:
			refused++
		}
		// The key: unchanged unless allowed; then the new TAT, or gone when
		// the new TAT is now (the same state as an absent key).
		wantStored := ""
		if want.Allowed && wantErr == nil {
			if wantTAT > tc.now {
				wantStored = strconv.FormatInt(wantTAT, 10)
			}
		} else if tc.tat >= 0 {
			wantStored = strconv.FormatInt(tc.tat, 10)
		}
		if errors.Is(gerr, redis.Nil) {
			stored = ""
		} else if gerr != nil {
			t.Fatal(gerr)
		}
		if stored != wantStored {
			t.Fatalf("case %d %s %+v: key holds %q, want %q", i, tc.name, tc, stored, wantStored)
		}
	}
	t.Logf("%d cases: %d allowed, %d refused, %d overflowed", len(cases), allowed, refused, overflowed)
	if allowed < 500 || refused < 500 || overflowed < 3 {
		t.Fatalf("the cases do not cover each outcome well: %d allowed, %d refused, %d overflowed", allowed, refused, overflowed)
	}
}

// TestArrivalsOneNanosecondApart walks one key through a long series of
// requests at injected times one nanosecond apart around each slot, and
// checks every result against gcra.Decide run on the side.
func TestArrivalsOneNanosecondApart(t *testing.T) {
	t.Parallel()
	for _, path := range redisstore.FunnelPaths {
		t.Run(path.Name, func(t *testing.T) {
			t.Parallel()
			testArrivalsOneNanosecondApart(t, path.Start(t))
		})
	}
}

func testArrivalsOneNanosecondApart(t *testing.T, srv *redistest.Server) {
	ctx := context.Background()
	var now atomic.Int64
	st := redisstore.New(srv.Client(), redisstore.Options{Now: now.Load, Timeout: 20 * time.Second})
	for _, p := range []gcra.Params{
		mkParams(t, 1, 1, 100*year),             // a century per unit
		mkParams(t, 4, 3, time.Second),          // T = 333333333 ns
		mkParams(t, 0, 999_999, time.Second),    // T = 1000 ns
		mkParams(t, 3, 10_000_000, time.Second), // T = 100 ns
		mkParams(t, 2, 1e9, time.Second),        // T = 1 ns, the shortest
		mkParams(t, 10, 7, 24*time.Hour+1e9+7),  // an odd interval
	} {
		var tat int64
		base := int64(1_795_350_508_971_038_011)
		key := "walk" + strconv.FormatInt(p.Interval, 10)
		for slot := int64(0); slot < 40; slot++ {
			for d := int64(-2); d <= 2; d++ {
				at := base + slot*p.Interval/2 + d
				if at < 0 {
					continue
				}
				now.Store(at)
				got, err := storetest.Throttle(ctx, st, key, p, 1)
				newTAT, want, wantErr := gcra.Decide(at, tat, p, 1)
				if wantErr != nil {
					// Past 2^63-1 ns (year 2262), with a century per unit.
					if !errors.Is(err, wantErr) {
						t.Fatalf("interval %d, at %d: err %v, want %v", p.Interval, at, err, wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				tat = newTAT
				if got != funnel.ResultOf(p, want) {
					t.Fatalf("interval %d, at %d: got %+v, want %+v", p.Interval, at, got, funnel.ResultOf(p, want))
				}
			}
		}
	}
}
