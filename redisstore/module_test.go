package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
)

// The values the differential tests put in keys: TATs around now and
// int64's end, and values that are not TATs in every way tat.lua reads.
func moduleTestValues(now int64) []string {
	return []string{
		strconv.FormatInt(now, 10),
		strconv.FormatInt(now-1, 10),
		strconv.FormatInt(now+1, 10),
		strconv.FormatInt(now+int64(time.Second), 10),
		strconv.FormatInt(now+int64(200*24*time.Hour), 10), // d > 2^50 ns
		// d's seconds at the edge of the answer in one integer
		strconv.FormatInt(now+1125899e9-1, 10),
		strconv.FormatInt(now+1125899e9, 10),
		strconv.FormatInt(now-int64(time.Hour), 10),
		"9223372036854775807", "9223372036854774807", "9223372036854775808",
		"0", "00", "+0", "+", "", "1", "+1795350508971038011", "0001795350508971038011",
		"00000000000000000000000000000000000000001", "12345678901234567890", "99999999999999999999",
		"-1", "-0", " 1", "1 ", "1e18", "0x10", "1.5", "abc", "\xff", "1795350508971038011\x00",
	}
}

// moduleCall runs one call both ways on c: gcra.lua by EVALSHA on the keys
// with prefix "s:", FUNNEL.GCRA on the same keys with prefix "m:". It
// returns both replies (or errors).
func moduleCall(ctx context.Context, c *redis.Client, keys, args []string) (script, module any, serr, merr error) {
	return bothWays(ctx, c, gcraLua, keys, args)
}

// bothWays runs one call of sc both ways on c: the script by EVALSHA on the
// keys with prefix "s:", its module command on the same keys with prefix
// "m:". It returns both replies (or errors).
func bothWays(ctx context.Context, c *redis.Client, sc *script, keys, args []string) (script, module any, serr, merr error) {
	sk, mk := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		sk[i], mk[i] = "s:"+k, "m:"+k
	}
	argv := make([]any, len(args))
	for i, a := range args {
		argv[i] = a
	}
	script, serr = sc.goRedis.Run(ctx, c, sk, argv...).Result()
	cmd := []any{sc.module, moduleVersion, len(mk)}
	for _, k := range mk {
		cmd = append(cmd, k)
	}
	module, merr = c.Do(ctx, append(cmd, argv...)...).Result()
	return
}

// alike runs one call of sc both ways on c (see bothWays) and fails t,
// naming the call by what, unless both sides answer the same reply, or the
// same error. It returns the script's reply and error, and the time the
// two sides took (see sameKeys).
func alike(t testing.TB, ctx context.Context, c *redis.Client, sc *script, keys, args []string, what string) (reply any, took time.Duration, err error) {
	t.Helper()
	start := time.Now()
	sv, mv, serr, merr := bothWays(ctx, c, sc, keys, args)
	took = time.Since(start)
	if !sameError(serr, merr) || !reflect.DeepEqual(sv, mv) {
		t.Fatalf("%s:\nscript %v %v\nmodule %v %v", what, sv, serr, mv, merr)
	}
	return sv, took, serr
}

// setBoth sets key k to v on both sides of bothWays ("s:" and "m:"), to
// expire at the same instant after ttl, or never when ttl is 0.
func setBoth(ctx context.Context, c *redis.Client, k, v string, ttl time.Duration) {
	if ttl == 0 {
		c.Set(ctx, "s:"+k, v, 0)
		c.Set(ctx, "m:"+k, v, 0)
		return
	}
	at := time.Now().Add(ttl).UnixMilli()
	c.Do(ctx, "SET", "s:"+k, v, "PXAT", at)
	c.Do(ctx, "SET", "m:"+k, v, "PXAT", at)
}

// held is what a key holds, as sameKeys reads it: its type, its value
// (a string's, or a sorted set's members and scores), and its absolute
// expiry (PEXPIRETIME: Unix ms as a Duration since the epoch, or Redis's
// negative answers).
type held struct {
	typ, value string
	members    []redis.Z
	expires    time.Duration
}

// readBoth reads what key k holds on both sides of bothWays ("s:" and
// "m:") in one transaction, so that Redis expires neither side between
// the reads, and returns it with the time the transaction had answered
// by.
func readBoth(ctx context.Context, c *redis.Client, k string) (s, m held, by time.Time) {
	var typ [2]*redis.StatusCmd
	var val [2]*redis.StringCmd
	var zs [2]*redis.ZSliceCmd
	var at [2]*redis.DurationCmd
	// (GET of a sorted set and ZRANGE of a string answer WRONGTYPE, which
	// leaves their value empty.)
	c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, side := range []string{"s:", "m:"} {
			typ[i], val[i] = p.Type(ctx, side+k), p.Get(ctx, side+k)
			zs[i], at[i] = p.ZRangeWithScores(ctx, side+k, 0, -1), p.PExpireTime(ctx, side+k)
		}
		return nil
	})
	by = time.Now()
	h := func(i int) held { return held{typ[i].Val(), val[i].Val(), zs[i].Val(), at[i].Val()} }
	return h(0), h(1), by
}

// sameKeys fails t (what names the call) unless each of names holds the
// same on both sides of bothWays after a call whose two sides took took:
// its type, its value (a string's or a sorted set's), and its expiry,
// neither side expiring, or both at most took plus 2 ms apart (each side
// writes from its own start). A key written to expire a moment after the
// call may be gone on the script's side, the first, when it is read: it
// is alike if the module's is due no later than took plus 2 ms after the
// read. sameKeys returns how many hold a string other than before's (the
// values set before the call; absent ones are not in it).
func sameKeys(t *testing.T, ctx context.Context, c *redis.Client, names []string, before map[string]string, took time.Duration, what string) (written int) {
	t.Helper()
	for _, k := range names {
		s, m, by := readBoth(ctx, c, k)
		if s.typ == "none" && m.typ != "none" && m.expires >= 0 && m.expires <= time.Duration(by.UnixNano())+took+2*time.Millisecond {
			continue
		}
		if s.typ != m.typ || s.value != m.value || !reflect.DeepEqual(s.members, m.members) {
			t.Fatalf("%s: %q holds %s %q %v by the script, %s %q %v by the module", what, k, s.typ, s.value, s.members, m.typ, m.value, m.members)
		}
		if (s.expires < 0) != (m.expires < 0) || (s.expires-m.expires).Abs() > took+2*time.Millisecond {
			t.Fatalf("%s: %q expires at %v by the script, %v by the module (the calls took %v)", what, k, s.expires, m.expires, took)
		}
		if was, ok := before[k]; s.typ == "string" && (!ok || was != s.value) {
			written++
		}
	}
	return written
}

