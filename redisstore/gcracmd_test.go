package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/gcraref"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/storetest"
)

func cmdParams(t *testing.T, burst, per int64, period float64, tokens int64) gcra.CommandParams {
	t.Helper()
	p, err := gcra.NewCommandParams(burst, per, period, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// On Redis's own clock, the store writes what Redis's GCRA command writes:
// SET key <TAT in µs> PXAT <TAT/1000>, the TAT a period's interval after
// Redis's time in whole milliseconds.
func TestGCRAWritesTheCommandsFormat(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	st := redisstore.New(c, redisstore.Options{Prefix: "gcra:", Timeout: 10 * time.Second})
	before := redisTime(t, c) / 1e6 * 1000 // µs of a whole ms
	// 1 s / 3: an interval of 333,333 µs, not a whole millisecond.
	r, err := st.GCRA(ctx, "k", cmdParams(t, 2, 3, 1, 1))
	if err != nil || r.Reply.Ints() != [5]int64{0, 3, 2, -1, 1} {
		t.Fatal(r, err)
	}
	after := redisTime(t, c) / 1e6 * 1000
	v, err := c.Get(ctx, "gcra:k").Result()
	if err != nil {
		t.Fatal(err)
	}
	tat, err := strconv.ParseInt(v, 10, 64)
	if err != nil || tat < before+333333 || tat > after+333333 || tat%1000 != 333 {
		t.Fatalf("value %q, want the ms of a time in [%d, %d] + 333,333 µs", v, before, after)
	}
	at, err := c.Do(ctx, "PEXPIRETIME", "gcra:k").Int64()
	if err != nil || at != tat/1000 {
		t.Fatalf("PEXPIRETIME %d, %v; want %d", at, err, tat/1000)
	}
}

// A key that Redis's GCRA command wrote (SET key tat PXAT tat/1000) is read
// as the command reads it.
func TestGCRAReadsTheCommandsKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	st := redisstore.New(c, redisstore.Options{Prefix: "gcra:", Timeout: 10 * time.Second})
	tat := redisTime(t, c)/1e6*1000 + 100_000_000 // 100 s after a whole ms, in µs
	if err := c.Do(ctx, "SET", "gcra:k", strconv.FormatInt(tat, 10), "PXAT", tat/1000).Err(); err != nil {
		t.Fatal(err)
	}
	// Limit 1 a minute: admitted when the TAT is at most 60 s ahead, so in
	// a little under 100 s (rounded up to 100).
	r, err := st.GCRA(ctx, "k", cmdParams(t, 0, 1, 60, 1))
	if err != nil || r.Reply.Ints() != [5]int64{1, 1, 0, 100, 100} {
		t.Fatal(r, err)
	}
	if v, _ := c.Get(ctx, "gcra:k").Result(); v != strconv.FormatInt(tat, 10) {
		t.Fatalf("a limited call changed the key: %q", v)
	}
}

// A key the command cannot read answers Redis's error and stays as it is.
func TestGCRAKeysItCannotRead(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	st := redisstore.New(c, redisstore.Options{Prefix: "gcra:", Timeout: 10 * time.Second})
	p := cmdParams(t, 5, 10, 60, 1)
	for _, tc := range []struct {
		value string
		want  error
	}{
		{"abc", gcra.ErrCommandInvalidKey},
		{"", gcra.ErrCommandInvalidKey},
		{"+5", gcra.ErrCommandInvalidKey},
		{"05", gcra.ErrCommandInvalidKey},
		{" 5", gcra.ErrCommandInvalidKey},
		{"-0", gcra.ErrCommandInvalidKey},
		{"1.5", gcra.ErrCommandInvalidKey},
		{"9223372036854775808", gcra.ErrCommandInvalidKey},
		{"-9223372036854775809", gcra.ErrCommandInvalidKey},
		{"123456789012345678901", gcra.ErrCommandInvalidKey},
		{"0", gcra.ErrCommandNegativeTime},
		{"-5", gcra.ErrCommandNegativeTime},
		{"-9223372036854775808", gcra.ErrCommandNegativeTime},
	} {
		if err := c.Set(ctx, "gcra:k", tc.value, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.GCRA(ctx, "k", p); !errors.Is(err, tc.want) {
			t.Errorf("%q: %v, want %v", tc.value, err, tc.want)
		}
		if v, _ := c.Get(ctx, "gcra:k").Result(); v != tc.value {
			t.Errorf("%q became %q", tc.value, v)
		}
	}
	// The command reads the key before it checks its parameters' overflow.
	over := cmdParams(t, 9223372036854775807, 1, 1, 1)
	if _, err := st.GCRA(ctx, "k", over); !errors.Is(err, gcra.ErrCommandNegativeTime) {
		t.Errorf("overflowing parameters on a bad key: %v", err)
	}
	if err := c.RPush(ctx, "gcra:l", "x").Err(); err != nil {
		t.Fatal(err)
	}
	for _, q := range []gcra.CommandParams{p, over} {
		if _, err := st.GCRA(ctx, "l", q); !errors.Is(err, funnel.ErrWrongType) {
			t.Errorf("a list: %v", err)
		}
	}
	if _, err := st.GCRA(ctx, "fresh", over); !errors.Is(err, gcra.ErrCommandBurstOverflow) {
		t.Errorf("overflowing parameters on a fresh key: %v", err)
	}
}

// A key set by hand without an expiry, with a TAT in the past, is read as
// the command reads it: present, its TTL negative (reset at or below 0,
// remaining beyond the limit when limited).
func TestGCRAPastTATWithoutExpiry(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	clock := storetest.NewClock(storetest.GCRAEpoch + 123_456)
	st := redisstore.New(c, redisstore.Options{Prefix: "gcra:", Timeout: 10 * time.Second, Now: clock.Now})
	model := gcraref.New()
	for _, value := range []string{"5", strconv.FormatInt(storetest.GCRAEpoch/1000-2_500_000, 10)} {
		for _, call := range []storetest.GCRACall{
			{Key: "k", MaxBurst: 2, PerPeriod: 1, Period: 1, Tokens: 4},
			{Key: "k", MaxBurst: 2, PerPeriod: 1, Period: 1},
		} {
			if err := c.Set(ctx, "gcra:k", value, 0).Err(); err != nil {
				t.Fatal(err)
			}
			model.Keys["k"] = gcraref.Value{Str: value}
			want, wantErr := model.Call(clock.Now()/1e6, call.Args()...)
			got, gotErr := storetest.CallGCRA(st, call, clock.Now())
			if got != want || gotErr != wantErr {
				t.Errorf("%q, %v: got %v %q, the model answers %v %q", value, call.Args(), got, gotErr, want, wantErr)
			}
		}
	}
}

// TTL and Reset (PTTL, EXISTS, DEL over RESP) see a GCRA key's state: until
// the end of its TAT's millisecond, as the memory store counts it.
func TestGCRAKeyTTLAndReset(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	clock := storetest.NewClock(storetest.GCRAEpoch)
	st := redisstore.New(c, redisstore.Options{Prefix: "gcra:", Timeout: 10 * time.Second, Now: clock.Now})
	if _, err := st.GCRA(ctx, "k", cmdParams(t, 5, 10, 60, 1)); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Second + 500*time.Microsecond)
	if d, ok, err := st.TTL(ctx, "k"); err != nil || !ok || d != 5*time.Second-500*time.Microsecond+time.Millisecond {
		t.Fatalf("TTL %v %v %v", d, ok, err)
	}
	if ok, err := st.Reset(ctx, "k"); err != nil || !ok {
		t.Fatalf("Reset %v %v", ok, err)
	}
	if n, _ := c.Exists(ctx, "gcra:k").Result(); n != 0 {
		t.Fatal("Reset left the key")
	}
	if _, ok, _ := st.TTL(ctx, "k"); ok {
		t.Fatal("TTL of a deleted key")
	}
}

// BenchmarkGCRARedis is one GCRA call at a time on one hot key that every
// call is admitted on, through the Redis store: it reports the CPU Redis
// spends in the script per call (INFO commandstats), beside the funnel's
// own script (gcra.lua) on the same key count.
func BenchmarkGCRARedis(b *testing.B) {
	srv := redistest.StartServer(b)
	c := srv.Client()
	ctx := context.Background()
	st := redisstore.New(c, redisstore.Options{Timeout: 10 * time.Second})
	p, err := gcra.NewCommandParams(1000000, 1000000, 1, 1)
	if err != nil {
		b.Fatal(err)
	}
	limit := funnel.PerSecond(1000000).WithBurst(1000000)
	lim := funnel.New(st)
	for _, bc := range []struct {
		name string
		call func() error
	}{
		{"gcracmd", func() error { _, err := st.GCRA(ctx, "hot", p); return err }},
		{"throttle", func() error { _, err := lim.Allow(ctx, "hot2", limit); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for range 100 {
				if err := bc.call(); err != nil {
					b.Fatal(err)
				}
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.call(); err != nil {
					b.Fatal(err)
				}
			}
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
		})
	}
}
