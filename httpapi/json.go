package httpapi

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/funnelrl/funnel"
)

// Limit is a limit as JSON carries it. Durations are Go duration strings
// ("1s", "1m30s", "24h").
type Limit struct {
	// Algorithm is gcra (or funnel, the default), leaky_bucket,
	// fixed_window, sliding_window, sliding_log or concurrency.
	Algorithm string `json:"algorithm,omitempty"`
	// Count is the number of units per Period (for concurrency: the leases
	// held at once).
	Count int64 `json:"count"`
	// Period is the window or leak period (for concurrency: a lease's
	// lifetime). Calendar windows leave it out.
	Period string `json:"period,omitempty"`
	// Burst is, for gcra and leaky_bucket, the units beyond the first that
	// a full bucket admits at once; left out, it is Count-1. For
	// concurrency, the leases beyond Count granted with a delay; left out,
	// 0.
	Burst *int64 `json:"burst,omitempty"`
	// UnitDelay, a duration, is for concurrency the default unit delay of
	// a lease granted within the burst (OpenResty limit.conn's
	// default_conn_delay): it waits UnitDelay × ⌊(leases held − 1) /
	// Count⌋, and the latencies releases report move the unit delay.
	UnitDelay string `json:"unit_delay,omitempty"`
	// Delay is, for leaky_bucket, the excess units that pass at once
	// (nginx's delay=); NoDelay delays none (nginx's nodelay).
	Delay int64 `json:"delay,omitempty"`
	// NoDelay, for leaky_bucket, lets every unit within the burst pass at
	// once (nginx's nodelay); it excludes Delay.
	NoDelay bool `json:"nodelay,omitempty"`
	// Calendar is, for fixed_window, "day", "week" (from Monday) or "month"
	// windows in TimeZone.
	Calendar string `json:"calendar,omitempty"`
	// TimeZone is the IANA name of the calendar's time zone, such as
	// "Europe/Paris"; empty means UTC.
	TimeZone string `json:"time_zone,omitempty"`
	// Ban, a duration, bans a key that overflows the limit for that long.
	Ban string `json:"ban,omitempty"`
}

// errInput is wrapped by errors in a request's values (answered 422).
var errInput = errors.New("httpapi: invalid request")

// inputf returns an error wrapping errInput.
func inputf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInput}, args...)...)
}

// parseDuration parses a JSON duration field.
func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, inputf("%s: %q is not a duration such as \"1s\" or \"1m30s\"", field, s)
	}
	return d, nil
}

// Funnel converts l to a funnel.Limit, checking it: the durations here, the
// rest by funnel.Spec, as every edge reads a limit.
func (l *Limit) Funnel() (funnel.Limit, error) {
	if l == nil {
		return funnel.Limit{}, inputf("the limit is missing")
	}
	spec := funnel.Spec{
		Algorithm: l.Algorithm,
		Count:     l.Count,
		Burst:     l.Burst,
		NoDelay:   l.NoDelay,
		Calendar:  l.Calendar,
		TimeZone:  l.TimeZone,
	}
	if l.Delay != 0 {
		spec.Delay = &l.Delay
	}
	var err error
	if spec.Period, err = parseDuration("period", l.Period); err != nil {
		return funnel.Limit{}, err
	}
	if spec.Ban, err = parseDuration("ban", l.Ban); err != nil {
		return funnel.Limit{}, err
	}
	if spec.UnitDelay, err = parseDuration("unit_delay", l.UnitDelay); err != nil {
		return funnel.Limit{}, err
	}
	return spec.Limit()
}

// limitFromQuery reads a Limit from URL query parameters named as the JSON
// fields.
func limitFromQuery(q url.Values) (*Limit, error) {
	l := &Limit{}
	for name, vs := range q {
		if len(vs) != 1 {
			return nil, inputf("query parameter %s is repeated", name)
		}
		v := vs[0]
		var err error
		switch name {
		case "algorithm":
			l.Algorithm = v
		case "count":
			l.Count, err = strconv.ParseInt(v, 10, 64)
		case "period":
			l.Period = v
		case "burst":
			var b int64
			b, err = strconv.ParseInt(v, 10, 64)
			l.Burst = &b
		case "delay":
			l.Delay, err = strconv.ParseInt(v, 10, 64)
		case "nodelay":
			l.NoDelay, err = strconv.ParseBool(v)
		case "calendar":
			l.Calendar = v
		case "time_zone":
			l.TimeZone = v
		case "ban":
			l.Ban = v
		case "unit_delay":
			l.UnitDelay = v
		case "name":
			continue
		default:
			return nil, inputf("unknown query parameter %s", name)
		}
		if err != nil {
			return nil, inputf("query parameter %s: %q is not valid", name, v)
		}
	}
	switch {
	case !q.Has("count"):
		return nil, inputf("query parameter count is missing: the limit is in the query string, such as ?count=10&period=1m")
	case !q.Has("period") && !q.Has("calendar"):
		return nil, inputf("query parameter period is missing: the limit is in the query string, such as ?count=10&period=1m")
	}
	return l, nil
}

