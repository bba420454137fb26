package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/redistest"
)

// randomWindows builds a call of window.lua's arguments at now (ns) for
// requests on keys (which may repeat), as the store's batches build it:
// each request's quantity, count and period (negative for a sliding window
// counter) drawn from r, below 2^53 as Go bounds them.
func randomWindows(r *rand.Rand, now int64, keys []string) []string {
	args := []string{limb(now / 1e9), limb(now % 1e9), limb(60000 + r.Int64N(3))}
	for range keys {
		count := []int64{0, 1, 5, 10}[r.IntN(4)]
		q := min([]int64{0, 1, 1, 2, 3, 7}[r.IntN(6)], count+1)
		p := takesTestPeriods[r.IntN(len(takesTestPeriods))]
		if r.IntN(2) == 0 {
			p = -p
		}
		args = append(args, limb(q), limb(count), limb(p))
	}
	return args
}

// FUNNEL.WINDOW and window.lua give the same replies and leave the same
// keys (values and expiries), for random batches of one to eight requests
// on fixed and sliding windows, keys that come more than once included,
// over keys that hold states of every kind near now's windows, numbers past
// 2^53, values that are no window's state, or lists, at injected times.
func TestModuleWindowIsTheScript(t *testing.T) { eachEncoding(t, testModuleWindowIsTheScript) }

func testModuleWindowIsTheScript(t *testing.T, encoding string) {
	srv := redistest.StartServer(t, "--loadmodule", redistest.Module(t), "encoding", encoding)
	c := srv.Client()
	ctx := context.Background()
	const base int64 = 1_795_350_508_971_038_011
	names := []string{"a", "b", "c", "d"}
	admitted, written := 0, 0
	for seed := uint64(1); seed <= 600; seed++ {
		r := rand.New(rand.NewPCG(seed, 13))
		now := base + r.Int64N(int64(48*time.Hour))
		keys := make([]string, 1+r.IntN(8))
		if seed%3 == 0 {
			keys = keys[:1]
		}
		for i := range keys {
			keys[i] = names[r.IntN(len(names))]
		}
		args := randomWindows(r, now, keys)
		values := takesTestValues(now)
		before := map[string]string{}
		for _, k := range names {
			c.Del(ctx, "s:"+k, "m:"+k)
			var vs []string
			switch n := r.IntN(10); {
			case n < 3:
				continue // absent
			case n < 6:
				vs = values['f']
			case n < 9:
				vs = values['s']
			default:
				vs = append(append(append(vs, values['g']...), values['x']...), "")
			}
			v := vs[r.IntN(len(vs))]
			if v == "" {
				c.RPush(ctx, "s:"+k, "x")
				c.RPush(ctx, "m:"+k, "x")
				continue
			}
			ttl := time.Duration(r.IntN(2)) * time.Hour // some without expiry
			setBoth(ctx, c, k, v, ttl)
			before[k] = v
		}
		what := fmt.Sprintf("seed %d: keys %q args %q", seed, keys, args)
		sv, took, _ := alike(t, ctx, c, windowScript, keys, args, what)
		if v, ok := sv.([]any); ok {
			for i := 2; i < len(v); i += 2 {
				if code, _ := v[i].(int64); code >= 0 && code&3 == 1 {
					admitted++
				}
			}
		}
		written += sameKeys(t, ctx, c, names, before, took, what)
	}
	if admitted < 500 || written < 300 {
		t.Fatalf("%d requests admitted, %d keys written: too few to compare", admitted, written)
	}
	t.Logf("%d requests admitted, %d keys written", admitted, written)
}

