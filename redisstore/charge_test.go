package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/redisstore"
)

// TestChargeKeyExpiresWithTheDebt checks that a key charged into debt
// expires in Redis when its state would be empty (the whole debt drained),
// rounded up to the millisecond, plus the test clock's slack, on every
// algorithm that takes a charge.
func TestChargeKeyExpiresWithTheDebt(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client()
	var clock atomic.Int64
	clock.Store(storetestDay0 + int64(250*time.Millisecond) + 1)
	lim := funnel.New(redisstore.New(client, redisstore.Options{Now: clock.Load, Prefix: "debt:"}))
	ctx := context.Background()
	for _, c := range []struct {
		limit funnel.Limit
		n     int64
		want  time.Duration // the key's state empties after this
	}{
		{funnel.Limit{Count: 10, Period: time.Second, Burst: 4}, 1000, 100 * time.Second},
		{funnel.Limit{Count: 1, Period: 24 * time.Hour}, 400, 400 * 24 * time.Hour},
		{funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second}, 1000, 100 * time.Second},
		{funnel.Limit{Algorithm: funnel.FixedWindow, Count: 3, Period: time.Second}, 1000, 750*time.Millisecond - 1},
		{funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 3, Period: time.Second}, 1000, 1750*time.Millisecond - 1},
		{funnel.Limit{Algorithm: funnel.SlidingLog, Count: 3, Period: time.Second}, 1000, time.Second + time.Millisecond - 1},
	} {
		key := c.limit.String()
		r, err := lim.Charge(ctx, key, c.limit, c.n)
		if err != nil || r.Allowed || r.ResetAfter != c.want {
			t.Fatalf("%v: Charge = %+v, %v; want over the limit, ResetAfter %v", c.limit, r, err, c.want)
		}
		pttl, err := client.PTTL(ctx, "debt:"+key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// Rounded up to the millisecond, plus the slack; Redis counts down
		// from the call.
		want := c.want.Truncate(time.Millisecond) + time.Millisecond + 10*time.Minute
		if c.want%time.Millisecond == 0 {
			want -= time.Millisecond
		}
		if pttl > want || pttl < want-time.Second {
			t.Errorf("%v: the key expires in %v, want %v", c.limit, pttl, want)
		}
	}
}

