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

// takesCall runs one call both ways on c: takes.lua by EVALSHA on the keys
// with prefix "s:", FUNNEL.TAKES on the same keys with prefix "m:". It
// returns both replies (or errors).
func takesCall(ctx context.Context, c *redis.Client, keys, args []string) (script, module any, serr, merr error) {
	return bothWays(ctx, c, takesScript, keys, args)
}

// takesTestPeriods are the windows' periods the differential tests use,
// in ms: a second, a minute, a day, and one that divides nothing.
var takesTestPeriods = []int64{1000, 60000, 86400000, 7}

// takesTestValues are the values the differential tests put in keys at
// now (ns), by kind: the funnel's ("g": moduleTestValues), fixed windows'
// ("f") and sliding window counters' ("s") states of every window near
// now's, whose numbers pass 2^53 or not, and values that are no window's
// state in every way that fixedread.lua and slidingread.lua read them
// ("x").
func takesTestValues(now int64) map[byte][]string {
	tats := moduleTestValues(now)
	v := map[byte][]string{'g': tats[:10], 'x': tats[10:]}
	ms := now / 1e6
	for _, p := range takesTestPeriods {
		s := ms - ms%p
		for _, w := range []int64{s, s - p, s - 2*p, s + p} {
			for _, n := range []int64{0, 1, 5, 11} {
				v['f'] = append(v['f'], fmt.Sprintf("F%d:%d:%d", w, w+p, n))
				v['s'] = append(v['s'], fmt.Sprintf("S%d:%d:%d:%d", w, p, n, 3), fmt.Sprintf("S%d:%d:%d:%d", w, p, n, 0))
			}
		}
		v['f'] = append(v['f'],
			fmt.Sprintf("F%d:%d:4", s, ms), fmt.Sprintf("F%d:%d:4", s, ms+1), // ends at now, or after it
			fmt.Sprintf("F%d:%d:99999999999999999999", s, s+p),
			fmt.Sprintf("F%d:%d:9007199254740993", s, s+p), // 2^53+1, a double's 2^53
			fmt.Sprintf("F000%d:000%d:0005", s, s+p))
		v['s'] = append(v['s'],
			fmt.Sprintf("S%d:%d:99999999999999999999:1", s, p),
			fmt.Sprintf("S%d:%d:1:9007199254740993", s, p),
			fmt.Sprintf("S%d:%d:0:0", s, p))
	}
	v['x'] = append(v['x'],
		"F1:99999999999999999999999:5", "F1:2", "F1:2:3:4", "F-1:2:3", "F1:2:3 ", "F:1:2", "f1:2:3",
		"S1:2:3", "S1:2:3:4:5", "S1:99999999999999999999999999:1:1", "S"+strings.Repeat("9", 500)+":1:1:1",
		"F"+strings.Repeat("0", 500)+"1:"+strings.Repeat("9", 20)+":1", "F1:2:3\x00", "X1:2:3",
	)
	return v
}

// allValues returns the values of every kind, in the kinds' order.
func allValues(values map[byte][]string) []string {
	var all []string
	for _, kind := range []byte("gfsx") {
		all = append(all, values[kind]...)
	}
	return all
}

// randomTakes builds a call of takes.lua's arguments at now (ns) for the
// takes under keys, as Store.takes builds it: each take's algorithm,
// quantity and limit drawn from r, with limits below 2^53 as Go bounds
// them, and a calendar window that holds now, or, rarely, one that does
// not.
func randomTakes(r *rand.Rand, now int64, keys []string) []string {
	ms := now / 1e6
	args := []string{limb(now / 1e9), limb(now % 1e9), limb(60000 + r.Int64N(3))}
	for range keys {
		q := []int64{0, 1, 1, 2, 3, 7}[r.IntN(6)]
		switch alg := "gglfds"[r.IntN(6)]; alg {
		case 'g', 'l':
			interval := []int64{1e9, 1e6 + 7, 1, 36e11}[r.IntN(4)]
			tol := []int64{3e9, 5e6, 0, 1e15, 1<<53 - 1}[r.IntN(5)]
			args = append(args, string(alg), limb(q), limb(interval*q), limb(tol))
		case 'f', 's':
			count := []int64{0, 1, 5, 10}[r.IntN(4)]
			args = append(args, string(alg), limb(min(q, count+1)), limb(count), limb(takesTestPeriods[r.IntN(len(takesTestPeriods))]))
		case 'd':
			count := []int64{0, 1, 5, 10}[r.IntN(4)]
			// A day in some zone: it starts at most a day before now.
			start := ms - r.Int64N(86400000)
			if r.IntN(10) == 0 {
				start = ms + 1 + r.Int64N(1000) // not yet: the script's -1
			}
			args = append(args, "d", limb(min(q, count+1)), limb(count), limb(start), limb(start+86400000))
		}
	}
	return args
}

