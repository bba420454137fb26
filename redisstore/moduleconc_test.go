package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel/internal/redistest"
)

// concTestState puts a concurrency key's state, drawn from r, in k on both
// sides of bothWays at nowms (ms), to expire at the same instant or never:
// absent, leases (some expired, some at now, some live) behind the marker
// of a unit delay, as conc.lua and family.lua keep them, or a sorted set
// without the marker or with it behind a lease, a string or a list (keys
// conc.lua leaves to family.lua). It returns the leases' ids.
func concTestState(ctx context.Context, c *redis.Client, r *rand.Rand, k string, nowms int64, concRead int) []string {
	c.Del(ctx, "s:"+k, "m:"+k)
	var ids []string
	var zs []redis.Z
	switch n := r.IntN(20); {
	case n < 3:
		return nil // absent
	case n == 3:
		c.Set(ctx, "s:"+k, "x", 0)
		c.Set(ctx, "m:"+k, "x", 0)
		return nil
	case n == 4:
		c.RPush(ctx, "s:"+k, "x")
		c.RPush(ctx, "m:"+k, "x")
		return nil
	case n == 5:
		zs = append(zs, redis.Z{Score: float64(nowms + 5000), Member: "l0"}) // no marker
		ids = append(ids, "l0")
	default:
		zs = append(zs, redis.Z{Score: float64(-1 - []int64{0, 0, 1000, 250_000_000, 3}[r.IntN(5)]), Member: "\x00conc"})
		if n == 6 {
			zs = append(zs, redis.Z{Score: -1e9, Member: "early"}) // a lease before the marker
		}
		for i := range r.IntN(concRead + 5) {
			id := fmt.Sprintf("l%d", i)
			d := []int64{-60000, -2000, -1, 0, 1, 500, 1000, 60000, 3_600_000}[r.IntN(9)]
			if r.IntN(4) == 0 {
				d = r.Int64N(120000) - 30000
			}
			zs = append(zs, redis.Z{Score: float64(nowms + d), Member: id})
			ids = append(ids, id)
		}
	}
	at, expires := time.Now().Add(time.Hour).UnixMilli(), r.IntN(3) > 0
	for _, side := range []string{"s:", "m:"} {
		c.ZAdd(ctx, side+k, zs...)
		if expires {
			c.PExpireAt(ctx, side+k, time.UnixMilli(at))
		}
	}
	return ids
}

// randomConc builds a call of conc.lua's arguments at now (ns), on a key
// holding ids, drawn from r: an acquire (of 0, 1 or 2 units) or a release,
// of one of ids or of another, with or without the default unit delay's
// marker or a latency, under a count, a period, and a CONCREAD of concRead.
func randomConc(r *rand.Rand, now int64, ids []string, concRead int) []string {
	slack := []int64{0, 60000, 1}[r.IntN(3)]
	args := []string{limb(now / 1e9), limb(now % 1e9), limb(slack + defaultLogPack*1e7 + int64(concRead)*1e10)}
	take := r.IntN(5) < 3
	if take {
		args = append(args, limb([]int64{0, 1, 1, 1, 1, 2}[r.IntN(6)]))
	} else {
		args = append(args, "r")
	}
	id := "new"
	if len(ids) > 0 && r.IntN(3) > 0 {
		id = ids[r.IntN(len(ids))]
	}
	if take || r.IntN(2) == 0 {
		args = append(args, limb([]int64{1, 2, 3, 5, 20}[r.IntN(5)]), limb([]int64{1000, 60000, 3}[r.IntN(3)]), id)
	} else {
		args = append(args, "0", "0", id) // a release, as Go sends it: no limit
	}
	switch x := r.IntN(4); {
	case x == 0:
	case take && x == 1:
		args = append(args, "")
	case take:
		args = append(args, limb(-1-[]int64{1000, 250_000_000}[r.IntN(2)]))
	default:
		args = append(args, limb([]int64{0, 1, 999, 250_000_000, 4_000_000_000}[r.IntN(5)]))
	}
	return args
}

