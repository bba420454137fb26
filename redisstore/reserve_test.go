package redisstore_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/eventually"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
)

// reserveLimits are the limits the reservation tests run under: every
// algorithm a reservation takes, with bans and a calendar window.
var reserveLimits = []funnel.Limit{
	{Algorithm: funnel.GCRA, Count: 10, Period: time.Second, Burst: 9},
	{Algorithm: funnel.GCRA, Count: 3, Period: 700*time.Millisecond + 3, Burst: 6, Ban: 2 * time.Second},
	{Algorithm: funnel.LeakyBucket, Count: 7, Period: time.Second, Burst: 6, DelayUnits: 2},
	{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Second},
	{Algorithm: funnel.FixedWindow, Count: 10, Period: 250 * time.Millisecond, Ban: 900 * time.Millisecond},
	{Algorithm: funnel.FixedWindow, Count: 10, Calendar: funnel.Daily, Location: kolkata},
	{Algorithm: funnel.SlidingWindow, Count: 10, Period: time.Second},
	{Algorithm: funnel.SlidingWindow, Count: 10, Period: 300 * time.Millisecond, Ban: 2 * time.Second},
	{Algorithm: funnel.SlidingLog, Count: 10, Period: time.Second},
	{Algorithm: funnel.SlidingLog, Count: 10, Period: 200 * time.Millisecond, Ban: time.Second},
}

// kolkata is a zone off UTC by a non-whole hour.
var kolkata = func() *time.Location {
	loc, err := funnel.LoadLocation("Asia/Kolkata")
	if err != nil {
		panic(err)
	}
	return loc
}()

// reserveStore returns a store on a fresh server with the test's clock,
// at storetestDay0 plus 250ms and 1ns, and a go-redis client of the server.
func reserveStore(t *testing.T) (*redisstore.Store, *redis.Client, *atomic.Int64) {
	t.Helper()
	srv := redistest.StartServer(t)
	c := srv.Client()
	var clock atomic.Int64
	clock.Store(storetestDay0 + int64(250*time.Millisecond) + 1)
	return redisstore.New(c, redisstore.Options{Now: clock.Load, Prefix: "rsv-test:", Timeout: 20 * time.Second}), c, &clock
}

