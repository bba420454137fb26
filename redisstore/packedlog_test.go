package redisstore_test

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
)

// TestPackedLogFormat checks a packed sliding log as Redis holds it: "L",
// the period in ms, ":", then each entry's millisecond on six bytes,
// big-endian, oldest first; a log whose limit's count grows past 1,024
// turns into a sorted set holding the same entries, and a sorted set
// written before (by a store that packs no log) stays one.
func TestPackedLogFormat(t *testing.T) {
	s, client, clock := reserveStore(t)
	ctx := context.Background()
	small := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 3, Period: time.Second})
	big := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 5000, Period: time.Second})
	clock.Store(storetestDay0) // a whole millisecond
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: small, N: 2})
	clock.Add(int64(10*time.Millisecond) + 1) // recorded at the next ms
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: small, N: 1})
	v, err := client.Get(ctx, "rsv-test:log").Result()
	if err != nil {
		t.Fatal(err)
	}
	day0 := uint64(storetestDay0 / int64(time.Millisecond))
	want := "L1000:"
	for _, ms := range []uint64{day0, day0, day0 + 11} {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], ms)
		want += string(b[2:])
	}
	if v != want {
		t.Fatalf("the packed log %q, want %q", v, want)
	}
	// A peek under a count above 1,024: the same entries, in a sorted set.
	do1(t, s, funnel.Op{Kind: funnel.OpPeek, Key: "log", Limit: big, N: 1})
	z, err := client.ZRangeWithScores(ctx, "rsv-test:log", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range z {
		got = append(got, e.Member.(string))
	}
	if strings.Join(got, " ") != "\x00log "+
		"1795392000000:00000001 1795392000000:00000002 1795392000011:00000001" || z[0].Score != -1000 {
		t.Fatalf("the sorted set %q (marker %v)", got, z[0].Score)
	}
	// A sorted set stays one under a store that packs logs.
	r := do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: small, N: 1})
	if r.Allowed || r.Remaining != 0 {
		t.Fatalf("a fourth unit of three: %+v", r)
	}
	if typ, _ := client.Type(ctx, "rsv-test:log").Result(); typ != "zset" {
		t.Fatalf("the log is a %s", typ)
	}
}

// TestPackedLogExpiry checks the expiry of a packed log's key at each of
// its writes: its newest entry plus the period of the limit that wrote it
// (plus the test clock's slack of 10 minutes): a take decided inline, one
// decided by the general path (with a ban), a refund, and a peek under a
// count that turns it into a sorted set.
func TestPackedLogExpiry(t *testing.T) {
	s, client, clock := reserveStore(t)
	ctx := context.Background()
	lim := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 3, Period: time.Second})
	banned := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 3, Period: 2 * time.Second, Ban: time.Second})
	big := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 5000, Period: 3 * time.Second})
	expires := func(what string, want time.Duration) {
		t.Helper()
		pttl, err := client.PTTL(ctx, "rsv-test:log").Result()
		if err != nil {
			t.Fatal(err)
		}
		if want += 10 * time.Minute; pttl > want || pttl < want-50*time.Millisecond {
			t.Errorf("%s: the log's key expires in %v, want %v", what, pttl, want)
		}
	}
	clock.Store(storetestDay0)
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: lim, N: 1})
	expires("a take", time.Second)
	clock.Add(int64(100 * time.Millisecond))
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: lim, N: 1})
	expires("a second take", time.Second)
	clock.Add(int64(200 * time.Millisecond))
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: banned, N: 1}) // the general path
	expires("a take with a ban", 2*time.Second)
	clock.Add(int64(100 * time.Millisecond))
	do1(t, s, funnel.Op{Kind: funnel.OpRefund, Key: "log", Limit: lim, N: 1}) // the entries at 0 and 0.1 s are left
	expires("a refund", 700*time.Millisecond)
	clock.Add(int64(100 * time.Millisecond))
	do1(t, s, funnel.Op{Kind: funnel.OpPeek, Key: "log", Limit: big, N: 1}) // a sorted set, of the refund's period
	expires("a peek that made it a sorted set", 600*time.Millisecond)
}

// TestPackedLogPeriodEdge checks that an entry exactly a period old no
// longer counts, on both paths of a packed log: a take decided inline and
// a peek (the general path), with a newer entry that still counts.
func TestPackedLogPeriodEdge(t *testing.T) {
	s, _, clock := reserveStore(t)
	one := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 2, Period: time.Second})
	clock.Store(storetestDay0)
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: one, N: 1})
	clock.Add(int64(500 * time.Millisecond))
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: one, N: 1})
	clock.Add(int64(500*time.Millisecond) - 1)
	if r := do1(t, s, funnel.Op{Kind: funnel.OpPeek, Key: "log", Limit: one, N: 1}); r.Allowed {
		t.Fatalf("a peek a ns before the entry is a period old: %+v", r)
	}
	if r := do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: one, N: 1}); r.Allowed {
		t.Fatalf("a take a ns before the entry is a period old: %+v", r)
	}
	clock.Add(1)
	if r := do1(t, s, funnel.Op{Kind: funnel.OpPeek, Key: "log", Limit: one, N: 1}); !r.Allowed {
		t.Fatalf("a peek when the entry is a period old: %+v", r)
	}
	if r := do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: one, N: 1}); !r.Allowed {
		t.Fatalf("a take when the entry is a period old: %+v", r)
	}
}

// TestPackedLogClockBack checks that a packed log records an entry never
// below its newest one, after a clock stepped back by a millisecond as by
// a second, so that its entries stay in order (as memstore records them).
func TestPackedLogClockBack(t *testing.T) {
	s, client, clock := reserveStore(t)
	ctx := context.Background()
	lim := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 10, Period: time.Minute})
	day0 := uint64(storetestDay0 / int64(time.Millisecond))
	for _, back := range []time.Duration{time.Millisecond, time.Second} {
		key := "log" + back.String()
		clock.Store(storetestDay0 + int64(5*time.Second))
		do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: key, Limit: lim, N: 1})
		clock.Add(-int64(back))
		do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: key, Limit: lim, N: 1})
		v, err := client.Get(ctx, "rsv-test:"+key).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := "L60000:"
		for range 2 {
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], day0+5000)
			want += string(b[2:])
		}
		if v != want {
			t.Errorf("back %v: the packed log %q, want %q", back, v, want)
		}
	}
}
