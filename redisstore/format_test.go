package redisstore_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/storetest"
)

// redisTime returns Redis's TIME in nanoseconds.
func redisTime(t testing.TB, c redis.Cmdable) int64 {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixNano()
}

// What the store writes is redis-cell's format: a decimal count of ns since
// the Unix epoch, expiring when that instant is reached.
func TestWritesRedisCellFormat(t *testing.T) {
	t.Parallel()
	for _, path := range redisstore.FunnelPaths {
		t.Run(path.Name, func(t *testing.T) {
			t.Parallel()
			testWritesRedisCellFormat(t, path.Start(t))
		})
	}
}

func testWritesRedisCellFormat(t *testing.T, srv *redistest.Server) {
	c := srv.Client()
	ctx := context.Background()
	st := redisstore.New(c, redisstore.Options{Prefix: "cell:", Timeout: 10 * time.Second})
	p := mkParams(t, 15, 30, time.Minute) // redis-cell's README: T = 2 s
	before := redisTime(t, c)
	r, err := storetest.Throttle(ctx, st, "user123", p, 1)
	if err != nil {
		t.Fatal(err)
	}
	after := redisTime(t, c)
	if want := (funnel.Result{Allowed: true, Limit: 16, Remaining: 15, ResetAfter: 2 * time.Second}); r != want {
		t.Fatalf("first request: %+v, want %+v", r, want)
	}
	v, err := c.Get(ctx, "cell:user123").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[1-9][0-9]{18}$`).MatchString(v) {
		t.Fatalf("key holds %q, want a 19-digit decimal", v)
	}
	tat, _ := strconv.ParseInt(v, 10, 64)
	if tat < before+int64(2*time.Second) || tat > after+int64(2*time.Second) {
		t.Fatalf("TAT %d is not TIME + 2 s (TIME was %d..%d)", tat, before, after)
	}
	// The key expires at the TAT: PEXPIRETIME is the TAT in whole ms, or the
	// next one (never earlier, so the key outlives its TAT).
	exp, err := c.Do(ctx, "PEXPIRETIME", "cell:user123").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if ms := tat / 1e6; exp < ms || exp > ms+2 {
		t.Fatalf("PEXPIRETIME %d, want the TAT %d ns in ms (%d) or the next", exp, tat, ms)
	}
	// The same key, as redis-cell would then read it: the TAT as a u64.
	if _, err := strconv.ParseUint(v, 10, 64); err != nil {
		t.Fatal(err)
	}
}

// A key written by redis-cell (SET k <ns> PX <ms>) is honoured.
func TestReadsRedisCellKeys(t *testing.T) {
	t.Parallel()
	for _, path := range redisstore.FunnelPaths {
		t.Run(path.Name, func(t *testing.T) {
			t.Parallel()
			testReadsRedisCellKeys(t, path.Start(t))
		})
	}
}

func testReadsRedisCellKeys(t *testing.T, srv *redistest.Server) {
	c := srv.Client()
	ctx := context.Background()
	p := mkParams(t, 9, 1, time.Second) // T = 1 s, tolerance 10 s

	// At an injected time: exact.
	clock := storetest.NewClock(storetest.Epoch)
	st := redisstore.New(c, redisstore.Options{Now: clock.Now, Timeout: 10 * time.Second})
	for _, v := range []string{
		strconv.FormatInt(storetest.Epoch+5e9, 10),
		"+" + strconv.FormatInt(storetest.Epoch+5e9, 10),   // Rust's u64 parser takes a '+'
		"000" + strconv.FormatInt(storetest.Epoch+5e9, 10), // and leading zeros
	} {
		if err := c.Set(ctx, "handwritten", v, 5*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		if ttl, ok, err := st.TTL(ctx, "handwritten"); err != nil || !ok || ttl != 5*time.Second {
			t.Fatalf("%q: TTL = %v, %v, %v; want 5s", v, ttl, ok, err)
		}
		r, err := storetest.Throttle(ctx, st, "handwritten", p, 1)
		want := funnel.Result{Allowed: true, Limit: 10, Remaining: 4, ResetAfter: 6 * time.Second}
		if err != nil || r != want {
			t.Fatalf("%q: %+v, %v; want %+v", v, r, err, want)
		}
		if got, _ := c.Get(ctx, "handwritten").Result(); got != strconv.FormatInt(storetest.Epoch+6e9, 10) {
			t.Fatalf("%q: key now holds %q", v, got)
		}
	}
	// An old TAT is a full bucket.
	c.Set(ctx, "old", "123", time.Minute)
	if r, err := storetest.Throttle(ctx, st, "old", p, 0); err != nil || r.Remaining != 10 || r.ResetAfter != 0 {
		t.Fatalf("old TAT: %+v, %v", r, err)
	}

	// On Redis's clock, as redis-cell writes it.
	real := redisstore.New(c, redisstore.Options{Timeout: 10 * time.Second})
	now := redisTime(t, c)
	if err := c.Set(ctx, "cell", strconv.FormatInt(now+5e9, 10), 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	r, err := storetest.Throttle(ctx, real, "cell", p, 1)
	if err != nil || !r.Allowed || r.Remaining != 4 || r.ResetAfter > 6*time.Second || r.ResetAfter < 5*time.Second {
		t.Fatalf("redis-cell key on Redis's clock: %+v, %v; want allowed, 4 remaining, reset just under 6s", r, err)
	}
}

// A key holding anything but a TAT gets a WRONGTYPE error from every
// operation, and is left exactly as it was.
func TestWrongType(t *testing.T) {
	t.Parallel()
	for _, path := range redisstore.FunnelPaths {
		t.Run(path.Name, func(t *testing.T) {
			t.Parallel()
			testWrongType(t, path.Start(t))
		})
	}
}

func testWrongType(t *testing.T, srv *redistest.Server) {
	c := srv.Client()
	ctx := context.Background()
	var now atomic.Int64
	now.Store(storetest.Epoch)
	st := redisstore.New(c, redisstore.Options{Now: now.Load, Timeout: 10 * time.Second})
	real := redisstore.New(c, redisstore.Options{Timeout: 10 * time.Second})
	p := mkParams(t, 9, 1, time.Second)
	values := []string{
		"notanumber", "", "-5", "1.5", "1e18", " 5", "5 ", "0x10", "+", "++5", "-0",
		"9223372036854775808",  // 2^63: beyond int64 nanoseconds
		"18446744073709551615", // u64 max
		"18446744073709551616", // beyond u64
		"123456789012345678901234567890",
		"\xff\xfe",
	}
	check := func(key, what string) {
		t.Helper()
		dump := c.Dump(ctx, key).Val()
		pttl := c.PTTL(ctx, key).Val()
		for _, s := range []*redisstore.Store{st, real} {
			_, err1 := storetest.Throttle(ctx, s, key, p, 1)
			_, _, err2 := s.TTL(ctx, key)
			_, err3 := s.Reset(ctx, key)
			for _, err := range []error{err1, err2, err3} {
				if !errors.Is(err, redisstore.ErrWrongType) || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
					t.Fatalf("%s: err %v, want ErrWrongType", what, err)
				}
			}
		}
		if d := c.Dump(ctx, key).Val(); d != dump {
			t.Fatalf("%s: key changed", what)
		}
		if got := c.PTTL(ctx, key).Val(); (got < 0) != (pttl < 0) || got > pttl {
			t.Fatalf("%s: PTTL changed from %v to %v", what, pttl, got)
		}
	}
	for i, v := range values {
		key := "bad" + strconv.Itoa(i)
		c.Set(ctx, key, v, time.Hour)
		check(key, strconv.Quote(v))
	}
	c.Set(ctx, "noexpiry", "oops", 0)
	check("noexpiry", "a string without expiry")
	c.RPush(ctx, "list", "a", "b")
	check("list", "a list")
	c.HSet(ctx, "hash", "f", "1")
	check("hash", "a hash")
	c.SAdd(ctx, "set", "1")
	check("set", "a set")
	_, err := storetest.Throttle(ctx, st, "list", p, 1)
	t.Logf("a list: %v", err)
	_, err = storetest.Throttle(ctx, st, "bad0", p, 1)
	t.Logf("a non-decimal string: %v", err)
	_, err = storetest.Throttle(ctx, st, "bad11", p, 1)
	t.Logf("2^63: %v", err)
}

// The largest TAT is valid: refused, peeked, and a new TAT one past it is
// an overflow that writes nothing.
func TestMaxTAT(t *testing.T) {
	t.Parallel()
	for _, path := range redisstore.FunnelPaths {
		t.Run(path.Name, func(t *testing.T) {
			t.Parallel()
			testMaxTAT(t, path.Start(t))
		})
	}
}

func testMaxTAT(t *testing.T, srv *redistest.Server) {
	c := srv.Client()
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	st := redisstore.New(c, redisstore.Options{Now: clock.Now, Timeout: 10 * time.Second})
	p := mkParams(t, 9, 1, time.Second)
	c.Set(ctx, "max", "9223372036854775807", time.Hour)
	r, err := storetest.Throttle(ctx, st, "max", p, 1)
	if err != nil || r.Allowed || r.Remaining != 0 {
		t.Fatalf("%+v, %v", r, err)
	}
	// Even a peek is refused: the TAT is beyond now + tolerance (as gcra.Decide says).
	_, want, _ := gcra.Decide(storetest.Epoch, 9223372036854775807, p, 0)
	if r, err := storetest.Throttle(ctx, st, "max", p, 0); err != nil || r != funnel.ResultOf(p, want) {
		t.Fatalf("peek: %+v, %v; want %+v", r, err, want)
	}
	clock.Set(9223372036854775807 - int64(time.Second) + 1)
	if _, err := storetest.Throttle(ctx, st, "fresh", p, 1); !errors.Is(err, gcra.ErrOverflow) {
		t.Fatalf("new TAT past 2^63-1: %v", err)
	}
	if n := c.Exists(ctx, "fresh").Val(); n != 0 {
		t.Fatal("overflow wrote the key")
	}
}
