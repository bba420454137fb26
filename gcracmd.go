package funnel

import (
	"context"
	"errors"

	"github.com/funnelrl/funnel/gcra"
)

// GCRAStore is implemented by a Store that runs Redis's own GCRA command
// (see gcra.DecideCommand) on its keys, reply for reply: the memory store
// and the Redis store do, and the wrappers of a store (metrics, tracing,
// leases) pass it through. A GCRA key is a state of its own: on Redis the
// command's string (the TAT in microseconds, expiring at the TAT's
// millisecond), so that Redis's own GCRA and Funnel's read each other's
// keys. Other operations of the store (Do) on a GCRA key, and GCRA on a key
// of the family, are errors that wrap ErrWrongType where the store can tell
// the states apart (see each store).
type GCRAStore interface {
	// GCRA applies one call of the command to key at the store's current
	// time, truncated to whole milliseconds as Redis's command time is.
	// The error is one of gcra's ErrCommand errors (the command's own
	// replies), an error that wraps ErrWrongType, or the store's failure;
	// a store that cannot decide in time may instead answer its fallback
	// (GCRAResult.Fallback).
	GCRA(ctx context.Context, key string, p gcra.CommandParams) (GCRAResult, error)
}

// GCRAResult is the answer of a GCRAStore.
type GCRAResult struct {
	// Reply is the command's reply. When Fallback is set it is the reply
	// to a fresh key, with Limited set to the store's fail-closed answer.
	Reply gcra.CommandReply
	// Fallback reports that the store could not decide (it was unreachable
	// or too slow), as Result.Fallback does.
	Fallback bool
}

// ErrNoGCRA is the error of a GCRA call on a store that does not run the
// command (a wrapper over a store that is not a GCRAStore).
var ErrNoGCRA = errors.New("funnel: the store does not run the GCRA command")

// GCRAOf returns s as a GCRAStore, and false when it is not one.
func GCRAOf(s Store) (GCRAStore, bool) {
	g, ok := s.(GCRAStore)
	return g, ok
}

// ForwardGCRA is the GCRA method of a store that wraps inner: inner's
// GCRA, or ErrNoGCRA when inner has none.
func ForwardGCRA(ctx context.Context, inner Store, key string, p gcra.CommandParams) (GCRAResult, error) {
	g, ok := GCRAOf(inner)
	if !ok {
		return GCRAResult{}, ErrNoGCRA
	}
	return g.GCRA(ctx, key, p)
}

// isGCRACommandError reports whether err is one of the GCRA command's own
// errors (its arguments, its overflows, a key that holds no TAT): the
// caller's, answered with their texts.
func isGCRACommandError(err error) bool {
	return errors.Is(err, gcra.ErrCommandArgs) || errors.Is(err, gcra.ErrCommandTokensOverflow) || errors.Is(err, gcra.ErrCommandBurstOverflow) ||
		errors.Is(err, gcra.ErrCommandInvalidKey) || errors.Is(err, gcra.ErrCommandNegativeTime)
}