// takesKinds returns the kind of state (see takesTestValues) that each
// take of args (takes.lua's) reads.
func takesKinds(args []string) []byte {
	var kinds []byte
	for a := 3; a < len(args); {
		switch alg := args[a][0]; alg {
		case 'd':
			kinds = append(kinds, 'f')
			a += 5
		case 'l':
			kinds = append(kinds, 'g')
			a += 4
		default:
			kinds = append(kinds, alg)
			a += 4
		}
	}
	return kinds
}

// FUNNEL.TAKES and takes.lua give the same replies and leave the same
// keys (values and expiries), for random calls of one to six takes of
// every algorithm over keys that hold states of every kind near now's
// windows, numbers past 2^53, or values that are no state, at injected
// times.
func TestModuleTakesIsTheScript(t *testing.T) { eachEncoding(t, testModuleTakesIsTheScript) }

func testModuleTakesIsTheScript(t *testing.T, encoding string) {
	srv := redistest.StartServer(t, "--loadmodule", redistest.Module(t), "encoding", encoding)
	c := srv.Client()
	ctx := context.Background()
	const base int64 = 1_795_350_508_971_038_011
	names := []string{"a", "b", "c", "d", "e", "f"}
	decided, written := 0, 0
	for seed := uint64(1); seed <= 600; seed++ {
		r := rand.New(rand.NewPCG(seed, 11))
		now := base + r.Int64N(int64(48*time.Hour))
		perm := r.Perm(len(names))
		keys := make([]string, 1+r.IntN(3))
		if seed%4 == 0 {
			keys = make([]string, 1+r.IntN(len(names)))
		}
		for i := range keys {
			keys[i] = names[perm[i]]
		}
		args := randomTakes(r, now, keys)
		// Each key's state: mostly absent or of its take's kind, else any
		// value or a list.
		values := takesTestValues(now)
		all := allValues(values)
		kindOf := map[string]byte{}
		for j, kind := range takesKinds(args) {
			kindOf[keys[j]] = kind
		}
		before := map[string]string{}
		for _, k := range names {
			c.Del(ctx, "s:"+k, "m:"+k)
			vs := all
			if kind, ok := kindOf[k]; ok && r.IntN(10) < 8 {
				if r.IntN(4) == 0 {
					continue // absent
				}
				vs = values[kind]
			}
			switch n := r.IntN(len(vs) + 1); {
			case n < len(vs):
				ttl := time.Duration(r.IntN(2)) * time.Hour // some without expiry
				setBoth(ctx, c, k, vs[n], ttl)
				before[k] = vs[n]
			default:
				c.RPush(ctx, "s:"+k, "x")
				c.RPush(ctx, "m:"+k, "x")
			}
		}
		what := fmt.Sprintf("seed %d: keys %q args %q", seed, keys, args)
		sv, took, _ := alike(t, ctx, c, takesScript, keys, args, what)
		if v, ok := sv.([]any); ok && !(len(v) == 3 && v[2] == int64(-1)) {
			decided++
		}
		written += sameKeys(t, ctx, c, names, before, took, what)
	}
	// The draw must reach both sides of the decision, and writes.
	if decided < 300 || written < 100 {
		t.Fatalf("%d calls decided, %d keys written: too few to compare", decided, written)
	}
	t.Logf("%d calls decided, %d keys written", decided, written)
}

