package respserver_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/respserver"
)

// failingStore answers every call with err.
type failingStore struct{ err error }

func (f failingStore) Do(context.Context, []funnel.Op, []funnel.Result) error { return f.err }
func (f failingStore) Reset(context.Context, string) (bool, error)            { return false, f.err }
func (f failingStore) TTL(context.Context, string) (time.Duration, bool, error) {
	return 0, false, f.err
}
func (f failingStore) Bans(context.Context) ([]funnel.Ban, error)  { return nil, f.err }
func (f failingStore) Unban(context.Context, string) (bool, error) { return false, f.err }

func serveFailing(t *testing.T, cfg respserver.Config, err error) *client {
	ln, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		t.Fatal(lerr)
	}
	return serveStore(t, ln, cfg, failingStore{err}, nil).dial(t)
}

// TestStoreDownOneReply: a store that cannot decide is answered with one
// text, -TRYAGAIN store unavailable, whether it says so with an error or with a
// fail-closed fallback (an error was "-ERR store unavailable" before), and
// Config.Fail answers a decision's error as a store's own fallback is
// answered: fail-open [0, limit, limit, -1, -1], FailClosedRefuse
// [1, limit, 0, 1, -1].
func TestStoreDownOneReply(t *testing.T) {
	t.Parallel()
	down := fmt.Errorf("store: dial tcp 10.1.2.3:6379: connection refused: %w", funnel.ErrUnavailable)
	tryagain := storeDown

	c := serveFailing(t, respserver.Config{}, down)
	for _, cmd := range [][]string{
		{"CL.THROTTLE", "k", "4", "10", "60"},
		{"FUNNEL.ALLOW", "k", "gcra", "10", "60000"},
		{"FUNNEL.ALLOWALL", "2", "LIMIT", "a", "gcra", "10", "60000", "LIMIT", "b", "fixed_window", "5", "1000"},
		{"FUNNEL.ACQUIRE", "k", "2", "30000"},
		{"FUNNEL.REFUND", "k", "gcra", "10", "60000"},
		{"PTTL", "k"}, {"DEL", "k"}, {"FUNNEL.BANS"}, {"FUNNEL.UNBAN", "k"},
	} {
		if got := c.do(cmd...); got != tryagain {
			t.Errorf("%v: %q, want %q", cmd, got, tryagain)
		}
	}

	c = serveFailing(t, respserver.Config{Fail: funnel.FailOpen}, down)
	if got, want := c.do("CL.THROTTLE", "k", "4", "10", "60"), ints(0, 5, 5, -1, -1); got != want {
		t.Errorf("fail open: %q, want %q", got, want)
	}
	if got, want := c.do("FUNNEL.ALLOW", "k", "gcra", "10", "60000"), ints(1, 10, 10, -1, -1, 0, 0); got != want {
		t.Errorf("fail open FUNNEL.ALLOW: %q", got)
	}
	if got := c.do("PTTL", "k"); got != tryagain {
		t.Errorf("fail open PTTL (no decision to admit): %q", got)
	}

	c = serveFailing(t, respserver.Config{FailClosed: respserver.FailClosedRefuse}, down)
	if got, want := c.do("CL.THROTTLE", "k", "4", "10", "60"), ints(1, 5, 0, 1, -1); got != want {
		t.Errorf("fail closed, refuse: %q, want %q", got, want)
	}
}

// downEverywhere is a store down for every call: decisions, GCRA, reserves
// and settles.
type downEverywhere struct{ failingStore }

func (d downEverywhere) GCRA(context.Context, string, gcra.CommandParams) (funnel.GCRAResult, error) {
	return funnel.GCRAResult{}, d.err
}

func (d downEverywhere) Reserve(context.Context, string, funnel.Checked, int64, string, time.Duration) (funnel.Result, error) {
	return funnel.Result{}, d.err
}

func (d downEverywhere) Settle(context.Context, string, string, int64) (funnel.Settlement, error) {
	return funnel.Settlement{}, d.err
}

