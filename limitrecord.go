package funnel

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// EncodeLimit returns l as one line of text that DecodeLimit reads back:
// how a store records the limit of a reservation beside its key (the
// memory store's snapshots, a Redis value), so that Settle, which is given
// no limit, settles under the one the estimate was taken under. The
// fields, separated by spaces: "l1", the algorithm's name, Count, Period
// in ns, Burst, DelayUnits, UnitDelay in ns, the calendar's number, Ban in
// ns, and the time zone's name when there is one.
func EncodeLimit(l Limit) string {
	b := make([]byte, 0, 64)
	b = append(b, "l1 "...)
	b = append(b, l.Algorithm.String()...)
	for _, v := range [...]int64{l.Count, int64(l.Period), l.Burst, l.DelayUnits, int64(l.UnitDelay), int64(l.Calendar), int64(l.Ban)} {
		b = append(b, ' ')
		b = strconv.AppendInt(b, v, 10)
	}
	if l.Location != nil {
		b = append(b, ' ')
		b = append(b, l.Location.String()...)
	}
	return string(b)
}

// DecodeLimit returns the limit that EncodeLimit wrote as s, validated. Its
// error wraps ErrInvalidLimit.
func DecodeLimit(s string) (Limit, error) {
	bad := func(why string) (Limit, error) {
		return Limit{}, fmt.Errorf("%w: limit record %q: %s", ErrInvalidLimit, trunc(s), why)
	}
	f := strings.Split(s, " ")
	if len(f) < 9 || len(f) > 10 || f[0] != "l1" {
		return bad("not a limit record")
	}
	a, err := ParseAlgorithm(f[1])
	if err != nil {
		return bad("unknown algorithm")
	}
	var v [7]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[2+i], 10, 64); err != nil {
			return bad("not an integer")
		}
	}
	if v[5] < 0 || v[5] > int64(Monthly) {
		return bad("unknown calendar")
	}
	l := Limit{Algorithm: a, Count: v[0], Period: time.Duration(v[1]), Burst: v[2], DelayUnits: v[3],
		UnitDelay: time.Duration(v[4]), Calendar: Calendar(v[5]), Ban: time.Duration(v[6])}
	if len(f) == 10 {
		if l.Location, err = LoadLocation(f[9]); err != nil {
			return bad("unknown time zone")
		}
	}
	if err := l.Validate(); err != nil {
		return Limit{}, err
	}
	return l, nil
}
