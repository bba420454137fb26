package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/funnelrl/funnel/gcra"
)

// leaseScript is gcra.Lease on a Redis key (see lease.lua).
var leaseScript = newTimedScript(include("lease.lua"), 1)

// Grant is the answer to Lease.
type Grant struct {
	// Now is Redis's time of the call, in nanoseconds since the Unix epoch
	// (Options.Now's in tests).
	Now int64
	// Units is the number of units granted (0 when fewer than the request's
	// Min fit).
	Units int64
	// TAT is the key's TAT after the call, 0 for an absent key. When Units
	// is positive it is the lease's end, the LeaseRequest.BackEnd that gives
	// its unspent tail back.
	TAT int64
	// Nodes is the number of nodes that leased the key within the last
	// LeaseCall.Window, this one included; 0 when not counted.
	Nodes int64
}

// LeaseCall is a lease request, and who makes it.
type LeaseCall struct {
	gcra.LeaseRequest
	// Node names the caller, and Window how long it counts as leasing
	// the key after a call: Grant.Nodes counts the nodes that leased the
	// key within Window, from a sorted set kept beside it in the same hash
	// slot. An empty Node, or a key that no such set can share a slot with
	// (a '}' without a hash tag), counts nothing.
	Node   string
	Window time.Duration
}

// nodesKey returns the key of the sorted set of key's leasing nodes, in
// key's hash slot, or "" when there is none (see siblingKey).
func nodesKey(key string) string { return siblingKey(key, "nodes") }

// siblingKey returns the key of what is kept beside key under name, in
// key's hash slot, or "" when there is none: key's own hash tag kept, or
// key itself made the tag (a key with a '}' but no tag has no sibling).
func siblingKey(key, name string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key + "\x00" + name
		}
	}
	if strings.IndexByte(key, '}') >= 0 {
		return ""
	}
	return "{" + key + "}\x00" + name
}

// Lease applies gcra.Lease to key at Redis's time, atomically, in one
// script call: it gives back req's unspent tail if the key's TAT is still
// req.BackEnd, then takes up to req.Want units of the funnel p. The key
// keeps redis-cell's format, so that it is shared with plain decisions of
// this store and of redis-cell. p.Tolerance plus req.Horizon must not
// exceed gcra.MaxLeaseTolerance; with a horizon, units are future-dated
// (gcra.LeaseSlot gives each unit's slot from the Grant).
//
// It is the primitive of package leasestore, bounded by Options.Timeout
// as Do is. A key of another type is an error that wraps ErrWrongType;
// when Redis cannot be reached the error wraps funnel.ErrUnavailable (a
// lease has no fallback: the caller decides what a failed lease means).
func (s *Store) Lease(ctx context.Context, key string, p gcra.Params, call LeaseCall) (Grant, error) {
	req := call.LeaseRequest
	if _, _, err := gcra.Lease(0, 0, p, req); err != nil {
		return Grant{}, err
	}
	args, err := s.args("l", 0)
	if err != nil {
		return Grant{}, err
	}
	back := ""
	if req.BackUnits > 0 && req.BackEnd > 0 {
		back = strconv.FormatInt(req.BackEnd, 10)
	}
	// The script's headroom is the tolerance plus the horizon: a unit
	// that fits in it is granted, with its slot up to the horizon ahead.
	args = append(args, limb(p.Interval), limb(p.Tolerance+req.Horizon), limb(req.Want), limb(req.Min),
		back, limb(req.BackUnits*p.Interval))
	keys := []string{s.prefix + key}
	if nk := nodesKey(s.prefix + key); nk != "" && call.Node != "" && call.Window > 0 {
		keys = append(keys, nk)
		args = append(args, call.Node, limb(max(call.Window.Milliseconds(), 1)))
	}
	v, err := s.evalTimed(ctx, leaseScript, keys, args)
	if err != nil {
		return Grant{}, s.unavailable(ctx, err)
	}
	if len(v) != 6 || v[2] < 0 || v[2] > req.Want || v[5] < 0 {
		return Grant{}, fmt.Errorf("%w: lease reply %v", errInternal, v)
	}
	_, now, err := decodeLimbs(0, v[0], v[1])
	if err != nil {
		return Grant{}, err
	}
	_, tat, err := decodeLimbs(0, v[3], v[4])
	if err != nil {
		return Grant{}, err
	}
	return Grant{Now: now, Units: v[2], TAT: tat, Nodes: v[5]}, nil
}