// sameError reports whether a script's error and the module's are the
// same: both nil, or both the same error up to the script's own words
// (the prefix and the kind of value a WRONGTYPE names).
func sameError(serr, merr error) bool {
	if (serr == nil) != (merr == nil) {
		return false
	}
	if serr == nil {
		return true
	}
	s, m := serr.Error(), merr.Error()
	if i := strings.Index(s, " script: "); i >= 0 {
		s = s[:i]
	}
	return strings.Fields(s)[0] == strings.Fields(m)[0] && (!strings.HasPrefix(s, "WRONGTYPE") || s == m)
}

// badCall is a call of one of the module's commands that it must refuse:
// its arguments after the command's name, and how its error starts.
type badCall struct {
	args []any
	want string
}

// refusesAll fails t unless each of calls of cmd on c answers an error
// that starts as it wants and leaves the key k as it was (its DUMP).
func refusesAll(t *testing.T, c *redis.Client, cmd, k string, calls []badCall) {
	t.Helper()
	ctx := context.Background()
	dump := c.Dump(ctx, k).Val()
	for _, tc := range calls {
		err := c.Do(ctx, append([]any{cmd}, tc.args...)...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %s…", tc.args, err, tc.want)
		}
		if d := c.Dump(ctx, k).Val(); d != dump {
			t.Fatalf("%v changed the key", tc.args)
		}
	}
}

// eachEncoding runs test, in parallel, for the module loaded with each
// encoding of its values.
func eachEncoding(t *testing.T, test func(t *testing.T, encoding string)) {
	t.Parallel()
	for _, encoding := range []string{"int", "raw"} {
		t.Run(encoding, func(t *testing.T) {
			t.Parallel()
			test(t, encoding)
		})
	}
}

// FUNNEL.GCRA and gcra.lua give the same replies and leave the same keys
// (values and expiries), for random batches of every form the store sends
// ("u", "t" with keys that come more than once, one key) over keys that
// hold TATs near the edges or values that are not TATs, at injected times.
func TestModuleIsTheScript(t *testing.T) { eachEncoding(t, testModuleIsTheScript) }

func testModuleIsTheScript(t *testing.T, encoding string) {
	srv := redistest.StartServer(t, "--loadmodule", redistest.Module(t), "encoding", encoding)
	c := srv.Client()
	ctx := context.Background()
	const base int64 = 1_795_350_508_971_038_011
	limits := []struct{ cost, tol int64 }{
		{int64(time.Second), 3 * int64(time.Second)},
		{1, 1},
		{int64(time.Millisecond) + 7, 5 * int64(time.Millisecond)},
		{int64(365 * 24 * time.Hour), 250 * int64(365*24*time.Hour)},
		{0, int64(time.Second)},
		{-int64(time.Second) - 3, 2 * int64(time.Second)}, // a refund
		{5 * int64(time.Second), int64(time.Second)},      // more than the tolerance
		{math.MaxInt64, math.MaxInt64},
		{math.MinInt64 + 1, 0},
	}
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	compared := 0
	for seed := uint64(1); seed <= 400; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		now := base + r.Int64N(int64(time.Hour))
		if seed%50 == 0 {
			now = math.MaxInt64 - r.Int64N(int64(time.Hour))
		}
		values := moduleTestValues(now)
		// The keys' state, the same on both sides.
		for _, k := range names {
			c.Del(ctx, "s:"+k, "m:"+k)
			switch n := r.IntN(len(values) + 3); {
			case n < len(values):
				ttl := time.Duration(r.IntN(2)) * time.Hour // some without expiry
				setBoth(ctx, c, k, values[n], ttl)
			case n == len(values):
				c.RPush(ctx, "s:"+k, "x")
				c.RPush(ctx, "m:"+k, "x")
			}
		}
		// A batch of requests, as the store builds it.
		n := 1 + r.IntN(12)
		if seed%5 == 0 {
			n = 1
		}
		batch := make([]*call, n)
		uniform := r.IntN(3) == 0
		l0 := limits[r.IntN(len(limits))]
		perm := r.Perm(len(names))
		for i := range batch {
			l := limits[r.IntN(len(limits))]
			key := names[r.IntN(len(names))]
			if uniform {
				l, key = l0, names[perm[i%len(names)]]
			}
			batch[i] = &call{req: req{key: key, cost: l.cost, tol: l.tol}}
		}
		// Expiries are at least a minute away: none passes while the test
		// compares them.
		args := []string{"t", limb(now / 1e9), limb(now % 1e9), limb(60000 + r.Int64N(3))}
		keys := make([]string, n)
		if n == 1 {
			args = appendLimbs(appendLimbs(append(args, "1536"), batch[0].cost), batch[0].tol)
			keys[0] = batch[0].key
		} else {
			keys, args = throttleArgs(batch, keys, args)
		}
		start := time.Now()
		sv, mv, serr, merr := moduleCall(ctx, c, keys, args)
		took := time.Since(start)
		if !sameError(serr, merr) || !reflect.DeepEqual(sv, mv) {
			t.Fatalf("seed %d: keys %q args %q:\nscript %v %v\nmodule %v %v", seed, keys, args, sv, serr, mv, merr)
		}
		sameKeys(t, ctx, c, names, nil, took, fmt.Sprintf("seed %d: keys %q args %q", seed, keys, args))
		compared++
	}
	t.Logf("%d calls compared", compared)
}

