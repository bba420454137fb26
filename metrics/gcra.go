package metrics

import (
	"context"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

var _ funnel.GCRAStore = (*Store)(nil)

// GCRA calls the wrapped store's GCRA (funnel.GCRAStore) and records it as
// op="gcra" (a fallback counts as an unavailable store); it fails with
// funnel.ErrNoGCRA when the wrapped store does not run the command.
func (s *Store) GCRA(ctx context.Context, key string, p gcra.CommandParams) (funnel.GCRAResult, error) {
	start := time.Now()
	r, err := funnel.ForwardGCRA(ctx, s.inner, key, p)
	s.m.done(opGCRA, start, err, err == nil && r.Fallback)
	return r, err
}