// FuzzModuleTakesReadsAsTheScript puts any value in a key and takes under
// each kind of limit on it, alone and beside a funnel's fresh key, both
// ways: the module must read the value (a state, or why not) and decide as
// takes.lua does, and leave the same keys.
func FuzzModuleTakesReadsAsTheScript(f *testing.F) {
	srv := redistest.StartServer(f, "--loadmodule", redistest.Module(f))
	c := srv.Client()
	const now int64 = 1_795_350_508_971_038_011
	for i, v := range allValues(takesTestValues(now)) {
		f.Add(v, uint8(i), int64(i%4), int64(1000*(i%7)+1))
	}
	f.Fuzz(func(t *testing.T, value string, kind uint8, q, limit int64) {
		ctx := context.Background()
		if q < 0 || q >= 1<<53 || limit <= 0 || limit >= 1<<53 {
			return
		}
		ms := now / 1e6
		var take []string
		switch kind % 5 {
		case 0:
			take = []string{"g", limb(q), limb(q * 1000 % (1 << 53)), limb(limit)}
		case 1:
			take = []string{"l", limb(q), "0", limb(limit)}
		case 2:
			take = []string{"f", limb(q), limb(limit % 20), limb(limit)}
		case 3:
			take = []string{"s", limb(q), limb(limit % 20), limb(limit)}
		default:
			take = []string{"d", limb(q), limb(limit % 20), limb(ms - limit%86400000), limb(ms - limit%86400000 + 86400000)}
		}
		for _, n := range []int{1, 2} {
			c.Del(ctx, "s:k", "m:k", "s:j", "m:j")
			c.Set(ctx, "s:k", value, time.Hour)
			c.Set(ctx, "m:k", value, time.Hour)
			keys := []string{"k"}
			args := append([]string{limb(now / 1e9), limb(now % 1e9), "60000"}, take...)
			if n == 2 {
				keys = append(keys, "j")
				args = append(args, "g", "1", "1000000000", "5000000000")
			}
			alike(t, ctx, c, takesScript, keys, args, fmt.Sprintf("%q, args %q", value, args))
			for _, k := range keys {
				s, serr := c.Get(ctx, "s:"+k).Result()
				m, merr := c.Get(ctx, "m:"+k).Result()
				if s != m || (serr == nil) != (merr == nil) {
					t.Fatalf("%q, args %q: %q holds %q by the script, %q by the module", value, args, k, s, m)
				}
			}
		}
	})
}

// Errors: FUNNEL.TAKES refuses what it cannot decide, before it reads or
// writes a key, with an error of its own; the time's deadline and earliest
// time are the script's.
func TestModuleTakesRefusesBadCalls(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--loadmodule", redistest.Module(t))
	c := srv.Client()
	ctx := context.Background()
	c.Set(ctx, "k", "F1:2:3", time.Hour)
	at := time.Now().UnixMicro()
	g := []any{"g", 1, 1e9, 3e9}
	call := func(head []any, takes ...any) []any { return append(head, takes...) }
	refusesAll(t, c, takesCommand, "k", []badCall{
		{[]any{}, "ERR wrong number of arguments"},
		{[]any{"1"}, "ERR wrong number of arguments"},
		{call([]any{"2", 1, "k", "", "", 0}, g...), "ERR funnel: version"},
		{call([]any{"1", 0, "", "", 0}, g...), "ERR funnel: the number of keys"},
		{[]any{"1", 128, "k"}, "ERR funnel: the number of keys"},
		{[]any{"1", 3, "k", "j"}, "ERR funnel: fewer keys"},
		{[]any{"1", 1, "k", "", ""}, "ERR wrong number of arguments"},
		{call([]any{"1", 1, "k", "", "", -1}, g...), "ERR funnel: the expiries' slack"},
		{call([]any{"1", 1, "k", "", "", "1e3"}, g...), "ERR funnel: the expiries' slack"},
		{[]any{"1", 1, "k", "", "", 0}, "ERR funnel: fewer arguments"},
		{[]any{"1", 2, "k", "j", "", "", 0, "g", 1, 1e9, 3e9}, "ERR funnel: fewer arguments"},
		{[]any{"1", 1, "k", "", "", 0, "g", 1, 1e9}, "ERR funnel: fewer arguments"},
		{[]any{"1", 1, "k", "", "", 0, "x", 1, 1e9, 3e9}, "ERR funnel: a take's algorithm"},
		{[]any{"1", 1, "k", "", "", 0, "gg", 1, 1e9, 3e9}, "ERR funnel: a take's algorithm"},
		{[]any{"1", 1, "k", "", "", 0, "g", -1, 1e9, 3e9}, "ERR funnel: a take's quantity"},
		{[]any{"1", 1, "k", "", "", 0, "g", 1 << 53, 1e9, 3e9}, "ERR funnel: a take's quantity"},
		{[]any{"1", 1, "k", "", "", 0, "g", "1.0", 1e9, 3e9}, "ERR funnel: a take's quantity"},
		{[]any{"1", 1, "k", "", "", 0, "g", 1, -1, 3e9}, "ERR funnel: a funnel's cost"},
		{[]any{"1", 1, "k", "", "", 0, "l", 1, 1e9, 1 << 53}, "ERR funnel: a funnel's cost"},
		{[]any{"1", 1, "k", "", "", 0, "f", 1, 10, 0}, "ERR funnel: a window's count"},
		{[]any{"1", 1, "k", "", "", 0, "s", 1, -1, 1000}, "ERR funnel: a window's count"},
		{[]any{"1", 1, "k", "", "", 0, "d", 1, 10, 0}, "ERR funnel: a calendar window's"},
		{[]any{"1", 1, "k", "", "", 0, "d", 1, 10, -(1 << 53), 7}, "ERR funnel: a calendar window's"},
		{[]any{"1", 1, "k", "", "", 0, "d", 1, -1, 0, 7}, "ERR funnel: a calendar window's"},
		{call([]any{"1", 1, "k", "", "", 0}, append(g, "extra")...), "ERR funnel: more arguments"},
		{call([]any{"1", 1, "k", "x", "", 0}, g...), "ERR funnel: now must be"},
		{call([]any{"1", 1, "k", "1", "1000000000", 0}, g...), "ERR funnel: now must be"},
		{call([]any{"1", 1, "k", "-", "x", 0}, g...), "ERR funnel: the deadline"},
		{call([]any{"1", 1, "k", "-", at - 1, 0}, g...), "DEADLINE funnel:"},
		{call([]any{"1", 1, "k", "~x", at + 6e7, 0}, g...), "ERR funnel: the earliest"},
		{call([]any{"1", 1, "k", fmt.Sprintf("~%d", at+6e7), at + 12e7, 0}, g...), "CLOCKSTEP funnel:"},
	})
	// Within the deadline and after the earliest time, the call decides
	// (the key holds no funnel's state: -1, as the script answers).
	v, err := c.Do(ctx, call([]any{takesCommand, "1", 1, "k", fmt.Sprintf("~%d", at-6e7), at + 6e7, 0}, g...)...).Slice()
	if err != nil || len(v) != 3 || v[2] != int64(-1) {
		t.Fatalf("%v, %v", v, err)
	}
	keys, err := c.CommandGetKeys(ctx, takesCommand, "1", 3, "a", "b{x}", "c", "", "", 0, "g", 1, 1, 1, "f", 1, 1, 1, "s", 1, 1, 1).Result()
	if err != nil || !reflect.DeepEqual(keys, []string{"a", "b{x}", "c"}) {
		t.Fatalf("COMMAND GETKEYS: %q, %v", keys, err)
	}
}

