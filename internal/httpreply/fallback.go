package httpreply

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/funnelrl/funnel"
)

// StatusClientClosedRequest is the status written for a request whose
// client went away before it was decided (nginx's 499). Nobody may read
// it, but access logs and proxies do, and an empty answer would go out as
// 200.
const StatusClientClosedRequest = 499

// FallbackStatus returns the status of an answer that carries r, and sets
// the Retry-After of a fail-closed fallback on h: 200 for an admission
// (fail-open included), 503 Service Unavailable with Retry-After: 1
// (funnel.FallbackRetry) for a fail-closed fallback, which must not look
// like a refusal by the limit and may be retried soon, and 429 for a
// refusal. Every HTTP edge maps a result to its status here.
func FallbackStatus(h http.Header, r funnel.Result) int {
	switch {
	case r.Allowed:
		return http.StatusOK
	case r.Fallback:
		h.Set(HeaderRetryAfter, strconv.FormatInt(Seconds(funnel.FallbackRetry), 10))
		return http.StatusServiceUnavailable
	}
	return http.StatusTooManyRequests
}

// Unserved writes the problem of a request whose context ended before it
// was served (while says when: "before it was decided", "while it waited
// its turn"): 499 Client Closed Request when the client went away, 503
// when the request's deadline passed. It is not the store's failure: no
// fallback answers it.
func Unserved(ctx context.Context, w http.ResponseWriter, while string) {
	if errors.Is(ctx.Err(), context.Canceled) {
		Problem{
			Status: StatusClientClosedRequest,
			Title:  "Client Closed Request",
			Detail: "the client closed the request " + while,
		}.Write(w)
		return
	}
	Problem{
		Status: http.StatusServiceUnavailable,
		Detail: "the request's deadline passed " + while,
	}.Write(w)
}
