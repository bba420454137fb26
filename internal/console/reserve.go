package console

import (
	"context"
	"time"

	"github.com/funnelrl/funnel"
)

var (
	_ funnel.ReserveStore = (*Timed)(nil)
	_ funnel.ReserveStore = (*Watched)(nil)
)

// Reserve calls the wrapped store's Reserve (funnel.ForwardReserve) and
// records its latency.
func (t *Timed) Reserve(ctx context.Context, key string, limit funnel.Checked, estimate int64, id string, ttl time.Duration) (funnel.Result, error) {
	start := time.Now()
	r, err := funnel.ForwardReserve(ctx, t.inner, key, limit, estimate, id, ttl)
	end := time.Now()
	t.h.Observe(end.Sub(start), end)
	return r, err
}

// Settle calls the wrapped store's Settle (funnel.ForwardSettle) and
// records its latency.
func (t *Timed) Settle(ctx context.Context, key, id string, actual int64) (funnel.Settlement, error) {
	start := time.Now()
	st, err := funnel.ForwardSettle(ctx, t.inner, key, id, actual)
	end := time.Now()
	t.h.Observe(end.Sub(start), end)
	return st, err
}

// Reserve calls the wrapped store's Reserve (funnel.ForwardReserve) and
// records a refusal under limit.
func (w *Watched) Reserve(ctx context.Context, key string, limit funnel.Checked, estimate int64, id string, ttl time.Duration) (funnel.Result, error) {
	r, err := funnel.ForwardReserve(ctx, w.inner, key, limit, estimate, id, ttl)
	if err == nil && !r.Allowed && !r.Fallback {
		w.top.Record(w.edge, ruleOf(&limit), key)
	}
	return r, err
}

// Settle calls the wrapped store's Settle (funnel.ForwardSettle): a settle
// is not a decision, and is not recorded.
func (w *Watched) Settle(ctx context.Context, key, id string, actual int64) (funnel.Settlement, error) {
	return funnel.ForwardSettle(ctx, w.inner, key, id, actual)
}
