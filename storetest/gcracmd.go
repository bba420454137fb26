package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/gcraref"
)

// GCRACall is one call of Redis's GCRA command in a case: at offset At from
// the case's start, GCRA key MaxBurst PerPeriod Period [TOKENS Tokens]. Want
// is the reply, or WantErr the error reply's text.
type GCRACall struct {
	At        time.Duration
	Key       string
	MaxBurst  int64
	PerPeriod int64
	Period    float64
	Tokens    int64 // 0 leaves TOKENS out (a count of 1)
	Want      [5]int64
	WantErr   string
}

// Args returns the call's arguments as a client sends them, the name first.
func (c GCRACall) Args() []string {
	a := []string{"GCRA", c.Key, strconv.FormatInt(c.MaxBurst, 10), strconv.FormatInt(c.PerPeriod, 10), strconv.FormatFloat(c.Period, 'g', -1, 64)}
	if c.Tokens != 0 {
		a = append(a, "TOKENS", strconv.FormatInt(c.Tokens, 10))
	}
	return a
}

// GCRAVectors are the worked examples of the GCRA command's spec: each case
// runs from Epoch (whole milliseconds, as Redis's command time is, but for
// the offsets that say otherwise).
var GCRAVectors = []struct {
	Name  string
	Calls []GCRACall
}{
	{"BurstThenRate", []GCRACall{
		// max_burst 5, 10 per 60 s: T = 6 s, Limit 6, variance 36 s.
		{At: 0, Key: "k", MaxBurst: 5, PerPeriod: 10, Period: 60, Want: [5]int64{0, 6, 5, -1, 6}},
		{At: 0, Key: "k", MaxBurst: 5, PerPeriod: 10, Period: 60, Want: [5]int64{0, 6, 4, -1, 12}},
		{At: 0, Key: "k", MaxBurst: 5, PerPeriod: 10, Period: 60, Tokens: 4, Want: [5]int64{0, 6, 0, -1, 36}},
		{At: 0, Key: "k", MaxBurst: 5, PerPeriod: 10, Period: 60, Want: [5]int64{1, 6, 0, 6, 36}},
		{At: 5999 * time.Millisecond, Key: "k", MaxBurst: 5, PerPeriod: 10, Period: 60, Want: [5]int64{1, 6, 0, 1, 31}},
		{At: 6 * time.Second, Key: "k", MaxBurst: 5, PerPeriod: 10, Period: 60, Want: [5]int64{0, 6, 0, -1, 36}},
		// more than a full bucket: never (-1), remaining from the TTL
		{At: 6 * time.Second, Key: "k", MaxBurst: 5, PerPeriod: 10, Period: 60, Tokens: 7, Want: [5]int64{1, 6, 0, -1, 36}},
		{At: 24 * time.Second, Key: "k", MaxBurst: 5, PerPeriod: 10, Period: 60, Tokens: 2, Want: [5]int64{0, 6, 1, -1, 30}},
	}},
	{"IntervalRoundsToNearestMicrosecond", []GCRACall{
		// 1 s / 3 = 333,333.33 µs → 333,333; 2 s / 3 = 666,666.67 µs → 666,667.
		{At: 0, Key: "a", MaxBurst: 0, PerPeriod: 3, Period: 1, Want: [5]int64{0, 1, 0, -1, 1}},
		{At: 333 * time.Millisecond, Key: "a", MaxBurst: 0, PerPeriod: 3, Period: 1, Want: [5]int64{1, 1, 0, 1, 1}},
		{At: 334 * time.Millisecond, Key: "a", MaxBurst: 0, PerPeriod: 3, Period: 1, Want: [5]int64{0, 1, 0, -1, 1}},
		{At: 0, Key: "b", MaxBurst: 2, PerPeriod: 3, Period: 2, Want: [5]int64{0, 3, 2, -1, 1}},
	}},
	{"SubMicrosecondInterval", []GCRACall{
		// 1 s / 10,000,000 rounds to 0 µs, taken as 1 µs.
		{At: 0, Key: "f", MaxBurst: 1000, PerPeriod: 10000000, Period: 1, Tokens: 1001, Want: [5]int64{0, 1001, 0, -1, 1}},
		{At: 0, Key: "f", MaxBurst: 1000, PerPeriod: 10000000, Period: 1, Want: [5]int64{1, 1001, 0, 1, 1}},
		{At: time.Millisecond, Key: "f", MaxBurst: 1000, PerPeriod: 10000000, Period: 1, Want: [5]int64{0, 1001, 999, -1, 1}},
	}},
	{"CommandTimeIsWholeMilliseconds", []GCRACall{
		// 0.9 ms later is the same command time: no token back yet.
		{At: 0, Key: "m", MaxBurst: 0, PerPeriod: 1000, Period: 1, Want: [5]int64{0, 1, 0, -1, 1}},
		{At: 900 * time.Microsecond, Key: "m", MaxBurst: 0, PerPeriod: 1000, Period: 1, Want: [5]int64{1, 1, 0, 1, 1}},
		{At: time.Millisecond, Key: "m", MaxBurst: 0, PerPeriod: 1000, Period: 1, Want: [5]int64{0, 1, 0, -1, 1}},
	}},
	{"FractionalPeriod", []GCRACall{
		// period 0.25 s, 1 per period: T = 250 ms; reset 250 ms → 1 s (ceil).
		{At: 0, Key: "p", MaxBurst: 1, PerPeriod: 1, Period: 0.25, Want: [5]int64{0, 2, 1, -1, 1}},
		{At: 0, Key: "p", MaxBurst: 1, PerPeriod: 1, Period: 0.25, Want: [5]int64{0, 2, 0, -1, 1}},
		{At: 0, Key: "p", MaxBurst: 1, PerPeriod: 1, Period: 0.25, Want: [5]int64{1, 2, 0, 1, 1}},
	}},
	{"Overflows", []GCRACall{
		{At: 0, Key: "o", MaxBurst: 9223372036854775807, PerPeriod: 1, Period: 1, WantErr: "ERR " + gcra.ErrCommandBurstOverflow.Error()},
		{At: 0, Key: "o", MaxBurst: 0, PerPeriod: 1, Period: 1, Tokens: 9223372036854775807, WantErr: "ERR " + gcra.ErrCommandTokensOverflow.Error()},
		// T = 999,999,999,999 s: 8 tokens fit, the new TAT of a 10th would not.
		{At: 0, Key: "o", MaxBurst: 8, PerPeriod: 1, Period: 999999999999, Tokens: 9, Want: [5]int64{0, 9, 0, -1, 8999999999992}}, // 8,999,999,999,991 s, rounded up twice (the µs as a double, then ceil)
		{At: 0, Key: "o", MaxBurst: 8, PerPeriod: 1, Period: 999999999999, Tokens: 1, WantErr: "ERR " + gcra.ErrCommandTokensOverflow.Error()},
		{At: 0, Key: "o", MaxBurst: 9, PerPeriod: 1, Period: 999999999999, WantErr: "ERR " + gcra.ErrCommandBurstOverflow.Error()},
	}},
}

