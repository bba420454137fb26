package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/redisstore"
)

// TestTakesOneCall checks that takes under several limits at once without
// a ban (a funnel, a delaying bucket, fixed windows of a period and of a
// calendar, a sliding window counter) cost one script call each
// (takes.lua), and that a call with a ban or with a key of another kind
// costs two, the second family.lua's, which decides it: the results agree
// with memstore's throughout.
func TestTakesOneCall(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client()
	ctx := context.Background()
	clock := storetestDay0 + int64(3*time.Hour)
	now := func() int64 { return clock }
	s := redisstore.New(client, redisstore.Options{Now: now, Prefix: "takes:", Timeout: 20 * time.Second})
	mem := memstore.New(memstore.Options{Now: now, SweepInterval: -1})
	defer mem.Close()
	limits := []funnel.Checked{
		mustCheck(t, funnel.Per(5, time.Second)),
		mustCheck(t, funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 4, Period: time.Second, Burst: 2}),
		mustCheck(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 7, Period: time.Minute}),
		mustCheck(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 9, Calendar: funnel.Daily, Location: kolkata}),
		mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 6, Period: 10 * time.Second}),
	}
	banned := limits[2]
	banned.Ban = time.Minute
	do := func(ops []funnel.Op) {
		t.Helper()
		got, want := make([]funnel.Result, len(ops)), make([]funnel.Result, len(ops))
		gerr, werr := s.Do(ctx, ops, got), mem.Do(ctx, ops, want)
		if !sameError(gerr, werr) {
			t.Fatalf("%+v: Redis's error %v, memstore's %v", ops, gerr, werr)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%+v: result %d\n Redis    %+v\n memstore %+v", ops, i, got[i], want[i])
			}
		}
	}
	calls := func() int64 {
		t.Helper()
		info, err := client.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		return redistest.ScriptCalls(info)
	}
	ops := func(key string, ls ...funnel.Checked) []funnel.Op {
		o := make([]funnel.Op, len(ls))
		for i, l := range ls {
			o[i] = funnel.Op{Kind: funnel.OpTake, Key: fmt.Sprintf("{%s}%d", key, i), Limit: l, N: 1}
		}
		return o
	}
	// the scripts in Redis's cache
	do(ops("warm", limits...))
	do(ops("warm", banned))
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// 12 rounds: every limit but the sliding window's count is reached, and
	// then all are refused together, nothing written.
	for range 12 {
		do(ops("k", limits...))
		clock += int64(50 * time.Millisecond)
	}
	// A funnel whose TAT runs more than 2^50 ns (13 days) ahead: its
	// state comes back on two limbs.
	slow := mustCheck(t, funnel.Per(3, 60*24*time.Hour))
	for range 4 {
		do(ops("slow", slow, limits[2]))
		clock += int64(time.Second)
	}
	if n := calls(); n != 16 {
		t.Errorf("%d script calls for 16 calls without a ban, want 16", n)
	}
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// A ban: family.lua alone.
	do(ops("b", limits[0], banned))
	// A key of another kind: takes.lua, then family.lua, which answers
	// WRONGTYPE.
	if err := client.SAdd(ctx, "takes:{w}1", "x").Err(); err != nil {
		t.Fatal(err)
	}
	got := make([]funnel.Result, 2)
	if err := s.Do(ctx, ops("w", limits[0], limits[2]), got); !sameError(err, funnel.ErrWrongType) {
		t.Errorf("a set under a fixed window: %v", err)
	}
	// Another algorithm's state, ended: family.lua reads it as absent.
	do(ops("e", limits[2], limits[0]))
	clock += int64(time.Minute)
	do(ops("e", limits[0], limits[2]))
	if n := calls(); n != 1+2+2+1 {
		t.Errorf("%d script calls, want 6", n)
	}
}

// TestTakesCalendarOtherDay checks a calendar window placed by this
// machine's clock on one side of midnight while Redis's is on the other:
// takes.lua leaves it to family.lua, which picks the day that holds
// Redis's now (here the store's clock alternates between the two, so that
// each script's now is one and each window's the other).
func TestTakesCalendarOtherDay(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client()
	ctx := context.Background()
	day := mustCheck(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 3, Calendar: funnel.Daily, Location: kolkata})
	fn := mustCheck(t, funnel.Per(100, time.Second))
	midnight := time.Date(2026, 11, 27, 0, 0, 0, 0, kolkata).UnixNano()
	for i, d := range []time.Duration{-time.Millisecond, time.Millisecond} {
		script, span := midnight+int64(d), midnight-int64(d)
		reads := 0
		// s.args reads the clock first (the script's now), then the
		// window's span is computed from the second read, and so on.
		now := func() int64 {
			reads++
			if reads%2 == 1 {
				return script
			}
			return span
		}
		s := redisstore.New(client, redisstore.Options{Now: now, Prefix: fmt.Sprintf("cal%d:", i), Timeout: 20 * time.Second})
		mem := memstore.New(memstore.Options{Now: func() int64 { return script }, SweepInterval: -1})
		for round := range 5 {
			reads = 0
			ops := []funnel.Op{{Kind: funnel.OpTake, Key: "{k}f", Limit: fn, N: 1}, {Kind: funnel.OpTake, Key: "{k}d", Limit: day, N: 1}}
			got, want := make([]funnel.Result, 2), make([]funnel.Result, 2)
			gerr, werr := s.Do(ctx, ops, got), mem.Do(ctx, ops, want)
			if gerr != nil || werr != nil || got[0] != want[0] || got[1] != want[1] {
				t.Fatalf("script at midnight%+v, window at midnight%+v, round %d: Redis %+v, %v; memstore %+v, %v", d, -d, round, got, gerr, want, werr)
			}
		}
		mem.Close()
	}
}
