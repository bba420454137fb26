package console_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/console"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/storetest"
)

// fakeNow is a clock the test moves.
type fakeNow struct{ ns atomic.Int64 }

func newFakeNow() *fakeNow {
	c := &fakeNow{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeNow) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeNow) add(d time.Duration) { c.ns.Add(int64(d)) }

func TestTopCountsAndWindows(t *testing.T) {
	clk := newFakeNow()
	top := console.NewTop(clk.now)
	l := funnel.PerMinute(10)
	for range 5 {
		top.Record("http", l, "alice")
	}
	top.Record("resp", l, "bob")
	clk.add(console.BucketWidth)
	top.Record("http", l, "alice") // counted in the bucket of the last Advance
	top.Advance()
	top.Record("http", l, "alice")
	got := top.Top(console.WindowMinute, console.Filter{})
	if len(got) != 2 || got[0].Key != "alice" || got[0].Count != 7 || got[0].Edge != "http" || got[1].Key != "bob" {
		t.Fatalf("top = %+v", got)
	}
	if got[0].Rule != "gcra 10 per 1m0s, burst 9" {
		t.Errorf("rule = %q", got[0].Rule)
	}
	if got := top.Top(console.WindowMinute, console.Filter{Edge: "resp"}); len(got) != 1 || got[0].Key != "bob" {
		t.Errorf("edge filter: %+v", got)
	}
	if got := top.Top(console.WindowMinute, console.Filter{Rule: "per 1m0s"}); len(got) != 2 {
		t.Errorf("rule filter: %+v", got)
	}
	if got := top.Top(console.WindowMinute, console.Filter{Rule: "per 1h"}); len(got) != 0 {
		t.Errorf("rule filter: %+v", got)
	}
	// Past a minute the first bucket leaves the minute, not the quarter.
	clk.add(time.Minute)
	if got := top.Top(console.WindowMinute, console.Filter{}); len(got) != 0 {
		t.Errorf("last minute after a minute = %+v", got)
	}
	if got := top.Top(console.WindowQuarter, console.Filter{}); len(got) != 2 || got[0].Count != 7 {
		t.Errorf("last 15 minutes = %+v", got)
	}
	clk.add(15 * time.Minute)
	if got := top.Top(console.WindowQuarter, console.Filter{}); len(got) != 0 {
		t.Errorf("after 15 minutes = %+v", got)
	}
	if total, skipped, sampling := top.Counts(); total != 8 || skipped != 0 || sampling {
		t.Errorf("counts = %d, %d, %v", total, skipped, sampling)
	}
}

// A heavy hitter is found among many more keys than the sketch holds, and
// what the sketch holds stays bounded.
func TestTopBoundedHeavyHitter(t *testing.T) {
	clk := newFakeNow()
	top := console.NewTop(clk.now)
	l := funnel.PerMinute(1)
	for i := range 15000 { // under SampleAfter: counted one by one
		top.Record("http", l, fmt.Sprintf("user-%d", i))
		if i%10 == 0 {
			top.Record("http", l, "heavy")
		}
	}
	got := top.Top(console.WindowMinute, console.Filter{})
	if len(got) != console.TopN {
		t.Fatalf("%d entries, want %d", len(got), console.TopN)
	}
	if got[0].Key != "heavy" || got[0].Count < 1500 || got[0].Count-got[0].Error > 1500 {
		t.Fatalf("first = %+v, want heavy with a count of 1500 within its error", got[0])
	}
	if _, _, sampling := top.Counts(); sampling {
		t.Fatal("sampling under SampleAfter refusals")
	}
	long := string(make([]byte, console.MaxKeyLen+10))
	top.Record("http", l, long)
	for _, e := range top.Top(console.WindowMinute, console.Filter{}) {
		if len(e.Key) > console.MaxKeyLen {
			t.Fatalf("a key of %d bytes kept", len(e.Key))
		}
	}
}

func TestNilTop(t *testing.T) {
	var top *console.Top
	top.Record("http", funnel.PerMinute(1), "k")
	if top.Top(console.WindowMinute, console.Filter{}) != nil {
		t.Fatal("nil top has entries")
	}
}

// The watched store keeps the contract, and the memory store's fast path.
func TestWatchConformance(t *testing.T) {
	top := console.NewTop(nil)
	storetest.Run(t, func(t *testing.T, now func() int64) funnel.Store {
		s := memstore.New(memstore.Options{Now: now})
		t.Cleanup(func() { s.Close() })
		return console.Watch(s, top, "http")
	})
}