func mustCheck(t *testing.T, l funnel.Limit) funnel.Checked {
	t.Helper()
	c, err := l.Check()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func do1(t *testing.T, s *redisstore.Store, op funnel.Op) funnel.Result {
	t.Helper()
	res := make([]funnel.Result, 1)
	if err := s.Do(context.Background(), []funnel.Op{op}, res); err != nil {
		t.Fatalf("%+v: %v", op, err)
	}
	return res[0]
}

// TestReserveSettleAsTakeAndCharge checks, on both clients, a reservation against the ops it
// is made of, on a twin key that gets them through Do at the same
// instants: a Reserve answers as the take of its estimate, a Settle above
// the estimate as the charge of the difference, at the estimate as a
// charge of 0, and below it, when the key still counts the estimate in
// full in the window it was taken in, as the refund of the difference
// then a charge of 0.
func TestReserveSettleAsTakeAndCharge(t *testing.T) {
	t.Run("go-redis", func(t *testing.T) {
		s, c, clock := reserveStore(t)
		testReserveSettleAsTakeAndCharge(t, s, c, clock)
	})
	t.Run("rueidis", func(t *testing.T) {
		srv := redistest.StartServer(t)
		var clock atomic.Int64
		clock.Store(storetestDay0)
		s := redisstore.NewRueidis(newRueidis(t, srv.Addr), redisstore.Options{Now: clock.Load, Prefix: "rsv-test:", Timeout: 20 * time.Second})
		testReserveSettleAsTakeAndCharge(t, s, srv.Client(), &clock)
	})
}

func testReserveSettleAsTakeAndCharge(t *testing.T, s *redisstore.Store, client *redis.Client, clock *atomic.Int64) {
	ctx := context.Background()
	for _, l := range reserveLimits {
		c := mustCheck(t, l)
		for _, actual := range []int64{0, 2, 5, 9, 40} {
			key, twin := "r:"+l.String()+":"+itoa(actual), "t:"+l.String()+":"+itoa(actual)
			clock.Add(int64(time.Hour)) // the windows start afresh
			clock.Store(clock.Load() - clock.Load()%int64(time.Second) + int64(10*time.Millisecond) + 7)
			// some units taken before
			for _, k := range []string{key, twin} {
				do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: k, Limit: c, N: 2})
			}
			clock.Add(int64(time.Millisecond) + 3)
			const estimate = 5
			got, err := s.Reserve(ctx, key, c, estimate, "id1", time.Minute)
			if err != nil {
				t.Fatalf("%v: Reserve: %v", l, err)
			}
			want := do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: twin, Limit: c, N: estimate})
			if got != want {
				t.Fatalf("%v: Reserve = %+v, the take = %+v", l, got, want)
			}
			clock.Add(int64(7*time.Millisecond) + 11)
			st, err := s.Settle(ctx, key, "id1", actual)
			if err != nil {
				t.Fatalf("%v: Settle(%d): %v", l, actual, err)
			}
			if actual < estimate {
				do1(t, s, funnel.Op{Kind: funnel.OpRefund, Key: twin, Limit: c, N: estimate - actual})
			}
			want = do1(t, s, funnel.Op{Kind: funnel.OpCharge, Key: twin, Limit: c, N: max(actual-estimate, 0)})
			if st.Result != want || st.Estimate != estimate || st.Actual != actual || st.Again {
				t.Fatalf("%v: Settle(%d) = %+v, want %+v", l, actual, st, want)
			}
			// Settled: again, nothing changes.
			clock.Add(int64(time.Millisecond))
			st, err = s.Settle(ctx, key, "id1", actual+3)
			want = do1(t, s, funnel.Op{Kind: funnel.OpCharge, Key: twin, Limit: c, N: 0})
			if err != nil || st.Result != want || st.Actual != actual || st.Estimate != estimate || !st.Again {
				t.Fatalf("%v: a second Settle = %+v, %v; want Again, Actual %d, %+v", l, st, err, actual, want)
			}
			d1, ok1, err1 := s.TTL(ctx, key)
			d2, ok2, err2 := s.TTL(ctx, twin)
			if d1 != d2 || ok1 != ok2 || err1 != nil || err2 != nil {
				t.Fatalf("%v: TTL = %v, %v, %v; the twin's %v, %v, %v", l, d1, ok1, err1, d2, ok2, err2)
			}
			// Redis expires the key with its state, as the twin's (Redis
			// counts down in its own time, between the two calls).
			p1, err1 := client.PTTL(ctx, "rsv-test:"+key).Result()
			p2, err2 := client.PTTL(ctx, "rsv-test:"+twin).Result()
			if err1 != nil || err2 != nil || p1-p2 > time.Second || p2-p1 > time.Second {
				t.Fatalf("%v: the key expires in %v, %v; the twin in %v, %v", l, p1, err1, p2, err2)
			}
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestSettleGiveBackRules checks what a settle below the estimate gives
// back once the window the estimate was taken in has passed: a fixed
// window nothing; a sliding window counter from the previous window's
// count one window later and nothing two windows later; a sliding log
// only its own entries (not newer ones), and nothing once they have left
// the log; a funnel the TAT moves back, never before now.
func TestSettleGiveBackRules(t *testing.T) {
	s, _, clock := reserveStore(t)
	ctx := context.Background()
	at := func(ms int64) {
		clock.Store(storetestDay0 + int64(time.Hour) + ms*int64(time.Millisecond) + 5)
	}
	peek := func(key string, c funnel.Checked) funnel.Result {
		return do1(t, s, funnel.Op{Kind: funnel.OpCharge, Key: key, Limit: c, N: 0})
	}
	settle := func(key, id string, actual int64) funnel.Settlement {
		t.Helper()
		st, err := s.Settle(ctx, key, id, actual)
		if err != nil {
			t.Fatalf("Settle(%s, %s, %d): %v", key, id, actual, err)
		}
		return st
	}
	reserve := func(key string, c funnel.Checked, n int64, id string) {
		t.Helper()
		r, err := s.Reserve(ctx, key, c, n, id, time.Minute)
		if err != nil || !r.Allowed {
			t.Fatalf("Reserve(%s, %d) = %+v, %v", key, n, r, err)
		}
	}

	fixed := mustCheck(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Second})
	at(100)
	reserve("f", fixed, 6, "a")
	reserve("f", fixed, 2, "b")
	at(900)
	if st := settle("f", "a", 1); st.Remaining != 7 {
		t.Errorf("fixed, same window: %+v, want 7 remaining (5 given back)", st)
	}
	at(1100)
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "f", Limit: fixed, N: 4})
	if st := settle("f", "b", 0); st.Remaining != 6 {
		t.Errorf("fixed, next window: %+v, want 6 remaining (nothing given back)", st)
	}

	sliding := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 10, Period: time.Second})
	at(0)
	reserve("s", sliding, 6, "a")
	reserve("s", sliding, 3, "b")
	at(1000) // the previous window counts in full at the window's start
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "s", Limit: sliding, N: 1})
	if st := settle("s", "a", 2); st.Remaining != 10-(9-4)-1 {
		t.Errorf("sliding, next window: %+v, want %d remaining (4 given back from the previous window)", st, 10-(9-4)-1)
	}
	at(2000)
	before := peek("s", sliding)
	if st := settle("s", "b", 0); st.Result != before {
		t.Errorf("sliding, two windows later: %+v, want %+v (nothing given back)", st, before)
	}

	log := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 10, Period: time.Second})
	at(0)
	reserve("o", log, 4, "a")
	at(10)
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "o", Limit: log, N: 3})
	at(20)
	if st := settle("o", "a", 0); st.Remaining != 10-3 || st.ResetAfter != 991*time.Millisecond-5 {
		t.Errorf("log: %+v, want 7 remaining, ResetAfter 991ms-5ns (the reservation's 4 entries dropped)", st)
	}
	at(100)
	reserve("o", log, 5, "b")
	at(1200) // its entries have left the log
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "o", Limit: log, N: 2})
	if st := settle("o", "b", 0); st.Remaining != 8 {
		t.Errorf("log, the entries gone: %+v, want 8 remaining", st)
	}

	funnelLimit := mustCheck(t, funnel.Limit{Count: 10, Period: time.Second, Burst: 9})
	at(0)
	reserve("g", funnelLimit, 8, "a")
	at(500) // 5 units drained
	if st := settle("g", "a", 0); st.Remaining != 10 || st.ResetAfter != 0 {
		t.Errorf("funnel: %+v, want a full bucket (given back only down to now)", st)
	}
}

