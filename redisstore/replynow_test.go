package redisstore_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/redisstore"
)

// TestScriptsNowOnRedisClock checks the scripts that answer Redis's now as
// one number, in µs (window.lua, log.lua, takes.lua and conc.lua), on
// Redis's own clock: the results of two decisions in a row must be those
// that memstore gives at a time between Redis's TIME read just before the
// first call and just after the second. Every limit's ResetAfter depends
// on now, so a now read at the wrong scale or with its digits misplaced
// fails it.
func TestScriptsNowOnRedisClock(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client()
	ctx := context.Background()
	lim := funnel.New(redisstore.New(client, redisstore.Options{Prefix: "rn:"}))
	redisNow := func() int64 {
		t.Helper()
		tm, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixNano()
	}
	const p = time.Hour
	cases := []struct {
		name string
		reqs []funnel.Request
	}{
		{"fixed window", []funnel.Request{{Key: "f", Limit: funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: p}, N: 1}}},
		{"sliding window", []funnel.Request{{Key: "s", Limit: funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 10, Period: p}, N: 1}}},
		{"sliding log", []funnel.Request{{Key: "l", Limit: funnel.Limit{Algorithm: funnel.SlidingLog, Count: 10, Period: p}, N: 1}}},
		{"funnel and calendar day", []funnel.Request{
			{Key: "{t}g", Limit: funnel.Per(10, p), N: 1},
			{Key: "{t}d", Limit: funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Calendar: funnel.Daily, Location: time.UTC}, N: 1},
		}},
		{"concurrency", []funnel.Request{{Key: "c", Limit: funnel.Limit{Algorithm: funnel.Concurrency, Count: 10, Period: p}, N: 1}}},
	}
	decide := func(l *funnel.Limiter, reqs []funnel.Request) []funnel.Result {
		t.Helper()
		if reqs[0].Limit.Algorithm == funnel.Concurrency {
			_, r, err := l.Acquire(ctx, reqs[0].Key, reqs[0].Limit)
			if err != nil {
				t.Fatal(err)
			}
			return []funnel.Result{r}
		}
		if len(reqs) == 1 {
			r, err := l.AllowN(ctx, reqs[0].Key, reqs[0].Limit, reqs[0].N)
			if err != nil {
				t.Fatal(err)
			}
			return []funnel.Result{r}
		}
		m, err := l.AllowAll(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		return m.Results
	}
	// two decisions in a row, the second's results after the first's
	twice := func(l *funnel.Limiter, reqs []funnel.Request) []funnel.Result {
		t.Helper()
		return append(decide(l, reqs), decide(l, reqs)...)
	}
	// memstore's, at one time
	at := func(now int64, reqs []funnel.Request) []funnel.Result {
		t.Helper()
		m := memstore.New(memstore.Options{Now: func() int64 { return now }})
		defer m.Close()
		return twice(funnel.New(m), reqs)
	}
	for _, c := range cases {
		for step := range 3 {
			// keys of their own at each step: the results compared are
			// those of fresh keys
			reqs := slices.Clone(c.reqs)
			for i := range reqs {
				reqs[i].Key += strconv.Itoa(step)
			}
			before := redisNow()
			got := twice(lim, reqs)
			after := redisNow()
			lo, hi := at(before, reqs), at(after, reqs)
			for i := range got {
				g, a, b := got[i], lo[i], hi[i]
				ra, rb := min(a.ResetAfter, b.ResetAfter), max(a.ResetAfter, b.ResetAfter)
				// The reference decides both calls at one time; Redis
				// decides the second later, by up to the time both took,
				// and it resets that much sooner.
				if i >= len(got)/2 {
					ra -= time.Duration(after - before)
				}
				if g.ResetAfter < ra-time.Millisecond || g.ResetAfter > rb+time.Millisecond {
					t.Errorf("%s, step %d, result %d: resets after %v, want %v to %v (memstore at Redis's time before and after the call)", c.name, step, i, g.ResetAfter, ra, rb)
				}
				g.ResetAfter, a.ResetAfter = 0, 0
				if g != a {
					t.Errorf("%s, step %d, result %d: %+v; memstore %+v", c.name, step, i, g, a)
				}
			}
		}
	}
}