// BenchmarkChargeRedis is one call at a time on one hot key, per
// algorithm: a take of one unit (AllowN: gcra.lua for the funnel, the inline
// paths of family.lua for the others), a charge of one (Charge), a peek
// of one (PeekN) and a reservation of one (Reserve), all three on
// family.lua's general path; then settles (Settle) of reservations made
// before, one a call. It reports the CPU
// Redis spends in the script per call (INFO commandstats).
func BenchmarkChargeRedis(b *testing.B) {
	srv := redistest.StartServer(b)
	c := srv.Client()
	ctx := context.Background()
	lim := funnel.New(redisstore.New(c, redisstore.Options{Timeout: 10 * time.Second}))
	for _, l := range []funnel.Limit{
		funnel.PerSecond(1e8).WithBurst(1 << 30),
		{Algorithm: funnel.LeakyBucket, Count: 1e8, Period: time.Second, Burst: 1 << 30, DelayUnits: funnel.NoDelay},
		{Algorithm: funnel.FixedWindow, Count: 1 << 40, Period: time.Hour},
		{Algorithm: funnel.SlidingWindow, Count: 1 << 39, Period: time.Second},
		{Algorithm: funnel.SlidingLog, Count: 100, Period: time.Second},
	} {
		for _, call := range []struct {
			name string
			f    func(key string) error
		}{
			{"allow", func(key string) error { _, err := lim.AllowN(ctx, key, l, 1); return err }},
			{"charge", func(key string) error { _, err := lim.Charge(ctx, key, l, 1); return err }},
			{"peek", func(key string) error { _, err := lim.PeekN(ctx, key, l, 1); return err }},
			{"reserve", func(key string) error { _, _, err := lim.Reserve(ctx, key, l, 1, time.Minute); return err }},
		} {
			b.Run(l.Algorithm.String()+"/"+call.name, func(b *testing.B) {
				key := "hot:" + l.Algorithm.String() + ":" + call.name
				for range 100 {
					if err := call.f(key); err != nil {
						b.Fatal(err)
					}
				}
				if err := c.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if err := call.f(key); err != nil {
						b.Fatal(err)
					}
				}
				reportScriptTime(b, srv)
			})
		}
		// A settle below its estimate (a give back) and above it (a
		// charge), each of a reservation made before, on a key of its own
		// (a hot log would refuse the reservations).
		for _, settle := range []struct {
			name             string
			estimate, actual int64
		}{{"settle-below", 2, 1}, {"settle-above", 1, 2}} {
			b.Run(l.Algorithm.String()+"/"+settle.name, func(b *testing.B) {
				keys := make([]string, b.N)
				ids := make([]string, b.N)
				for i := range b.N {
					keys[i] = "settle:" + l.Algorithm.String() + ":" + strconv.Itoa(i)
					rsv, r, err := lim.Reserve(ctx, keys[i], l, settle.estimate, time.Minute)
					if err != nil || !r.Allowed {
						b.Fatal(r, err)
					}
					ids[i] = rsv.ID
				}
				if err := c.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					if _, err := lim.Settle(ctx, keys[i], ids[i], settle.actual); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				reportScriptTime(b, srv)
				if err := c.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// reportScriptTime reports the CPU Redis spent per script call since its
// statistics were reset (INFO commandstats).
func reportScriptTime(b *testing.B, srv *redistest.Server) {
	stats, err := srv.Info("commandstats")
	if err != nil {
		b.Fatal(err)
	}
	for _, kv := range strings.Split(stats["cmdstat_evalsha"], ",") {
		if k, v, _ := strings.Cut(kv, "="); k == "usec_per_call" {
			f, _ := strconv.ParseFloat(v, 64)
			b.ReportMetric(f, "redis-µs/op")
		}
	}
}

// TestRefundOfADebt checks that a refund of more units than a window's
// count gives them all back from a window charged into debt, as memstore
// does: 1 taken and 9 charged into a window of 4, then 6 refunded, leave 4
// (within the limit), not 5.
func TestRefundOfADebt(t *testing.T) {
	srv := redistest.StartServer(t)
	var clock atomic.Int64
	clock.Store(storetestDay0 + int64(250*time.Millisecond) + 1)
	redis := redisstore.New(srv.Client(), redisstore.Options{Now: clock.Load, Prefix: "refund-debt:"})
	mem := memstore.New(memstore.Options{Now: clock.Load})
	defer mem.Close()
	ctx := context.Background()
	for _, l := range []funnel.Limit{
		{Algorithm: funnel.FixedWindow, Count: 4, Period: time.Second},
		{Algorithm: funnel.FixedWindow, Count: 4, Calendar: funnel.Daily, Location: kolkata},
		{Algorithm: funnel.SlidingWindow, Count: 4, Period: time.Second},
		{Algorithm: funnel.SlidingLog, Count: 4, Period: time.Second},
	} {
		c, err := l.Check()
		if err != nil {
			t.Fatal(err)
		}
		key := l.String()
		for _, op := range []funnel.Op{
			{Kind: funnel.OpTake, Key: key, Limit: c, N: 1},
			{Kind: funnel.OpCharge, Key: key, Limit: c, N: 9},
			{Kind: funnel.OpRefund, Key: key, Limit: c, N: 6},
			{Kind: funnel.OpTake, Key: key, Limit: c, N: 0},
		} {
			got, want := make([]funnel.Result, 1), make([]funnel.Result, 1)
			gerr := redis.Do(ctx, []funnel.Op{op}, got)
			werr := mem.Do(ctx, []funnel.Op{op}, want)
			if gerr != nil || werr != nil || got[0] != want[0] {
				t.Fatalf("%v: %v %d: Redis %+v, %v; memstore %+v, %v", l, op.Kind, op.N, got[0], gerr, want[0], werr)
			}
		}
	}
}

// TestChargeOverflowOfAnotherKind checks that a funnel's charge whose cost
// does not fit in int64 on a key that holds another algorithm's state is
// refused as memstore refuses it, for the state (ErrWrongType) rather than
// the quantity, and for the quantity on a key of its own kind.
func TestChargeOverflowOfAnotherKind(t *testing.T) {
	srv := redistest.StartServer(t)
	var clock atomic.Int64
	clock.Store(storetestDay0)
	redis := redisstore.New(srv.Client(), redisstore.Options{Now: clock.Load, Prefix: "overflow-kind:"})
	mem := memstore.New(memstore.Options{Now: clock.Load})
	defer mem.Close()
	ctx := context.Background()
	log, err := funnel.Limit{Algorithm: funnel.SlidingLog, Count: 4, Period: time.Second}.Check()
	if err != nil {
		t.Fatal(err)
	}
	leaky, err := funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 4, Period: 900 * time.Millisecond, Burst: 3}.Check()
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []funnel.Op{
		{Kind: funnel.OpTake, Key: "k", Limit: log, N: 1},
		{Kind: funnel.OpCharge, Key: "k", Limit: leaky, N: algo.MaxCount},
		{Kind: funnel.OpCharge, Key: "k2", Limit: leaky, N: algo.MaxCount},
	} {
		got, want := make([]funnel.Result, 1), make([]funnel.Result, 1)
		gerr := redis.Do(ctx, []funnel.Op{op}, got)
		werr := mem.Do(ctx, []funnel.Op{op}, want)
		for _, kind := range []error{funnel.ErrWrongType, gcra.ErrOverflow} {
			if errors.Is(gerr, kind) != errors.Is(werr, kind) {
				t.Fatalf("%v %d of %q: Redis %v; memstore %v", op.Kind, op.N, op.Key, gerr, werr)
			}
		}
		if werr == nil && got[0] != want[0] {
			t.Fatalf("%v %d of %q: Redis %+v; memstore %+v", op.Kind, op.N, op.Key, got[0], want[0])
		}
	}
}