// TestSettleErrors checks the settles that are refused, and that they
// change nothing: an unknown id, an id whose TTL has ended (and that Redis
// forgets), a negative actual, a debt that does not fit (the reservation
// then settles still), and a key that holds another algorithm's state.
func TestSettleErrors(t *testing.T) {
	s, client, clock := reserveStore(t)
	ctx := context.Background()
	c := mustCheck(t, funnel.Limit{Count: 10, Period: time.Second, Burst: 9})
	if _, err := s.Reserve(ctx, "k", c, 3, "id", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"other", "", strings.Repeat("x", funnel.MaxLeaseIDLen+1)} {
		if _, err := s.Settle(ctx, "k", id, 1); !errors.Is(err, funnel.ErrUnknownReservation) {
			t.Errorf("Settle(%q) = %v, want ErrUnknownReservation", id[:min(len(id), 8)], err)
		}
	}
	if _, err := s.Settle(ctx, "k2", "id", 1); !errors.Is(err, funnel.ErrUnknownReservation) {
		t.Errorf("Settle of another key = %v, want ErrUnknownReservation", err)
	}
	if _, err := s.Settle(ctx, "k", "id", -1); !errors.Is(err, funnel.ErrInvalidQuantity) {
		t.Errorf("Settle(-1) = %v, want ErrInvalidQuantity", err)
	}
	before := do1(t, s, funnel.Op{Kind: funnel.OpCharge, Key: "k", Limit: c, N: 0})
	if _, err := s.Settle(ctx, "k", "id", math.MaxInt64); !errors.Is(err, gcra.ErrOverflow) {
		t.Errorf("Settle(MaxInt64) = %v, want gcra.ErrOverflow", err)
	}
	if after := do1(t, s, funnel.Op{Kind: funnel.OpCharge, Key: "k", Limit: c, N: 0}); after != before {
		t.Errorf("a debt that does not fit changed the key: %+v, then %+v", before, after)
	}
	// Another algorithm's state: refused, the reservation still pending.
	if _, err := s.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	other := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 10, Period: time.Second})
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "k", Limit: other, N: 1})
	for _, actual := range []int64{0, 3, 5} {
		if _, err := s.Settle(ctx, "k", "id", actual); !errors.Is(err, funnel.ErrWrongType) {
			t.Errorf("Settle(%d) of a key that holds a log = %v, want ErrWrongType", actual, err)
		}
	}
	if _, err := s.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Settle(ctx, "k", "id", 4); err != nil || st.Again || st.Actual != 4 || st.Remaining != 9 {
		t.Errorf("Settle(4) after the refusals = %+v, %v; want settled now, 9 remaining", st, err)
	}
	// A reservation's key that holds something else: an internal error,
	// not unavailability.
	if _, err := s.Reserve(ctx, "k", c, 1, "junk", time.Minute); err != nil {
		t.Fatal(err)
	}
	junk, err := client.Keys(ctx, "*rsv-test:rsv:4:junkk").Result()
	if err != nil || len(junk) != 1 {
		t.Fatalf("reservation key %q, %v", junk, err)
	}
	client.Set(ctx, junk[0], "not a record", time.Minute)
	if _, err := s.Settle(ctx, "k", "junk", 1); err == nil || errors.Is(err, funnel.ErrUnavailable) || errors.Is(err, funnel.ErrUnknownReservation) {
		t.Errorf("Settle of a key that holds something else: %v", err)
	}
	client.Del(ctx, junk[0])
	// The TTL: known until it ends, then unknown; Redis forgets it.
	if _, err := s.Reserve(ctx, "k", c, 1, "short", 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	keys, err := client.Keys(ctx, "*rsv-test:rsv:*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("reservation keys %q, %v; want 2", keys, err)
	}
	for _, k := range keys {
		pttl, err := client.PTTL(ctx, k).Result()
		// 10 minutes of the test clock's slack
		if err != nil || pttl > 10*time.Minute+2*time.Second || pttl < 10*time.Minute {
			t.Errorf("%s expires in %v, %v", k, pttl, err)
		}
	}
	clock.Add(int64(1500*time.Millisecond) - 1)
	if _, err := s.Settle(ctx, "k", "short", 1); err != nil {
		t.Errorf("Settle 1ns before the TTL ends: %v", err)
	}
	if _, err := s.Reserve(ctx, "k", c, 1, "short2", 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(1500 * time.Millisecond))
	if _, err := s.Settle(ctx, "k", "short2", 1); !errors.Is(err, funnel.ErrUnknownReservation) {
		t.Errorf("Settle when the TTL ends = %v, want ErrUnknownReservation", err)
	}
}