// Decision is the answer to a throttle, a peek, a charge, a reserve or an
// acquire.
// Times are in milliseconds, rounded up, so that a client that waits that
// long has waited enough.
type Decision struct {
	// Allowed reports whether the request was admitted (and charged); for
	// a peek, whether it would be; for a charge, whether the key is still
	// within its limit after it (false: it is in debt, refused for
	// RetryAfterMs).
	Allowed bool `json:"allowed"`
	// Limit is the units a full limit admits at once (gcra: burst+1).
	Limit int64 `json:"limit"`
	// Remaining is the units that could be admitted now.
	Remaining int64 `json:"remaining"`
	// RetryAfterMs is 0 when allowed; when refused, the milliseconds until
	// the same request would pass, or -1 when it never would (its quantity
	// is above the limit); when refused by a fail-closed fallback, 1000,
	// as Retry-After: 1.
	RetryAfterMs int64 `json:"retry_after_ms"`
	// ResetAfterMs is the milliseconds until the limit is whole again.
	ResetAfterMs int64 `json:"reset_after_ms"`
	// DelayMs is, for leaky_bucket and for a lease granted within a
	// concurrency limit's burst, how long an admitted request should wait
	// before it proceeds.
	DelayMs int64 `json:"delay_ms"`
	// Banned reports a refusal because the key is banned (RetryAfterMs is
	// then the time until the ban ends).
	Banned bool `json:"banned"`
	// Fallback reports that the store could not decide, and Allowed is the
	// configured fail-open (200) or fail-closed (503) answer.
	Fallback bool `json:"fallback"`
	// Lease is the id of the lease an allowed acquire took.
	Lease string `json:"lease,omitempty"`
	// ReservationID is the id of the reservation an allowed reserve
	// recorded, for POST /v1/settle; a refusal or a fallback records none,
	// and leaves it out.
	ReservationID string `json:"reservation_id,omitempty"`
}

// ms rounds d up to whole milliseconds; Never is -1.
func ms(d time.Duration) int64 {
	if d == funnel.Never {
		return -1
	}
	if d <= 0 {
		return 0
	}
	m := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		m++
	}
	return m
}

// decision converts a result to its JSON form.
func decision(r funnel.Result) Decision {
	d := Decision{
		Allowed:      r.Allowed,
		Limit:        r.Limit,
		Remaining:    r.Remaining,
		RetryAfterMs: ms(r.RetryAfter),
		ResetAfterMs: ms(r.ResetAfter),
		DelayMs:      ms(r.Delay),
		Banned:       r.Banned,
		Fallback:     r.Fallback,
	}
	switch {
	case r.Allowed:
		d.RetryAfterMs = 0
	case r.Fallback:
		d.RetryAfterMs = ms(funnel.FallbackRetry)
	}
	return d
}

// ThrottleRequest is the body of POST /v1/throttle: either one limit (Key,
// Limit, Quantity, Name) or several (Limits) checked all-or-nothing.
type ThrottleRequest struct {
	// Key is the key the limit applies to, such as "user:42".
	Key string `json:"key,omitempty"`
	// Limit is the limit the key is charged to.
	Limit *Limit `json:"limit,omitempty"`
	// Quantity is the units asked for; left out, 1. 0 peeks.
	Quantity *int64 `json:"quantity,omitempty"`
	// Peek asks whether Quantity units would be admitted now, and if not
	// after how long, charging nothing (funnel.Limiter.PeekN); it is
	// answered 200 whatever it finds ("allowed" says), and a quantity that
	// no wait would admit has "retry_after_ms": -1. It takes one limit,
	// not Limits.
	Peek bool `json:"peek,omitempty"`
	// Name is the policy's name in the RateLimit-Policy and RateLimit
	// fields; left out, "default" (for one limit) or "limit<i>" (for the
	// i-th of several, from 0).
	Name string `json:"name,omitempty"`
	// Limits, instead of Key and Limit, are checked all-or-nothing: every
	// one admits the request and all are charged, or none is charged.
	Limits []Entry `json:"limits,omitempty"`
}

// ChargeRequest is the body of POST /v1/charge: units of a key already
// spent, such as the tokens of a response counted when it ends.
type ChargeRequest struct {
	// Key is the key charged.
	Key string `json:"key"`
	// Limit is the limit the key is charged to (not a concurrency limit).
	Limit *Limit `json:"limit"`
	// Quantity is the units spent; it is required, and 0 charges nothing.
	// Units that do not fit are recorded as a debt: the key is refused
	// until it has drained.
	Quantity *int64 `json:"quantity"`
	// Name is the policy's name in the header fields ("default").
	Name string `json:"name,omitempty"`
}

// ReserveRequest is the body of POST /v1/reserve: an estimate of a cost
// known only afterwards, such as the max_tokens of a model's request,
// taken now and settled at the actual cost by POST /v1/settle.
type ReserveRequest struct {
	// Key is the key the estimate is taken from.
	Key string `json:"key"`
	// Limit is the limit the key is charged to (not a concurrency limit).
	Limit *Limit `json:"limit"`
	// Quantity is the estimate, the units reserved: required, at least 1.
	Quantity *int64 `json:"quantity"`
	// TTL, a duration such as "30s", is how long the reservation lives:
	// one not settled by then is settled at its estimate and forgotten.
	// Left out, funnel.DefaultReservationTTL (10m); at most
	// funnel.MaxReservationTTL (24h), rounded up to whole milliseconds.
	TTL string `json:"ttl,omitempty"`
	// Name is the policy's name in the header fields ("default").
	Name string `json:"name,omitempty"`
}

