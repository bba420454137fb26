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

// commandLeaseCase is one lease of a GCRA command's key checked against
// gcra.LeaseCommand: the key holds tat (µs) or nothing (tat < 0), with an
// expiry unless persist.
type commandLeaseCase struct {
	now, tat int64
	persist  bool
	p        gcra.CommandParams
	req      gcra.LeaseRequest
}

// randomCommandLeaseCases draws leases on keys that are fresh, in the past
// (expired, or without an expiry), partly spent, spent beyond the variance,
// or exactly at a previous lease's end (so that the give-back applies),
// with intervals from 1 µs to hours and variances up to
// gcra.MaxLeaseTolerance, some reduced below a whole number of intervals
// (as package leasestore leases them).
func randomCommandLeaseCases(n int) []commandLeaseCase {
	r := rand.New(rand.NewPCG(13, 17))
	const base = 1_795_350_508_971 // ms
	var cs []commandLeaseCase
	for len(cs) < n {
		var p gcra.CommandParams
		var err error
		switch r.IntN(3) {
		case 0:
			p, err = gcra.NewCommandParams(r.Int64N(1000), 1+r.Int64N(1e6), 1, 1)
		case 1:
			p, err = gcra.NewCommandParams(r.Int64N(20), 1, float64(1+r.Int64N(1e7))/1e3, 1)
		default:
			// Near the largest variance a lease takes.
			iv := 1 + r.Int64N(1e9)
			p = gcra.CommandParams{Interval: iv, Variance: gcra.MaxLeaseTolerance - r.Int64N(iv*3+1)}
			p.Limit = p.Variance / iv
		}
		if err != nil || p.Overflow != nil || p.Variance > gcra.MaxLeaseTolerance || p.Variance < p.Interval {
			continue
		}
		if r.IntN(3) == 0 {
			p.Variance -= r.Int64N(p.Variance - p.Interval + 1) // reduced
		}
		now := (base + r.Int64N(1e9)) * 1000
		tat := int64(-1)
		persist := false
		switch r.IntN(6) {
		case 0:
		case 1:
			tat = now - 1 - r.Int64N(1e9)
			persist = r.IntN(2) == 0
		case 2:
			tat = now + r.Int64N(p.Variance+1)
		case 3:
			tat = now + p.Variance + r.Int64N(p.Variance+1) // beyond
		case 4:
			tat = now + r.Int64N(1000) // within now's millisecond
		default:
			tat = now + r.Int64N(p.Variance+1)
		}
		var h int64
		if r.IntN(2) == 0 {
			h = r.Int64N(min(3*p.Variance, gcra.MaxLeaseTolerance-p.Variance) + 1)
			if r.IntN(10) == 0 {
				h = gcra.MaxLeaseTolerance - p.Variance
			}
			if tat > 0 && r.IntN(3) == 0 {
				tat = now + r.Int64N(p.Variance+h+1) // queued into the horizon
			}
		}
		want := 1 + r.Int64N((p.Variance+h)/p.Interval+2)
		req := gcra.LeaseRequest{Want: want, Min: 1 + r.Int64N(want), Horizon: h}
		if r.IntN(2) == 0 {
			req.BackUnits = r.Int64N((p.Variance+h)/p.Interval + 1)
			req.BackEnd = tat
			if r.IntN(3) == 0 || tat <= 0 {
				req.BackEnd = now + r.Int64N(p.Variance+1) // another lease's end
			}
		}
		cs = append(cs, commandLeaseCase{now, tat, persist, p, req})
	}
	return cs
}