// Two calls that the random ones do not reach, both ways: a calendar day
// that starts before 1970 (a zone east of UTC, under a clock near the
// epoch: a test's), and, over maxmemory, a call whose first write is a
// DEL (a take of cost 0 on a full bucket, which Go never sends): a script
// that has written may write on, and so may the module.
func TestModuleTakesAsTheScriptAtTheEdges(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--loadmodule", redistest.Module(t))
	c := srv.Client()
	ctx := context.Background()
	same := func(name string, keys, args []string) {
		t.Helper()
		sv, mv, serr, merr := takesCall(ctx, c, keys, args)
		if serr != nil || merr != nil || !reflect.DeepEqual(sv, mv) {
			t.Fatalf("%s: script %v %v, module %v %v", name, sv, serr, mv, merr)
		}
		for _, k := range keys {
			s, _ := c.Get(ctx, "s:"+k).Result()
			m, _ := c.Get(ctx, "m:"+k).Result()
			if s != m || s == "" {
				t.Fatalf("%s: %q holds %q by the script, %q by the module", name, k, s, m)
			}
		}
	}
	same("a day from before 1970", []string{"a", "b"},
		[]string{"3600", "0", "600000", "d", "1", "10", "-50400000", "36000000", "g", "1", "1000000000", "5000000000"})
	for _, k := range []string{"s:", "m:"} {
		c.Set(ctx, k+"c", "5", 0)
	}
	c.ConfigSet(ctx, "maxmemory-policy", "noeviction")
	c.ConfigSet(ctx, "maxmemory", "1")
	defer c.ConfigSet(ctx, "maxmemory", "0")
	sv, mv, serr, merr := takesCall(ctx, c, []string{"c", "d"}, []string{"1700000000", "123456789", "0", "g", "1", "0", "1000", "f", "1", "10", "60000"})
	if serr != nil || merr != nil || !reflect.DeepEqual(sv, mv) {
		t.Fatalf("over maxmemory: script %v %v, module %v %v", sv, serr, mv, merr)
	}
	for _, k := range []string{"c", "d"} {
		s, _ := c.Get(ctx, "s:"+k).Result()
		m, _ := c.Get(ctx, "m:"+k).Result()
		if s != m || (k == "d") != (s != "") {
			t.Fatalf("over maxmemory: %q holds %q by the script, %q by the module", k, s, m)
		}
	}
}
