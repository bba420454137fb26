package httpreply

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/funnelrl/funnel"
)

// The header fields of draft-ietf-httpapi-ratelimit-headers (revision 11),
// and Retry-After (RFC 9110, section 10.2.3).
const (
	// HeaderPolicy is the RateLimit-Policy field: the quota policies, as a
	// List of Strings with parameters q (quota), w (window, in seconds) and
	// qu (quota unit).
	HeaderPolicy = "RateLimit-Policy"
	// HeaderRateLimit is the RateLimit field: the service limits now, as a
	// List of Strings with parameters r (available quota) and t (effective
	// window, in seconds).
	HeaderRateLimit = "RateLimit"
	// HeaderRetryAfter is Retry-After, in whole seconds (delay-seconds).
	HeaderRetryAfter = "Retry-After"
)

// DefaultName is the policy name of the header fields when the edge is given
// none.
const DefaultName = "default"

// maxSFInteger is the largest Integer a structured field carries (RFC 9651,
// section 3.3.1: at most 15 digits).
const maxSFInteger = 999_999_999_999_999

// ErrPolicyName is returned for a policy name that a structured field
// String cannot carry (only printable ASCII, 1 to 256 bytes).
var ErrPolicyName = errors.New("httplimit: a policy name must be 1 to 256 bytes of printable ASCII")

// CheckPolicyName reports whether name can be a policy's identifier: a
// structured field String holds printable ASCII only.
func CheckPolicyName(name string) error {
	if name == "" || len(name) > 256 {
		return ErrPolicyName
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return ErrPolicyName
		}
	}
	return nil
}

// appendString appends s as a structured field String: quoted, with '"' and
// '\' escaped. Bytes outside printable ASCII, which CheckPolicyName refuses,
// are written as '?'.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// appendParam appends ";name=v", v clamped to a structured field Integer.
func appendParam(b []byte, name string, v int64) []byte {
	b = append(b, ';')
	b = append(b, name...)
	b = append(b, '=')
	return strconv.AppendInt(b, min(max(v, 0), maxSFInteger), 10)
}

// Seconds rounds d up to whole seconds, as delay-seconds: a client that
// waits that long has waited at least d. Never and other durations beyond
// the range of a structured field Integer are clamped to it.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return min(s, maxSFInteger)
}

// window returns a limit's quota (q), its window in seconds (w, 0 for
// none) and whether it counts concurrent requests.
func window(l funnel.Limit) (q, w int64, concurrent bool) {
	switch l.Algorithm {
	case funnel.GCRA, funnel.LeakyBucket:
		// A full bucket admits Burst+1 units, and refills in Tolerance:
		// q/w is the rate, q the largest burst.
		p, err := l.Params()
		if err != nil {
			return 0, 0, false
		}
		return p.Limit, Seconds(time.Duration(p.Tolerance)), false
	case funnel.Concurrency:
		return l.Count, 0, true
	case funnel.FixedWindow:
		switch l.Calendar {
		case funnel.Daily:
			return l.Count, 86400, false
		case funnel.Weekly:
			return l.Count, 7 * 86400, false
		case funnel.Monthly:
			return l.Count, 0, false // months differ in length: no w
		}
	}
	return l.Count, Seconds(l.Period), false
}

// AppendPolicy appends the RateLimit-Policy item of limit named name:
//
//	"name";q=<quota>;w=<window in seconds>
//
// For the funnel (GCRA) and the leaky bucket, q is the burst a full bucket
// admits (Burst+1) and w the seconds it takes to refill, so that q/w is the
// rate: PerMinute(30).WithBurst(15) is "name";q=16;w=32. For the window
// algorithms q is Count and w the window (Period, or 86400 for calendar
// days and 604800 for weeks; calendar months have no w). A concurrency
// limit is "name";q=<Count>;qu="concurrent-requests".
func AppendPolicy(b []byte, name string, limit funnel.Limit) []byte {
	q, w, concurrent := window(limit)
	b = appendString(b, name)
	b = appendParam(b, "q", q)
	if concurrent {
		return append(b, `;qu="concurrent-requests"`...)
	}
	if w > 0 {
		b = appendParam(b, "w", w)
	}
	return b
}

// AppendRateLimit appends the RateLimit item of result r named name:
//
//	"name";r=<remaining>;t=<seconds>
//
// r is Result.Remaining. t is, for an admitted request, the seconds until
// the limit is whole again (ResetAfter, rounded up); for a refused one, the
// seconds until the same request would pass (RetryAfter, rounded up, the
// same value as Retry-After), or ResetAfter when no wait would do. A
// Fallback result carries no state: SetHeaders leaves its item out.
func AppendRateLimit(b []byte, name string, r funnel.Result) []byte {
	b = appendString(b, name)
	b = appendParam(b, "r", r.Remaining)
	if r.Fallback {
		return b
	}
	t := r.ResetAfter
	if !r.Allowed && r.RetryAfter != funnel.Never {
		t = r.RetryAfter
	}
	return appendParam(b, "t", Seconds(t))
}

// Policy is one limit and its result, for SetHeaders.
type Policy struct {
	// Name identifies the policy in the fields (check it with
	// CheckPolicyName).
	Name   string
	Limit  funnel.Limit
	Result funnel.Result
}

// SetHeaders sets the RateLimit-Policy and RateLimit fields of the given
// policies (one list item each, in one field line) and, when any of them
// refused, Retry-After: the longest wait in whole seconds, rounded up. A
// Fallback result gets a RateLimit-Policy item but no RateLimit item (the
// store said nothing about the key). Retry-After is left out when the
// request cannot pass at any time (a refusing policy's RetryAfter is
// funnel.Never) or nothing is known of when it could.
func SetHeaders(h http.Header, policies ...Policy) {
	var pol, rl []byte
	for _, p := range policies {
		if len(pol) > 0 {
			pol = append(pol, ", "...)
		}
		pol = AppendPolicy(pol, p.Name, p.Limit)
		if !p.Result.Fallback {
			if len(rl) > 0 {
				rl = append(rl, ", "...)
			}
			rl = AppendRateLimit(rl, p.Name, p.Result)
		}
	}
	if len(pol) > 0 {
		h.Set(HeaderPolicy, string(pol))
	}
	if len(rl) > 0 {
		h.Set(HeaderRateLimit, string(rl))
	}
	SetRetryAfter(h, policies)
}

// SetRetryAfter sets Retry-After to the longest wait of the refusing
// policies, unless one of them cannot be lifted by any wait or none tells
// how long to wait.
func SetRetryAfter(h http.Header, policies []Policy) {
	var retry time.Duration
	for _, p := range policies {
		switch r := p.Result; {
		case r.Allowed || r.Fallback:
		case r.RetryAfter == funnel.Never:
			return // waiting would not help
		default:
			retry = max(retry, r.RetryAfter)
		}
	}
	if retry > 0 {
		h.Set(HeaderRetryAfter, strconv.FormatInt(Seconds(retry), 10))
	}
}

// RetryText says when to retry, for a problem's detail.
func RetryText(r funnel.Result) string {
	switch {
	case r.RetryAfter == funnel.Never:
		return "the request asks for more than the limit admits at once"
	case r.Banned:
		return "banned; retry in " + strconv.FormatInt(Seconds(r.RetryAfter), 10) + " s"
	}
	return "retry in " + strconv.FormatInt(Seconds(r.RetryAfter), 10) + " s"
}
