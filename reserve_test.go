package funnel_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

// plainStore is a Store that keeps no reservations.
type plainStore struct{ funnel.Store }

func TestReserveAndSettleChecks(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano()
	store := memstore.New(memstore.Options{Now: func() int64 { return now }})
	defer store.Close()
	o := new(seen)
	lim := funnel.New(store).WithObserver(o)
	limit := funnel.PerSecond(10)

	// No TTL: the default; a TTL of a part of a millisecond: rounded up.
	r, res, err := lim.Reserve(ctx, "k", limit, 4, 0)
	if err != nil || !res.Allowed || r.TTL != funnel.DefaultReservationTTL || r.Key != "k" || r.Estimate != 4 || len(r.ID) == 0 {
		t.Fatalf("Reserve: %+v, %+v, %v", r, res, err)
	}
	r2, _, err := lim.Reserve(ctx, "k", limit, 1, 1500*time.Microsecond)
	if err != nil || r2.TTL != 2*time.Millisecond || r2.ID == r.ID {
		t.Fatalf("Reserve of 1.5ms: %+v, %v", r2, err)
	}
	now += int64(2*time.Millisecond) - 1
	if _, err := lim.Settle(ctx, "k", r2.ID, 1); err != nil {
		t.Fatalf("Settle 1 ns before the rounded TTL ends: %v", err)
	}
	for _, c := range []struct {
		n   int64
		ttl time.Duration
		lim funnel.Limit
		err error
	}{
		{0, time.Second, limit, funnel.ErrInvalidQuantity},
		{-3, time.Second, limit, funnel.ErrInvalidQuantity},
		{1, -time.Second, limit, funnel.ErrInvalidQuantity},
		{1, funnel.MaxReservationTTL + time.Millisecond, limit, funnel.ErrInvalidQuantity},
		{1, time.Second, funnel.Limit{Algorithm: funnel.Concurrency, Count: 2, Period: time.Second}, funnel.ErrInvalidLimit},
		{1, time.Second, funnel.Limit{Count: 0, Period: time.Second}, funnel.ErrInvalidLimit},
		{math.MaxInt64, time.Second, limit, funnel.ErrInvalidQuantity},
	} {
		r, res, err := lim.Reserve(ctx, "bad", c.lim, c.n, c.ttl)
		if !errors.Is(err, c.err) || r != (funnel.Reservation{}) || res != (funnel.Result{}) {
			t.Errorf("Reserve(%v, %d, %v) = %+v, %+v, %v; want %v", c.lim, c.n, c.ttl, r, res, err, c.err)
		}
	}
	// Refused: an empty reservation, and the observer is told.
	o.take()
	r3, res, err := lim.Reserve(ctx, "k", limit, 10, time.Second)
	if err != nil || res.Allowed || r3.ID != "" {
		t.Fatalf("a refused Reserve: %+v, %+v, %v", r3, res, err)
	}
	if keys, _, _ := o.take(); len(keys) != 1 || keys[0] != "k" {
		t.Errorf("observed %v, want the refused reserve of k", keys)
	}
	for _, c := range []struct {
		key, id string
		actual  int64
		err     error
	}{
		{"k", r.ID, -1, funnel.ErrInvalidQuantity},
		{"k", r.ID, math.MaxInt64, funnel.ErrInvalidQuantity},
		{"k", "", 1, funnel.ErrUnknownReservation},
		{"k", strings.Repeat("x", funnel.MaxLeaseIDLen+1), 1, funnel.ErrUnknownReservation},
		{"other", r.ID, 1, funnel.ErrUnknownReservation},
	} {
		st, err := lim.Settle(ctx, c.key, c.id, c.actual)
		if !errors.Is(err, c.err) || st != (funnel.Settlement{}) {
			t.Errorf("Settle(%q, %d-byte id, %d) = %+v, %v; want %v", c.key, len(c.id), c.actual, st, err, c.err)
		}
		if funnel.ClassOf(err) != funnel.ClassInvalid {
			t.Errorf("ClassOf(%v) = %v, want invalid", err, funnel.ClassOf(err))
		}
	}
	// Still pending after the errors.
	if st, err := lim.Settle(ctx, "k", r.ID, 4); err != nil || st.Again || st.Actual != 4 {
		t.Errorf("Settle after the errors: %+v, %v", st, err)
	}

	plain := funnel.New(plainStore{store})
	if _, _, err := plain.Reserve(ctx, "k", limit, 1, 0); !errors.Is(err, funnel.ErrNoReserve) {
		t.Errorf("Reserve on a store without reservations: %v", err)
	}
	if _, err := plain.Settle(ctx, "k", r.ID, 1); !errors.Is(err, funnel.ErrNoReserve) {
		t.Errorf("Settle on a store without reservations: %v", err)
	}
}

func TestEncodeLimit(t *testing.T) {
	paris, err := funnel.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []funnel.Limit{
		funnel.PerMinute(100),
		funnel.PerSecond(7).WithBurst(0),
		{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 4, DelayUnits: funnel.NoDelay, Ban: time.Minute},
		{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 4, DelayUnits: 2},
		{Algorithm: funnel.FixedWindow, Count: 1000, Calendar: funnel.Daily, Location: paris},
		{Algorithm: funnel.FixedWindow, Count: 3, Period: time.Second},
		{Algorithm: funnel.SlidingWindow, Count: 4, Period: time.Hour, Ban: time.Second},
		{Algorithm: funnel.SlidingLog, Count: 3, Period: time.Second},
		{Algorithm: funnel.Concurrency, Count: 2, Period: time.Second, Burst: 3, UnitDelay: time.Millisecond},
	} {
		s := funnel.EncodeLimit(l)
		got, err := funnel.DecodeLimit(s)
		if err != nil || got != l {
			t.Errorf("DecodeLimit(%q) = %v, %v; want %v", s, got, err, l)
		}
	}
	for _, s := range []string{
		"", "l1", "l2 gcra 1 1000000000 0 0 0 0 0", "l1 nope 1 1000000000 0 0 0 0 0",
		"l1 gcra x 1000000000 0 0 0 0 0", "l1 gcra 0 1000000000 0 0 0 0 0",
		"l1 fixed_window 1 0 0 0 0 9 0", "l1 fixed_window 1 0 0 0 0 1 0 Nowhere/City",
		"l1 gcra 1 1000000000 0 0 0 0 0 UTC extra", "l1 gcra 1 1000000000 -1 0 0 0 0",
	} {
		if l, err := funnel.DecodeLimit(s); !errors.Is(err, funnel.ErrInvalidLimit) {
			t.Errorf("DecodeLimit(%q) = %v, %v; want ErrInvalidLimit", s, l, err)
		}
	}
}

func FuzzDecodeLimit(f *testing.F) {
	f.Add("l1 gcra 100 60000000000 99 0 0 0 0")
	f.Add("l1 fixed_window 1000 0 0 0 0 1 0 Europe/Paris")
	f.Add("l1 leaky_bucket 10 1000000000 4 2 0 0 60000000000")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := funnel.DecodeLimit(s)
		if err != nil {
			if !errors.Is(err, funnel.ErrInvalidLimit) {
				t.Fatalf("DecodeLimit(%q): %v does not wrap ErrInvalidLimit", s, err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("DecodeLimit(%q) = %v, invalid: %v", s, l, err)
		}
		if got, err := funnel.DecodeLimit(funnel.EncodeLimit(l)); err != nil || got != l {
			t.Fatalf("round trip of %v: %v, %v", l, got, err)
		}
	})
}
