package gcra_test

import (
	"math"
	"strconv"
	"testing"

	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/gcraref"
)

func TestNewCommandParams(t *testing.T) {
	for _, tc := range []struct {
		burst, per int64
		period     float64
		tokens     int64
		want       gcra.CommandParams
	}{
		// T = 6 s; limit 6; variance 36 s.
		{5, 10, 60, 1, gcra.CommandParams{Limit: 6, Interval: 6e6, Increment: 6e6, Variance: 36e6}},
		{5, 10, 60, 3, gcra.CommandParams{Limit: 6, Interval: 6e6, Increment: 18e6, Variance: 36e6}},
		// Rounded to the nearest µs: 333,333.33 down, 666,666.67 up, .5 up.
		{0, 3, 1, 1, gcra.CommandParams{Limit: 1, Interval: 333333, Increment: 333333, Variance: 333333}},
		{0, 3, 2, 1, gcra.CommandParams{Limit: 1, Interval: 666667, Increment: 666667, Variance: 666667}},
		{0, 2, 0.000001, 1, gcra.CommandParams{Limit: 1, Interval: 1, Increment: 1, Variance: 1}},
		// Under half a microsecond: 0, taken as 1.
		{9, 3, 0.000001, 1, gcra.CommandParams{Limit: 10, Interval: 1, Increment: 1, Variance: 10}},
		// max_burst 2^63-1 stays the limit (no +1); T·limit overflows.
		{math.MaxInt64, 1, 0.000001, 1, gcra.CommandParams{Limit: math.MaxInt64, Interval: 1, Increment: 1, Variance: math.MaxInt64}},
		{math.MaxInt64, 1, 1, 1, gcra.CommandParams{Limit: math.MaxInt64, Interval: 1e6, Overflow: gcra.ErrCommandBurstOverflow}},
		// The count's overflow is checked first.
		{math.MaxInt64, 1, 1, math.MaxInt64, gcra.CommandParams{Limit: math.MaxInt64, Interval: 1e6, Overflow: gcra.ErrCommandTokensOverflow}},
	} {
		got, err := gcra.NewCommandParams(tc.burst, tc.per, tc.period, tc.tokens)
		if err != nil || got != tc.want {
			t.Errorf("NewCommandParams(%d, %d, %v, %d) = %+v, %v; want %+v", tc.burst, tc.per, tc.period, tc.tokens, got, err, tc.want)
		}
	}
	for _, bad := range [][4]float64{{-1, 1, 1, 1}, {0, 0, 1, 1}, {0, 1, 0, 1}, {0, 1, 1e12, 1}, {0, 1, math.NaN(), 1}, {0, 1, math.Inf(1), 1}, {0, 1, 1, 0}} {
		if _, err := gcra.NewCommandParams(int64(bad[0]), int64(bad[1]), bad[2], int64(bad[3])); err != gcra.ErrCommandArgs {
			t.Errorf("NewCommandParams%v: %v", bad, err)
		}
	}
}

func TestDecideCommand(t *testing.T) {
	const now = 1_795_350_508_971_000 // µs of a whole ms
	p, _ := gcra.NewCommandParams(5, 10, 60, 1)
	// A fresh key: admitted, the TAT T after now.
	tat, r, stored, err := gcra.DecideCommand(now, 0, false, p)
	if err != nil || !stored || tat != now+6e6 || r.Ints() != [5]int64{0, 6, 5, -1, 6} {
		t.Fatal(tat, r, stored, err)
	}
	// Limited: nothing to store, the TAT as it was.
	full := int64(now + 36e6)
	tat, r, stored, err = gcra.DecideCommand(now, full, true, p)
	if err != nil || stored || tat != full || r.Ints() != [5]int64{1, 6, 0, 6, 36} {
		t.Fatal(tat, r, stored, err)
	}
	// A TAT in the past (a key set by hand): remaining from the negative
	// TTL, beyond the limit, and a reset at or below 0, when limited.
	p7, _ := gcra.NewCommandParams(5, 10, 60, 7)
	_, r, _, _ = gcra.DecideCommand(now, now-12_500_000, true, p7)
	if r.Ints() != [5]int64{1, 6, 8, -1, -12} {
		t.Fatal(r)
	}
	if _, _, _, err := gcra.DecideCommand(now, 0, true, p); err != gcra.ErrCommandNegativeTime {
		t.Fatal(err)
	}
	over, _ := gcra.NewCommandParams(math.MaxInt64, 1, 1, 1)
	if _, _, _, err := gcra.DecideCommand(now, -1, true, over); err != gcra.ErrCommandNegativeTime {
		t.Fatalf("the key is checked first: %v", err)
	}
	if _, _, _, err := gcra.DecideCommand(now, 0, false, over); err != gcra.ErrCommandBurstOverflow {
		t.Fatal(err)
	}
	if _, _, _, err := gcra.DecideCommand(now, math.MaxInt64-5e6, true, p); err != gcra.ErrCommandTokensOverflow {
		t.Fatal(err)
	}
}

// FuzzDecideCommand: the decision is the model's (internal/gcraref, the C
// function read separately), for any parameters, key and time.
func FuzzDecideCommand(f *testing.F) {
	f.Add(int64(5), int64(10), 60.0, int64(1), int64(1_795_350_508_971), int64(1_795_350_514_971_000), true)
	f.Add(int64(0), int64(3), 1.0, int64(1), int64(1_795_350_508_971), int64(0), false)
	f.Add(int64(8), int64(1), 999999999999.0, int64(9), int64(1_795_350_508_971), int64(9_000_000_000_000_000_000), true)
	f.Add(int64(1000), int64(10000000), 1.0, int64(1001), int64(1), int64(5), true)
	f.Add(int64(5), int64(10), 60.0, int64(7), int64(1_795_350_508_971), int64(1_795_350_496_471_000), true)
	f.Fuzz(func(t *testing.T, burst, per int64, period float64, tokens, nowMS, tat int64, exists bool) {
		p, err := gcra.NewCommandParams(burst, per, period, tokens)
		if err != nil || nowMS < 0 || nowMS > math.MaxInt64/1000 {
			return
		}
		model := gcraref.New()
		if exists {
			model.Keys["k"] = gcraref.Value{Str: strconv.FormatInt(tat, 10)}
		}
		want, wantErr := model.Call(nowMS, "GCRA", "k", strconv.FormatInt(burst, 10), strconv.FormatInt(per, 10), strconv.FormatFloat(period, 'g', -1, 64), "TOKENS", strconv.FormatInt(tokens, 10))
		newTAT, r, stored, err := gcra.DecideCommand(nowMS*1000, tat, exists, p)
		switch {
		case err != nil || wantErr != "":
			if err == nil || "ERR "+err.Error() != wantErr {
				t.Fatalf("%+v at %d on %d (%v): %v, the model %q", p, nowMS, tat, exists, err, wantErr)
			}
		case r.Ints() != want:
			t.Fatalf("%+v at %d on %d (%v): %v, the model %v", p, nowMS, tat, exists, r.Ints(), want)
		case stored != (model.Keys["k"].Str == strconv.FormatInt(newTAT, 10) && want[0] == 0):
			t.Fatalf("%+v at %d on %d (%v): stored %v %d, the model holds %+v", p, nowMS, tat, exists, stored, newTAT, model.Keys["k"])
		}
	})
}
