package redisstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestPackedLogFormat checks a packed sliding log as Redis holds it: "L",
// the period in ms, ":", then each entry's millisecond on six bytes,
// big-endian, oldest first; a log read under a count above 256 turns into
// a sorted set holding the same entries, and back.
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
	// A peek under a count above 256: the same entries, in a sorted set.
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
	// Read again under a count up to 256: packed again, the same entries.
	r := do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: small, N: 1})
	if r.Allowed || r.Remaining != 0 {
		t.Fatalf("a fourth unit of three: %+v", r)
	}
	if v, err := client.Get(ctx, "rsv-test:log").Result(); err != nil || v != want {
		t.Fatalf("the log packed again: %q (%v), want %q", v, err, want)
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

// logTwin is a Redis store and memstore on one clock, to compare a key's
// answers and TTL step by step.
type logTwin struct {
	t     *testing.T
	rs    *redisstore.Store
	ms    *memstore.Store
	c     *redis.Client
	clock *atomic.Int64
	pre   string
}

func newLogTwin(t *testing.T, srv *redistest.Server, prefix string) *logTwin {
	var clock atomic.Int64
	clock.Store(storetestDay0)
	ms := memstore.New(memstore.Options{Now: clock.Load, SweepInterval: -1})
	t.Cleanup(func() { ms.Close() })
	rs := redisstore.New(srv.Client(), redisstore.Options{Now: clock.Load, Prefix: prefix, Timeout: 20 * time.Second})
	return &logTwin{t: t, rs: rs, ms: ms, c: srv.Client(), clock: &clock, pre: prefix}
}

// do applies op to both stores and fails when they answer differently.
func (w *logTwin) do(what string, op funnel.Op) {
	w.t.Helper()
	a, b := make([]funnel.Result, 1), make([]funnel.Result, 1)
	ea := w.rs.Do(context.Background(), []funnel.Op{op}, a)
	eb := w.ms.Do(context.Background(), []funnel.Op{op}, b)
	if (ea == nil) != (eb == nil) || a[0] != b[0] {
		w.t.Errorf("%s: Redis %+v (%v), memstore %+v (%v)", what, a[0], ea, b[0], eb)
	}
}

// ttl fails when the stores' TTLs of key differ.
func (w *logTwin) ttl(what, key string) {
	w.t.Helper()
	a, oka, _ := w.rs.TTL(context.Background(), key)
	b, okb, _ := w.ms.TTL(context.Background(), key)
	if oka != okb || a != b {
		w.t.Errorf("%s: TTL Redis %v %v, memstore %v %v", what, a, oka, b, okb)
	}
}

// TestPackedLogAgainstMemstore runs short sequences on a packed log that
// the random sequences reach too rarely, against memstore: a take at
// exactly the newest entry plus its writer's period under a longer
// period; old entries dropped by a take and by a refund (a longer period
// would count them again); a charge far over the count; the entry a
// refund waits for on a log over its count; and a settle that gives back
// to a log last written under another period (whose key keeps that
// period's expiry).
func TestPackedLogAgainstMemstore(t *testing.T) {
	srv := redistest.StartServer(t)
	three := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 3, Period: time.Second})
	longer := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 2, Period: 3 * time.Second})
	long3 := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 3, Period: 3 * time.Second})
	take := func(l funnel.Checked, n int64) funnel.Op {
		return funnel.Op{Kind: funnel.OpTake, Key: "k", Limit: l, N: n}
	}
	op := func(kind funnel.OpKind, l funnel.Checked, n int64) funnel.Op {
		return funnel.Op{Kind: kind, Key: "k", Limit: l, N: n}
	}
	for _, c := range []struct {
		name string
		run  func(w *logTwin)
	}{
		{"empty at its writer's period, read under a longer one", func(w *logTwin) {
			w.do("take 2", take(three, 2))
			w.clock.Add(int64(time.Second))
			w.do("take under 3 s", take(longer, 1))
		}},
		{"a take drops the old entries", func(w *logTwin) {
			w.do("take at 0", take(three, 1))
			w.clock.Add(int64(500 * time.Millisecond))
			w.do("take at 0.5 s", take(three, 1))
			w.clock.Add(int64(700 * time.Millisecond))
			w.do("take at 1.2 s", take(three, 1))
			w.clock.Add(int64(100 * time.Millisecond))
			w.do("take under 3 s", take(long3, 1))
		}},
		{"a refund drops the old entries", func(w *logTwin) {
			w.do("take at 0", take(three, 1))
			w.clock.Add(int64(500 * time.Millisecond))
			w.do("take 2 at 0.5 s", take(three, 2))
			w.clock.Add(int64(700 * time.Millisecond))
			w.do("refund 1", op(funnel.OpRefund, three, 1))
			w.do("peek 2 under 3 s", op(funnel.OpPeek, long3, 2))
		}},
		{"a charge far over the count", func(w *logTwin) {
			w.do("charge 1000", op(funnel.OpCharge, three, 1000))
			w.clock.Add(int64(10 * time.Millisecond))
			w.do("refund 2", op(funnel.OpRefund, three, 2))
			w.do("peek 1", op(funnel.OpPeek, three, 1))
		}},
		{"a refund's wait on a log over its count", func(w *logTwin) {
			for range 3 {
				w.do("take", take(three, 1))
				w.clock.Add(int64(10 * time.Millisecond))
			}
			w.do("charge 2", op(funnel.OpCharge, three, 2))
			w.clock.Add(int64(10 * time.Millisecond))
			w.do("refund 0", op(funnel.OpRefund, three, 0))
			w.do("refund 1", op(funnel.OpRefund, three, 1))
		}},
		{"a settle keeps the writer's period", func(w *logTwin) {
			ctx := context.Background()
			ra, ea := w.rs.Reserve(ctx, "k", three, 2, "r1", time.Minute)
			rb, eb := w.ms.Reserve(ctx, "k", three, 2, "r1", time.Minute)
			if ea != nil || eb != nil || ra != rb {
				t.Fatalf("reserve: %+v %v / %+v %v", ra, ea, rb, eb)
			}
			w.clock.Add(int64(100 * time.Millisecond))
			w.do("refund 0 under 3 s", op(funnel.OpRefund, longer, 0))
			w.ttl("after the refund", "k")
			w.clock.Add(int64(100 * time.Millisecond))
			sa, ea := w.rs.Settle(ctx, "k", "r1", 1)
			sb, eb := w.ms.Settle(ctx, "k", "r1", 1)
			if (ea == nil) != (eb == nil) || sa != sb {
				t.Errorf("settle: %+v %v / %+v %v", sa, ea, sb, eb)
			}
			w.ttl("after the settle", "k")
			// its newest entry (at 0) plus the writer's 3 s, less now (0.2
			// s), plus the test clock's 10 minutes
			pttl, _ := w.c.PTTL(ctx, w.pre+"k").Result()
			if want := 10*time.Minute + 2800*time.Millisecond; pttl > want || pttl < want-50*time.Millisecond {
				t.Errorf("after the settle the key expires in %v, want %v", pttl, want)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.run(newLogTwin(t, srv, strings.ReplaceAll(c.name, " ", "-")+":"))
		})
	}
}

