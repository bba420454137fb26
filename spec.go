package funnel

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/funnelrl/funnel/algo"
)

// Spec is a limit as its text forms give it (the RESP commands' arguments,
// the HTTP API's JSON, the rate-limit service's YAML rules): the algorithm,
// the calendar and the time zone by name, and the burst and the delay only
// when they are given. Spec.Limit turns it into a Limit with the defaults
// and the rules that every form shares, so that all of them read a limit
// the same way.
type Spec struct {
	// Algorithm is the algorithm's name as ParseAlgorithm takes it; empty
	// means gcra.
	Algorithm string
	// Count is the number of units per Period (for concurrency: the leases
	// held at once).
	Count int64
	// Period is the window or leak period (for concurrency: a lease's
	// lifetime); calendar windows leave it zero.
	Period time.Duration
	// Burst is, for gcra and leaky_bucket, the units beyond the first that
	// a full bucket admits at once; nil means Count-1. For concurrency it is
	// the leases beyond Count granted with a delay; nil means 0.
	Burst *int64
	// Delay is, for leaky_bucket only, the excess units that pass at once
	// (nginx's delay=); nil means 0.
	Delay *int64
	// UnitDelay is, for concurrency only, the default unit delay of a
	// lease granted within the burst (see Limit.UnitDelay); 0 means none.
	UnitDelay time.Duration
	// NoDelay is, for leaky_bucket only, nginx's nodelay: every unit within
	// the burst passes at once. It excludes Delay.
	NoDelay bool
	// Calendar is, for fixed_window only, "day", "week" (from Monday) or
	// "month"; empty means windows of Period aligned to the Unix epoch.
	Calendar string
	// TimeZone is the IANA name of the calendar's time zone, such as
	// "Europe/Paris"; empty means UTC. It goes with a Calendar only.
	TimeZone string
	// Ban, when positive, bans a key that overflows the limit for that long.
	Ban time.Duration
}

// SpecError is an error of Spec.Limit (and of ParseCalendar and
// LoadLocation): the field at fault and why. It wraps ErrInvalidLimit.
type SpecError struct {
	// Field is the field at fault in snake case ("algorithm", "burst",
	// "delay", "nodelay", "unit_delay", "calendar", "time_zone"), or empty
	// when the limit as a whole is invalid (Limit.Validate's reasons that
	// concern no one field).
	Field string
	// Reason says why, without the field.
	Reason error
}

// Error returns "funnel: invalid limit: field: reason", or Validate's error
// for the limit as a whole.
func (e *SpecError) Error() string {
	if e.Field == "" {
		return e.Reason.Error()
	}
	return ErrInvalidLimit.Error() + ": " + e.Field + ": " + e.Reason.Error()
}

// Unwrap returns ErrInvalidLimit and the reason.
func (e *SpecError) Unwrap() []error { return []error{ErrInvalidLimit, e.Reason} }

// specErr returns a SpecError of field.
func specErr(field, format string, args ...any) error {
	return &SpecError{Field: field, Reason: fmt.Errorf(format, args...)}
}

// fieldError is an error of Limit.Validate that one option of the limit
// causes: Spec.Limit reports it as a SpecError of that field.
type fieldError struct {
	field  string
	reason error
}

func (e *fieldError) Error() string { return e.reason.Error() }
func (e *fieldError) Unwrap() error { return e.reason }

// fieldErr returns a fieldError of field.
func fieldErr(field, format string, args ...any) error {
	return &fieldError{field: field, reason: fmt.Errorf(format, args...)}
}

// checkUnitDelay checks a concurrency limit's unit delay.
func checkUnitDelay(d time.Duration) error {
	switch {
	case d < 0:
		return fieldErr("unit_delay", "must not be negative, got %v", d)
	case d > algo.MaxUnitDelay:
		return fieldErr("unit_delay", "%v is above the largest, %v", d, algo.MaxUnitDelay)
	}
	return nil
}

