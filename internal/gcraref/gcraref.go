// Package gcraref is a model of a Redis that has the GCRA command, for
// tests: the command of Redis's src/gcra.c transliterated statement by
// statement, with its argument parsing (Redis's string2ll and string2d),
// over a map of keys that expire as Redis's do. It shares no code with the
// implementation it checks (gcra.DecideCommand and the RESP server's
// parser), so that the tests compare two readings of the C code.
package gcraref

import (
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Value is what a key holds.
type Value struct {
	// Str is a string value; Other marks a value of another type (a list).
	Str   string
	Other bool
	// PXAt is the key's expiry in Unix milliseconds, 0 for none.
	PXAt int64
}

// Redis is the model: keys, and the GCRA command over them.
type Redis struct {
	Keys map[string]Value
}

// New returns a model with no keys.
func New() *Redis { return &Redis{Keys: map[string]Value{}} }

// lookup returns key's value at the millisecond nowMS, dropping it when it
// has expired (Redis keeps a key while now <= its expiry).
func (r *Redis) lookup(key string, nowMS int64) (Value, bool) {
	v, ok := r.Keys[key]
	if ok && v.PXAt != 0 && nowMS > v.PXAt {
		delete(r.Keys, key)
		return Value{}, false
	}
	return v, ok
}

var (
	intSyntax   = regexp.MustCompile(`^(0|-?[1-9][0-9]*)$`)
	floatSyntax = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)
	infNaN      = regexp.MustCompile(`^[+-]?(?i:inf|infinity|nan)$`)
)

// string2ll is Redis's util.c string2ll.
func string2ll(s string) (int64, bool) {
	if len(s) == 0 || len(s) >= 21 || !intSyntax.MatchString(s) {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// string2d is Redis's util.c string2d over fast_float (leading '+' taken,
// overflow to infinity, underflow to zero, NaN refused).
func string2d(s string) (float64, bool) {
	if !floatSyntax.MatchString(s) && !infNaN.MatchString(s) {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !strings.Contains(err.Error(), "out of range") {
		return 0, false
	}
	if math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

// getRangeLong is getRangeLongFromObjectOrReply with msg NULL, and
// getPositiveLongFromObjectOrReply when positive.
func getRangeLong(s string, min int64, positive bool) (int64, string) {
	v, ok := string2ll(s)
	if !ok {
		return 0, "ERR value is not an integer or out of range"
	}
	if v < min {
		if positive {
			return 0, "ERR value is out of range, must be positive"
		}
		return 0, "ERR value is out of range, value must between " + strconv.FormatInt(min, 10) + " and 9223372036854775807"
	}
	return v, ""
}

// Call runs argv (the command name first) at the millisecond nowMS and
// returns the reply, or the error reply's text.
func (r *Redis) Call(nowMS int64, argv ...string) ([5]int64, string) {
	if len(argv) < 5 || len(argv) > 7 {
		return [5]int64{}, "ERR wrong number of arguments for 'gcra' command"
	}
	key := argv[1]
	var maxBurst, tokensPerPeriod, numTokens int64 = 0, 0, 1
	var period float64
	var limited int64
	var remaining, retryAfter, resetAfter int64 = 0, -1, 0
	var e string
	if maxBurst, e = getRangeLong(argv[2], 0, true); e != "" {
		return [5]int64{}, e
	}
	if maxBurst < math.MaxInt64 {
		maxBurst++
	}
	if tokensPerPeriod, e = getRangeLong(argv[3], 1, false); e != "" {
		return [5]int64{}, e
	}
	var ok bool
	if period, ok = string2d(argv[4]); !ok {
		return [5]int64{}, "ERR value is not a valid float"
	}
	if period <= 0 || period >= 1e12 {
		return [5]int64{}, "ERR period must be > 0 and < 1e12"
	}
	if len(argv) >= 6 {
		word := argv[5]
		if i := strings.IndexByte(word, 0); i >= 0 {
			word = word[:i]
		}
		if !strings.EqualFold(word, "tokens") {
			return [5]int64{}, "ERR syntax error"
		}
		if len(argv) == 6 {
			return [5]int64{}, "ERR Missing TOKENS value"
		}
		if numTokens, e = getRangeLong(argv[6], 1, false); e != "" {
			return [5]int64{}, e
		}
	}
	now := nowMS * 1000
	var tatUs, newTatUs int64
	kv, exists := r.lookup(key, nowMS)
	if exists && kv.Other {
		return [5]int64{}, "WRONGTYPE Operation against a key holding the wrong kind of value"
	}
	if exists {
		if tatUs, ok = string2ll(kv.Str); !ok {
			return [5]int64{}, "ERR Invalid GCRA key"
		}
		if tatUs <= 0 {
			return [5]int64{}, "ERR Negative time is invalid value for GCRA"
		}
	} else {
		tatUs = now
	}
	periodUs := period * 1000000.
	emissionIntervalUs := int64(periodUs/float64(tokensPerPeriod) + 0.5)
	if emissionIntervalUs == 0 {
		emissionIntervalUs = 1
	}
	if emissionIntervalUs > math.MaxInt64/numTokens {
		return [5]int64{}, "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and TOKENS would cause an overflow"
	}
	if emissionIntervalUs > math.MaxInt64/maxBurst {
		return [5]int64{}, "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and max_burst would cause an overflow"
	}
	varianceUs := emissionIntervalUs * maxBurst
	incrementUs := emissionIntervalUs * numTokens
	baseUs := tatUs
	if now > tatUs {
		baseUs = now
	}
	if math.MaxInt64-baseUs < incrementUs {
		return [5]int64{}, "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and TOKENS would cause an overflow"
	}
	newTatUs = baseUs + incrementUs
	allowAt := newTatUs - varianceUs
	diffUs := now - allowAt
	var ttlUs int64
	if diffUs < 0 {
		limited = 1
		if incrementUs <= varianceUs {
			retryAfter = int64(math.Ceil(float64(-diffUs) / 1000000.))
		}
		ttlUs = tatUs - now
	} else {
		limited = 0
		ttlUs = newTatUs - now
		r.Keys[key] = Value{Str: strconv.FormatInt(newTatUs, 10), PXAt: newTatUs / 1000}
	}
	nextUs := varianceUs - ttlUs
	if nextUs > -emissionIntervalUs {
		remaining = nextUs / emissionIntervalUs
	}
	resetAfter = int64(math.Ceil(float64(ttlUs) / 1000000.))
	return [5]int64{limited, maxBurst, remaining, retryAfter, resetAfter}, ""
}