// The lease script on a real Redis is gcra.LeaseCommand, bit for bit: the
// tokens granted, the TAT after, the value stored.
func TestLeaseGCRAIsLeaseCommand(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	var now atomic.Int64
	st := redisstore.New(c, redisstore.Options{Now: now.Load, Prefix: "cl:", Timeout: 20 * time.Second})
	granted, none, backs, future, absent := 0, 0, 0, 0, 0
	for i, tc := range randomCommandLeaseCases(4000) {
		key := "k" + strconv.Itoa(i)
		raw := ""
		if tc.tat >= 0 {
			raw = strconv.FormatInt(tc.tat, 10)
			exp := time.Hour
			if tc.persist {
				exp = 0
			}
			if err := c.Set(ctx, "cl:"+key, raw, exp).Err(); err != nil {
				t.Fatal(err)
			}
		}
		now.Store(tc.now * 1000)
		g, err := st.LeaseGCRA(ctx, key, tc.p, redisstore.LeaseCall{LeaseRequest: tc.req})
		if err != nil {
			t.Fatalf("case %d %+v: %v", i, tc, err)
		}
		// The command's read: a key whose millisecond has passed is absent
		// when it expires.
		exists := tc.tat >= 0 && (tc.tat >= tc.now || tc.persist)
		if tc.tat >= 0 && !exists {
			absent++
		}
		wantTAT, wantN, stored, err := gcra.LeaseCommand(tc.now, max(tc.tat, 0), exists, tc.p, tc.req)
		if err != nil {
			t.Fatal(err)
		}
		if g.Now != tc.now || g.Units != wantN || g.TAT != wantTAT {
			t.Fatalf("case %d %+v: grant %+v, want %d tokens to %d", i, tc, g, wantN, wantTAT)
		}
		got, gerr := c.Get(ctx, "cl:"+key).Result()
		if errors.Is(gerr, redis.Nil) {
			got = ""
		} else if gerr != nil {
			t.Fatal(gerr)
		}
		want := raw
		if stored {
			want = strconv.FormatInt(wantTAT, 10)
		}
		if got != want {
			t.Fatalf("case %d %+v: key holds %q, want %q", i, tc, got, want)
		}
		switch {
		case wantN == 0:
			none++
		case gcra.CommandLeaseSlot(tc.now, wantTAT, wantN, wantN-1, tc.p) > tc.now:
			future++
			granted++
		default:
			granted++
		}
		if exists && tc.req.BackUnits > 0 && tc.req.BackEnd == tc.tat {
			backs++
		}
	}
	t.Logf("4000 leases: %d granted (%d with future-dated tokens), %d not, %d gave back, %d on keys read as absent",
		granted, future, none, backs, absent)
	if granted < 500 || none < 500 || backs < 300 || future < 300 || absent < 100 {
		t.Fatal("the cases do not cover grants, future-dated tokens, refusals, give-backs and expired keys")
	}
}

// On Redis's own clock the lease writes what the command writes, and the
// command (this store's GCRA) sees the tokens taken; keys it cannot read
// are the command's errors and stay as they are.
func TestLeaseGCRAOnRedisClock(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	st := redisstore.New(c, redisstore.Options{Prefix: "g:", Timeout: 10 * time.Second})
	p := cmdParams(t, 9, 10, 1, 1) // 100 ms, 10 tokens
	g, err := st.LeaseGCRA(ctx, "k", p, redisstore.LeaseCall{LeaseRequest: gcra.LeaseRequest{Want: 100, Min: 1},
		Node: "a", Window: time.Second})
	if err != nil || g.Units != 10 || g.TAT-g.Now != 1_000_000 || g.Now%1000 != 0 || g.Nodes != 1 {
		t.Fatalf("fresh: %+v, %v", g, err)
	}
	v, err := c.Get(ctx, "g:k").Result()
	if err != nil || v != strconv.FormatInt(g.TAT, 10) {
		t.Fatalf("value %q, %v; want %d", v, err, g.TAT)
	}
	if at, err := c.Do(ctx, "PEXPIRETIME", "g:k").Int64(); err != nil || at != g.TAT/1000 {
		t.Fatalf("PEXPIRETIME %d, %v; want %d", at, err, g.TAT/1000)
	}
	if r, err := st.GCRA(ctx, "k", p); err != nil || !r.Reply.Limited {
		t.Fatalf("the command after the lease: %+v, %v", r, err)
	}
	// Give all ten back: the command admits again.
	g2, err := st.LeaseGCRA(ctx, "k", p, redisstore.LeaseCall{LeaseRequest: gcra.LeaseRequest{Want: 10, Min: 10, BackEnd: g.TAT, BackUnits: 10}})
	if err != nil || g2.Units != 10 {
		t.Fatalf("give-back: %+v, %v", g2, err)
	}
	c.HSet(ctx, "g:h", "f", "v")
	c.Set(ctx, "g:s", "nope", 0)
	c.Set(ctx, "g:n", "-5", 0)
	req := redisstore.LeaseCall{LeaseRequest: gcra.LeaseRequest{Want: 1, Min: 1}}
	for key, want := range map[string]error{"h": funnel.ErrWrongType, "s": gcra.ErrCommandInvalidKey, "n": gcra.ErrCommandNegativeTime} {
		if _, err := st.LeaseGCRA(ctx, key, p, req); !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", key, err, want)
		}
	}
	if v, _ := c.Get(ctx, "g:s").Result(); v != "nope" {
		t.Fatal("a key the command cannot read changed")
	}
	if _, err := st.LeaseGCRA(ctx, "k", p, redisstore.LeaseCall{LeaseRequest: gcra.LeaseRequest{Want: 0, Min: 0}}); !errors.Is(err, gcra.ErrBadLease) {
		t.Fatalf("want 0: %v", err)
	}
}