// TestPackedLogSettleEmptiesIt checks a settle that gives back a
// reservation's entries from a packed log whose other entries are all a
// period old: the log is empty, and its key goes (an expiry of the
// newest entry plus the period, less now, would be negative).
func TestPackedLogSettleEmptiesIt(t *testing.T) {
	s, client, clock := reserveStore(t)
	ctx := context.Background()
	l := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 3, Period: 200 * time.Millisecond})
	clock.Store(storetestDay0)
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: l, N: 1})
	clock.Add(int64(100 * time.Millisecond))
	if r, err := s.Reserve(ctx, "log", l, 1, "r1", time.Minute); err != nil || !r.Allowed {
		t.Fatalf("Reserve: %+v, %v", r, err)
	}
	clock.Add(int64(150 * time.Millisecond))
	if _, err := s.Settle(ctx, "log", "r1", 0); err != nil {
		t.Fatal(err)
	}
	if n, _ := client.Exists(ctx, "rsv-test:log").Result(); n != 0 {
		t.Fatal("the emptied log's key is still there")
	}
}

// TestSortedSetLogGetsPacked checks that a sorted-set log of a count up
// to 256 (written by a store that packs no log, as an older version) is
// packed at its first decision by a store that packs: that decision takes
// two script calls (log.lua, then family.lua), every later one one.
func TestSortedSetLogGetsPacked(t *testing.T) {
	s, client, clock := reserveStore(t)
	ctx := context.Background()
	old := redisstore.New(client, redisstore.Options{Now: clock.Load, Prefix: "rsv-test:", Timeout: 20 * time.Second, SortedSetLogs: true})
	l := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 100, Period: time.Second})
	do1(t, old, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: l, N: 1})
	if typ, _ := client.Type(ctx, "rsv-test:log").Result(); typ != "zset" {
		t.Fatalf("a log written with SortedSetLogs is a %s", typ)
	}
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "warm", Limit: l, N: 1}) // log.lua in Redis's script cache
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		clock.Add(int64(10 * time.Millisecond))
		do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: l, N: 1})
	}
	if typ, _ := client.Type(ctx, "rsv-test:log").Result(); typ != "string" {
		t.Fatalf("after 50 takes the log is a %s", typ)
	}
	info, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if calls := redistest.ScriptCalls(info); calls != 51 {
		t.Errorf("%d script calls for 50 takes, want 51", calls)
	}
	// And back: a store with SortedSetLogs turns it into a sorted set.
	do1(t, old, funnel.Op{Kind: funnel.OpPeek, Key: "log", Limit: l, N: 1})
	if typ, _ := client.Type(ctx, "rsv-test:log").Result(); typ != "zset" {
		t.Fatalf("after a peek with SortedSetLogs the log is a %s", typ)
	}
}

// TestUncheckedLimitRefused checks that a sliding log's limit not computed
// by Limit.Check (a period of 0) is refused with ErrInvalidLimit by every
// path of Do, the short scripts' too, as memstore refuses it.
func TestUncheckedLimitRefused(t *testing.T) {
	s, _, _ := reserveStore(t)
	bad := funnel.Checked{Limit: funnel.Limit{Algorithm: funnel.SlidingLog}}
	bad.Window.Count = 5 // Period 0
	for _, kind := range []funnel.OpKind{funnel.OpTake, funnel.OpPeek} {
		for _, n := range []int64{0, 1} {
			res := make([]funnel.Result, 1)
			if err := s.Do(context.Background(), []funnel.Op{{Kind: kind, Key: "k", Limit: bad, N: n}}, res); !errors.Is(err, funnel.ErrInvalidLimit) {
				t.Errorf("kind %v, %d units, under a period of 0: %v (%+v)", kind, n, err, res[0])
			}
		}
	}
}