// Errors: the module refuses what it cannot decide before it reads or
// writes a key, with an error of its own; the time's deadline and earliest
// time are the script's.
func TestModuleRefusesBadCalls(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--loadmodule", redistest.Module(t))
	c := srv.Client()
	ctx := context.Background()
	c.Set(ctx, "k", "1795350508971038011", time.Hour)
	at := time.Now().UnixMicro()
	refusesAll(t, c, moduleCommand, "k", []badCall{
		{[]any{}, "ERR wrong number of arguments"},
		{[]any{"1"}, "ERR wrong number of arguments"},
		{[]any{"2", 1, "k", "t", "", "", 0, 1536, 1, 0, 2, 0}, "ERR funnel: version"},
		{[]any{"", 1, "k", "t", "", "", 0, 1536, 1, 0, 2, 0}, "ERR funnel: version"},
		{[]any{"1", 0, "t", "", "", 0}, "ERR funnel: the number of keys"},
		{[]any{"1", 128, "k"}, "ERR funnel: the number of keys"},
		{[]any{"1", "x", "k"}, "ERR funnel: the number of keys"},
		{[]any{"1", 3, "k", "t"}, "ERR funnel: fewer keys"},
		{[]any{"1", 1, "k", "t", "", ""}, "ERR wrong number of arguments"},
		{[]any{"1", 1, "k", "x", "", "", 0, 1536, 1, 0, 2, 0}, "ERR funnel: the first argument"},
		{[]any{"1", 1, "k", "t", "", "", -1, 1536, 1, 0, 2, 0}, "ERR funnel: the expiries' slack"},
		{[]any{"1", 1, "k", "t", "", "", "x", 1536, 1, 0, 2, 0}, "ERR funnel: the expiries' slack"},
		{[]any{"1", 1, "k", "t", "", "", 0, 1537, 1, 0, 2, 0}, "ERR funnel: a request's argument"},
		{[]any{"1", 1, "k", "t", "", "", 0, 1536, 1, 0, 2}, "ERR funnel: a request's argument"},
		{[]any{"1", 1, "k", "t", "", "", 0, 1536, 1, 1e9, 2, 0}, "ERR funnel: a request's argument"},
		{[]any{"1", 1, "k", "t", "", "", 0, 1536, "1.5", 0, 2, 0}, "ERR funnel: a request's argument"},
		{[]any{"1", 1, "k", "t", "", "", 0, 1536, "99999999999999999999", 0, 2, 0}, "ERR funnel: a request's argument"},
		{[]any{"1", 2, "k", "k", "u", "", "", 0, 1, 0}, "ERR funnel: a u call's limit"},
		{[]any{"1", 2, "k", "j", "t", "", "", 0, "", "", 1, 0, 2, 0}, "ERR funnel: the first request"},
		{[]any{"1", 2, "k", "j", "t", "", "", 0, 7*256 + 2, "", 1, 0, 2, 0}, "ERR funnel: a request's argument names"},
		{[]any{"1", 2, "k", "j", "t", "", "", 0, 7*256 + 128, "", 1, 0, 2, 0}, "ERR funnel: a request's argument names"},
		{[]any{"1", 2, "k", "j", "t", "", "", 0, 5 * 256, "", 1, 0, 2, 0}, "ERR funnel: a request's argument must name"},
		{[]any{"1", 1, "k", "t", "x", "", 0, 1536, 1, 0, 2, 0}, "ERR funnel: now must be"},
		{[]any{"1", 1, "k", "t", "1", "1000000000", 0, 1536, 1, 0, 2, 0}, "ERR funnel: now must be"},
		{[]any{"1", 1, "k", "t", "-", "x", 0, 1536, 1, 0, 2, 0}, "ERR funnel: the deadline"},
		{[]any{"1", 1, "k", "t", "-", at - 1, 0, 1536, 1, 0, 2, 0}, "DEADLINE funnel:"},
		{[]any{"1", 1, "k", "t", "~x", at + 6e7, 0, 1536, 1, 0, 2, 0}, "ERR funnel: the earliest"},
		{[]any{"1", 1, "k", "t", fmt.Sprintf("~%d", at+6e7), at + 12e7, 0, 1536, 1, 0, 2, 0}, "CLOCKSTEP funnel:"},
	})
	// A module loaded with other arguments does not load.
	out, code := redistest.RunTool(t, "redis-server", "", 10*time.Second, nil, "--port", "0", "--unixsocket", filepath.Join(t.TempDir(), "redis.sock"), "--save", "", "--loadmodule", redistest.Module(t), "encoding", "utf8")
	if code == 0 || !strings.Contains(out, "funnel: the module takes no arguments, or: encoding int|raw") {
		t.Errorf("redis-server with the module and encoding utf8: exit %d\n%s", code, out)
	}
	// Within the deadline and after the earliest time, the call decides.
	err := c.Do(ctx, moduleCommand, "1", 1, "k", "t", fmt.Sprintf("~%d", at-6e7), at+6e7, 0, 1536, 1, 0, 2, 0).Err()
	if err != nil {
		t.Fatal(err)
	}
	// COMMAND GETKEYS names every key, so that a cluster routes and checks
	// them all.
	keys, err := c.CommandGetKeys(ctx, moduleCommand, "1", 3, "a", "b{x}", "c", "u", "", "", 0, 1, 0, 2, 0).Result()
	if err != nil || !reflect.DeepEqual(keys, []string{"a", "b{x}", "c"}) {
		t.Fatalf("COMMAND GETKEYS: %q, %v", keys, err)
	}
}

