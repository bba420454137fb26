package config

import (
	"fmt"

	"github.com/funnelrl/funnel/redisstore"
)

// validateSnapshot reports whether the snapshot settings can be served.
func (c Config) validateSnapshot() error {
	switch {
	case c.SnapshotInterval < 0:
		return fmt.Errorf("%w: snapshot_interval %v is negative", ErrInvalid, c.SnapshotInterval)
	case c.SnapshotMaxElapsed < 0:
		return fmt.Errorf("%w: snapshot_max_elapsed %v is negative", ErrInvalid, c.SnapshotMaxElapsed)
	case c.Snapshot != "" && c.Store != "memory":
		return fmt.Errorf("%w: snapshot %q: snapshots keep the memory store; the store is %s, which keeps its own state", ErrInvalid, c.Snapshot, redisstore.Redact(c.Store))
	}
	return nil
}
