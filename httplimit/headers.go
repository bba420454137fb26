package httplimit

import (
	"net/http"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/httpreply"
)

// ErrPolicyName is returned by New for a Name that the header fields cannot
// carry: a policy name is 1 to 256 bytes of printable ASCII.
var ErrPolicyName = httpreply.ErrPolicyName

// Policy is one limit and its result, for SetHeaders.
type Policy struct {
	// Name identifies the policy in the fields: 1 to 256 bytes of
	// printable ASCII.
	Name   string
	Limit  funnel.Limit
	Result funnel.Result
}

// SetHeaders sets the RateLimit-Policy and RateLimit fields of the given
// policies (one list item each, in one field line) and, when any of them
// refused, Retry-After: the longest wait in whole seconds, rounded up, as
// the middleware does for its one limit. It is for a handler that calls the
// Limiter itself, for several limits at once. A Fallback result gets a
// RateLimit-Policy item but no RateLimit item (the store said nothing
// about the key). Retry-After is left out when the request cannot pass at
// any time (a refusing policy's RetryAfter is funnel.Never) or nothing is
// known of when it could.
func SetHeaders(h http.Header, policies ...Policy) {
	var buf [4]httpreply.Policy
	ps := buf[:0]
	for _, p := range policies {
		ps = append(ps, httpreply.Policy(p))
	}
	httpreply.SetHeaders(h, ps...)
}
