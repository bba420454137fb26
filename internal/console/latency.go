package console

import (
	"context"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

// Bounds of Latency.
const (
	// LatencySubBuckets is the number of buckets of each power of two of
	// nanoseconds: a quantile is reported within 1/LatencySubBuckets
	// (0.8 %) above the true value, and exactly below 128 ns.
	LatencySubBuckets = 1 << latencySubBits
	latencySubBits    = 7
	// latencyMaxBits bounds the durations told apart: 2^40 ns (18 min);
	// longer ones count as the longest.
	latencyMaxBits = 40
	latencyBuckets = (latencyMaxBits - latencySubBits + 1) * LatencySubBuckets
	// latencySlots is the number of BucketWidth-long slots kept: the
	// current one and the three before it make the last minute (as
	// WindowMinute); the fifth is the one about to be reused.
	latencySlots = 5
)

// latencyIndex returns the bucket of ns: ns itself below
// LatencySubBuckets, then LatencySubBuckets buckets per power of two
// (the HDR histogram's log-linear layout).
func latencyIndex(ns uint64) int {
	if ns < LatencySubBuckets {
		return int(ns)
	}
	ns = min(ns, 1<<latencyMaxBits-1)
	shift := bits.Len64(ns) - latencySubBits - 1
	return (shift+1)*LatencySubBuckets + int(ns>>shift) - LatencySubBuckets
}

// latencyUpper returns the largest duration in bucket i, in ns.
func latencyUpper(i int) uint64 {
	if i < LatencySubBuckets {
		return uint64(i)
	}
	shift := i/LatencySubBuckets - 1
	sub := uint64(i%LatencySubBuckets + LatencySubBuckets)
	return (sub+1)<<shift - 1
}

// latencySlot counts the durations of one BucketWidth.
type latencySlot struct {
	period atomic.Int64 // the slot's BucketWidth number; -1 unused
	counts [latencyBuckets]atomic.Uint64
}

// Latency is a histogram of durations with bounded memory and a bounded
// relative error (HDR-style log-linear buckets: LatencySubBuckets per
// power of two, 4,352 in all), kept per BucketWidth for the last minute:
// 5 slots of 35 kB. Observe costs a clock-free index and one atomic add.
// It is safe for concurrent use; the zero Latency is ready, and a nil one
// records nothing.
type Latency struct {
	mu    sync.Mutex // rotation of a slot
	once  sync.Once
	slots [latencySlots]latencySlot
}

func (h *Latency) init() {
	for i := range h.slots {
		h.slots[i].period.Store(-1)
	}
}

// periodOf returns the BucketWidth number of t.
func periodOf(t time.Time) int64 { return t.Unix() / int64(BucketWidth/time.Second) }

// Observe counts one duration d that ended at now.
func (h *Latency) Observe(d time.Duration, now time.Time) {
	if h == nil {
		return
	}
	h.once.Do(h.init)
	p := periodOf(now)
	s := &h.slots[p%latencySlots]
	if s.period.Load() != p {
		h.rotate(s, p)
	}
	s.counts[latencyIndex(uint64(max(d, 0)))].Add(1)
}

// rotate empties slot s for period p, unless another goroutine did.
func (h *Latency) rotate(s *latencySlot, p int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.period.Load() == p {
		return
	}
	for i := range s.counts {
		s.counts[i].Store(0)
	}
	s.period.Store(p)
}

// Quantiles returns the durations at quantiles qs (0 to 1) of those
// observed in the last minute as of now (the current BucketWidth and the
// three before it: 45 to 60 seconds), each the largest duration of its
// bucket, so within 1/LatencySubBuckets above the true quantile; and the
// number of durations counted. Without any, it returns nil and 0.
func (h *Latency) Quantiles(now time.Time, qs ...float64) ([]time.Duration, uint64) {
	if h == nil {
		return nil, 0
	}
	h.once.Do(h.init)
	p := periodOf(now)
	var sum [latencyBuckets]uint64
	var total uint64
	for i := range h.slots {
		s := &h.slots[i]
		if sp := s.period.Load(); sp > p || sp <= p-4 {
			continue
		}
		for j := range s.counts {
			if n := s.counts[j].Load(); n > 0 {
				sum[j] += n
				total += n
			}
		}
	}
	if total == 0 {
		return nil, 0
	}
	out := make([]time.Duration, len(qs))
	for k, q := range qs {
		rank := uint64(math.Ceil(min(max(q, 0), 1) * float64(total)))
		rank = max(rank, 1)
		var cum uint64
		for j, n := range sum {
			if cum += n; cum >= rank {
				out[k] = time.Duration(latencyUpper(j))
				break
			}
		}
	}
	return out, total
}

// Time returns a store that passes every call to s and records the
// latency of its decisions (Do and the GCRA command) in h, for the
// console's p50 and p99: meant for a network store, whose calls take far
// longer than the two clock reads. It forwards the optional interfaces of
// s that Watch does (not FunnelTaker: a Limiter over it decides through
// Do, timed). With a nil h it returns s.
func Time(s funnel.Store, h *Latency) funnel.Store {
	if h == nil {
		return s
	}
	return &Timed{inner: s, h: h}
}

// Timed is a funnel.Store that records the latency of the decisions of
// the store it wraps. Build one with Time.
type Timed struct {
	inner funnel.Store
	h     *Latency
}

var (
	_ funnel.Store     = (*Timed)(nil)
	_ funnel.GCRAStore = (*Timed)(nil)
)

// Do calls the wrapped store's Do and records its latency.
func (t *Timed) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	start := time.Now()
	err := t.inner.Do(ctx, ops, res)
	end := time.Now()
	t.h.Observe(end.Sub(start), end)
	return err
}

// GCRA calls the wrapped store's GCRA command (funnel.ForwardGCRA) and
// records its latency.
func (t *Timed) GCRA(ctx context.Context, key string, p gcra.CommandParams) (funnel.GCRAResult, error) {
	start := time.Now()
	r, err := funnel.ForwardGCRA(ctx, t.inner, key, p)
	end := time.Now()
	t.h.Observe(end.Sub(start), end)
	return r, err
}

// Reset calls the wrapped store's Reset.
func (t *Timed) Reset(ctx context.Context, key string) (bool, error) { return t.inner.Reset(ctx, key) }

// TTL calls the wrapped store's TTL.
func (t *Timed) TTL(ctx context.Context, key string) (time.Duration, bool, error) {
	return t.inner.TTL(ctx, key)
}

// Bans calls the wrapped store's Bans.
func (t *Timed) Bans(ctx context.Context) ([]funnel.Ban, error) { return t.inner.Bans(ctx) }

// Unban calls the wrapped store's Unban.
func (t *Timed) Unban(ctx context.Context, key string) (bool, error) { return t.inner.Unban(ctx, key) }

// NonBlocking reports whether the wrapped store says that its calls never
// wait.
func (t *Timed) NonBlocking() bool { return funnel.NonBlockingOf(t.inner) }

// Group returns the wrapped store's group of key (funnel.Grouper).
func (t *Timed) Group(key string) int { return funnel.GroupOf(t.inner, key) }

// Keys returns the keys the wrapped store holds, when it counts them.
func (t *Timed) Keys() (int, bool) { return funnel.KeysOf(t.inner) }

// Evictions returns the keys the wrapped store evicted.
func (t *Timed) Evictions() uint64 { return funnel.EvictionsOf(t.inner) }

// Unwrap returns the wrapped store.
func (t *Timed) Unwrap() funnel.Store { return t.inner }