// A store that finds no module uses the script; one that finds a module
// of another version too, and says so once; both try again after a while.
func TestModuleMissing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		warn bool // a store that meets it says so, once
	}{
		{"unknown", errors.New("ERR unknown command 'FUNNEL.GCRA', with args beginning with: '1' '1'"), false},
		{"version", errors.New("ERR funnel: version of FUNNEL.GCRA's arguments unknown to this module"), true},
		{"client", errNoCommand, false},
		{"proxy", errors.New("unsupported command 'FUNNEL.GCRA'"), false},
		// rueidis's errors, without "ERR "
		{"rueidis unknown", errors.New("unknown command 'FUNNEL.GCRA', with args beginning with: '1'"), false},
		{"rueidis version", errors.New("funnel: version of FUNNEL.GCRA's arguments unknown to this module"), true},
		{"ACL", errors.New("NOPERM this user has no permissions to run the 'funnel.gcra' command"), true},
		{"ACL takes", errors.New("NOPERM this user has no permissions to run the 'funnel.takes' command"), true},
	} {
		if !moduleMissing(tc.err) {
			t.Errorf("%s: not missing", tc.name)
		}
		var logs logCapture
		s := newStore(goRedisRunner{}, Options{Logger: logs.logger()})
		s.moduleAbsent(gcraLua, tc.err)
		s.moduleAbsent(gcraLua, tc.err)
		if n := strings.Count(logs.String(), "module is not usable"); n != map[bool]int{false: 0, true: 1}[tc.warn] ||
			strings.Count(logs.String(), "level=INFO") != map[bool]int{false: 1, true: 0}[tc.warn] {
			t.Errorf("%s: %d warnings:\n%s", tc.name, n, logs.String())
		}
	}
	for _, err := range []error{nil, errors.New("WRONGTYPE the value is not a string"), errLate, context.DeadlineExceeded,
		errors.New("NOPERM this user has no permissions to run the 'set' command"), errors.New("OOM command not allowed when used memory > 'maxmemory'.")} {
		if moduleMissing(err) {
			t.Errorf("%v: missing", err)
		}
	}
	try := func(s *Store, sc *script) bool {
		ok, _ := s.useModule(sc)
		return ok
	}
	s := newStore(goRedisRunner{}, Options{})
	if !try(s, gcraLua) || !try(s, takesScript) || !try(s, windowScript) || !try(s, concScript) || !try(s, logScript) || try(s, familyScript) {
		t.Fatal("a new store does not try the module for gcra.lua, takes.lua, window.lua, conc.lua and log.lua only")
	}
	s.moduleAbsent(gcraLua, errNoModule)
	if try(s, gcraLua) {
		t.Fatal("a store that found no module tries it again at once")
	}
	if !try(s, takesScript) {
		t.Fatal("a store that found no FUNNEL.GCRA does not try FUNNEL.TAKES (a module of an older release may lack one, not the other)")
	}
	// The retry is due: one call tries the module, the others keep to the
	// script until it has its answer.
	s.module.command(gcraLua).absentUntil.Store(time.Now().Add(-time.Second).UnixNano())
	ok, seen := s.useModule(gcraLua)
	if !ok || try(s, gcraLua) {
		t.Fatal("a store does not try the module again, once, after moduleRetry")
	}
	// A call made before a miss, answered after it, leaves the store on the
	// script; the retry's answer ends it.
	s.moduleAnswered(gcraLua, 0)
	if try(s, gcraLua) || s.module.command(gcraLua).present.Load() {
		t.Fatal("an answer to an earlier call sent the store back to the module")
	}
	s.moduleAnswered(gcraLua, seen)
	if !try(s, gcraLua) || !s.module.command(gcraLua).present.Load() {
		t.Fatal("the retry's answer did not send the store back to the module")
	}
	// A retry that another call's miss overtook changes nothing.
	s.moduleAbsent(gcraLua, errNoModule)
	s.module.command(gcraLua).absentUntil.Store(time.Now().Add(-time.Second).UnixNano())
	_, seen = s.useModule(gcraLua)
	s.moduleAbsent(gcraLua, errNoModule)
	s.moduleAnswered(gcraLua, seen)
	if try(s, gcraLua) {
		t.Fatal("an overtaken retry's answer sent the store back to the module")
	}
	// A client that sends scripts only is said once, whatever the command.
	var clientLogs logCapture
	s = newStore(goRedisRunner{}, Options{Logger: clientLogs.logger()})
	for _, sc := range []*script{gcraLua, takesScript, windowScript} {
		s.moduleAbsent(sc, errNoCommand)
	}
	if n := strings.Count(clientLogs.String(), "level=INFO"); n != 1 {
		t.Fatalf("a client that sends scripts only, said %d times:\n%s", n, clientLogs.String())
	}
	// A module of an older release, with FUNNEL.GCRA but no FUNNEL.TAKES:
	// the store keeps to the module for the one, the script for the other,
	// and says so once, as that.
	var logs logCapture
	s = newStore(goRedisRunner{}, Options{Logger: logs.logger()})
	s.moduleAnswered(gcraLua, 0)
	noTakes := errors.New("ERR unknown command 'FUNNEL.TAKES', with args beginning with: '1' '2'")
	s.moduleAbsent(takesScript, noTakes)
	s.moduleAbsent(takesScript, noTakes)
	if out := logs.String(); !try(s, gcraLua) || try(s, takesScript) || strings.Count(out, "Redis has no FUNNEL.TAKES") != 1 ||
		strings.Contains(out, "level=WARN") {
		t.Fatalf("a module without FUNNEL.TAKES:\n%s", out)
	}
	if s := newStore(goRedisRunner{}, Options{ScriptOnly: true}); try(s, gcraLua) {
		t.Fatal("ScriptOnly: the store tries the module")
	}
}

