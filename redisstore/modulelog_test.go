package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/redistest"
)

// packedLog is a packed sliding log's value (see family.lua): "L", the
// period in ms, ":", then each entry's ms in six bytes, big-endian.
func packedLog(period string, entries ...int64) string {
	b := []byte("L" + period + ":")
	for _, e := range entries {
		var x [8]byte
		binary.BigEndian.PutUint64(x[:], uint64(e))
		b = append(b, x[2:]...)
	}
	return string(b)
}

// logTestValue draws from r a value for a sliding log's key at nowms (ms)
// under a period of p ms: a packed log of entries old, within the period
// and ahead (a clock that went back), ended or not, of the same period or
// another; or no packed log (a torn entry, no digits, another tag, a
// period past a double's range, an empty string). "" stands for absent.
func logTestValue(r *rand.Rand, nowms, p int64) string {
	var entries []int64
	at := nowms - p - 10 - r.Int64N(p+10)
	for range r.IntN(14) {
		at += []int64{0, 0, 1, 7, p / 5, p / 2}[r.IntN(6)]
		entries = append(entries, at)
	}
	per := limb(p)
	switch r.IntN(12) {
	case 0:
		return ""
	case 1:
		per = limb(p * 3) // stored under another period
	case 2:
		per = "0" + per // leading zeros
	case 3:
		return packedLog(per, entries...)[:len(packedLog(per, entries...))-1] // a torn entry
	case 4:
		return []string{"L:", "Lx:", "F1:2:3", "", "L" + strings.Repeat("9", 400) + ":", "L1", "l5:"}[r.IntN(7)]
	case 5:
		entries = append(entries, nowms+p+50) // ahead of now
	case 6, 7:
		// stored under a shorter or a longer period, whose newest entry
		// ends it at now exactly
		q := []int64{max(p/3, 1), p * 2}[r.IntN(2)]
		per = limb(q)
		entries = append(entries, nowms-q)
	}
	return packedLog(per, entries...)
}

// FUNNEL.LOG and log.lua give the same replies and leave the same keys
// (values and expiries), for random takes, peeks and quantities past the
// count, on packed logs of every shape near now, at whole and fractional
// milliseconds of injected times, and on keys that log.lua leaves to
// family.lua.
func TestModuleLogIsTheScript(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--loadmodule", redistest.Module(t))
	c := srv.Client()
	ctx := context.Background()
	const base int64 = 1_795_350_508_971_038_011
	counts := map[string]int{}
	for seed := uint64(1); seed <= 1500; seed++ {
		r := rand.New(rand.NewPCG(seed, 19))
		now := base + r.Int64N(int64(48*time.Hour))
		switch r.IntN(6) {
		case 0, 1:
			now -= now % 1e6
		case 2:
			now -= now%1e6 - 1 // a nanosecond past a millisecond
		}
		p := []int64{1000, 60000, 3, 86_400_000}[r.IntN(4)]
		v := logTestValue(r, now/1e6, p)
		c.Del(ctx, "s:k", "m:k")
		switch {
		case v == "" && r.IntN(4) == 0:
			c.RPush(ctx, "s:k", "x")
			c.RPush(ctx, "m:k", "x")
		case v != "":
			setBoth(ctx, c, "k", v, time.Duration(r.IntN(2))*time.Hour)
		}
		count := []int64{1, 2, 5, 10, 256}[r.IntN(5)]
		q := min([]int64{0, 1, 1, 1, 2, 3, 7}[r.IntN(7)], count+1)
		args := []string{limb(now / 1e9), limb(now % 1e9), limb([]int64{0, 60000, 1}[r.IntN(3)]), limb(q), limb(count), limb(p)}
		what := fmt.Sprintf("seed %d: %q, args %q", seed, v, args)
		sv, took, serr := alike(t, ctx, c, logScript, []string{"k"}, args, what)
		sameKeys(t, ctx, c, []string{"k"}, nil, took, what)
		switch v, _ := sv.([]any); {
		case serr != nil:
			counts["error"]++
		case len(v) == 3:
			counts["left to family.lua"]++
		case v[2].(int64)&1 == 1 && q > 0:
			counts["admitted"]++
		case v[2].(int64)&1 == 1:
			counts["peek"]++
		case v[3].(int64) >= 0:
			counts["refused, with a wait"]++
		default:
			counts["refused"]++
		}
	}
	enoughOfEach(t, counts, 30, "admitted", "peek", "refused, with a wait", "refused", "left to family.lua")
}