// RunGCRA runs the GCRA command's cases against stores built by newStore,
// which must implement funnel.GCRAStore: the spec's worked examples, and
// random calls compared, reply for reply, with a model of a Redis that has
// the command (package internal/gcraref), at the same instants.
func RunGCRA(t *testing.T, newStore NewStore) {
	t.Run("Vectors", func(t *testing.T) {
		for _, v := range GCRAVectors {
			t.Run(v.Name, func(t *testing.T) {
				t.Parallel()
				clock := NewClock(GCRAEpoch)
				g := gcraStore(t, newStore(t, clock.Now))
				model := gcraref.New()
				for i, c := range v.Calls {
					clock.Set(GCRAEpoch + int64(c.At))
					got, gotErr := CallGCRA(g, c, clock.Now())
					want, wantErr := model.Call(clock.Now()/1e6, c.Args()...)
					if want != c.Want || wantErr != c.WantErr {
						t.Fatalf("call %d %v: the model answers %v %q, the vector says %v %q", i, c.Args(), want, wantErr, c.Want, c.WantErr)
					}
					if got != c.Want || gotErr != c.WantErr {
						t.Fatalf("call %d %v at +%v: got %v %q, want %v %q", i, c.Args(), c.At, got, gotErr, c.Want, c.WantErr)
					}
				}
			})
		}
	})
	t.Run("Model", func(t *testing.T) {
		for seed := range uint64(12) {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				t.Parallel()
				runGCRAModel(t, newStore, seed)
			})
		}
	})
}

// GCRAEpoch is Epoch rounded down to a whole millisecond: the start of the
// GCRAVectors' cases, so that their offsets are their command times.
const GCRAEpoch = Epoch / 1e6 * 1e6

func gcraStore(t *testing.T, s funnel.Store) funnel.GCRAStore {
	t.Helper()
	g, ok := funnel.GCRAOf(s)
	if !ok {
		t.Fatalf("%T is not a funnel.GCRAStore", s)
	}
	return g
}