func TestWatchRecordsRefusals(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	top := console.NewTop(nil)
	w := console.Watch(s, top, "resp")
	if _, ok := w.(funnel.ObservingStore); !ok {
		t.Fatal("not an ObservingStore: a Limiter would not use the memory store's TakeFunnel")
	}
	if nb, ok := w.(interface{ NonBlocking() bool }); !ok || !nb.NonBlocking() {
		t.Fatal("NonBlocking not forwarded")
	}
	lim := funnel.New(w)
	ctx := context.Background()
	banned := funnel.PerMinute(1)
	banned.Ban = time.Hour
	for _, l := range []funnel.Limit{funnel.PerMinute(1), banned} {
		key := "k-" + l.String()
		for range 3 {
			if _, err := lim.Allow(ctx, key, l); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := top.Top(console.WindowMinute, console.Filter{})
	if len(got) != 2 || got[0].Count != 2 || got[1].Count != 2 || got[0].Edge != "resp" {
		t.Fatalf("top = %+v", got)
	}
	// The leaky bucket admits within its burst with a delay: counted apart.
	leaky := funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 1, Period: time.Second, Burst: 5}
	var delayed uint64
	for range 3 {
		r, err := lim.Allow(ctx, "leaky", leaky)
		if err != nil || !r.Allowed {
			t.Fatalf("leaky = %+v, %v", r, err)
		}
		if r.Delay > 0 {
			delayed++
		}
	}
	if got := top.Delayed()["resp"]; got != delayed || delayed == 0 {
		t.Fatalf("delayed = %d, the results say %d", got, delayed)
	}
}

// A refusal is recorded whichever path decided it: the Limiter's (through
// the memory store's TakeFunnel or not), the watched store's own Do, and
// the GCRA command; a funnel under the same rule whichever path.
func TestWatchRecordsEveryPath(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	top := console.NewTop(nil)
	w := console.Watch(s, top, "resp")
	lim := funnel.New(w)
	ctx := context.Background()
	one := funnel.PerHour(1).WithBurst(0)
	c, err := one.Check()
	if err != nil {
		t.Fatal(err)
	}
	lim.Allow(ctx, "k", one)          // admitted
	lim.Allow(ctx, "k", one)          // fast path
	lim.AllowChecked(ctx, "k", &c, 1) // fast path
	ops := []funnel.Op{{Kind: funnel.OpTake, Key: "k", Limit: c, N: 1}}
	res := make([]funnel.Result, 1)
	if err := lim.Do(ctx, ops, res); err != nil || res[0].Allowed {
		t.Fatal(res, err)
	}
	if err := w.Do(ctx, ops, res); err != nil || res[0].Allowed { // the store's own Do
		t.Fatal(res, err)
	}
	lim.AllowAll(ctx, []funnel.Request{{Key: "k", Limit: one, N: 1}}) // the store's Do
	p, err := gcra.NewCommandParams(0, 1, 3600, 1)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := funnel.ForwardGCRA(ctx, w, "g", p); err != nil {
			t.Fatal(err)
		}
	}
	got := top.Top(console.WindowMinute, console.Filter{})
	if len(got) != 2 || got[0].Key != "k" || got[0].Count != 5 || got[1].Key != "g" || got[1].Count != 1 {
		t.Fatalf("top = %+v", got)
	}
	if total, _, _ := top.Counts(); total != 6 {
		t.Fatalf("total = %d, want 6", total)
	}
}

// Beyond SampleAfter refusals in a bucket one in SampleRate is counted, as
// SampleRate; the next bucket counts one by one again.
func TestTopSampling(t *testing.T) {
	clk := newFakeNow()
	top := console.NewTop(clk.now)
	l := funnel.PerMinute(1)
	const n = 100000
	for range n {
		top.Record("resp", l, "flood")
	}
	total, _, sampling := top.Counts()
	if !sampling {
		t.Fatal("not sampling after 100,000 refusals")
	}
	got := top.Top(console.WindowMinute, console.Filter{})
	// 20,000 counted, then 80,000 sampled at 1/16: a standard deviation of
	// 16·sqrt(80000·(1/16)·(15/16)) ≈ 1,100 around 100,000.
	if len(got) != 1 || got[0].Count < n-10000 || got[0].Count > n+10000 || got[0].Count != total {
		t.Fatalf("flood = %+v, total %d; want about %d", got, total, n)
	}
	clk.add(console.BucketWidth)
	top.Advance()
	top.Record("resp", l, "next")
	if _, _, sampling := top.Counts(); sampling {
		t.Fatal("still sampling in the next bucket")
	}
}