// TestSettleFunnelExact checks a funnel's settle of large amounts, whose
// cost (units × interval) passes 2^53: the settle's charge equals the
// charge of the difference on a twin key, to the nanosecond, and one past
// int64 is refused.
func TestSettleFunnelExact(t *testing.T) {
	s, _, _ := reserveStore(t)
	ctx := context.Background()
	for _, l := range []funnel.Limit{
		{Count: 1e9, Period: time.Second, Burst: 1e9},                     // 1ns
		{Count: 3, Period: 700*time.Millisecond + 3, Burst: 100},          // 233333334ns
		{Count: 7, Period: 24*time.Hour + 13, Burst: 10},                  // 12342857144ns
		{Count: 999_999_937, Period: 999_999_999_989, Burst: 999_999_937}, // 1000ns, odd
	} {
		c := mustCheck(t, l)
		for _, d := range []int64{1, 1 << 40, 1<<53 + 1, 999_999_999_999, 123_456_789_012_345_678, math.MaxInt64 / c.GCRA.Interval / 2} {
			if d > math.MaxInt64/2/c.GCRA.Interval {
				continue
			}
			key, twin := "x:"+l.String()+itoa(d), "y:"+l.String()+itoa(d)
			r, err := s.Reserve(ctx, key, c, 1, "id", time.Minute)
			if err != nil || !r.Allowed {
				t.Fatalf("Reserve = %+v, %v", r, err)
			}
			do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: twin, Limit: c, N: 1})
			st, err := s.Settle(ctx, key, "id", d+1)
			want := do1(t, s, funnel.Op{Kind: funnel.OpCharge, Key: twin, Limit: c, N: d})
			if err != nil || st.Result != want {
				t.Fatalf("%v: Settle(%d) = %+v, %v; want %+v", l, d+1, st, err, want)
			}
			ttl1, _, _ := s.TTL(ctx, key)
			ttl2, _, _ := s.TTL(ctx, twin)
			if ttl1 != ttl2 {
				t.Fatalf("%v: TTL after Settle(%d) = %v, the charge's %v", l, d+1, ttl1, ttl2)
			}
		}
		key := "z:" + l.String()
		if _, err := s.Reserve(ctx, key, c, 1, "id", time.Minute); err != nil {
			t.Fatal(err)
		}
		actual := int64(math.MaxInt64)
		if c.GCRA.Interval > 1 {
			actual = math.MaxInt64/c.GCRA.Interval + 2
		}
		if _, err := s.Settle(ctx, key, "id", actual); !errors.Is(err, gcra.ErrOverflow) {
			t.Errorf("%v: Settle past int64 = %v, want gcra.ErrOverflow", l, err)
		}
	}
	// Random intervals, estimates and actual amounts, of every magnitude
	// (log-uniform), below and above the estimate: the settle leaves the
	// key as the take of the estimate then the refund or the charge of the
	// difference leave a twin key, to the nanosecond.
	r := rand.New(rand.NewPCG(24, 2))
	logUniform := func(most int64) int64 {
		return max(1, int64(math.Exp(r.Float64()*math.Log(float64(most)))))
	}
	for i := range 300 {
		interval := logUniform(1e13)
		est := logUniform(1 << 61 / interval)
		c := mustCheck(t, funnel.Limit{Count: 1, Period: time.Duration(interval), Burst: est})
		actual := r.Int64N(est)
		if i%2 == 0 {
			actual = est + logUniform(1<<61/interval)
		}
		key, twin := "rx"+itoa(int64(i)), "ry"+itoa(int64(i))
		if r, err := s.Reserve(ctx, key, c, est, "id", time.Minute); err != nil || !r.Allowed {
			t.Fatalf("%v: Reserve(%d) = %+v, %v", c.Limit, est, r, err)
		}
		do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: twin, Limit: c, N: est})
		st, err := s.Settle(ctx, key, "id", actual)
		if actual < est {
			do1(t, s, funnel.Op{Kind: funnel.OpRefund, Key: twin, Limit: c, N: est - actual})
		}
		want := do1(t, s, funnel.Op{Kind: funnel.OpCharge, Key: twin, Limit: c, N: max(actual-est, 0)})
		if err != nil || st.Result != want {
			t.Fatalf("%v: Settle(%d) of %d = %+v, %v; want %+v", c.Limit, actual, est, st, err, want)
		}
		ttl1, _, _ := s.TTL(ctx, key)
		ttl2, _, _ := s.TTL(ctx, twin)
		if ttl1 != ttl2 {
			t.Fatalf("%v: TTL after Settle(%d) of %d = %v, the twin's %v", c.Limit, actual, est, ttl1, ttl2)
		}
	}
}

