package server

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzLimitArgs: the FUNNEL.* limit parser answers every argument list with
// an ERR reply or a limit that is valid, never a panic, and never uses more
// arguments than it was given.
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
	} {
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, stop bool) {
		args := bytes.Split(in, []byte(" "))
		fl, used, err := parseLimitArgs(args, stop)
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
	})
}
