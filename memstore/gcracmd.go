package memstore

import (
	"context"
	"math"
	"sync"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

// Redis's GCRA command (funnel.GCRAStore) in memory.
//
// A GCRA key is a family state of its own kind (kindCmd), in the shard's map
// beside the windows', under the shard's lock: its a is the TAT in
// microseconds of the store's clock, and it lives as the command's Redis key
// does, until the end of the millisecond TAT/1000 (Redis keeps a key whose
// PXAT is now's millisecond). So the command reads the same TATs here as on
// Redis, to the microsecond, and the decision is gcra.DecideCommand's at the
// store's time truncated to whole milliseconds (Redis's command time). The
// funnel's state (CL.THROTTLE's, the table's TATs in nanoseconds) and
// GCRA's are told apart: either one on the other's key is ErrWrongType, as
// is any live state of another algorithm. A GCRA key counts against MaxKeys
// and is swept, evicted, reset, snapshotted and restored like any family
// state.

var _ funnel.GCRAStore = (*Store)(nil)

// GCRA applies one call of Redis's GCRA command to key at the store's
// current time (see funnel.GCRAStore). It never blocks on I/O and ignores
// ctx; it never answers a fallback.
func (s *Store) GCRA(_ context.Context, key string, p gcra.CommandParams) (funnel.GCRAResult, error) {
	h, sh := s.hash(key)
	c := cmdCalls.Get().(*cmdCall)
	defer func() {
		*c = cmdCall{}
		cmdCalls.Put(c)
	}()
	c.op = funnel.Op{Key: key, N: 1}
	c.held[0] = sh
	for {
		c.ps[0] = pending{op: &c.op, sh: sh, h: h, kind: kindCmd}
		sh.mu.Lock()
		now := s.Now()
		r, err := s.applyCmd(now, c.ps[:], p, c.held[:])
		sh.mu.Unlock()
		if err != errNoRoom {
			return funnel.GCRAResult{Reply: r}, err
		}
		if err := s.evictAnywhere(now, 1); err != nil {
			return funnel.GCRAResult{}, err
		}
	}
}

// cmdCall holds what one GCRA call passes by pointer, pooled rather than
// allocated per call.
type cmdCall struct {
	op   funnel.Op
	ps   [1]pending
	held [1]*shard
}

var cmdCalls = sync.Pool{New: func() any { return new(cmdCall) }}

// applyCmd decides the GCRA call of ps[0] at now and stores its new TAT,
// as apply does for the family's ops. The caller holds the shard's lock.
func (s *Store) applyCmd(now int64, ps []pending, p gcra.CommandParams, held []*shard) (gcra.CommandReply, error) {
	pd := &ps[0]
	if err := pd.resolve(now); err != nil {
		return gcra.CommandReply{}, err
	}
	var tat int64
	if pd.live {
		tat = pd.fs.a
	}
	newTAT, r, stored, err := gcra.DecideCommand(cmdNow(now), tat, pd.live, p)
	if err != nil || !stored {
		return r, err
	}
	pd.st = fstate{kind: kindCmd, a: newTAT, expires: cmdExpires(newTAT)}
	var evict int64
	if s.max > 0 {
		var err error
		if evict, err = s.reserve(now, ps, held); err != nil {
			return gcra.CommandReply{}, err
		}
	}
	pd.commit(now)
	if evict > 0 {
		s.evictHeld(now, ps, held, evict)
	}
	s.insertNew(now, pd)
	return r, nil
}

// cmdNow returns the GCRA command's time for a store time of now
// nanoseconds: Redis's command time, whole milliseconds, in microseconds.
func cmdNow(now int64) int64 {
	return now / 1e6 * 1000
}

// cmdExpires returns the instant (ns) from which a GCRA key of TAT tat (µs)
// reads as absent: the end of the millisecond tat/1000, at which Redis
// expires the key (a key lives while now's millisecond is at most its PXAT).
func cmdExpires(tat int64) int64 {
	ms := gcra.CommandExpiry(tat)
	if ms >= math.MaxInt64/int64(1e6)-1 {
		return math.MaxInt64
	}
	return (ms + 1) * 1e6
}