// FUNNEL.CONC and conc.lua give the same replies and leave the same keys
// (members, scores and expiries), for random acquires and releases, with
// and without unit delays and latencies, on keys of up to CONCREAD leases
// (read whole) and of more (read a number at a time), some of them
// expired, at injected times; and on keys that conc.lua leaves to
// family.lua.
func TestModuleConcIsTheScript(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--loadmodule", redistest.Module(t))
	c := srv.Client()
	ctx := context.Background()
	const base int64 = 1_795_350_508_971_038_011
	counts := map[string]int{}
	for seed := uint64(1); seed <= 1500; seed++ {
		r := rand.New(rand.NewPCG(seed, 17))
		now := base + r.Int64N(int64(48*time.Hour))
		if r.IntN(4) == 0 {
			now -= now % 1e6 // at a whole ms
		}
		concRead := []int{16, 16, 2, 0, 5}[r.IntN(5)]
		ids := concTestState(ctx, c, r, "k", now/1e6, concRead)
		args := randomConc(r, now, ids, concRead)
		what := fmt.Sprintf("seed %d: args %q", seed, args)
		sv, took, serr := alike(t, ctx, c, concScript, []string{"k"}, args, what)
		sameKeys(t, ctx, c, []string{"k"}, nil, took, what)
		kind := "acquire"
		if args[3] == "r" {
			kind = "release"
		}
		switch v, _ := sv.([]any); {
		case serr != nil:
			counts["error"]++
		case len(v) == 2:
			counts["left to family.lua"]++
		case len(v) >= 4 && v[1].(int64)&1 == 1:
			counts[kind+" admitted"]++
		default:
			counts[kind+" refused"]++
		}
		if len(ids) > concRead+1 {
			counts["read a number at a time"]++
		}
	}
	enoughOfEach(t, counts, 50, "acquire admitted", "acquire refused", "release admitted", "release refused", "left to family.lua", "read a number at a time")
}

// enoughOfEach fails t unless a differential test's counts hold at least
// least of each of kinds, and no "error" (the script's), and logs them.
func enoughOfEach(t *testing.T, counts map[string]int, least int, kinds ...string) {
	t.Helper()
	for _, k := range kinds {
		if counts[k] < least {
			t.Fatalf("%v: too few of %q to compare", counts, k)
		}
	}
	if counts["error"] > 0 {
		t.Fatalf("%v: errors", counts)
	}
	t.Logf("%v", counts)
}

// FuzzModuleConcReadsAsTheScript acquires and releases a lease on a
// sorted set of any members and scores, both ways: the module must read
// it (a concurrency key's leases, or why not) and decide and write as
// conc.lua does.
func FuzzModuleConcReadsAsTheScript(f *testing.F) {
	srv := redistest.StartServer(f, "--loadmodule", redistest.Module(f))
	c := srv.Client()
	const now int64 = 1_795_350_508_971_038_011
	const nowms = now / 1e6
	f.Add("\x00conc|a|b", int64(-1), nowms+5, nowms+10, "a", int64(1), int64(2), int64(3))
	f.Add("\x00conc|a|b", int64(-1001), nowms-5, nowms, "b", int64(-1), int64(2), int64(0))
	f.Add("a|\x00conc|b", int64(-1), nowms+5, nowms+10, "a", int64(1), int64(1), int64(-1))
	f.Add("\x00conc|a|a", int64(-3), nowms, nowms+1, "new", int64(0), int64(1), int64(1000))
	f.Fuzz(func(t *testing.T, members string, s0, s1, s2 int64, id string, q, count, lat int64) {
		ctx := context.Background()
		if count < 1 || count > 50 || q < -1 || q > 3 || lat < -2 || lat > 1<<40 || (id != "" && id[0] == 0) {
			return
		}
		var zs []redis.Z
		scores := []int64{s0, s1, s2}
		for i, m := range strings.SplitN(members, "|", 8) {
			if s := scores[i%3]; s > -(1<<52) && s < 1<<52 {
				zs = append(zs, redis.Z{Score: float64(s + int64(i/3)), Member: m})
			}
		}
		for _, concRead := range []int{16, 1} {
			c.Del(ctx, "s:k", "m:k")
			if len(zs) > 0 {
				c.ZAdd(ctx, "s:k", zs...)
				c.ZAdd(ctx, "m:k", zs...)
			}
			args := []string{limb(now / 1e9), limb(now % 1e9), limb(defaultLogPack*1e7 + int64(concRead)*1e10)}
			if q < 0 {
				args = append(args, "r")
			} else {
				args = append(args, limb(q))
			}
			args = append(args, limb(count), "60000", id)
			switch {
			case lat == -2:
			case q >= 0 && lat < 0:
				args = append(args, "")
			case q >= 0:
				args = append(args, limb(-1-lat))
			default:
				args = append(args, limb(lat))
			}
			what := fmt.Sprintf("%v, args %q", zs, args)
			_, took, _ := alike(t, ctx, c, concScript, []string{"k"}, args, what)
			sameKeys(t, ctx, c, []string{"k"}, nil, took, what)
		}
	})
}