// TestFallbackRepliesAgree: with the store down, every decision command
// says the same guess. Failing open: allowed, the whole limit remaining, no
// wait, a reset after of -1 (FUNNEL.ALLOW, FUNNEL.RESERVE, FUNNEL.ALLOWALL's
// results and FUNNEL.ACQUIRE answered 0 remaining, which tells a client that
// paces itself to stop, where CL.THROTTLE answered the whole limit; GCRA a
// fresh key's reply). Under FailClosedRefuse: limited, nothing remaining,
// retry in 1 s, a reset after of -1 (GCRA's was 0).
func TestFallbackRepliesAgree(t *testing.T) {
	t.Parallel()
	down := fmt.Errorf("store: dial tcp 10.1.2.3:6379: connection refused: %w", funnel.ErrUnavailable)
	serve := func(cfg respserver.Config) *client {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return serveStore(t, ln, cfg, downEverywhere{failingStore{down}}, nil).dial(t)
	}
	fam := func(v ...int64) string { return strings.TrimPrefix(ints(v...), "*7\r\n") }
	for _, tc := range []struct {
		name string
		cfg  respserver.Config
		want map[string]string
	}{
		{"FailOpen", respserver.Config{Fail: funnel.FailOpen}, map[string]string{
			"CL.THROTTLE":     ints(0, 5, 5, -1, -1),
			"GCRA":            ints(0, 6, 6, -1, -1),
			"FUNNEL.ALLOW":    ints(1, 10, 10, -1, -1, 0, 0),
			"PEEK":            ints(1, 10, 10, -1, -1, 0, 0),
			"FUNNEL.RESERVE":  "*8\r\n" + fam(1, 10, 10, -1, -1, 0, 0) + "$-1\r\n",
			"FUNNEL.ALLOWALL": "*4\r\n:1\r\n:-1\r\n:-1\r\n*2\r\n" + ints(1, 10, 10, -1, -1, 0, 0) + ints(1, 5, 5, -1, -1, 0, 0),
			"FUNNEL.ACQUIRE":  "*7\r\n:1\r\n:2\r\n:2\r\n:-1\r\n:-1\r\n",
		}},
		{"FailClosedRefuse", respserver.Config{FailClosed: respserver.FailClosedRefuse}, map[string]string{
			"CL.THROTTLE":     ints(1, 5, 0, 1, -1),
			"GCRA":            ints(1, 6, 0, 1, -1),
			"FUNNEL.ALLOW":    ints(0, 10, 0, 1000, -1, 0, 0),
			"PEEK":            ints(0, 10, 0, 1000, -1, 0, 0),
			"FUNNEL.RESERVE":  "*8\r\n" + fam(0, 10, 0, 1000, -1, 0, 0) + "$-1\r\n",
			"FUNNEL.ALLOWALL": "*4\r\n:0\r\n:0\r\n:1000\r\n*2\r\n" + ints(0, 10, 0, 1000, -1, 0, 0) + ints(0, 5, 0, 1000, -1, 0, 0),
			"FUNNEL.ACQUIRE":  "*7\r\n:0\r\n:2\r\n:0\r\n:1000\r\n:-1\r\n$-1\r\n:0\r\n",
		}},
	} {
		c := serve(tc.cfg)
		for name, cmd := range map[string][]string{
			"CL.THROTTLE":     {"CL.THROTTLE", "k", "4", "10", "60"},
			"GCRA":            {"GCRA", "g", "5", "10", "60"},
			"FUNNEL.ALLOW":    {"FUNNEL.ALLOW", "k", "gcra", "10", "60000", "QUANTITY", "3"},
			"PEEK":            {"FUNNEL.ALLOW", "k", "gcra", "10", "60000", "QUANTITY", "3", "PEEK"},
			"FUNNEL.RESERVE":  {"FUNNEL.RESERVE", "k", "gcra", "10", "60000", "QUANTITY", "3"},
			"FUNNEL.ALLOWALL": {"FUNNEL.ALLOWALL", "2", "LIMIT", "a", "gcra", "10", "60000", "LIMIT", "b", "fixed_window", "5", "1000"},
			"FUNNEL.ACQUIRE":  {"FUNNEL.ACQUIRE", "c", "2", "30000"},
		} {
			got, want := c.do(cmd...), tc.want[name]
			if name == "FUNNEL.ACQUIRE" && tc.name == "FailOpen" {
				// Then a lease id of its own, 32 hex digits, and the delay.
				rest := got[min(len(got), len(want)):]
				if !regexp.MustCompile(`^\$32\r\n[0-9a-f]{32}\r\n:0\r\n$`).MatchString(rest) {
					t.Errorf("%s: %v with the store down: lease id and delay %q, want 32 hex digits and 0", tc.name, cmd, rest)
				}
				got = got[:min(len(got), len(want))]
			}
			if got != want {
				t.Errorf("%s: %v with the store down:\n got %q\nwant %q", tc.name, cmd, got, want)
			}
		}
		if tc.name == "FailOpen" {
			// With the caller's id, that id.
			if got, want := c.do("FUNNEL.ACQUIRE", "c", "2", "30000", "ID", "job-7"), "*7\r\n:1\r\n:2\r\n:2\r\n:-1\r\n:-1\r\n$5\r\njob-7\r\n:0\r\n"; got != want {
				t.Errorf("FailOpen: FUNNEL.ACQUIRE with an ID with the store down:\n got %q\nwant %q", got, want)
			}
		}
	}
}