// TestReserveSlots checks that a reservation lives in its key's hash slot
// on a Redis Cluster, and in its key's shard on a Ring, whatever the key
// (with or without a hash tag), and that it settles there.
func TestReserveSlots(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	a, b := redistest.StartServer(t), redistest.StartServer(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { ring.Close() })
	ctx := context.Background()
	c := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 10, Period: time.Minute, Ban: time.Second})
	for _, client := range []redisstore.Client{cc, ring} {
		s := redisstore.New(client, redisstore.Options{Prefix: "p:", Timeout: 10 * time.Second})
		for i := range 40 {
			key := "key" + strconv.Itoa(i)
			if i%3 == 0 {
				key = "{tag" + strconv.Itoa(i) + "}k"
			}
			r, err := s.Reserve(ctx, key, c, 4, "id"+strconv.Itoa(i), time.Minute)
			if err != nil || !r.Allowed || r.Remaining != 6 {
				t.Fatalf("Reserve(%s) = %+v, %v", key, r, err)
			}
			st, err := s.Settle(ctx, key, "id"+strconv.Itoa(i), 1)
			if err != nil || st.Remaining != 9 || st.Again {
				t.Fatalf("Settle(%s) = %+v, %v", key, st, err)
			}
			st, err = s.Settle(ctx, key, "id"+strconv.Itoa(i), 2)
			if err != nil || st.Remaining != 9 || !st.Again || st.Actual != 1 {
				t.Fatalf("a second Settle(%s) = %+v, %v", key, st, err)
			}
		}
	}
}

