package funnel_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
)

func ptr(v int64) *int64 { return &v }

func TestSpecLimit(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		spec funnel.Spec
		want funnel.Limit
	}{
		{"GCRADefaultBurst", funnel.Spec{Count: 30, Period: time.Minute}, funnel.PerMinute(30)},
		{"GCRABurst", funnel.Spec{Algorithm: "funnel", Count: 30, Period: time.Minute, Burst: ptr(15)}, funnel.PerMinute(30).WithBurst(15)},
		{"LeakyNoDelay", funnel.Spec{Algorithm: "leaky_bucket", Count: 10, Period: time.Second, NoDelay: true},
			funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 9, DelayUnits: funnel.NoDelay}},
		{"LeakyDelay", funnel.Spec{Algorithm: "leaky_bucket", Count: 10, Period: time.Second, Delay: ptr(3)},
			funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 9, DelayUnits: 3}},
		{"WindowNoBurst", funnel.Spec{Algorithm: "sliding_window", Count: 10, Period: time.Second, Ban: time.Hour},
			funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 10, Period: time.Second, Ban: time.Hour}},
		{"ConcurrencyNoBurst", funnel.Spec{Algorithm: "concurrency", Count: 10, Period: time.Minute},
			funnel.Limit{Algorithm: funnel.Concurrency, Count: 10, Period: time.Minute}},
		{"ConcurrencyBurst", funnel.Spec{Algorithm: "concurrency", Count: 10, Period: time.Minute, Burst: ptr(5), UnitDelay: 200 * time.Millisecond},
			funnel.Limit{Algorithm: funnel.Concurrency, Count: 10, Period: time.Minute, Burst: 5, UnitDelay: 200 * time.Millisecond}},
		{"Calendar", funnel.Spec{Algorithm: "fixed_window", Count: 1000, Calendar: "day", TimeZone: "Europe/Paris"},
			funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1000, Calendar: funnel.Daily, Location: paris}},
	} {
		got, err := c.spec.Limit()
		if err != nil || got.String() != c.want.String() || got.Burst != c.want.Burst || got.DelayUnits != c.want.DelayUnits || got.UnitDelay != c.want.UnitDelay {
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

func TestSpecErrors(t *testing.T) {
	for _, c := range []struct {
		spec  funnel.Spec
		field string
		msg   string
	}{
		{funnel.Spec{Algorithm: "token_bucket", Count: 1, Period: time.Second}, "algorithm", `unknown algorithm "token_bucket"`},
		{funnel.Spec{Algorithm: "fixed_window", Count: 1, Period: time.Second, Burst: ptr(3)}, "burst", "only gcra, leaky_bucket and concurrency take a burst"},
		{funnel.Spec{Count: 1, Period: time.Second, Delay: ptr(1)}, "delay", "only leaky_bucket takes a delay"},
		{funnel.Spec{Count: 1, Period: time.Second, NoDelay: true}, "nodelay", "only leaky_bucket takes a delay"},
		{funnel.Spec{Algorithm: "leaky_bucket", Count: 1, Period: time.Second, Delay: ptr(1), NoDelay: true}, "delay", "delay and nodelay exclude each other"},
		{funnel.Spec{Algorithm: "fixed_window", Count: 1, Calendar: "year"}, "calendar", `unknown calendar "year" (want day, week or month)`},
		{funnel.Spec{Count: 1, Calendar: "day"}, "calendar", "only fixed_window takes a calendar"},
		{funnel.Spec{Algorithm: "fixed_window", Count: 1, Period: time.Second, TimeZone: "UTC"}, "time_zone", "a time zone goes with a calendar"},
		{funnel.Spec{Algorithm: "fixed_window", Count: 1, Calendar: "day", TimeZone: "Mars/Olympus"}, "time_zone", `unknown time zone "Mars/Olympus"`},
		{funnel.Spec{Algorithm: "fixed_window", Count: 1, Calendar: "day", TimeZone: strings.Repeat("x", 100)}, "time_zone", "unknown time zone"},
		{funnel.Spec{Count: 0, Period: time.Second}, "", "zero rates are not supported"},
		{funnel.Spec{Count: 1, Period: time.Second, UnitDelay: time.Second}, "unit_delay", "only concurrency takes a unit delay"},
		{funnel.Spec{Algorithm: "concurrency", Count: 1, Period: time.Second, UnitDelay: -1}, "unit_delay", "must not be negative"},
		{funnel.Spec{Algorithm: "concurrency", Count: 1, Period: time.Second, UnitDelay: 25 * time.Hour}, "unit_delay", "above the largest"},
		{funnel.Spec{Algorithm: "concurrency", Count: 1, Period: time.Second, Burst: ptr(-1)}, "", "must not be negative"},
		{funnel.Spec{Algorithm: "concurrency", Count: 1, Period: time.Second, Burst: ptr(1 << 40)}, "", "too large"},
	} {
		_, err := c.spec.Limit()
		var se *funnel.SpecError
		if !errors.As(err, &se) || se.Field != c.field || !strings.Contains(err.Error(), c.msg) || !errors.Is(err, funnel.ErrInvalidLimit) {
			t.Errorf("%+v: %v (field %q); want field %q, %q", c.spec, err, fieldOf(se), c.field, c.msg)
		}
	}
}

func fieldOf(se *funnel.SpecError) string {
	if se == nil {
		return "<none>"
	}
	return se.Field
}

// A time zone is loaded once, then served from the cache.
func TestLoadLocationCached(t *testing.T) {
	a, err := funnel.LoadLocation("America/Havana")
	if err != nil {
		t.Fatal(err)
	}
	b, err := funnel.LoadLocation("America/Havana")
	if err != nil || a != b {
		t.Fatalf("%p, %p, %v: want the same location", a, b, err)
	}
	if n := testing.AllocsPerRun(100, func() { funnel.LoadLocation("America/Havana") }); n != 0 {
		t.Errorf("a cached zone allocates %v times", n)
	}
}

// Limit.Validate says which unit delay is out of range, as Spec.Limit
// does: the check lives in one place, and Spec.Limit names its field.
func TestValidateUnitDelay(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Nanosecond, "must not be negative, got -1ns"},
		{25 * time.Hour, "25h0m0s is above the largest, 24h0m0s"},
	} {
		l := funnel.Limit{Algorithm: funnel.Concurrency, Count: 1, Period: time.Second, UnitDelay: c.d}
		err := l.Validate()
		if !errors.Is(err, funnel.ErrInvalidLimit) || !strings.HasSuffix(err.Error(), ": "+c.want) {
			t.Errorf("unit delay %v: %v, want %q", c.d, err, c.want)
		}
		_, err = funnel.Spec{Algorithm: "concurrency", Count: 1, Period: time.Second, UnitDelay: c.d}.Limit()
		if want := "funnel: invalid limit: unit_delay: " + c.want; err == nil || err.Error() != want {
			t.Errorf("Spec with unit delay %v: %v, want %q", c.d, err, want)
		}
	}
}
