package redisstore_test

import (
	"context"
	"errors"
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
)

// leaseCase is one lease checked against gcra.Lease: the key holds tat or
// nothing (tat < 0).
type leaseCase struct {
	now, tat int64
	p        gcra.Params
	req      gcra.LeaseRequest
}

// randomLeaseCases draws leases on keys that are fresh, partly spent, spent
// beyond the tolerance (a lowered limit), or exactly at a previous lease's
// end (so that the give-back applies), with intervals from 1 ns to a second
// and tolerances up to gcra.MaxLeaseTolerance.
func randomLeaseCases(t *testing.T, n int) []leaseCase {
	r := rand.New(rand.NewPCG(7, 11))
	const base = 1_795_350_508_971_038_011
	var cs []leaseCase
	for len(cs) < n {
		var p gcra.Params
		switch r.IntN(3) {
		case 0:
			p = mkParams(t, r.Int64N(1000), 1+r.Int64N(1e6), time.Second)
		case 1:
			p = mkParams(t, r.Int64N(20), 1, time.Duration(1+r.Int64N(int64(time.Second))))
		default:
			// Near the largest tolerance a lease takes.
			iv := 1 + r.Int64N(1e12)
			p = gcra.Params{Interval: iv, Tolerance: gcra.MaxLeaseTolerance - r.Int64N(iv*3+1)}
			p.Limit = p.Tolerance / iv
			p.Burst = p.Limit - 1
		}
		if p.Tolerance > gcra.MaxLeaseTolerance || p.Tolerance < p.Interval {
			continue
		}
		now := base + r.Int64N(1e12)
		tat := int64(-1)
		switch r.IntN(5) {
		case 0:
		case 1:
			tat = now - r.Int64N(1e9)
		case 2:
			tat = now + r.Int64N(p.Tolerance+1)
		case 3:
			tat = now + p.Tolerance + r.Int64N(p.Tolerance+1) // beyond
		default:
			tat = now + r.Int64N(p.Tolerance+1)
		}
		var h int64
		if r.IntN(2) == 0 {
			// Future-dated units, up to a horizon that may reach the
			// largest headroom.
			h = r.Int64N(min(3*p.Tolerance, gcra.MaxLeaseTolerance-p.Tolerance) + 1)
			if r.IntN(10) == 0 {
				h = gcra.MaxLeaseTolerance - p.Tolerance
			}
			if tat > 0 && r.IntN(3) == 0 {
				tat = now + r.Int64N(p.Tolerance+h+1) // queued into the horizon
			}
		}
		want := 1 + r.Int64N(p.Limit+h/p.Interval+2)
		req := gcra.LeaseRequest{Want: want, Min: 1 + r.Int64N(want), Horizon: h}
		if r.IntN(2) == 0 {
			req.BackUnits = r.Int64N(p.Tolerance/p.Interval + 1)
			req.BackEnd = tat
			if r.IntN(3) == 0 || tat <= 0 {
				req.BackEnd = now + r.Int64N(p.Tolerance+1) // another lease's end
			}
		}
		cs = append(cs, leaseCase{now, tat, p, req})
	}
	return cs
}

