package metrics

import (
	"context"
	"time"

	"github.com/funnelrl/funnel"
)

var _ funnel.ReserveStore = (*Store)(nil)

// Reserve calls the wrapped store's Reserve (funnel.ReserveStore) and
// records it as op="reserve" (a fallback counts as an unavailable store);
// it fails with funnel.ErrNoReserve when the wrapped store keeps no
// reservations.
func (s *Store) Reserve(ctx context.Context, key string, limit funnel.Checked, estimate int64, id string, ttl time.Duration) (funnel.Result, error) {
	start := time.Now()
	r, err := funnel.ForwardReserve(ctx, s.inner, key, limit, estimate, id, ttl)
	s.m.done(opReserve, start, err, err == nil && r.Fallback)
	return r, err
}

// Settle calls the wrapped store's Settle (funnel.ReserveStore) and records
// it as op="settle".
func (s *Store) Settle(ctx context.Context, key, id string, actual int64) (funnel.Settlement, error) {
	start := time.Now()
	st, err := funnel.ForwardSettle(ctx, s.inner, key, id, actual)
	s.m.done(opSettle, start, err, false)
	return st, err
}