// FuzzModuleLogReadsAsTheScript puts any value in a key and takes a sliding
// log's units on it both ways: the module must read the value (a packed
// log, or why not) and decide and write as log.lua does.
func FuzzModuleLogReadsAsTheScript(f *testing.F) {
	srv := redistest.StartServer(f, "--loadmodule", redistest.Module(f))
	c := srv.Client()
	const now int64 = 1_795_350_508_971_038_011
	const nowms = now / 1e6
	f.Add(packedLog("1000", nowms-2000, nowms-500, nowms), int64(1), int64(2), int64(1000))
	f.Add(packedLog("60000", nowms-60000, nowms-59999, nowms+5), int64(2), int64(3), int64(60000))
	f.Add(packedLog("7", nowms+100), int64(0), int64(0), int64(7))
	f.Add("L1000:\x00\x00", int64(1), int64(5), int64(1000))
	f.Add("L99999999999999999999999:", int64(1), int64(5), int64(1000))
	f.Fuzz(func(t *testing.T, value string, q, count, period int64) {
		ctx := context.Background()
		if q < 0 || q > 300 || count < 0 || count >= 1<<53 || period < 1 || period >= 1<<53 {
			return
		}
		c.Del(ctx, "s:k", "m:k")
		setBoth(ctx, c, "k", value, time.Hour)
		args := []string{limb(now / 1e9), limb(now % 1e9), "60000", limb(q), limb(count), limb(period)}
		what := fmt.Sprintf("%q, args %q", value, args)
		_, took, _ := alike(t, ctx, c, logScript, []string{"k"}, args, what)
		sameKeys(t, ctx, c, []string{"k"}, nil, took, what)
	})
}

// Errors: FUNNEL.LOG refuses what it cannot decide, before it reads or
// writes a key, with an error of its own.
func TestModuleLogRefusesBadCalls(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--loadmodule", redistest.Module(t))
	c := srv.Client()
	ctx := context.Background()
	c.Set(ctx, "k", packedLog("1000", time.Now().UnixMilli()), time.Hour)
	refusesAll(t, c, logCommand, "k", []badCall{
		{[]any{}, "ERR wrong number of arguments"},
		{[]any{"2", 1, "k", "", "", 0, 1, 10, 1000}, "ERR funnel: version of FUNNEL.LOG"},
		{[]any{"1", 0, "", "", 0, 1, 10, 1000}, "ERR funnel: the number of keys"},
		{[]any{"1", 2, "k", "k", "", "", 0, 1, 10, 1000}, "ERR funnel: a sliding log call takes one key"},
		{[]any{"1", 1, "k", "", "", 0, 1, 10}, "ERR funnel: a sliding log call takes six arguments"},
		{[]any{"1", 1, "k", "", "", -1, 1, 10, 1000}, "ERR funnel: the expiries' slack"},
		{[]any{"1", 1, "k", "", "", 0, -1, 10, 1000}, "ERR funnel: a sliding log's quantity"},
		{[]any{"1", 1, "k", "", "", 0, 1<<20 + 1, 1 << 21, 1000}, "ERR funnel: a sliding log's quantity"},
		{[]any{"1", 1, "k", "", "", 0, 1, -1, 1000}, "ERR funnel: a sliding log's quantity"},
		{[]any{"1", 1, "k", "", "", 0, 1, 10, 0}, "ERR funnel: a sliding log's quantity"},
		{[]any{"1", 1, "k", "x", "", 0, 1, 10, 1000}, "ERR funnel: now must be"},
		{[]any{"1", 1, "k", "-", time.Now().UnixMicro() - 1, 0, 1, 10, 1000}, "DEADLINE funnel:"},
	})
	keys, err := c.CommandGetKeys(ctx, logCommand, "1", 1, "a{x}", "", "", 0, 1, 10, 1000).Result()
	if err != nil || !reflect.DeepEqual(keys, []string{"a{x}"}) {
		t.Fatalf("COMMAND GETKEYS: %q, %v", keys, err)
	}
}