// FuzzModuleReadsAsTheScript puts any value in a key and decides it, alone
// and in a batch beside itself, both ways: the module must read the value
// (a TAT or why not) and decide as gcra.lua does, and leave the same key.
func FuzzModuleReadsAsTheScript(f *testing.F) {
	srv := redistest.StartServer(f, "--loadmodule", redistest.Module(f))
	c := srv.Client()
	const now int64 = 1_795_350_508_971_038_011
	for i, v := range moduleTestValues(now) {
		f.Add(v, int64(i)*int64(time.Second)-3, int64(i%5)*int64(time.Second))
	}
	f.Fuzz(func(t *testing.T, value string, cost, tol int64) {
		ctx := context.Background()
		for _, n := range []int{1, 2} {
			c.Del(ctx, "s:k", "m:k")
			c.Set(ctx, "s:k", value, time.Hour)
			c.Set(ctx, "m:k", value, time.Hour)
			args := []string{"t", limb(now / 1e9), limb(now % 1e9), "60000"}
			keys := []string{"k"}
			if n == 1 {
				args = appendLimbs(appendLimbs(append(args, "1536"), cost), tol)
			} else {
				batch := []*call{{req: req{key: "k", cost: cost, tol: tol}}, {req: req{key: "k", cost: cost, tol: tol}}}
				keys, args = throttleArgs(batch, make([]string, 2), args)
			}
			sv, mv, serr, merr := moduleCall(ctx, c, keys, args)
			if !sameError(serr, merr) || !reflect.DeepEqual(sv, mv) {
				t.Fatalf("%q, %d requests: script %v %v, module %v %v", value, n, sv, serr, mv, merr)
			}
			s, serr := c.Get(ctx, "s:k").Result()
			m, merr := c.Get(ctx, "m:k").Result()
			if s != m || (serr == nil) != (merr == nil) {
				t.Fatalf("%q, %d requests: the key holds %q by the script, %q by the module", value, n, s, m)
			}
		}
	})
}

// The module's writes reach a replica (which needs no module) and the AOF
// as the same values with the same absolute expiries, and fire the same
// keyspace events as the script's, in either encoding.
func TestModuleReplicatesAsTheScript(t *testing.T) { eachEncoding(t, testModuleReplicatesAsTheScript) }

func testModuleReplicatesAsTheScript(t *testing.T, encoding string) {
	master := redistest.StartServer(t, "--loadmodule", redistest.Module(t), "encoding", encoding,
		"--appendonly", "yes", "--notify-keyspace-events", "KEA")
	replica := redistest.StartReplica(t, master)
	c := master.Client()
	ctx := context.Background()
	sub := c.PSubscribe(ctx, "__keyevent@0__:*")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	p := mustNewParams(t, 2, 1, time.Hour)
	events := map[string][]string{}
	for _, path := range FunnelPaths {
		prefix := path.Name[:1] + ":"
		s := New(c, Options{Prefix: prefix, Timeout: 10 * time.Second, ScriptOnly: !path.Module})
		for _, q := range []int64{1, 1, 1, 5, -1, -9} { // allowed, refused, refunds to an empty bucket
			for _, key := range []string{"a", "b"} {
				if _, err := s.throttle(ctx, key, p, q, -1); err != nil {
					t.Fatal(err)
				}
			}
		}
		// a batch of keys that come once and more than once
		batch := []*call{}
		for _, key := range []string{"a", "c", "a", "d", "c"} {
			batch = append(batch, &call{req: req{key: prefix + key, cost: p.Interval, tol: p.Tolerance}, queued: time.Now(), done: make(chan struct{})})
		}
		s.send(batch)
		for _, cl := range batch {
			if <-cl.done; cl.err != nil {
				t.Fatal(cl.err)
			}
		}
		// takes under several limits at once (takes.lua, FUNNEL.TAKES):
		// admitted, then refused by the fixed window
		ops := []funnel.Op{
			{Kind: funnel.OpTake, Key: "w", N: 1, Limit: moduleCheck(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1, Period: time.Hour})},
			{Kind: funnel.OpTake, Key: "x", N: 1, Limit: moduleCheck(t, funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 5, Period: time.Hour})},
			{Kind: funnel.OpTake, Key: "y", N: 1, Limit: moduleCheck(t, funnel.PerHour(5))},
		}
		for range 2 {
			if err := s.Do(ctx, ops, make([]funnel.Result, len(ops))); err != nil {
				t.Fatal(err)
			}
			// and a window's alone (window.lua, FUNNEL.WINDOW)
			if err := s.Do(ctx, ops[1:2], make([]funnel.Result, 1)); err != nil {
				t.Fatal(err)
			}
		}
		// a concurrency limit's acquires and releases (conc.lua,
		// FUNNEL.CONC): with a unit delay, admitted twice, refused, then
		// released with a latency, and a lease not held released
		conc := moduleCheck(t, funnel.Limit{Algorithm: funnel.Concurrency, Count: 2, Period: time.Hour, UnitDelay: time.Millisecond})
		for _, op := range []funnel.Op{
			{Kind: funnel.OpTake, Key: "z", N: 1, Lease: "l1", Limit: conc},
			{Kind: funnel.OpTake, Key: "z", N: 1, Lease: "l2", Limit: conc},
			{Kind: funnel.OpTake, Key: "z", N: 1, Lease: "l3", Limit: conc},
			{Kind: funnel.OpRefund, Key: "z", N: 1, Lease: "l1", Latency: 3 * time.Millisecond, Limit: conc},
			{Kind: funnel.OpRefund, Key: "z", N: 1, Lease: "l9", Limit: conc},
		} {
			if err := s.Do(ctx, []funnel.Op{op}, make([]funnel.Result, 1)); err != nil {
				t.Fatal(err)
			}
		}
		conc.Window.Count = 5
		if err := s.Do(ctx, []funnel.Op{{Kind: funnel.OpTake, Key: "v", N: 1, Lease: "l1", Limit: conc}}, make([]funnel.Result, 1)); err != nil {
			t.Fatal(err)
		}
		// a packed sliding log's takes (log.lua, FUNNEL.LOG): admitted
		// twice, then refused
		log := moduleCheck(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 2, Period: time.Hour})
		for range 3 {
			if err := s.Do(ctx, []funnel.Op{{Kind: funnel.OpTake, Key: "g", N: 1, Limit: log}}, make([]funnel.Result, 1)); err != nil {
				t.Fatal(err)
			}
		}
		// The events so far, as event and key without the prefix.
		c.Set(ctx, "end", path.Name, 0)
		for {
			msg, err := sub.ReceiveMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if msg.Payload == "end" {
				break
			}
			events[path.Name] = append(events[path.Name], strings.TrimPrefix(msg.Channel, "__keyevent@0__:")+" "+strings.TrimPrefix(msg.Payload, prefix))
		}
	}
	if info, _ := master.Info("commandstats"); !strings.HasPrefix(info["cmdstat_funnel.gcra"], "calls=") ||
		!strings.HasPrefix(info["cmdstat_funnel.takes"], "calls=") || !strings.HasPrefix(info["cmdstat_funnel.window"], "calls=") ||
		!strings.HasPrefix(info["cmdstat_funnel.conc"], "calls=") || !strings.HasPrefix(info["cmdstat_funnel.log"], "calls=") {
		t.Fatalf("a module command was not called: %q", info)
	}
	if !reflect.DeepEqual(events["script"], events["module"]) || len(events["module"]) < 10 {
		t.Fatalf("keyspace events:\nscript %q\nmodule %q", events["script"], events["module"])
	}
	if n, err := c.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d, %v", n, err)
	}
	type state struct {
		value string
		at    int64
	}
	read := func(c *redis.Client, key string) state {
		v, _ := c.Get(ctx, key).Result()
		return state{v, c.PExpireTime(ctx, key).Val().Milliseconds()}
	}
	want := map[string]state{}
	for _, key := range []string{"a", "b", "c", "d", "w", "x", "y", "g"} {
		m := read(c, "m:"+key)
		if s := read(c, "s:"+key); (s.value == "") != (m.value == "") || m.value != "" && len(s.value) != len(m.value) {
			t.Fatalf("%q: script %+v, module %+v", key, s, m)
		}
		if r := read(replica.Client(), "m:"+key); r != m {
			t.Fatalf("%q: master %+v, replica %+v", key, m, r)
		}
		want[key] = m
	}
	if want["b"].value != "" || want["a"].value == "" || want["w"].value == "" || want["x"].value == "" || want["y"].value == "" || len(want["g"].value) != len("L3600000:")+12 {
		t.Fatalf("the decisions did not leave a empty and a written: %+v", want)
	}
	// A concurrency key holds the same leases both ways (their expiries
	// from each side's now), and the same on the replica.
	leases := func(c *redis.Client, key string) []redis.Z { return c.ZRangeWithScores(ctx, key, 0, -1).Val() }
	for _, key := range []string{"v", "z"} {
		s, m := leases(c, "s:"+key), leases(c, "m:"+key)
		if len(s) != 2 || len(m) != 2 || s[0] != m[0] || s[1].Member != m[1].Member {
			t.Fatalf("%q: script %v, module %v", key, s, m)
		}
		if r := leases(replica.Client(), "m:"+key); !reflect.DeepEqual(r, m) {
			t.Fatalf("%q: master %v, replica %v", key, m, r)
		}
	}
	// A value is kept as the script keeps it, in Redis's integer encoding,
	// unless the module was loaded with "encoding raw"; then but for the
	// call's first SET ("a", written after its last request), which goes
	// through Redis for its checks.
	for _, key := range []string{"a", "c", "d"} {
		want := encoding
		if key == "a" {
			want = "int"
		}
		se, me := c.ObjectEncoding(ctx, "s:"+key).Val(), c.ObjectEncoding(ctx, "m:"+key).Val()
		if se != "int" || me != want {
			t.Errorf("%q: encoding %s by the script, %s by the module loaded with encoding %s", key, se, me, encoding)
		}
	}
	// The AOF, read at a restart, holds the same.
	master.Stop()
	if err := master.Start(); err != nil {
		t.Fatal(err)
	}
	for key, w := range want {
		if got := read(master.Client(), "m:"+key); got != w {
			t.Fatalf("%q after a restart from the AOF: %+v, want %+v", key, got, w)
		}
	}
	for _, key := range []string{"v", "z"} {
		if got, w := leases(master.Client(), "m:"+key), leases(replica.Client(), "m:"+key); !reflect.DeepEqual(got, w) {
			t.Fatalf("%q after a restart from the AOF: %v, want %v", key, got, w)
		}
	}
}

