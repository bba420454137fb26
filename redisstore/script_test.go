package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
)

// The expiry is the time to the TAT in whole milliseconds rounded up (and
// at least 1 ms), so that a key never vanishes while its TAT is ahead: the
// truncation redis-cell does would forget up to a millisecond of every key,
// and for intervals under 1 ms (PEXPIRE 0) all of it. The script runs here
// with an injected time and no test slack, in MULTI with a PTTL.
func TestExpiryRoundsUp(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	if err := gcraScript.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	const now int64 = 1_795_350_508_971_038_011
	for _, tc := range []struct {
		ttl    time.Duration
		wantPX int64
	}{
		{1, 1},
		{999_999, 1},
		{time.Millisecond, 1},
		{time.Millisecond + 1, 2},
		{10*time.Millisecond - 1, 10},
		{10 * time.Millisecond, 10},
		{10*time.Millisecond + 1, 11},
		{time.Hour + 1, 3_600_001},
	} {
		// PTTL right after the write is the PX or, if Redis's clock crossed a
		// millisecond in between, one less: take the largest of a few tries.
		best := int64(-3)
		for try := 0; try < 5; try++ {
			key := "px" + strconv.Itoa(try)
			pipe := c.TxPipeline()
			pipe.Del(ctx, key)
			ev := pipe.EvalSha(ctx, gcraScript.Hash(), []string{key}, "t", limb(now/1e9), limb(now%1e9), "0", "1536",
				limb(int64(tc.ttl)/1e9), limb(int64(tc.ttl)%1e9), "7200", "0")
			pttl := pipe.PTTL(ctx, key)
			// Read the value in the same transaction: with a PX of 1 ms the
			// key may be gone by the next round trip.
			val := pipe.Get(ctx, key)
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			if v, err := ev.Int64(); err != nil || v != 1 { // allowed, d = 0
				t.Fatalf("ttl %v: script answered %v, %v", tc.ttl, v, err)
			}
			if v := pttl.Val().Milliseconds(); v > best {
				best = v
			}
			if v := val.Val(); v != strconv.FormatInt(now+int64(tc.ttl), 10) {
				t.Fatalf("ttl %v: key holds %q", tc.ttl, v)
			}
		}
		if best != tc.wantPX {
			t.Errorf("ttl %v: PX %d, want %d", tc.ttl, best, tc.wantPX)
		}
	}
}

// After SCRIPT FLUSH (as after a restart, or on a replica promoted after a
// failover that never saw the script) the store loads the script again.
func TestReloadsOnNoscript(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	s := New(c, Options{Timeout: 10 * time.Second})
	for i := 0; i < 3; i++ {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		r, err := s.throttle(ctx, "k", mustParams(t), 1, -1)
		if err != nil || r.Fallback || !r.Allowed {
			t.Fatalf("after SCRIPT FLUSH: %+v, %v", r, err)
		}
		if ok := c.ScriptExists(ctx, gcraScript.Hash()).Val(); len(ok) != 1 || !ok[0] {
			t.Fatal("script not loaded again")
		}
	}
}

func mustParams(t *testing.T) gcra.Params {
	t.Helper()
	p, err := gcra.NewParams(9, 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKeySlot(t *testing.T) {
	for key, want := range map[string]uint16{
		"123456789":            0x31c3, // CRC16 XMODEM's check value
		"somekey":              11058,  // CLUSTER KEYSLOT, from Redis's documentation
		"foo{hash_tag}":        2515,
		"bar{hash_tag}":        2515,
		"{}x":                  keySlot("{}x"),
		"a{}{b}":               keySlot("a{}{b}"),
		"{user1000}.following": keySlot("user1000"),
		"x{y":                  keySlot("x{y"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if keySlot("{}x") == keySlot("x") || keySlot("a{}{b}") == keySlot("b") {
		t.Error("an empty hash tag must not count")
	}
}

// The scripts are sent with their parts written in, at each place that
// includes them, indented there, and without their heading comments.
func TestIncludeWritesPartsIn(t *testing.T) {
	for _, tc := range []struct {
		script string
		parts  map[string]int // how many times each part is written in
	}{
		{"gcra.lua", map[string]int{"get.lua": 1, "tat.lua": 3, "decide.lua": 3, "store.lua": 3, "answer.lua": 2}},
		{"keyops.lua", map[string]int{"tat.lua": 1}},
	} {
		src := include(tc.script)
		if strings.Contains(src, "\n"+includeMark) || strings.Contains(src, " "+includeMark) {
			t.Errorf("%s: a line %q is left", tc.script, includeMark)
		}
		for part, want := range tc.parts {
			raw, err := scriptFiles.ReadFile(part)
			if err != nil {
				t.Fatal(err)
			}
			// The first line of code of the part, and its longest.
			var first, longest string
			for _, l := range strings.Split(string(raw), "\n") {
				if first == "" && !strings.HasPrefix(l, "--") {
					first = l
				}
				if first != "" && len(l) > len(longest) {
					longest = l
				}
			}
			if strings.Contains(src, strings.SplitN(string(raw), "\n", 2)[0]) {
				t.Errorf("%s: the heading comment of %s is written in", tc.script, part)
			}
			for _, l := range []string{first, longest} {
				n := 0
				l = strings.TrimLeft(l, " ")
				for _, s := range strings.Split(src, "\n") {
					if strings.TrimLeft(s, " ") == l && len(s) > len(l) {
						n++
					}
				}
				if n != want {
					t.Errorf("%s: the line %q of %s is written in, indented, %d times; want %d", tc.script, l, part, n, want)
				}
			}
		}
	}
}