// TestReserveUnavailable checks that a Reserve that cannot reach Redis
// answers the fallback and records nothing, and that a Settle fails with
// an error that wraps ErrUnavailable, after which the reservation settles
// once Redis is back.
func TestReserveUnavailable(t *testing.T) {
	srv := redistest.StartServer(t, "--save", "", "--appendonly", "yes")
	ctx := context.Background()
	c := mustCheck(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Hour})
	closed := redisstore.New(srv.Client(), redisstore.Options{Timeout: time.Second})
	open := redisstore.New(srv.Client(), redisstore.Options{Timeout: time.Second, Fail: funnel.FailOpen})
	if r, err := closed.Reserve(ctx, "k", c, 3, "kept", time.Hour); err != nil || !r.Allowed || r.Fallback {
		t.Fatalf("Reserve with Redis up = %+v, %v", r, err)
	}
	srv.Stop()
	for _, s := range []*redisstore.Store{closed, open} {
		r, err := s.Reserve(ctx, "k", c, 3, "lost", time.Hour)
		if want := (funnel.Result{Fallback: true, Allowed: s == open, Limit: 10}); err != nil || r != want {
			t.Fatalf("Reserve with Redis down = %+v, %v; want %+v", r, err, want)
		}
		if _, err := s.Settle(ctx, "k", "kept", 1); !errors.Is(err, funnel.ErrUnavailable) {
			t.Fatalf("Settle with Redis down = %v, want ErrUnavailable", err)
		}
	}
	srv.MustStart()
	var st funnel.Settlement
	var err error
	eventually.True(t, "a settle once Redis is back", func() bool {
		st, err = closed.Settle(ctx, "k", "kept", 1)
		return !errors.Is(err, funnel.ErrUnavailable)
	})
	if err != nil || st.Again || st.Remaining != 9 {
		t.Fatalf("Settle with Redis back = %+v, %v; want settled, 9 remaining", st, err)
	}
	if _, err := closed.Settle(ctx, "k", "lost", 1); !errors.Is(err, funnel.ErrUnknownReservation) {
		t.Fatalf("Settle of the reservation made while Redis was down = %v, want ErrUnknownReservation", err)
	}
}

