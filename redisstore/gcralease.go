package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/funnelrl/funnel/gcra"
)

// gcraLeaseScript is gcra.LeaseCommand on a key of the GCRA command (see
// gcralease.lua).
var gcraLeaseScript = newScript(include("gcralease.lua"))

// CommandGrant is the answer to LeaseGCRA, in the GCRA command's units.
type CommandGrant struct {
	// Now is Redis's time of the call in microseconds since the Unix
	// epoch: whole milliseconds, as the command's time (Options.Now's in
	// tests).
	Now int64
	// Units is the number of tokens granted (0 when fewer than the
	// request's Min fit).
	Units int64
	// TAT is the key's TAT after the call in microseconds, 0 for an absent
	// key. When Units is positive it is the lease's end, the
	// LeaseRequest.BackEnd that gives its unspent tail back.
	TAT int64
	// Nodes is the number of nodes that leased the key within the last
	// LeaseCall.Window, this one included; 0 when not counted.
	Nodes int64
}

// LeaseGCRA applies gcra.LeaseCommand to key, a key of Redis's GCRA command
// (see GCRA), at Redis's time in whole milliseconds, atomically, in one
// script call: it gives back call's unspent tail if the key still holds
// call.BackEnd, then takes up to call.Want tokens of the funnel whose
// interval is p.Interval and whose tolerance is p.Variance, all in
// microseconds (call.Horizon and call.BackEnd too). The key keeps the
// command's format, so that it is shared with this store's GCRA and with a
// Redis that has the command. p.Variance plus call.Horizon must not exceed
// gcra.MaxLeaseTolerance; with a horizon, tokens are future-dated
// (gcra.CommandLeaseSlot gives each one's slot from the grant). Call.Node
// and call.Window count the nodes that lease the key, as Lease does.
//
// It is the primitive of package leasestore for the GCRA command, bounded
// by Options.Timeout. The error is p.Overflow or gcra.ErrBadLease for
// parameters that cannot be leased (before any I/O), one of the command's
// key errors (gcra.ErrCommandInvalidKey, gcra.ErrCommandNegativeTime), one
// that wraps ErrWrongType for a key of another type, or, when Redis cannot
// be reached, one that wraps funnel.ErrUnavailable (a lease has no
// fallback: the caller decides what a failed lease means).
func (s *Store) LeaseGCRA(ctx context.Context, key string, p gcra.CommandParams, call LeaseCall) (CommandGrant, error) {
	req := call.LeaseRequest
	if _, _, _, err := gcra.LeaseCommand(0, 0, false, p, req); err != nil {
		return CommandGrant{}, err
	}
	args := make([]string, 0, 10)
	expiry := ""
	if s.now != nil {
		now := s.now()
		if now < 0 {
			return CommandGrant{}, fmt.Errorf("%w: Options.Now returned %d, before the Unix epoch", errInternal, now)
		}
		args = append(args, strconv.FormatInt(now/1e6, 10))
		expiry = s.slack
	} else {
		args = append(args, "")
	}
	back := ""
	if req.BackUnits > 0 && req.BackEnd > 0 {
		back = strconv.FormatInt(req.BackEnd, 10)
	}
	args = append(args, expiry, limb(p.Interval), limb(p.Variance+req.Horizon), limb(req.Want), limb(req.Min),
		back, limb(req.BackUnits*p.Interval))
	keys := []string{s.prefix + key}
	if nk := nodesKey(s.prefix + key); nk != "" && call.Node != "" && call.Window > 0 {
		keys = append(keys, nk)
		args = append(args, call.Node, limb(max(call.Window.Milliseconds(), 1)))
	}
	v, err := s.evalTimed(ctx, gcraLeaseScript, keys, args)
	if err != nil {
		return CommandGrant{}, s.unavailable(ctx, err)
	}
	if len(v) != 6 || v[1] < 0 || v[1] > math.MaxInt64/1000 || v[2] < 0 || v[2] > req.Want || v[3] < 0 || v[3] > math.MaxInt64/int64(1e9) ||
		v[4] < 0 || v[4] >= 1e9 || v[5] < 0 {
		return CommandGrant{}, fmt.Errorf("%w: GCRA lease reply %v", errInternal, v)
	}
	switch v[0] {
	case 1:
	case -1:
		return CommandGrant{}, gcra.ErrCommandInvalidKey
	case -2:
		return CommandGrant{}, gcra.ErrCommandNegativeTime
	case 3:
		return CommandGrant{}, gcra.ErrCommandTokensOverflow
	default:
		return CommandGrant{}, fmt.Errorf("%w: GCRA lease reply %v", errInternal, v)
	}
	return CommandGrant{Now: v[1] * 1000, Units: v[2], TAT: v[3]*1e9 + v[4], Nodes: v[5]}, nil
}
