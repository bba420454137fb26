package leasestore

import (
	"context"
	"time"

	"github.com/funnelrl/funnel"
)

var _ funnel.ReserveStore = (*Store)(nil)

// Reserve takes a reservation's estimate in the backend, whole, as a
// charge goes there (funnel.ForwardReserve): exact whatever the key's
// leases hold, since the units that leases hold were counted in the
// backend when they were leased.
func (s *Store) Reserve(ctx context.Context, key string, limit funnel.Checked, estimate int64, id string, ttl time.Duration) (funnel.Result, error) {
	return funnel.ForwardReserve(ctx, s.b, key, limit, estimate, id, ttl)
}

// Settle settles a reservation in the backend (funnel.ForwardSettle).
func (s *Store) Settle(ctx context.Context, key, id string, actual int64) (funnel.Settlement, error) {
	return funnel.ForwardSettle(ctx, s.b, key, id, actual)
}