// TestReserveIDInUse checks that a reserve under an id that a live
// reservation of the key holds (pending or settled) is refused and changes
// nothing, as the memory store refuses it, and that the id may be used
// again once its TTL has ended.
func TestReserveIDInUse(t *testing.T) {
	s, _, clock := reserveStore(t)
	ctx := context.Background()
	c := mustCheck(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Hour})
	if _, err := s.Reserve(ctx, "k", c, 3, "id", time.Second); err != nil {
		t.Fatal(err)
	}
	for _, settled := range []bool{false, true} {
		if _, err := s.Reserve(ctx, "k", c, 2, "id", time.Minute); !errors.Is(err, funnel.ErrInvalidLimit) {
			t.Fatalf("a reserve under an id in use (settled %v): %v, want ErrInvalidLimit", settled, err)
		}
		if st, err := s.Settle(ctx, "k", "id", 3); err != nil || st.Remaining != 7 || st.Estimate != 3 {
			t.Fatalf("Settle after the refused reserve: %+v, %v; want 7 remaining, estimate 3", st, err)
		}
	}
	// Another key's reservation of the same id.
	if r, err := s.Reserve(ctx, "k2", c, 2, "id", time.Minute); err != nil || !r.Allowed {
		t.Fatalf("the same id on another key: %+v, %v", r, err)
	}
	clock.Add(int64(time.Second))
	if r, err := s.Reserve(ctx, "k", c, 2, "id", time.Minute); err != nil || r.Remaining != 5 {
		t.Fatalf("the id once its TTL has ended: %+v, %v; want 5 remaining", r, err)
	}
}

// TestSettleConcurrently checks that concurrent settles of one
// reservation settle it once: one is the first, the others say Again with
// its actual amount, and the key is charged once.
func TestSettleConcurrently(t *testing.T) {
	s, _, _ := reserveStore(t)
	ctx := context.Background()
	c := mustCheck(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 100, Period: time.Hour})
	if _, err := s.Reserve(ctx, "k", c, 10, "id", time.Minute); err != nil {
		t.Fatal(err)
	}
	const n = 16
	var first atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := s.Settle(ctx, "k", "id", int64(20+i))
			if err != nil {
				t.Error(err)
				return
			}
			if !st.Again {
				first.Add(1)
			}
		}()
	}
	wg.Wait()
	st, err := s.Settle(ctx, "k", "id", 0)
	if err != nil || !st.Again || st.Actual < 20 || st.Remaining != 100-st.Actual || first.Load() != 1 {
		t.Fatalf("after %d concurrent settles: %+v, %v; %d firsts; want one, and the key charged once", n, st, err, first.Load())
	}
}

// TestReserveSettleNotMadeWhenLate checks that a reserve that fell back
// and a settle that failed because Redis was frozen (SIGSTOP) were not
// made once it resumes: their scripts, run after their deadline, change
// nothing.
func TestReserveSettleNotMadeWhenLate(t *testing.T) { runOutage(t, testReserveSettleNotMadeWhenLate) }

