package memstore_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/storetest"
)

func commandParams(t *testing.T, burst, per int64, period float64, tokens int64) gcra.CommandParams {
	t.Helper()
	p, err := gcra.NewCommandParams(burst, per, period, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func gcraCall(t *testing.T, s *memstore.Store, key string, p gcra.CommandParams) [5]int64 {
	t.Helper()
	r, err := s.GCRA(context.Background(), key, p)
	if err != nil {
		t.Fatal(err)
	}
	return r.Reply.Ints()
}

// A GCRA key and a funnel's (CL.THROTTLE's) are different states: either
// on the other's key is WRONGTYPE and changes nothing, as is a window's.
func TestGCRAKeyIsAStateOfItsOwn(t *testing.T) {
	s, clock := newStore(t, memstore.Options{SweepInterval: -1})
	clock.Set(storetest.Epoch / 1e6 * 1e6)
	ctx := context.Background()
	p := commandParams(t, 5, 10, 60, 1)
	if got := gcraCall(t, s, "g", p); got != [5]int64{0, 6, 5, -1, 6} {
		t.Fatal(got)
	}
	lim := funnel.New(s)
	if _, err := lim.Allow(ctx, "g", funnel.PerMinute(10)); !errors.Is(err, funnel.ErrWrongType) {
		t.Fatalf("a funnel on a GCRA key: %v", err)
	}
	if _, err := lim.Allow(ctx, "w", funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1, Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Allow(ctx, "f", funnel.PerMinute(10)); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"w", "f"} {
		if _, err := s.GCRA(ctx, k, p); !errors.Is(err, funnel.ErrWrongType) {
			t.Fatalf("GCRA on %q: %v", k, err)
		}
	}
	// The GCRA key is unchanged by the refused calls.
	if got := gcraCall(t, s, "g", p); got != [5]int64{0, 6, 4, -1, 12} {
		t.Fatal(got)
	}
	// PTTL: until the end of the TAT's millisecond; then it is gone, and a
	// funnel may take the key.
	if d, ok, _ := s.TTL(ctx, "g"); !ok || d != 12*time.Second+time.Millisecond {
		t.Fatalf("TTL %v %v", d, ok)
	}
	clock.Add(12*time.Second + time.Millisecond)
	if _, ok, _ := s.TTL(ctx, "g"); ok {
		t.Fatal("the GCRA key outlived its TAT's millisecond")
	}
	if _, err := lim.Allow(ctx, "g", funnel.PerMinute(10)); err != nil {
		t.Fatal(err)
	}
}

// The key lives, as Redis's does, until its TAT's millisecond has passed:
// within that millisecond the call still sees the TAT (a few µs ahead).
func TestGCRAKeyLivesThroughItsMillisecond(t *testing.T) {
	s, clock := newStore(t, memstore.Options{SweepInterval: -1})
	// 1 s / 3 = 333,333 µs: the TAT is not on a millisecond.
	p := commandParams(t, 0, 3, 1, 1)
	clock.Set(storetest.Epoch / 1e6 * 1e6)
	gcraCall(t, s, "k", p)
	clock.Add(333*time.Millisecond + 999*time.Microsecond) // ms 333 of the TAT at 333,333 µs
	if got := gcraCall(t, s, "k", p); got != [5]int64{1, 1, 0, 1, 1} {
		t.Fatalf("within the TAT's millisecond: %v", got)
	}
	clock.Add(time.Microsecond) // ms 334: gone
	if got := gcraCall(t, s, "k", p); got != [5]int64{0, 1, 0, -1, 1} {
		t.Fatalf("after the TAT's millisecond: %v", got)
	}
}

func TestGCRASnapshot(t *testing.T) {
	s, clock := newStore(t, memstore.Options{SweepInterval: -1})
	p := commandParams(t, 5, 10, 60, 1)
	for range 3 {
		gcraCall(t, s, "g", p)
	}
	var buf bytes.Buffer
	if _, err := s.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	b := memstore.New(memstore.Options{Now: clock.Now, SweepInterval: -1})
	defer b.Close()
	st, err := b.ReadSnapshot(bytes.NewReader(buf.Bytes()))
	if err != nil || st.Keys != 1 {
		t.Fatal(st, err)
	}
	want := gcraCall(t, s, "g", p)
	if got := gcraCall(t, b, "g", p); got != want || got != [5]int64{0, 6, 2, -1, 24} {
		t.Fatalf("restored: %v, the original: %v", got, want)
	}
}

func TestGCRACountsAgainstMaxKeys(t *testing.T) {
	s, _ := newStore(t, memstore.Options{Shards: 1, MaxKeys: 2, SweepInterval: -1})
	p := commandParams(t, 0, 1, 60, 1)
	for _, k := range []string{"a", "b", "c"} {
		gcraCall(t, s, k, p)
	}
	if n := s.Len(); n != 2 {
		t.Fatalf("%d keys held under a bound of 2", n)
	}
}
