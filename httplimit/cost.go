package httplimit

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/funnelrl/funnel"
)

// ReportedCost makes the cost of a request the one its handler reports
// after it ran, with ReportCost: the cost of work known only once it is
// done, such as the tokens of a language model's response. The request is
// admitted as usual, for its Quantity (1 by default; a Quantity of 0 admits
// it while the key is not over its limit, charging nothing). When the
// handler has returned, the difference between the reported cost and what
// the admission took is charged with funnel.Limiter.Charge, into debt when
// it does not fit (the key's next requests are then refused until the debt
// has drained), or given back with funnel.Limiter.Refund when the cost is
// smaller. A handler that reports nothing costs what its admission took.
//
// The charge comes after the response's header fields were sent: its
// result shows in the next request's fields. A charge that fails (the
// store is down) is logged, at most once a second; its cost is lost. A
// request let through by a fail-open fallback took nothing: its reported
// cost is charged whole. A concurrency limit ignores ReportedCost: a
// request holds one lease.
func ReportedCost() Option { return func(c *config) { c.reported = true } }

// costKey is the context key of a request's reported cost.
type costKey struct{}

// cost is a request's reported cost: -1 until reported.
type cost struct{ n atomic.Int64 }

// ReportCost reports the real cost of the request whose context is ctx,
// in the units of its limit, to the middleware that admitted it with
// ReportedCost; the last report before the handler returns is charged. It
// is safe to call from any goroutine of the handler. It reports false, and
// records nothing, when no such middleware wraps the request or n is
// negative.
func ReportCost(ctx context.Context, n int64) bool {
	c, ok := ctx.Value(costKey{}).(*cost)
	if !ok || n < 0 {
		return false
	}
	c.n.Store(n)
	return true
}

// serveCosted serves r with a slot for its reported cost when ReportedCost
// is set, then charges the cost less taken, the units the admission took.
func (h *handler) serveCosted(w http.ResponseWriter, r *http.Request, key string, taken int64) {
	if !h.c.reported || h.limit.Algorithm == funnel.Concurrency {
		h.next.ServeHTTP(w, r)
		return
	}
	c := &cost{}
	c.n.Store(-1)
	ctx := r.Context()
	defer func() { h.chargeCost(ctx, key, taken, c.n.Load()) }()
	h.next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, costKey{}, c)))
}

// chargeCost charges the reported cost n (-1: none reported) of a request
// whose admission took taken units: Charge of the difference, or Refund
// when n is smaller. It runs even when the client has gone: the work was
// done.
func (h *handler) chargeCost(ctx context.Context, key string, taken, n int64) {
	if n < 0 || n == taken {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var err error
	if n > taken {
		_, err = h.lim.Charge(ctx, key, h.limit, n-taken)
	} else {
		err = h.lim.Refund(ctx, key, h.limit, taken-n)
	}
	if err == nil {
		return
	}
	c := h.c
	if errors.Is(err, funnel.ErrInvalidQuantity) {
		c.wrong.Do(func(held int64) {
			c.log.Error("rate limit: a reported cost cannot be charged (logged once a second at most)", "key", key, "cost", n, "err", err, "held_back", held)
		})
		return
	}
	c.warned.Do(func(held int64) {
		c.log.Warn("rate limit: a reported cost was not charged (logged once a second at most)", "key", key, "cost", n, "err", err, "held_back", held)
	})
}
