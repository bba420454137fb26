package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/funnelrl/funnel/gcra"
)

// shareScript is gcra.Share on a key's shares hash (see share.lua).
var shareScript = newTimedScript(include("share.lua"), 1)

// shareStateScript answers a shares hash as its number of fields and one
// string: '.' (so that no client reads the string as a number), then each
// field's name and value, each written as its length in decimal, ':' and
// its bytes.
var shareStateScript = newScript(`local h = redis.pcall('HGETALL', KEYS[1])
if h.err then
  return redis.error_reply('WRONGTYPE the shares are not a hash')
end
local b = {}
for i = 1, #h do
  b[i] = #h[i] .. ':' .. h[i]
end
return { #h / 2, '.' .. table.concat(b) }`)

// ErrShareMixed is the error of a Share call on a key that is also
// decided plainly: the funnel's key holds a TAT after now that is not the
// shares' fence, written by a plain decision of this store, a unit lease,
// or the redis-cell module, none of which knows the shares and each of
// which would admit on top of them. Nothing is granted or changed. The
// other direction is the fence's (see Share): a plain decision made while
// shares are live finds the bucket full, and admits only once they have
// drained. So a fleet that mixes the two (while the mode is rolled out,
// say) never admits more than one exact funnel; it admits less, each side
// waiting for the other's.
var ErrShareMixed = errors.New("redisstore: the key is also decided plainly")

// ErrNoShareKey is wrapped, with gcra.ErrBadLease, by the error of Share
// and ShareState on a key that holds a '}' without a hash tag: no key in
// its hash slot can hold its shares.
var ErrNoShareKey = errors.New("redisstore: the key has no hash slot sibling to hold its shares")

// sharesKey returns the key of the hash of key's rate shares, in key's
// hash slot, or "" when there is none (see siblingKey).
func sharesKey(key string) string { return siblingKey(key, "shares") }

// fenceKey returns the key of the copy of key's shares' fence, in key's
// hash slot, or "" when there is none (see siblingKey).
func fenceKey(key string) string { return siblingKey(key, "fence") }

// Share applies gcra.Share to key's rate shares at Redis's time in
// microseconds, atomically, in one script call: the caller named by
// req.Node gets a grant of a part of the funnel p's rate and capacity, and
// the reservation that keeps them for it. The shares are kept in a hash
// beside key in its hash slot (key + "\x00shares" for a key with a hash
// tag, "{" + key + "}\x00shares" otherwise), one field per node, which
// expires when its last reservation has drained and its last node stopped
// competing. While a reservation is live the funnel's key holds a fence,
// gcra.ShareFence on Redis's clock, whose copy a third key beside it keeps
// (key + "\x00fence", or "{" + key + "}\x00fence"), with the same expiry:
// whatever decides the key plainly finds its bucket full until every
// node's has drained. While the key holds a TAT after now that is not the
// fence, the error is ErrShareMixed.
//
// It is the primitive of the rate-shares mode of package leasestore,
// bounded by Options.Timeout as Do is; with Options.Now, the allocator's
// time is Options.Now's in whole microseconds. The error wraps
// gcra.ErrBadLease for a request that gcra.Share refuses, or for a key
// with a '}' and no hash tag (with ErrNoShareKey), before any I/O; wraps
// ErrWrongType when the funnel's key holds anything but a TAT or the
// shares' key anything but a hash of shares; and wraps
// funnel.ErrUnavailable when Redis cannot be reached (a share has no
// fallback: the caller decides what a failed call means). An error
// changes nothing.
func (s *Store) Share(ctx context.Context, key string, p gcra.Params, req gcra.ShareRequest) (gcra.ShareGrant, error) {
	if err := gcra.CheckShare(p, req); err != nil {
		return gcra.ShareGrant{}, err
	}
	sk := sharesKey(s.prefix + key)
	if sk == "" {
		return gcra.ShareGrant{}, fmt.Errorf("%w: %w: %q", gcra.ErrBadLease, ErrNoShareKey, key)
	}
	args, err := s.args("s", 0)
	if err != nil {
		return gcra.ShareGrant{}, err
	}
	args = append(args, limb(p.Interval), limb(p.Tolerance), limb(p.Limit),
		req.Node, limb(req.Demand), limb(req.Lifetime), limb(req.Grace), limb(req.Level))
	v, err := s.evalTimed(ctx, shareScript, []string{s.prefix + key, sk, fenceKey(s.prefix + key)}, args)
	if err != nil {
		if strings.HasPrefix(err.Error(), "SHAREMIXED") {
			return gcra.ShareGrant{}, ErrShareMixed
		}
		return gcra.ShareGrant{}, s.unavailable(ctx, err)
	}
	if len(v) != 6 {
		return gcra.ShareGrant{}, fmt.Errorf("%w: share reply %v", errInternal, v)
	}
	g := gcra.ShareGrant{Now: v[0], Start: v[1], End: v[2], Hold: v[3], K: v[4], C: v[5]}
	if g.Now < 0 || g.Start != g.Now || g.End <= g.Start || g.Hold < g.End ||
		g.K < 0 || g.K > gcra.ShareParts || g.C < 0 || g.C > p.Limit || (g.K == 0) != (g.C == 0) {
		return gcra.ShareGrant{}, fmt.Errorf("%w: share reply %v", errInternal, v)
	}
	return g, nil
}