// CallGCRA makes call c on g, and returns the reply or the error reply's
// text as the RESP server writes it (now is the clock's time, for the
// message of an unexpected failure).
func CallGCRA(g funnel.GCRAStore, c GCRACall, now int64) ([5]int64, string) {
	tokens := c.Tokens
	if tokens == 0 {
		tokens = 1
	}
	p, err := gcra.NewCommandParams(c.MaxBurst, c.PerPeriod, c.Period, tokens)
	if err != nil {
		return [5]int64{}, fmt.Sprintf("NewCommandParams: %v", err)
	}
	r, err := g.GCRA(context.Background(), c.Key, p)
	switch {
	case err == nil && r.Fallback:
		return [5]int64{}, fmt.Sprintf("a fallback at %d", now)
	case err == nil:
		return r.Reply.Ints(), ""
	case errors.Is(err, funnel.ErrWrongType):
		return [5]int64{}, "WRONGTYPE Operation against a key holding the wrong kind of value"
	}
	for _, e := range []error{gcra.ErrCommandInvalidKey, gcra.ErrCommandNegativeTime, gcra.ErrCommandTokensOverflow, gcra.ErrCommandBurstOverflow} {
		if errors.Is(err, e) {
			return [5]int64{}, "ERR " + e.Error()
		}
	}
	return [5]int64{}, err.Error()
}

// gcraPeriods are the periods the random calls choose from: whole and
// fractional seconds, intervals under a microsecond, and some so long that
// the arithmetic comes near 2^63 µs.
var gcraPeriods = []float64{1, 60, 0.5, 0.25, 0.001, 1e-7, 3600.25, 86400, 7.3, 1e9, 999999999999}

func runGCRAModel(t *testing.T, newStore NewStore, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 28))
	clock := NewClock(Epoch)
	g := gcraStore(t, newStore(t, clock.Now))
	model := gcraref.New()
	type limit struct {
		burst, per int64
		period     float64
	}
	var limits []limit
	for range 3 {
		l := limit{burst: rng.Int64N(8), per: 1 + rng.Int64N(20), period: gcraPeriods[rng.IntN(len(gcraPeriods))]}
		if rng.IntN(4) == 0 {
			l.per = 1 + rng.Int64N(20000000)
		}
		limits = append(limits, l)
	}
	// One near the bounds: T ≈ 10^18 µs, so that a burst of 10 or a few
	// calls overflow 2^63 µs (errors), and the other limits meet TATs far
	// beyond 2^53 µs.
	limits = append(limits, limit{burst: 6 + rng.Int64N(5), per: 1, period: 999999999999})
	keys := []string{"a", "b", "c"}
	var seen [3]int // allowed, limited, errors
	for i := range 300 {
		switch rng.IntN(6) {
		case 0:
		case 1:
			clock.Add(time.Duration(rng.Int64N(int64(time.Millisecond))))
		case 2, 3:
			clock.Add(time.Duration(rng.Int64N(int64(2 * time.Second))))
		case 4:
			clock.Add(time.Duration(rng.Int64N(int64(time.Minute))))
		default:
			clock.Add(time.Duration(rng.Int64N(int64(5 * time.Millisecond))))
		}
		l := limits[rng.IntN(len(limits))]
		c := GCRACall{Key: keys[rng.IntN(len(keys))], MaxBurst: l.burst, PerPeriod: l.per, Period: l.period}
		switch rng.IntN(5) {
		case 0:
			c.Tokens = 1 + rng.Int64N(l.burst+3)
		case 1:
			c.Tokens = 1
		}
		want, wantErr := model.Call(clock.Now()/1e6, c.Args()...)
		got, gotErr := CallGCRA(g, c, clock.Now())
		if got != want || gotErr != wantErr {
			t.Fatalf("seed %d, call %d %v at %d ns: got %v %q, the model answers %v %q", seed, i, c.Args(), clock.Now(), got, gotErr, want, wantErr)
		}
		switch {
		case wantErr != "":
			seen[2]++
		case want[0] == 0:
			seen[0]++
		default:
			seen[1]++
		}
	}
	t.Logf("seed %d: %d allowed, %d limited, %d errors", seed, seen[0], seen[1], seen[2])
	if seen[0] == 0 || seen[1] == 0 {
		t.Errorf("seed %d: %d allowed, %d limited, %d errors: the calls do not exercise both outcomes", seed, seen[0], seen[1], seen[2])
	}
}