// Errors: FUNNEL.CONC refuses what it cannot decide, before it reads or
// writes a key, with an error of its own.
func TestModuleConcRefusesBadCalls(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--loadmodule", redistest.Module(t))
	c := srv.Client()
	ctx := context.Background()
	c.ZAdd(ctx, "k", redis.Z{Score: -1, Member: "\x00conc"}, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "a"})
	slack := limb(16e10)
	refusesAll(t, c, concCommand, "k", []badCall{
		{[]any{}, "ERR wrong number of arguments"},
		{[]any{"2", 1, "k", "", "", slack, 1, 10, 1000, "a"}, "ERR funnel: version of FUNNEL.CONC"},
		{[]any{"1", 0, "", "", slack, 1, 10, 1000, "a"}, "ERR funnel: the number of keys"},
		{[]any{"1", 2, "k", "k", "", "", slack, 1, 10, 1000, "a"}, "ERR funnel: a concurrency call takes one key"},
		{[]any{"1", 1, "k", "", "", slack, 1, 10, 1000}, "ERR funnel: a concurrency call takes seven or eight"},
		{[]any{"1", 1, "k", "", "", slack, 1, 10, 1000, "a", "", "x"}, "ERR funnel: a concurrency call takes seven or eight"},
		{[]any{"1", 1, "k", "", "", -1, 1, 10, 1000, "a"}, "ERR funnel: the expiries' slack"},
		{[]any{"1", 1, "k", "", "", limb(1025e10), 1, 10, 1000, "a"}, "ERR funnel: a concurrency call reads at most"},
		{[]any{"1", 1, "k", "", "", slack, -1, 10, 1000, "a"}, "ERR funnel: an acquire's quantity"},
		{[]any{"1", 1, "k", "", "", slack, "R", 10, 1000, "a"}, "ERR funnel: an acquire's quantity"},
		{[]any{"1", 1, "k", "", "", slack, 1, 0, 1000, "a"}, "ERR funnel: an acquire's count and period"},
		{[]any{"1", 1, "k", "", "", slack, 1, 10, 0, "a"}, "ERR funnel: an acquire's count and period"},
		{[]any{"1", 1, "k", "", "", slack, 1, 10, 1000, "\x00conc"}, "ERR funnel: a lease id"},
		{[]any{"1", 1, "k", "", "", slack, "r", 0, 0, "\x00conc"}, "ERR funnel: a lease id"},
		{[]any{"1", 1, "k", "", "", slack, 1, 10, 1000, "a", "1.5"}, "ERR funnel: an acquire's default unit delay"},
		{[]any{"1", 1, "k", "", "", slack, "r", 10, 1000, "a", ""}, "ERR funnel: a release's latency"},
		{[]any{"1", 1, "k", "x", "", slack, 1, 10, 1000, "a"}, "ERR funnel: now must be"},
		{[]any{"1", 1, "k", "-", time.Now().UnixMicro() - 1, slack, "r", 10, 1000, "a"}, "DEADLINE funnel:"},
	})
	keys, err := c.CommandGetKeys(ctx, concCommand, "1", 1, "a{x}", "", "", slack, 1, 10, 1000, "a").Result()
	if err != nil || !reflect.DeepEqual(keys, []string{"a{x}"}) {
		t.Fatalf("COMMAND GETKEYS: %q, %v", keys, err)
	}
}