// FuzzModuleWindowReadsAsTheScript puts any value in a key and takes a
// fixed or a sliding window's units on it, alone and twice in a batch, both
// ways: the module must read the value (a state, or why not) and decide as
// window.lua does, and leave the same key.
func FuzzModuleWindowReadsAsTheScript(f *testing.F) {
	srv := redistest.StartServer(f, "--loadmodule", redistest.Module(f))
	c := srv.Client()
	const now int64 = 1_795_350_508_971_038_011
	for i, v := range allValues(takesTestValues(now)) {
		f.Add(v, int64(i%4), int64(i%12), int64(1000*(i%7)+1)*int64(1-2*(i%2)))
	}
	f.Fuzz(func(t *testing.T, value string, q, count, period int64) {
		ctx := context.Background()
		if q < 0 || q >= 1<<53 || count < 0 || count >= 1<<53 || period == 0 || period <= -(1<<53) || period >= 1<<53 {
			return
		}
		for _, n := range []int{1, 2} {
			c.Del(ctx, "s:k", "m:k")
			c.Set(ctx, "s:k", value, time.Hour)
			c.Set(ctx, "m:k", value, time.Hour)
			keys := []string{"k"}
			args := []string{limb(now / 1e9), limb(now % 1e9), "60000", limb(q), limb(count), limb(period)}
			if n == 2 {
				keys = append(keys, "k")
				args = append(args, limb(q), limb(count), limb(period))
			}
			alike(t, ctx, c, windowScript, keys, args, fmt.Sprintf("%q, args %q", value, args))
			s, serr := c.Get(ctx, "s:k").Result()
			m, merr := c.Get(ctx, "m:k").Result()
			if s != m || (serr == nil) != (merr == nil) {
				t.Fatalf("%q, args %q: the key holds %q by the script, %q by the module", value, args, s, m)
			}
		}
	})
}

// Errors: FUNNEL.WINDOW refuses what it cannot decide, before it reads or
// writes a key, with an error of its own.
func TestModuleWindowRefusesBadCalls(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--loadmodule", redistest.Module(t))
	c := srv.Client()
	ctx := context.Background()
	c.Set(ctx, "k", "F1:2:3", time.Hour)
	refusesAll(t, c, windowCommand, "k", []badCall{
		{[]any{}, "ERR wrong number of arguments"},
		{[]any{"2", 1, "k", "", "", 0, 1, 10, 1000}, "ERR funnel: version of FUNNEL.WINDOW"},
		{[]any{"1", 0, "", "", 0, 1, 10, 1000}, "ERR funnel: the number of keys"},
		{[]any{"1", 2, "k"}, "ERR funnel: fewer keys"},
		{[]any{"1", 1, "k", "", ""}, "ERR wrong number of arguments"},
		{[]any{"1", 1, "k", "", "", -1, 1, 10, 1000}, "ERR funnel: the expiries' slack"},
		{[]any{"1", 1, "k", "", "", 0, 1, 10}, "ERR funnel: a window call takes three arguments"},
		{[]any{"1", 1, "k", "", "", 0, 1, 10, 1000, 1}, "ERR funnel: a window call takes three arguments"},
		{[]any{"1", 1, "k", "", "", 0, -1, 10, 1000}, "ERR funnel: a window request's"},
		{[]any{"1", 1, "k", "", "", 0, 1, 1 << 53, 1000}, "ERR funnel: a window request's"},
		{[]any{"1", 1, "k", "", "", 0, 1, 10, 0}, "ERR funnel: a window request's"},
		{[]any{"1", 1, "k", "", "", 0, 1, 10, -(1 << 53)}, "ERR funnel: a window request's"},
		{[]any{"1", 1, "k", "", "", 0, 1, 10, "1e3"}, "ERR funnel: a window request's"},
		{[]any{"1", 1, "k", "x", "", 0, 1, 10, 1000}, "ERR funnel: now must be"},
		{[]any{"1", 1, "k", "-", time.Now().UnixMicro() - 1, 0, 1, 10, 1000}, "DEADLINE funnel:"},
	})
	keys, err := c.CommandGetKeys(ctx, windowCommand, "1", 2, "a", "b{x}", "", "", 0, 1, 1, 1, 1, 1, -1).Result()
	if err != nil || !reflect.DeepEqual(keys, []string{"a", "b{x}"}) {
		t.Fatalf("COMMAND GETKEYS: %q, %v", keys, err)
	}
}
