package leasestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/leasestore"
	"github.com/funnelrl/funnel/redisstore"
)

// A charge on a leased key is applied to the shared funnel in Redis whole:
// the key's TAT moves by exactly n intervals, whatever the process holds
// (the units it holds were debited when leased, and stay its own); a peek
// of n units asks Redis too. Windows alike.
func TestChargeOnALeasedKey(t *testing.T) {
	srv := redistest.StartServer(t)
	c := &clock{}
	c.t.Store(1_800_000_000_000_000_000)
	rs := redisstore.New(srv.Client(), redisstore.Options{Now: c.now, Prefix: "charge:", Timeout: 10 * time.Second})
	ls := leasestore.New(rs, leasestore.Options{Now: c.now, NoPrefetch: true})
	defer ls.Close()
	lim := funnel.New(ls)
	ctx := context.Background()
	for _, l := range []funnel.Limit{
		funnel.PerSecond(1000),
		{Algorithm: funnel.FixedWindow, Count: 1000, Period: time.Minute},
	} {
		key := l.Algorithm.String()
		// Warm: the key is leased, and its decisions come from memory.
		for range 200 {
			if r, err := lim.Allow(ctx, key, l); err != nil || !r.Allowed {
				t.Fatalf("%v: Allow: %+v, %v", l, r, err)
			}
			c.t.Add(int64(100 * time.Microsecond))
		}
		if st := ls.Stats(); st.Local == 0 {
			t.Fatalf("%v: no decision from a lease: %+v", l, st)
		}
		before, err := lim.Peek(ctx, key, l) // Redis's state
		if err != nil {
			t.Fatal(err)
		}
		r, err := lim.Charge(ctx, key, l, 5000)
		if err != nil || r.Allowed {
			t.Fatalf("%v: Charge: %+v, %v", l, r, err)
		}
		switch l.Algorithm {
		case funnel.GCRA:
			if want := before.ResetAfter + 5*time.Second; r.ResetAfter != want {
				t.Errorf("%v: the shared funnel empties in %v after the charge, want %v", l, r.ResetAfter, want)
			}
		case funnel.FixedWindow:
			if got, _ := lim.Peek(ctx, key, l); got != r || before.Remaining == 0 {
				t.Errorf("%v: Peek after the charge %+v, the charge's %+v (before %+v)", l, got, r, before)
			}
		}
		p, err := lim.PeekN(ctx, key, l, 1)
		if err != nil || p.Allowed || p.RetryAfter <= 0 {
			t.Errorf("%v: PeekN after a debt: %+v, %v", l, p, err)
		}
	}
}
