package respserver

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
)

// FuzzLimitArgs: the FUNNEL.* limit parser answers every argument list, as
// every command reads it, with an ERR reply or a limit that is valid, never
// a panic, and never uses more arguments than it was given; PEEK is taken
// by FUNNEL.ALLOW only, FUNNEL.CHARGE's and FUNNEL.RESERVE's lists have a
// QUANTITY (at least 1 for FUNNEL.RESERVE), and TTL is taken by
// FUNNEL.RESERVE only, in its range.
func FuzzLimitArgs(f *testing.F) {
	for _, seed := range []string{
		"fixed_window 3 60000",
		"gcra 10 1000 BURST 20 QUANTITY 2 BAN 60000",
		"leaky_bucket 5 1000 BURST 3 DELAY 1",
		"leaky_bucket 5 1000 NODELAY",
		"fixed_window 1000 0 CALENDAR day TZ Europe/Paris",
		"fixed_window 1 0 CALENDAR month TZ Mars/Olympus",
		"sliding_log 100 1000 LIMIT k gcra 1 1",
		"sliding_window 9223372036854775807 9223372036854775807",
		"gcra -1 1000", "gcra 1 1000 QUANTITY", "FIXED_WINDOW 1 1.5",
		"concurrency 1 1000", "gcra 1 1000 TZ \x00",
		"gcra 10 1000 QUANTITY 11 PEEK", "sliding_log 3 1000 PEEK QUANTITY 2 PEEK",
		"fixed_window 3 1000 QUANTITY 9223372036854775807", "gcra 1 1 QUANTITY 18446744073709551616",
		"gcra 1 1000 BURST 4 QUANTITY -3", "leaky_bucket 1 1000 QUANTITY 2 QUANTITY",
		"gcra 10 1000 QUANTITY 5 TTL 60000", "sliding_log 3 1000 TTL 1 QUANTITY 1", "fixed_window 3 1000 QUANTITY 0 TTL 86400000",
		"gcra 1 1000 QUANTITY 1 TTL 86400001", "gcra 1 1000 QUANTITY 1 TTL 0", "gcra 1 1000 QUANTITY 1 TTL -5 TTL 7", "gcra 1 1000 TTL",
	} {
		for use := range useReserve + 1 {
			f.Add([]byte(seed), uint8(use))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte, u uint8) {
		use := limitUse(u % uint8(useReserve+1))
		args := bytes.Split(in, []byte(" "))
		fl, used, err := parseLimitArgs(args, use)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ERR ") {
				t.Fatalf("%q: reply %q is not an ERR", in, err)
			}
			return
		}
		if used > len(args) || used < 3 {
			t.Fatalf("%q: used %d of %d arguments", in, used, len(args))
		}
		if err := fl.limit.Validate(); err != nil {
			t.Fatalf("%q: parsed an invalid limit %v: %v", in, fl.limit, err)
		}
		if fl.n < 0 {
			t.Fatalf("%q: negative quantity %d", in, fl.n)
		}
		if fl.peek && use != useAllow {
			t.Fatalf("%q: PEEK taken for use %d", in, use)
		}
		if (use == useCharge || use == useReserve) && !slices.ContainsFunc(args[:used], func(a []byte) bool { return bytes.EqualFold(a, []byte("QUANTITY")) }) {
			t.Fatalf("%q: a charge or a reserve without QUANTITY", in)
		}
		if use == useReserve && fl.n < 1 {
			t.Fatalf("%q: a reserve of %d", in, fl.n)
		}
		if fl.ttl != 0 && (use != useReserve || fl.ttl < time.Millisecond || fl.ttl > funnel.MaxReservationTTL || fl.ttl%time.Millisecond != 0) {
			t.Fatalf("%q: TTL %v taken for use %d", in, fl.ttl, use)
		}
	})
}

// FuzzSettleArgs: FUNNEL.SETTLE's parser answers every argument list with
// an ERR reply or an actual amount of at least 0, never a panic.
func FuzzSettleArgs(f *testing.F) {
	for _, seed := range []string{
		"FUNNEL.SETTLE k id 0", "FUNNEL.SETTLE k id 4096", "FUNNEL.SETTLE k id -1", "FUNNEL.SETTLE k id x",
		"FUNNEL.SETTLE k id 9223372036854775807", "FUNNEL.SETTLE k id 18446744073709551616", "FUNNEL.SETTLE k id",
		"FUNNEL.SETTLE k id 1 2", "FUNNEL.SETTLE k  +1", "FUNNEL.SETTLE k id 01",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		args := bytes.Split(in, []byte(" "))
		actual, err := parseSettle(args)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ERR ") {
				t.Fatalf("%q: reply %q is not an ERR", in, err)
			}
			return
		}
		if len(args) != 4 || actual < 0 {
			t.Fatalf("%q: parsed actual %d of %d arguments", in, actual, len(args))
		}
	})
}

// FuzzAcquireArgs: FUNNEL.ACQUIRE's parser answers every argument list with
// an ERR reply or a valid concurrency limit, never a panic.
func FuzzAcquireArgs(f *testing.F) {
	for _, seed := range []string{
		"FUNNEL.ACQUIRE k 2 1000",
		"FUNNEL.ACQUIRE k 2 1000 ID x BURST 3 DELAY 100",
		"FUNNEL.ACQUIRE k 2 1000 DELAY 86400001",
		"FUNNEL.ACQUIRE k 2 1000 BURST -1",
		"FUNNEL.ACQUIRE k 2 1000 BURST 1099511627776 ID",
		"FUNNEL.ACQUIRE k 0 9223372036854775807 DELAY 9223372036854775807",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		args := bytes.Split(in, []byte(" "))
		a, err := parseAcquire(args)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ERR ") {
				t.Fatalf("%q: reply %q is not an ERR", in, err)
			}
			return
		}
		if err := a.limit.Validate(); err != nil || a.limit.Algorithm.String() != "concurrency" {
			t.Fatalf("%q: parsed %v: %v", in, a.limit, err)
		}
		if a.id != nil && (len(a.id) == 0 || len(a.id) > maxLeaseID) {
			t.Fatalf("%q: lease id %q", in, a.id)
		}
	})
}