// ShareState returns key's rate shares as Share keeps them: each node's
// record by name, the times in microseconds of the allocator's clock. An
// absent hash is an empty map. It reads the hash whole, for tests and for
// inspection, not for the path of a decision. The error wraps
// gcra.ErrBadLease (with ErrNoShareKey) for a key with a '}' and no hash
// tag, wraps ErrWrongType when the hash holds something else than
// Share's records, and wraps funnel.ErrUnavailable when Redis cannot be
// reached.
func (s *Store) ShareState(ctx context.Context, key string) (map[string]*gcra.ShareNode, error) {
	sk := sharesKey(s.prefix + key)
	if sk == "" {
		return nil, fmt.Errorf("%w: %w: %q", gcra.ErrBadLease, ErrNoShareKey, key)
	}
	v, err := s.evalTimed(ctx, shareStateScript, []string{sk}, nil)
	if err != nil {
		return nil, s.unavailable(ctx, err)
	}
	if len(v) < 2 || v[1] != '.' {
		return nil, fmt.Errorf("%w: shares reply %v", errInternal, v[:min(len(v), 2)])
	}
	blob := make([]byte, len(v)-2)
	for i, b := range v[2:] {
		if b < 0 || b > 255 {
			return nil, fmt.Errorf("%w: shares reply byte %d", errInternal, b)
		}
		blob[i] = byte(b)
	}
	st, err := decodeShareState(string(blob), v[0])
	if err != nil {
		return nil, fmt.Errorf("%w (%s: %v)", ErrWrongType, sk, err)
	}
	return st, nil
}

// decodeShareState decodes n fields of a shares hash as shareStateScript
// writes them.
func decodeShareState(blob string, n int64) (map[string]*gcra.ShareNode, error) {
	if n < 0 {
		return nil, fmt.Errorf("%d fields", n)
	}
	st := make(map[string]*gcra.ShareNode, min(n, 1024))
	next := func() (string, error) {
		l, rest, ok := strings.Cut(blob, ":")
		size, err := strconv.Atoi(l)
		if !ok || err != nil || size < 0 || size > len(rest) {
			return "", errors.New("a cut reply")
		}
		blob = rest[size:]
		return rest[:size], nil
	}
	for i := int64(0); i < n; i++ {
		name, err := next()
		if err != nil {
			return nil, err
		}
		v, err := next()
		if err != nil {
			return nil, err
		}
		nd, err := decodeShareNode(v)
		if err != nil {
			return nil, fmt.Errorf("node %q: %w", name, err)
		}
		st[name] = nd
	}
	if blob != "" {
		return nil, errors.New("bytes after the last field")
	}
	return st, nil
}

// maxShareNumber is above every number of a share record: Share's are
// below 2^53, so that the script computes them exactly.
const maxShareNumber = 1 << 53

// decodeShareNode parses one node's record as share.lua writes it,
// "demand seen start hold k c start hold k c …" in decimal, and accepts
// what the script accepts: integers of digits and an optional '-',
// separated by spaces, from -1 (a demand, at most gcra.MaxShareDemand) or
// 0 (the rest) to below 2^53, whose rates are 1 to gcra.ShareParts, whose
// capacities are at least 0 (a renewal cuts an older grant's to the level
// its node keeps within) and whose holds are not before their starts.
func decodeShareNode(v string) (*gcra.ShareNode, error) {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c != ' ' && c != '-' && (c < '0' || c > '9') {
			return nil, fmt.Errorf("a byte %q in a share record", c)
		}
	}
	fields := strings.Fields(v)
	if len(fields) < 2 || (len(fields)-2)%4 != 0 {
		return nil, fmt.Errorf("a share record of %d numbers", len(fields))
	}
	x := make([]int64, len(fields))
	for i, f := range fields {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < -1 || n >= maxShareNumber || (n < 0 && i > 0) {
			return nil, fmt.Errorf("%q in a share record", f)
		}
		x[i] = n
	}
	if x[0] > gcra.MaxShareDemand {
		return nil, fmt.Errorf("a demand of %d parts", x[0])
	}
	nd := &gcra.ShareNode{Demand: x[0], Seen: x[1]}
	for i := 2; i < len(x); i += 4 {
		r := gcra.ShareReservation{Start: x[i], Hold: x[i+1], K: x[i+2], C: x[i+3]}
		if r.Hold < r.Start || r.K < 1 || r.K > gcra.ShareParts || r.C < 0 {
			return nil, fmt.Errorf("a reservation %+v", r)
		}
		nd.Res = append(nd.Res, r)
	}
	return nd, nil
}

// encodeShareNode writes nd as share.lua does.
func encodeShareNode(nd *gcra.ShareNode) string {
	b := strconv.AppendInt(nil, nd.Demand, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, nd.Seen, 10)
	for _, r := range nd.Res {
		for _, x := range []int64{r.Start, r.Hold, r.K, r.C} {
			b = append(b, ' ')
			b = strconv.AppendInt(b, x, 10)
		}
	}
	return string(b)
}