// TestBugIsInternalError: an error that is neither the client's nor a
// store that cannot decide is a bug: "-ERR internal error", its detail not
// sent (it was "-ERR store unavailable", which said what was not so).
func TestBugIsInternalError(t *testing.T) {
	t.Parallel()
	c := serveFailing(t, respserver.Config{Fail: funnel.FailOpen}, errors.New("secret detail"))
	for _, cmd := range [][]string{{"CL.THROTTLE", "k", "4", "10", "60"}, {"PTTL", "k"}} {
		if got := c.do(cmd...); got != "-ERR internal error\r\n" {
			t.Errorf("%v: %q", cmd, got)
		}
	}
}

// TestLongKey: a key longer than funnel.MaxKeyLen is stored under its hash
// (funnel.BoundKey) by every command that takes a key, as on every edge
// (RESP stored keys of up to 512 KiB as they were before): CL.THROTTLE and
// FUNNEL.ALLOW on the long key share its bucket, PTTL sees it under the
// hash, and DEL of the long key deletes it.
func TestLongKey(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{EventLoops: testEventLoops})
	c := ts.dial(t)
	long := strings.Repeat("k", 100_000)
	hashed := funnel.BoundKey(long)
	if got, want := c.do("CL.THROTTLE", long, "1", "1", "60"), ints(0, 2, 1, -1, 60); got != want {
		t.Fatalf("first: %q, want %q", got, want)
	}
	if got, want := c.do("FUNNEL.ALLOW", long, "gcra", "1", "60000", "BURST", "1"), ints(1, 2, 0, -1, 120000, 0, 0); got != want {
		t.Fatalf("FUNNEL.ALLOW on the long key: %q, want %q", got, want)
	}
	if got := c.do("PTTL", hashed); got != ":120000\r\n" {
		t.Fatalf("PTTL of the hash: %q", got)
	}
	if got := c.do("PTTL", long); got != ":120000\r\n" {
		t.Fatalf("PTTL of the long key: %q", got)
	}
	if got := c.do("DEL", long); got != ":1\r\n" {
		t.Fatalf("DEL of the long key: %q", got)
	}
	exact := strings.Repeat("e", funnel.MaxKeyLen)
	c.do("CL.THROTTLE", exact, "1", "1", "60")
	if got := c.do("EXISTS", exact); got != ":1\r\n" {
		t.Fatalf("a key of MaxKeyLen bytes: EXISTS %q", got)
	}
	if n, ok := funnel.KeysOf(ts.store); !ok || n != 1 {
		t.Fatalf("the store holds %d keys, want 1 (the key of MaxKeyLen bytes as it is)", n)
	}
}