// Limit returns the limit that s gives, validated. It reads the names
// (algorithm, calendar, time zone), gives the burst its default, and
// refuses what only the text can say wrong: a burst or a delay given to an
// algorithm that takes none (even 0), both delay and nodelay, a time zone
// without a calendar; the rest is Limit.Validate's. The error is a
// *SpecError that names the field at fault, or none when the limit as a
// whole is invalid.
func (s Spec) Limit() (Limit, error) {
	l := Limit{Count: s.Count, Period: s.Period, Ban: s.Ban, UnitDelay: s.UnitDelay}
	if s.Algorithm != "" {
		a, err := ParseAlgorithm(s.Algorithm)
		if err != nil {
			return Limit{}, specErr("algorithm", "unknown algorithm %q (want %s)", s.Algorithm, strings.Join(algorithmNames[:], ", "))
		}
		l.Algorithm = a
	}
	var err error
	if l.Burst, err = s.burst(l.Algorithm); err != nil {
		return Limit{}, err
	}
	if l.DelayUnits, err = s.delay(l.Algorithm); err != nil {
		return Limit{}, err
	}
	if l.Calendar, l.Location, err = s.calendar(); err != nil {
		return Limit{}, err
	}
	if err := l.Validate(); err != nil {
		if fe := (*fieldError)(nil); errors.As(err, &fe) {
			return Limit{}, &SpecError{Field: fe.field, Reason: fe.reason}
		}
		return Limit{}, &SpecError{Reason: err}
	}
	return l, nil
}

// burst returns the burst of a limit of algorithm a: the one given, or by
// default Count-1 for a bucket and 0 for the others.
func (s Spec) burst(a Algorithm) (int64, error) {
	bucket := a == GCRA || a == LeakyBucket
	switch {
	case s.Burst != nil && !bucket && a != Concurrency:
		return 0, specErr("burst", "only gcra, leaky_bucket and concurrency take a burst")
	case s.Burst != nil:
		return *s.Burst, nil
	case bucket:
		return max(s.Count-1, 0), nil
	}
	return 0, nil
}

// delay returns the delay of a limit of algorithm a: the one given,
// NoDelay, or 0.
func (s Spec) delay(a Algorithm) (int64, error) {
	switch {
	case (s.Delay != nil || s.NoDelay) && a != LeakyBucket:
		field := "delay"
		if s.Delay == nil {
			field = "nodelay"
		}
		return 0, specErr(field, "only leaky_bucket takes a delay")
	case s.Delay != nil && s.NoDelay:
		return 0, specErr("delay", "delay and nodelay exclude each other")
	case s.NoDelay:
		return NoDelay, nil
	case s.Delay != nil:
		return *s.Delay, nil
	}
	return 0, nil
}

// calendar returns the calendar and the time zone that s names.
func (s Spec) calendar() (Calendar, *time.Location, error) {
	var (
		c   Calendar
		loc *time.Location
		err error
	)
	if s.Calendar != "" {
		if c, err = ParseCalendar(s.Calendar); err != nil {
			return NoCalendar, nil, err
		}
	}
	if s.TimeZone != "" {
		if s.Calendar == "" {
			return NoCalendar, nil, specErr("time_zone", "a time zone goes with a calendar")
		}
		if loc, err = LoadLocation(s.TimeZone); err != nil {
			return NoCalendar, nil, err
		}
	}
	return c, loc, nil
}

// ParseCalendar returns the calendar named s: "day", "week" or "month".
// The error is a *SpecError of the field "calendar".
func ParseCalendar(s string) (Calendar, error) {
	switch s {
	case "day":
		return Daily, nil
	case "week":
		return Weekly, nil
	case "month":
		return Monthly, nil
	}
	return NoCalendar, specErr("calendar", "unknown calendar %q (want day, week or month)", trunc(s))
}

// zones caches the time zones LoadLocation found, by name: loading one
// reads the system's zone files, too slow for every request that names one.
// Only names that exist are kept, so the cache holds at most the few
// hundred zones there are.
var zones sync.Map // string -> *time.Location

// LoadLocation returns the time zone of IANA name (time.LoadLocation),
// cached after the first time. UTC's name is "UTC"; an empty name, or one
// that is not a zone, is a *SpecError of the field "time_zone".
func LoadLocation(name string) (*time.Location, error) {
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	if name == "" || len(name) > 64 || strings.ContainsAny(name, "\x00") {
		return nil, specErr("time_zone", "unknown time zone %q", trunc(name))
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, specErr("time_zone", "unknown time zone %q", trunc(name))
	}
	zones.Store(name, loc)
	return loc, nil
}

// trunc shortens s, a client's text quoted in an error, to 64 bytes.
func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