func testReserveSettleNotMadeWhenLate(t *testing.T, oc outageClient) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	s, closeS := oc.open(t, srv.Addr, redisstore.Options{Timeout: 50 * time.Millisecond})
	defer closeS()
	if err := s.Check(ctx); err != nil { // the offset of Redis's clock
		t.Fatal(err)
	}
	c := mustCheck(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: 24 * time.Hour})
	// A loaded machine may delay a call past the 50 ms timeout: ask again.
	for i := 0; ; i++ {
		r, err := s.Reserve(ctx, "w", c, 4, "a", time.Hour)
		if err != nil || (!r.Fallback && r.Remaining != 6) || i == 100 {
			t.Fatalf("reserve with Redis up: %+v, %v", r, err)
		}
		if !r.Fallback {
			break
		}
	}
	srv.Pause()
	if r, err := s.Reserve(ctx, "w", c, 2, "late", time.Hour); err != nil || !r.Fallback {
		t.Errorf("reserve with Redis frozen: %+v, %v", r, err)
	}
	if _, err := s.Settle(ctx, "w", "a", 9); !errors.Is(err, funnel.ErrUnavailable) {
		t.Errorf("settle with Redis frozen: %v", err)
	}
	srv.Resume()
	waitFor(t, "the late scripts", 10*time.Second, func() bool {
		info, err := srv.Info("errorstats")
		return err == nil && info["errorstat_DEADLINE"] != ""
	})
	for i := 0; ; i++ {
		st, err := s.Settle(ctx, "w", "a", 1)
		if errors.Is(err, funnel.ErrUnavailable) && i < 100 {
			continue
		}
		if err != nil || st.Again || st.Actual != 1 || st.Remaining != 9 {
			t.Fatalf("settle after: %+v, %v; want the first settle, 9 remaining", st, err)
		}
		break
	}
	if _, err := s.Settle(ctx, "w", "late", 1); !errors.Is(err, funnel.ErrUnknownReservation) {
		t.Fatalf("the reserve made while Redis was frozen: %v, want ErrUnknownReservation", err)
	}
}

// A settle that gives back to a sliding log keeps its key in Redis as long
// as the log's marker says it counts: its newest entry plus the period of
// the limit that wrote it last (3 s here), not the reservation's limit's
// (1 s), which would let Redis drop entries that a 3 s limit still counts.
func TestLogGiveBackKeepsItsExpiry(t *testing.T) {
	s, client, clock := reserveStore(t)
	ctx := context.Background()
	short := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 3, Period: time.Second})
	long := mustCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 4, Period: 3 * time.Second})
	clock.Store(storetestDay0)
	if r, err := s.Reserve(ctx, "log", short, 1, "i", time.Minute); err != nil || !r.Allowed {
		t.Fatalf("Reserve: %+v, %v", r, err)
	}
	clock.Add(int64(500 * time.Millisecond))
	do1(t, s, funnel.Op{Kind: funnel.OpTake, Key: "log", Limit: long, N: 1})
	clock.Add(int64(100 * time.Millisecond))
	if _, err := s.Settle(ctx, "log", "i", 0); err != nil {
		t.Fatal(err)
	}
	pttl, err := client.PTTL(ctx, "rsv-test:log").Result()
	if err != nil {
		t.Fatal(err)
	}
	// the entry at 0.5 s counts until 3.5 s, 2.9 s from now (plus the test
	// clock's 10 minutes of slack)
	if want := 2900*time.Millisecond + 10*time.Minute; pttl > want || pttl < want-time.Second {
		t.Errorf("the log's key expires in %v, want %v", pttl, want)
	}
}

// TestConcurrencyRingKeyWithoutTag checks that a concurrency limit, which
// has no ban, takes a Ring key with braces but no hash tag on every path
// (conc.lua, and family.lua for leases that have all expired), as it
// takes any other key.
func TestConcurrencyRingKeyWithoutTag(t *testing.T) {
	srv := redistest.StartServer(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { ring.Close() })
	var clock atomic.Int64
	clock.Store(storetestDay0)
	lim := funnel.New(redisstore.New(ring, redisstore.Options{Now: clock.Load, Prefix: "p:", Timeout: 10 * time.Second}))
	ctx := context.Background()
	l := funnel.Limit{Algorithm: funnel.Concurrency, Count: 2, Period: time.Second}
	for _, id := range []string{"x", "y"} {
		if _, r, err := lim.AcquireID(ctx, "a{b", l, id); err != nil || !r.Allowed {
			t.Fatalf("acquire %s: %+v, %v", id, r, err)
		}
		clock.Add(int64(2 * time.Second)) // every lease expired
	}
	if held, err := lim.Release(ctx, funnel.Lease{Key: "a{b", ID: "y"}); err != nil || held {
		t.Fatalf("release of an expired lease: %v, %v", held, err)
	}
}