func TestLeaseIsGcraLease(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	var now atomic.Int64
	st := redisstore.New(c, redisstore.Options{Now: now.Load, Prefix: "lease:", Timeout: 20 * time.Second})
	granted, none, backs, future := 0, 0, 0, 0
	for i, tc := range randomLeaseCases(t, 3000) {
		key := "k" + strconv.Itoa(i)
		if tc.tat >= 0 {
			if err := c.Set(ctx, "lease:"+key, strconv.FormatInt(tc.tat, 10), time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
		}
		now.Store(tc.now)
		g, err := st.Lease(ctx, key, tc.p, redisstore.LeaseCall{LeaseRequest: tc.req})
		if err != nil {
			t.Fatalf("case %d %+v: %v", i, tc, err)
		}
		old := max(tc.tat, 0)
		wantTAT, wantN, err := gcra.Lease(tc.now, old, tc.p, tc.req)
		if err != nil {
			t.Fatal(err)
		}
		if g.Now != tc.now || g.Units != wantN {
			t.Fatalf("case %d %+v: grant %+v, want %d units", i, tc, g, wantN)
		}
		// The TAT: what gcra.Lease says, where a TAT at or before now and
		// an absent key are the same state.
		gotTAT, wt := g.TAT, wantTAT
		if gotTAT <= tc.now {
			gotTAT = 0
		}
		if wt <= tc.now {
			wt = 0
		}
		if gotTAT != wt {
			t.Fatalf("case %d %+v: TAT %d, want %d", i, tc, g.TAT, wantTAT)
		}
		stored, gerr := c.Get(ctx, "lease:"+key).Result()
		if errors.Is(gerr, redis.Nil) {
			stored = ""
		} else if gerr != nil {
			t.Fatal(gerr)
		}
		wantStored := ""
		switch {
		case wantTAT > tc.now:
			wantStored = strconv.FormatInt(wantTAT, 10)
		case wantTAT == old && tc.tat >= 0:
			wantStored = strconv.FormatInt(tc.tat, 10) // untouched, even if behind now
		}
		if stored != wantStored {
			t.Fatalf("case %d %+v: key holds %q, want %q", i, tc, stored, wantStored)
		}
		if wantN > 0 && gcra.LeaseSlot(tc.now, wantTAT, wantN, wantN-1, tc.p) > tc.now {
			future++
		}
		if wantN > 0 {
			granted++
		} else {
			none++
		}
		if tc.req.BackUnits > 0 && tc.req.BackEnd == old {
			backs++
		}
	}
	t.Logf("3000 leases: %d granted (%d with future-dated units), %d not, %d gave back", granted, future, none, backs)
	if granted < 500 || none < 500 || backs < 300 || future < 300 {
		t.Fatal("the cases do not cover grants, future-dated units, refusals and give-backs")
	}
}

func TestLeaseErrors(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	st := redisstore.New(c, redisstore.Options{})
	p := mkParams(t, 9, 10, time.Second)
	if _, err := st.Lease(ctx, "k", p, redisstore.LeaseCall{LeaseRequest: gcra.LeaseRequest{Want: 0, Min: 0}}); !errors.Is(err, gcra.ErrBadLease) {
		t.Fatalf("want 0: %v", err)
	}
	big := mkParams(t, 100, 1, 24*time.Hour)
	if _, err := st.Lease(ctx, "k", big, redisstore.LeaseCall{LeaseRequest: gcra.LeaseRequest{Want: 1, Min: 1}}); !errors.Is(err, gcra.ErrBadLease) {
		t.Fatalf("tolerance of 101 days: %v", err)
	}
	c.HSet(ctx, "h", "f", "v")
	c.Set(ctx, "s", "nope", 0)
	for _, key := range []string{"h", "s"} {
		if _, err := st.Lease(ctx, key, p, redisstore.LeaseCall{LeaseRequest: gcra.LeaseRequest{Want: 1, Min: 1}}); !errors.Is(err, funnel.ErrWrongType) {
			t.Fatalf("%s: %v", key, err)
		}
	}
	if v, _ := c.Get(ctx, "s").Result(); v != "nope" {
		t.Fatal("a key of another type changed")
	}
	// Real time: a fresh key grants what fits, and the key is redis-cell's.
	g, err := st.Lease(ctx, "fresh", p, redisstore.LeaseCall{LeaseRequest: gcra.LeaseRequest{Want: 100, Min: 1}})
	if err != nil || g.Units != 10 || g.TAT-g.Now != 10*p.Interval {
		t.Fatalf("fresh: %+v, %v", g, err)
	}
	// A plain decision on the same key sees the lease: the bucket is spent.
	res := make([]funnel.Result, 1)
	op := funnel.Op{Kind: funnel.OpTake, Key: "fresh", N: 1, Limit: funnel.Checked{GCRA: p}}
	if err := st.Do(ctx, []funnel.Op{op}, res); err != nil || res[0].Allowed {
		t.Fatalf("a decision after the lease: %+v, %v", res[0], err)
	}
}

// Nodes that lease a key are counted within a window, from a sorted set in
// the key's hash slot; keys with a hash tag keep it.
func TestLeaseCountsNodes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	var now atomic.Int64
	now.Store(1_800_000_000_000_000_000)
	st := redisstore.New(c, redisstore.Options{Now: now.Load, Prefix: "n:"})
	p := mkParams(t, 999, 1000, time.Second)
	call := func(key, node string) redisstore.Grant {
		t.Helper()
		g, err := st.Lease(ctx, key, p, redisstore.LeaseCall{LeaseRequest: gcra.LeaseRequest{Want: 1, Min: 1}, Node: node, Window: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for i, node := range []string{"a", "b", "a", "c"} {
		if g := call("k", node); g.Nodes != []int64{1, 2, 2, 3}[i] {
			t.Fatalf("call %d by %s: %d nodes", i, node, g.Nodes)
		}
	}
	now.Add(int64(150 * time.Millisecond))
	call("k", "a")
	now.Add(int64(100 * time.Millisecond)) // b and c are 250 ms old
	if g := call("k", "a"); g.Nodes != 1 {
		t.Fatalf("after the window: %d nodes", g.Nodes)
	}
	if g := call("{t}k", "a"); g.Nodes != 1 {
		t.Fatalf("a tagged key: %d nodes", g.Nodes)
	}
	if n, _ := c.Exists(ctx, "n:{t}k\x00nodes", "{n:k}\x00nodes").Result(); n != 2 {
		t.Fatalf("the nodes' sets: %d of 2", n)
	}
	if g := call("a}b", "a"); g.Nodes != 0 || g.Units != 1 {
		t.Fatalf("a key with a '}' and no tag: %+v", g)
	}
}