// SettleRequest is the body of POST /v1/settle.
type SettleRequest struct {
	// Key is the key the reservation was made on.
	Key string `json:"key"`
	// ReservationID is the id that POST /v1/reserve answered.
	ReservationID string `json:"reservation_id"`
	// Actual is the units spent, at least 0: above the estimate the
	// difference is charged (into debt), below it is given back.
	Actual *int64 `json:"actual"`
	// Name is the policy's name in the RateLimit field ("default").
	Name string `json:"name,omitempty"`
}

// Settled is the answer to POST /v1/settle: the key's state after the
// settle under the reservation's limit, as a charge answers (Allowed is
// false while the key is over its limit), with the reservation's amounts.
type Settled struct {
	Decision
	// Estimate is the reservation's estimate.
	Estimate int64 `json:"estimate"`
	// Actual is the amount the reservation was settled at: the first
	// settle's, when Again.
	Actual int64 `json:"actual"`
	// Again reports that the reservation was settled before: this settle
	// changed nothing.
	Again bool `json:"again"`
}

// Entry is one limit of a ThrottleRequest with several.
type Entry struct {
	// Key is the key this limit applies to; the keys of one request must
	// differ (and, on Redis Cluster, share a {hash tag}).
	Key string `json:"key"`
	// Limit is the limit the key is charged to.
	Limit *Limit `json:"limit"`
	// Quantity is the units asked for; left out, 1.
	Quantity *int64 `json:"quantity,omitempty"`
	// Name is the policy's name in the header fields; left out,
	// "limit<i>".
	Name string `json:"name,omitempty"`
}

// MultiDecision is the answer to a ThrottleRequest with several limits.
type MultiDecision struct {
	// Allowed reports whether every limit admitted the request (and all
	// were charged); when false, none was charged.
	Allowed bool `json:"allowed"`
	// Refused is the index in Limits of the first refusing limit, or -1.
	Refused int `json:"refused"`
	// RetryAfterMs is 0 when allowed, else the longest wait of the
	// refusing limits, in milliseconds (-1: never); a fail-closed
	// fallback's wait is 1000.
	RetryAfterMs int64 `json:"retry_after_ms"`
	// Fallback reports that the store could not decide for at least one
	// limit. A refusal by fail-closed fallbacks only is answered 503.
	Fallback bool `json:"fallback"`
	// Results are each limit's own decision, in the order of Limits.
	Results []Decision `json:"results"`
}

// AcquireRequest is the body of POST /v1/acquire.
type AcquireRequest struct {
	// Key is the key whose leases are counted.
	Key string `json:"key"`
	// Limit is a concurrency limit (its algorithm may be left out): Count
	// leases at once, each expiring after Period unless released.
	Limit *Limit `json:"limit"`
	// Lease is the lease's id, such as a request id; left out, a random
	// one. Acquiring an id that is held renews it.
	Lease string `json:"lease,omitempty"`
	// Name is the policy's name in the header fields ("default").
	Name string `json:"name,omitempty"`
}

// ReleaseRequest is the body of POST /v1/release.
type ReleaseRequest struct {
	// Key is the key the lease was taken on.
	Key string `json:"key"`
	// Lease is the id that the acquire answered (or was given).
	Lease string `json:"lease"`
	// Latency, a duration, is how long the lease's request took, to move
	// the key's unit delay (see Limit.UnitDelay); left out, none. A
	// latency for a lease that is not held is refused, changing nothing.
	Latency string `json:"latency,omitempty"`
}

// Released is the answer to a release.
type Released struct {
	// Released is false when the lease had expired or was released before.
	Released bool `json:"released"`
}

// RefundRequest is the body of POST /v1/refund.
type RefundRequest struct {
	// Key is the key given units back.
	Key string `json:"key"`
	// Limit is the limit the units were charged to.
	Limit *Limit `json:"limit"`
	// Quantity is the units given back; left out, 1.
	Quantity *int64 `json:"quantity,omitempty"`
}

// ResetReply is the answer to DELETE /v1/keys/{key}.
type ResetReply struct {
	// Existed reports whether the key held state.
	Existed bool `json:"existed"`
}

// Ban is one banned key in BansReply.
type Ban struct {
	// Key is the banned key.
	Key string `json:"key"`
	// Until is when the ban ends (RFC 3339, UTC).
	Until time.Time `json:"until"`
}

// BansReply is the answer to GET /v1/bans.
type BansReply struct {
	// Bans are the banned keys, the soonest to end first.
	Bans []Ban `json:"bans"`
}

// UnbanReply is the answer to DELETE /v1/bans/{key}.
type UnbanReply struct {
	// Unbanned reports whether the key was banned.
	Unbanned bool `json:"unbanned"`
}
