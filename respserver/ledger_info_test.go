package respserver_test

import (
	"strings"
	"testing"

	"github.com/funnelrl/funnel/respserver"
	"github.com/redis/go-redis/v9"
)

// TestInfoLedgerCounters: INFO's stats count charges, reserves and settles
// by outcome beside the throttles (they were counted nowhere: a charge into
// debt, a refused reserve or a settle of an unknown reservation left no
// trace), read through go-redis, and Server.Stats counts the same.
func TestInfoLedgerCounters(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ts := startServer(t, respserver.Config{})
	rdb := ts.goRedis(t, redis.Options{PoolSize: 2})
	limit := []any{"fixed_window", 10, 60000}
	do := func(want string, args ...any) []any {
		t.Helper()
		v, err := rdb.Do(ctx, args...).Slice()
		if want != "" {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("%v: %v, %v; want the error %q", args, v, err, want)
			}
			return nil
		}
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}
	cmd := func(name, key string, rest ...any) []any {
		return append(append([]any{name, key}, limit...), rest...)
	}
	do("", cmd("FUNNEL.CHARGE", "a", "QUANTITY", 4)...) // within
	do("", cmd("FUNNEL.CHARGE", "a", "QUANTITY", 8)...) // 12 of 10: into debt
	id1 := do("", cmd("FUNNEL.RESERVE", "r", "QUANTITY", 6)...)[7].(string)
	if got := do("", cmd("FUNNEL.RESERVE", "r", "QUANTITY", 6)...); got[0] != int64(0) || got[7] != nil {
		t.Fatalf("a reserve over the limit: %v, want refused", got)
	}
	do("", "FUNNEL.SETTLE", "r", id1, 3) // 3 of the 6 given back
	do("", "FUNNEL.SETTLE", "r", id1, 3) // again: nothing changed
	id2 := do("", cmd("FUNNEL.RESERVE", "r", "QUANTITY", 5)...)[7].(string)
	do("", "FUNNEL.SETTLE", "r", id2, 20) // 23 of 10: into debt
	do("unknown or expired reservation", "FUNNEL.SETTLE", "r", "nope", 1)

	info, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"throttle_allowed":     "2", // the admitted reserves
		"throttle_limited":     "1",
		"charges":              "2",
		"charges_in_debt":      "1",
		"reserves_admitted":    "2",
		"reserves_refused":     "1",
		"settles":              "2",
		"settles_in_debt":      "1",
		"settles_again":        "1",
		"settles_unknown":      "1",
		"throttle_fail_open":   "0",
		"throttle_fail_closed": "0",
	}
	for name, w := range want {
		if got := field(info, name); got != w {
			t.Errorf("INFO %s = %q, want %s", name, got, w)
		}
	}
	st := ts.srv.Stats()
	if st.Charges != 2 || st.ChargesInDebt != 1 || st.ReservesAdmitted != 2 || st.ReservesRefused != 1 ||
		st.Settles != 2 || st.SettlesInDebt != 1 || st.SettlesAgain != 1 || st.SettlesUnknown != 1 {
		t.Errorf("Stats: %+v", st)
	}
	// The counts of a client that has gone stay.
	rdb.Close()
	poll(t, "the clients to be gone", func() bool { return ts.srv.Stats().Clients == 0 })
	if got := ts.srv.Stats(); got.Charges != 2 || got.Settles != 2 || got.SettlesUnknown != 1 || got.ReservesRefused != 1 {
		t.Errorf("Stats once the clients are gone: %+v", got)
	}
}
