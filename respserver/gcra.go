package respserver

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

// Redis's own GCRA command, reply for reply (src/gcra.c and
// src/commands/gcra.json of Redis):
//
//	GCRA key max_burst tokens_per_period period [TOKENS count]
//
// The arguments are parsed as Redis parses them, in the command's order,
// with Redis's error texts; the decision is the store's (funnel.GCRAStore),
// by gcra.DecideCommand.

// gcraDoc is GCRA's entry of COMMAND DOCS, as Redis's gcra.json says it.
var gcraDoc = commandDoc{summary: "Rate limit via GCRA (Generic Cell Rate Algorithm).", since: "8.8.0", group: "rate_limit", complexity: "O(1)",
	args: []argDoc{{name: "key", typ: "key"}, {name: "max-burst", typ: "integer"}, {name: "tokens-per-period", typ: "integer"},
		{name: "period", typ: "double"}, {name: "count", typ: "integer", token: "TOKENS", optional: true}}}

// Redis's replies to GCRA's arguments.
const (
	gcraArityError    = "ERR wrong number of arguments for 'gcra' command"
	gcraNotInteger    = "ERR value is not an integer or out of range"
	gcraNotPositive   = "ERR value is out of range, must be positive"
	gcraNotAtLeastOne = "ERR value is out of range, value must between 1 and 9223372036854775807"
	gcraNotFloat      = "ERR value is not a valid float"
	gcraPeriodRange   = "ERR period must be > 0 and < 1e12"
	gcraSyntaxError   = "ERR syntax error"
	gcraMissingTokens = "ERR Missing TOKENS value"
	gcraErrorPrefix   = "ERR "
)

// parseGCRA parses GCRA's arguments (the command name first) into the
// command's parameters, or returns Redis's error reply for the first bad
// one. The command table has checked that there are at least five.
func parseGCRA(args [][]byte) (gcra.CommandParams, string) {
	if len(args) > 7 { // the name, the key, three numbers, TOKENS and its count
		return gcra.CommandParams{}, gcraArityError
	}
	maxBurst, ok := redisInt(args[2])
	if !ok {
		return gcra.CommandParams{}, gcraNotInteger
	}
	if maxBurst < 0 {
		return gcra.CommandParams{}, gcraNotPositive
	}
	perPeriod, ok := redisInt(args[3])
	if !ok {
		return gcra.CommandParams{}, gcraNotInteger
	}
	if perPeriod < 1 {
		return gcra.CommandParams{}, gcraNotAtLeastOne
	}
	period, ok := redisDouble(args[4])
	if !ok {
		return gcra.CommandParams{}, gcraNotFloat
	}
	if period <= 0 || period >= gcra.MaxCommandPeriod {
		return gcra.CommandParams{}, gcraPeriodRange
	}
	tokens := int64(1)
	if len(args) >= 6 {
		if !equalFoldC(args[5], "tokens") {
			return gcra.CommandParams{}, gcraSyntaxError
		}
		if len(args) == 6 {
			return gcra.CommandParams{}, gcraMissingTokens
		}
		if tokens, ok = redisInt(args[6]); !ok {
			return gcra.CommandParams{}, gcraNotInteger
		}
		if tokens < 1 {
			return gcra.CommandParams{}, gcraNotAtLeastOne
		}
	}
	p, err := gcra.NewCommandParams(maxBurst, perPeriod, period, tokens)
	if err != nil {
		return gcra.CommandParams{}, gcraErrorPrefix + err.Error() // not reached: the checks above are its own
	}
	return p, ""
}

// equalFoldC reports whether b, up to its first NUL byte (C's strcasecmp
// stops there), equals the lower-case ASCII word w in any case.
func equalFoldC(b []byte, w string) bool {
	b = cstr(b)
	if len(b) != len(w) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}

// redisInt parses b as Redis's string2ll does: an optional '-', then a
// digit 1 to 9 and more digits, or "0" alone; no '+', no leading zero, no
// space, under 21 bytes, within int64.
func redisInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) >= 21 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > math.MaxUint64/10 {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
		if v < uint64(c-'0') {
			return 0, false
		}
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return int64(-v), true
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}

// redisDouble parses b as Redis's string2d does (the fast_float library,
// with a leading '+' allowed): an optional sign, then digits with an
// optional '.' (a digit at least) and an optional exponent (e or E, an
// optional sign, digits), or "inf", "infinity" or "nan" in any case; the
// whole of b, with no leading space. NaN is refused; a value beyond the
// doubles is infinite, one below them 0 (Redis's string2d takes both,
// since fast_float reports them as EINVAL rather than ERANGE).
func redisDouble(b []byte) (float64, bool) {
	s := b
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	if isInfNaN(s) {
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil || f != f {
			return 0, false
		}
		return f, true
	}
	i, digits := 0, 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i, digits = i+1, digits+1
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i, digits = i+1, digits+1
		}
	}
	if digits == 0 {
		return 0, false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		k := j
		for k < len(s) && '0' <= s[k] && s[k] <= '9' {
			k++
		}
		if k > j {
			i = k
		}
	}
	if i != len(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		var ne *strconv.NumError
		if !errors.As(err, &ne) || ne.Err != strconv.ErrRange {
			return 0, false
		}
	}
	return f, true
}

// isInfNaN reports whether s is "inf", "infinity" or "nan" in any case
// (fast_float also takes "nan(chars)", which is NaN all the same).
func isInfNaN(s []byte) bool {
	switch len(s) {
	case 3, 8:
		return equalFoldC(s, "inf") || equalFoldC(s, "nan") || equalFoldC(s, "infinity")
	}
	return false
}

func cmdGCRA(c *conn, args [][]byte) {
	p, msg := parseGCRA(args)
	if msg != "" {
		c.wr.WriteError(msg)
		return
	}
	gs, ok := funnel.GCRAOf(c.s.store)
	if !ok {
		c.replyError(funnel.ErrNoGCRA)
		return
	}
	// The key aliases the read buffer: stores copy a key they keep.
	res, err := gs.GCRA(context.Background(), storeKey(args[1]), p)
	if err != nil {
		for _, e := range gcraErrors {
			if errors.Is(err, e) {
				c.wr.WriteError(gcraErrorPrefix + e.Error())
				return
			}
		}
		if !c.fellBack(err) {
			return
		}
		res = c.s.cfg.Fail.GCRAFallback(p)
	}
	r := res.Reply
	if res.Fallback {
		fr := funnel.Result{Fallback: true, Allowed: !r.Limited}
		if c.decided(&fr) {
			return
		}
		// As CL.THROTTLE answers them (see fallbackReset): fail-open, the
		// whole limit remaining; FailClosedRefuse, limited, nothing
		// remaining, retry in 1 s; a reset after of -1 either way.
		if r.Limited {
			r.Remaining, r.RetryAfter = 0, int64(fr.RetryAfter/time.Second)
		} else {
			r.Remaining, r.RetryAfter = r.Limit, -1
		}
		r.ResetAfter = fallbackReset
	} else {
		c.count(!r.Limited)
	}
	c.wr.WriteArray(5)
	for _, v := range r.Ints() {
		c.wr.WriteInt(v)
	}
}

// gcraErrors are the command's own errors, answered with their texts.
var gcraErrors = []error{gcra.ErrCommandInvalidKey, gcra.ErrCommandNegativeTime, gcra.ErrCommandTokensOverflow, gcra.ErrCommandBurstOverflow}
