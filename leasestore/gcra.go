package leasestore

import (
	"context"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

var _ funnel.GCRAStore = (*Store)(nil)

// GCRA runs Redis's GCRA command (funnel.GCRAStore) on the backing store,
// unleased: every call is decided in Redis, on the command's own key, as
// without leases.
func (s *Store) GCRA(ctx context.Context, key string, p gcra.CommandParams) (funnel.GCRAResult, error) {
	return funnel.ForwardGCRA(ctx, s.b, key, p)
}