// Where Redis may not write (over maxmemory, a read-only replica, too few
// replicas, an ACL that denies SET), the module's commands answer the
// requests they refuse, and answer Redis's error for a call that writes,
// as the scripts do; in no case is a key written.
func TestModuleUnderRedisLimits(t *testing.T) {
	t.Parallel()
	master := redistest.StartServer(t, "--loadmodule", redistest.Module(t))
	replica := redistest.StartReplica(t, master, "--loadmodule", redistest.Module(t))
	ctx := context.Background()
	const now int64 = 1_795_350_508_971_038_011
	full := strconv.FormatInt(now+int64(time.Hour), 10)
	ms := now / 1e6
	window := fmt.Sprintf("F%d:%d:5", ms-ms%60000, ms-ms%60000+60000)
	// For each command, one request on a full key (refused), then a call
	// with a fresh key (admitted: written).
	type caller func(ctx context.Context, c *redis.Client, keys, args []string) (any, any, error, error)
	at := []string{limb(now / 1e9), limb(now % 1e9), "0"}
	calls := []struct {
		call caller
		keys []string
		args []string
	}{
		{moduleCall, []string{"full"}, appendLimbs(appendLimbs(append([]string{"t"}, append(at, "1536")...), int64(time.Second)), int64(time.Second))},
		{moduleCall, []string{"full", "fresh"}, appendLimbs(appendLimbs(append([]string{"u"}, at...), int64(time.Second)), int64(time.Second))},
		{takesCall, []string{"window", "full"}, append(at, "f", "1", "5", "60000", "g", "1", "1000000000", "1000000000")},
		{takesCall, []string{"fresh"}, append(at, "f", "1", "5", "60000")},
		{windowCall, []string{"window", "window"}, append(at, "1", "5", "60000", "1", "5", "60000")},
		{windowCall, []string{"window", "fresh"}, append(at, "1", "5", "60000", "1", "5", "-60000")},
		{concCall, []string{"conc"}, append(at[:2:2], "160000000000", "1", "1", "60000", "b")},
		{concCall, []string{"fresh"}, append(at[:2:2], "160000000000", "1", "1", "60000", "b")},
		{logCall, []string{"log"}, append(at, "1", "1", "60000")},
		{logCall, []string{"fresh"}, append(at, "1", "1", "60000")},
	}
	for _, k := range []string{"s:", "m:"} {
		if err := master.Client().Set(ctx, k+"full", full, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if err := master.Client().Set(ctx, k+"window", window, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if err := master.Client().Set(ctx, k+"log", packedLog("60000", ms), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if err := master.Client().ZAdd(ctx, k+"conc", redis.Z{Score: -1, Member: "\x00conc"}, redis.Z{Score: float64(ms + 3_600_000), Member: "a"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := master.Client().Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	run := func(name string, c *redis.Client, wantErr string) {
		t.Helper()
		for i, call := range calls {
			sv, mv, serr, merr := call.call(ctx, c, call.keys, call.args)
			if !sameError(serr, merr) || !reflect.DeepEqual(sv, mv) {
				t.Fatalf("%s, call %d: script %v %v, module %v %v", name, i, sv, serr, mv, merr)
			}
			switch {
			case i%2 == 0 && serr != nil:
				t.Fatalf("%s: a refusal answered %v", name, serr)
			case i%2 == 1 && (serr == nil || !strings.HasPrefix(merr.Error(), wantErr)):
				t.Fatalf("%s: a write answered %v, %v (script %v); want %s…", name, sv, merr, serr, wantErr)
			}
		}
		for _, k := range []string{"s:fresh", "m:fresh"} {
			if n := master.Client().Exists(ctx, k).Val(); n != 0 {
				t.Fatalf("%s: %s written", name, k)
			}
		}
	}
	mc := master.Client()
	run("read-only replica", replica.Client(), "READONLY")
	mc.ConfigSet(ctx, "min-replicas-to-write", "2")
	run("too few replicas", mc, "NOREPLICAS")
	mc.ConfigSet(ctx, "min-replicas-to-write", "0")
	if err := mc.Do(ctx, "ACL", "SETUSER", "limiter", "on", "nopass", "~*", "+@all", "-set", "-psetex", "-del", "-zadd").Err(); err != nil {
		t.Fatal(err)
	}
	limited := redis.NewClient(&redis.Options{Addr: master.Addr, Username: "limiter", Password: "x"})
	defer limited.Close()
	run("an ACL without SET", limited, "ERR")
	mc.ConfigSet(ctx, "maxmemory-policy", "noeviction")
	mc.ConfigSet(ctx, "maxmemory", "1")
	defer mc.ConfigSet(ctx, "maxmemory", "0")
	run("maxmemory", mc, "OOM")
}

// A user whose ACL does not let it call FUNNEL.GCRA decides through the
// script, and the store says why, once.
func TestModuleDeniedByACL(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--loadmodule", redistest.Module(t))
	ctx := context.Background()
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "limiter", "on", "nopass", "~*", "+@all", "-funnel.gcra").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "limiter", Password: "x"})
	defer c.Close()
	var logs logCapture
	s := New(c, Options{Timeout: 10 * time.Second, Logger: logs.logger()})
	for range 3 {
		if r, err := s.throttle(ctx, "k", mustNewParams(t, 9, 1, time.Second), 1, -1); err != nil || r.Fallback || !r.Allowed {
			t.Fatalf("%+v, %v", r, err)
		}
		s.module.command(gcraLua).absentUntil.Store(1) // try the module again at once
	}
	if n := strings.Count(logs.String(), "module is not usable"); n != 1 || !strings.Contains(logs.String(), "NOPERM") {
		t.Fatalf("%d warnings:\n%s", n, logs.String())
	}
	FunnelPaths[0].Check(t, srv.Client())
}

// FuzzModuleArguments sends each of the module's commands any arguments:
// Redis must answer each call, with a reply or an error, and stay up (the
// module reads every argument within bounds, whatever they say).
func FuzzModuleArguments(f *testing.F) {
	srv := redistest.StartServer(f, "--loadmodule", redistest.Module(f))
	c := srv.Client()
	for _, seed := range []string{
		// FUNNEL.GCRA's
		"1|1|k|t|||0|1536|1|0|2|0",
		"1|2|a|b|u|||0|1|0|2|0",
		"1|3|a|b|a|t|1795350508|971038011|600000|2049|2048|2177|1|0|2|0",
		"1|2|a|b|t|-|99999999999999999|0|2305|130|-1|999999999|3|0",
		"1|1|k|t|~1|99999999999999999|0|1536|9223372036|854775807|9223372036|854775807",
		"1|127|k", "1|2|k|k|t|||0|||", "1|1|k|t|||0|256|0|0|0|0", "|||", "1|-1|k",
		// FUNNEL.TAKES's
		"1|1|k|||0|g|1|1000000000|3000000000",
		"1|2|a|b|1795350508|971038011|60000|f|1|10|60000|s|2|10|1000",
		"1|1|k|1795350508|971038011|0|d|1|10|1795300000000|1795386400000",
		"1|1|k|-|99999999999999999|0|l|1|0|0",
		"1|1|k|~1|99999999999999999|0|g|9007199254740991|9007199254740991|9007199254740991",
		"1|2|k|k|||0|f|1|1|1|f|1|1", "1|1|k|||0|s|1|1|0", "1|1|k|||0|d|1|1|1",
		// FUNNEL.WINDOW's
		"1|1|k|||0|1|10|60000", "1|2|a|a|1795350508|971038011|60000|1|10|-1000|2|10|-1000",
		"1|1|k|-|99999999999999999|0|1|1|1", "1|1|k|~1|99999999999999999|0|9007199254740991|0|-9007199254740991",
		"1|1|k|||0|1|1|0", "1|1|k|||0|1|1",
		// FUNNEL.CONC's
		"1|1|k|||160000000000|1|10|60000|a", "1|1|k|1795350508|971038011|160000000000|r|10|60000|a|1000",
		"1|1|k|~1|99999999999999999|10000000000|1|1|1|a|-1000001", "1|1|k|||0|r|1|1||",
		// FUNNEL.LOG's
		"1|1|k|||0|1|10|1000", "1|1|k|1795350508|971038011|60000|257|256|60000", "1|1|k|||0|1048577|1|1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ctx := context.Background()
		parts := strings.Split(s, "|")
		if len(parts) > 700 {
			return
		}
		for _, cmd := range moduleCommands {
			args := []any{cmd.name}
			for _, p := range parts {
				args = append(args, p)
			}
			v, err := c.Do(ctx, args...).Result()
			if err != nil && !strings.HasPrefix(err.Error(), "ERR") && !strings.HasPrefix(err.Error(), "WRONGTYPE") &&
				!strings.HasPrefix(err.Error(), "DEADLINE funnel:") && !strings.HasPrefix(err.Error(), "CLOCKSTEP funnel:") {
				t.Fatalf("%s %q: %v, %v", cmd.name, s, v, err)
			}
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatalf("%s %q: Redis does not answer after it: %v", cmd.name, s, err)
			}
		}
	})
}

// A module unloaded under a store sends it back to the script at once,
// with a warning, and no decision fails; loaded again, it is taken up
// at the store's next try.
func TestModuleUnloadedAndLoaded(t *testing.T) {
	t.Parallel()
	path := redistest.Module(t)
	srv := redistest.StartServer(t, "--loadmodule", path, "--enable-module-command", "yes")
	c := srv.Client()
	ctx := context.Background()
	var logs logCapture
	s := New(c, Options{Timeout: 10 * time.Second, Logger: logs.logger()})
	p := mustNewParams(t, 99, 1, time.Second)
	decide := func(want int64) {
		t.Helper()
		if r, err := s.throttle(ctx, "k", p, 1, -1); err != nil || r.Fallback || r.Remaining != want {
			t.Fatalf("%+v, %v; want remaining %d", r, err, want)
		}
	}
	calls := func() int64 {
		info, _ := srv.Info("commandstats")
		v, _ := strconv.ParseInt(strings.TrimPrefix(strings.Split(info["cmdstat_funnel.gcra"], ",")[0], "calls="), 10, 64)
		return v
	}
	decide(99)
	if err := c.Do(ctx, "MODULE", "UNLOAD", "funnel").Err(); err != nil {
		t.Fatal(err)
	}
	decide(98) // through the script, the same key
	decide(97)
	if err := c.Do(ctx, "MODULE", "LOAD", path).Err(); err != nil {
		t.Fatal(err)
	}
	decide(96) // still the script, until the store tries again
	if n := calls(); n != 0 {
		t.Fatalf("FUNNEL.GCRA called %d times before the store tried again", n)
	}
	// The retry meets a key of another type: the module's own refusal is
	// its answer, and the store keeps to it.
	s.module.command(gcraLua).absentUntil.Store(time.Now().Add(-time.Second).UnixNano())
	c.RPush(ctx, "list", "x")
	if _, err := s.throttle(ctx, "list", p, 1, -1); !errors.Is(err, ErrWrongType) {
		t.Fatalf("a list: %v", err)
	}
	decide(95)
	decide(94)
	if n := calls(); n != 3 {
		t.Fatalf("FUNNEL.GCRA called %d times after the store tried again, want 3", n)
	}
	out := logs.String()
	if strings.Count(out, "module is not usable") != 1 || strings.Count(out, "Redis has loaded Funnel's module") != 2 {
		t.Fatalf("logs:\n%s", out)
	}
}

// logCapture is a logger whose records a test reads back as text, safe
// for concurrent use.
type logCapture struct {
	mu  sync.Mutex
	buf strings.Builder
}

// logger returns a logger that writes to c.
func (c *logCapture) logger() *slog.Logger { return slog.New(slog.NewTextHandler(c, nil)) }

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

// String returns the records written so far.
func (c *logCapture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// On a Redis Cluster where one master lacks the module, the store goes to
// the script for every node after the first miss, under concurrent load,
// and says so once: no decision fails, and no answer to a call already on
// its way to a node with the module sends the store back to it.
func TestModuleMixedCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartClusterWith(t, 3, 0, "--loadmodule", redistest.Module(t), "--enable-module-command", "yes")
	c := cl.Client()
	ctx := context.Background()
	var logs logCapture
	s := New(c, Options{Timeout: 10 * time.Second, Logger: logs.logger()})
	p := mustNewParams(t, 1e6, 1, time.Second)
	// Decisions reach every node, through the module.
	decideAll := func(round int) {
		var wg sync.WaitGroup
		var failed atomic.Int64
		for g := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					r, err := s.throttle(ctx, fmt.Sprintf("k%d-%d", g, i), p, 1, -1)
					if err != nil || r.Fallback || !r.Allowed {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Fatalf("round %d: %d decisions failed", round, n)
		}
	}
	decideAll(1)
	if err := cl.Nodes[0].Client().Do(ctx, "MODULE", "UNLOAD", "funnel").Err(); err != nil {
		t.Fatal(err)
	}
	decideAll(2)
	decideAll(3)
	out := logs.String()
	if strings.Count(out, "module is not usable") != 1 || strings.Count(out, "has loaded Funnel's module") != 1 {
		t.Fatalf("logs:\n%s", out)
	}
	if try, _ := s.useModule(gcraLua); try {
		t.Fatal("the store tries the module within a minute of a miss")
	}
}

// windowCall runs one call both ways on c, as moduleCall does, of
// window.lua and FUNNEL.WINDOW.
func windowCall(ctx context.Context, c *redis.Client, keys, args []string) (script, module any, serr, merr error) {
	return bothWays(ctx, c, windowScript, keys, args)
}

// logCall runs one call both ways on c, as moduleCall does, through
// log.lua and FUNNEL.LOG.
func logCall(ctx context.Context, c *redis.Client, keys, args []string) (script, module any, serr, merr error) {
	return bothWays(ctx, c, logScript, keys, args)
}

// concCall runs one call both ways on c, as moduleCall does, through
// conc.lua and FUNNEL.CONC.
func concCall(ctx context.Context, c *redis.Client, keys, args []string) (script, module any, serr, merr error) {
	return bothWays(ctx, c, concScript, keys, args)
}

// moduleCheck returns l checked, or fails t.
func moduleCheck(t *testing.T, l funnel.Limit) funnel.Checked {
	t.Helper()
	c, err := l.Check()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
