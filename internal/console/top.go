package console

import (
	"container/heap"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/funnelrl/funnel"
)

// Bounds of the top-limited sketch.
const (
	// BucketWidth is the span of time one Space-Saving summary covers.
	BucketWidth = 15 * time.Second
	// Buckets is the number of summaries kept: 15 minutes of them.
	Buckets = 60
	// BucketCapacity is the number of counters of one summary: the keys
	// refused most in its span, and how often, over-estimated by at most
	// the smallest count of a full summary.
	BucketCapacity = 128
	// TopN is the number of entries a window reports at most.
	TopN = 100
	// MaxKeyLen bounds the bytes of a key the sketch keeps; a longer key is
	// kept truncated and reported with Truncated set.
	MaxKeyLen = 512
	// SampleAfter is the number of refusals of a bucket that the sketch
	// counts one by one (1,333 a second); beyond, until the next bucket, it
	// counts one refusal in SampleRate, chosen at random, as SampleRate.
	SampleAfter = 20000
	// SampleRate is the sampling of refusals beyond SampleAfter.
	SampleRate = 16
)

// Windows of Top.Top.
const (
	// WindowMinute is the last minute: the current bucket and the three
	// before it (45 to 60 seconds).
	WindowMinute = time.Minute
	// WindowQuarter is the last 15 minutes.
	WindowQuarter = 15 * time.Minute
)

// entryKey is what the sketch counts: a refused key under one limit,
// decided through one edge.
type entryKey struct {
	edge  string
	rule  funnel.Limit // Location dropped; a funnel as 1 per interval
	key   string
	trunc bool
}

// counter is one counter of a Space-Saving summary.
type counter struct {
	k     entryKey
	count uint64
	err   uint64 // the count it inherited from the counter it replaced
}

// summary is a Space-Saving summary (Metwally, Agrawal and El Abbadi,
// 2005) of at most BucketCapacity counters, in a min-heap by count.
type summary struct {
	start int64 // bucket number (Unix time / BucketWidth) it counts
	idx   map[entryKey]int
	items []counter
	last  int    // index of the counter added to last, -1 for none: a hot key skips the map
	seen  uint64 // refusals of the bucket, sampled ones as SampleRate
}

func (s *summary) Len() int           { return len(s.items) }
func (s *summary) Less(i, j int) bool { return s.items[i].count < s.items[j].count }
func (s *summary) Swap(i, j int) {
	s.items[i], s.items[j] = s.items[j], s.items[i]
	s.idx[s.items[i].k] = i
	s.idx[s.items[j].k] = j
	switch s.last {
	case i:
		s.last = j
	case j:
		s.last = i
	}
}
func (s *summary) Push(x any) {
	c := x.(counter)
	s.idx[c.k] = len(s.items)
	s.items = append(s.items, c)
}
func (s *summary) Pop() any {
	c := s.items[len(s.items)-1]
	s.items = s.items[:len(s.items)-1]
	delete(s.idx, c.k)
	return c
}

// add counts w occurrences of k: in its counter, or a new one, or the
// smallest counter taken over.
func (s *summary) add(k entryKey, w uint64) {
	if s.last >= 0 && s.items[s.last].k == k {
		s.items[s.last].count += w
		heap.Fix(s, s.last)
		return
	}
	if i, ok := s.idx[k]; ok {
		s.last = i
		s.items[i].count += w
		heap.Fix(s, i)
		return
	}
	k.key = strings.Clone(k.key) // the store's key may alias a reused buffer
	if len(s.items) < BucketCapacity {
		s.last = len(s.items)
		heap.Push(s, counter{k: k, count: w})
		return
	}
	min := s.items[0]
	delete(s.idx, min.k)
	s.items[0] = counter{k: k, count: min.count + w, err: min.count}
	s.idx[k] = 0
	s.last = 0
	heap.Fix(s, 0)
}

// Top is a bounded heavy-hitter sketch of refused decisions: for each
// BucketWidth of the last 15 minutes, a Space-Saving summary of the keys
// refused most, by edge and limit. Its memory is bounded whatever the
// number of keys: Buckets × BucketCapacity counters, each with a key of at
// most MaxKeyLen bytes. It is safe for concurrent use; a nil *Top records
// nothing.
//
// Record costs the decision path little: an admitted decision is not
// recorded at all; a refusal reads no clock (see Advance); and Record never
// waits: when another goroutine holds the sketch, the refusal is not
// counted but added to the skipped count, so that the page says how many
// were left out. Beyond SampleAfter refusals in a bucket, one in
// SampleRate is counted, as SampleRate: the heavy hitters of a flood are
// found at a sixteenth of the cost, with counts that are estimates.
type Top struct {
	now    func() time.Time
	bucket atomic.Int64 // the current bucket number, as Advance last read it
	mu     sync.Mutex
	ring   [Buckets]summary
	// sampling is set while the current bucket has seen more than
	// SampleAfter refusals; it is read by every Record and written once a
	// bucket at most, so that it costs no shared write.
	sampling atomic.Bool
	total    uint64        // refusals counted (sampled ones as SampleRate), under mu
	skipped  atomic.Uint64 // refusals left out, the sketch being busy

	delayMu sync.Mutex
	delayed map[string]*atomic.Uint64 // admitted with a delay, by edge
}

// NewTop returns an empty sketch that reads the time from now (nil means
// time.Now).
func NewTop(now func() time.Time) *Top {
	if now == nil {
		now = time.Now
	}
	t := &Top{now: now}
	t.bucket.Store(bucketOf(now()))
	for i := range t.ring {
		t.ring[i] = summary{start: -1, idx: make(map[entryKey]int), last: -1}
	}
	return t
}

// bucketOf returns the bucket number of t.
func bucketOf(t time.Time) int64 { return t.Unix() / int64(BucketWidth/time.Second) }

// Advance reads the clock and moves the bucket that Record counts into:
// Record does not read the clock itself, to cost the decision path less.
// The console calls it every second, and Top at each query.
func (t *Top) Advance() {
	if t == nil {
		return
	}
	if b := bucketOf(t.now()); t.bucket.Swap(b) != b {
		t.sampling.Store(false) // a new bucket counts one by one
	}
}

// Record counts one refusal of key under limit through edge, in the bucket
// of the last Advance.
func (t *Top) Record(edge string, limit funnel.Limit, key string) {
	if t == nil {
		return
	}
	if w := t.weight(rand.Uint64()); w > 0 {
		t.record(edge, limit, key, w)
	}
}

// weight is what a refusal counts for: 1, or while sampling SampleRate
// for one refusal in SampleRate and 0 for the others, chosen by the top
// bits of h times the golden ratio: h must vary from refusal to refusal
// (a random number, or the nanoseconds of a result's times). It is small
// enough to be inlined, so that a refusal sampled out costs a load and a
// multiplication.
func (t *Top) weight(h uint64) uint64 {
	if !t.sampling.Load() {
		return 1
	}
	if (h*0x9E3779B97F4A7C15)>>60 != 0 {
		return 0
	}
	return SampleRate
}

// record counts a refusal of weight w.
func (t *Top) record(edge string, limit funnel.Limit, key string, w uint64) {
	if !t.mu.TryLock() {
		t.skipped.Add(w)
		return
	}
	b := t.bucket.Load()
	s := &t.ring[b%Buckets]
	if s.start != b {
		clear(s.idx)
		s.items = s.items[:0]
		s.start, s.last, s.seen = b, -1, 0
		t.sampling.Store(false)
	}
	s.seen += w
	if s.seen > SampleAfter && !t.sampling.Load() {
		t.sampling.Store(true)
	}
	t.total += w
	k := entryKey{edge: edge, rule: limit, key: key}
	if len(key) > MaxKeyLen {
		k.key, k.trunc = key[:MaxKeyLen], true
	}
	s.add(k, w)
	t.mu.Unlock()
}

// Counts returns the refusals counted since start (those counted by
// sampling as SampleRate each), the ones left out because the sketch was
// busy, and whether the current bucket is sampled.
func (t *Top) Counts() (total, skipped uint64, sampling bool) {
	if t == nil {
		return 0, 0, false
	}
	t.mu.Lock()
	total = t.total
	t.mu.Unlock()
	return total, t.skipped.Load(), t.sampling.Load()
}

// delayCounter returns the counter of edge's delayed decisions.
func (t *Top) delayCounter(edge string) *atomic.Uint64 {
	t.delayMu.Lock()
	defer t.delayMu.Unlock()
	if t.delayed == nil {
		t.delayed = map[string]*atomic.Uint64{}
	}
	c, ok := t.delayed[edge]
	if !ok {
		c = new(atomic.Uint64)
		t.delayed[edge] = c
	}
	return c
}

// Delayed returns, by edge, the decisions admitted with a delay (the leaky
// bucket's, and concurrency leases granted within their burst) since start.
func (t *Top) Delayed() map[string]uint64 {
	if t == nil {
		return nil
	}
	t.delayMu.Lock()
	defer t.delayMu.Unlock()
	m := make(map[string]uint64, len(t.delayed))
	for e, c := range t.delayed {
		m[e] = c.Load()
	}
	return m
}

// Entry is one key of a top-limited window.
type Entry struct {
	// Edge is the listener the decisions came through: "http", "resp" or
	// "grpc".
	Edge string `json:"edge"`
	// Rule describes the limit the key was refused under, as the store saw
	// it: a funnel as "gcra 1 per <interval>, burst <b>" (its emission
	// interval), other algorithms as their Limit.String.
	Rule string `json:"rule"`
	// Key is the store key (with the rate-limit service, the descriptor's
	// key: domain_key_value_…).
	Key string `json:"key"`
	// Truncated reports that Key is the first MaxKeyLen bytes of a longer
	// key.
	Truncated bool `json:"truncated,omitempty"`
	// Count is the refusals counted in the window: an estimate that
	// exceeds the true count by at most Error.
	Count uint64 `json:"count"`
	// Error bounds the over-estimate of Count.
	Error uint64 `json:"error"`
}

// Filter selects the entries of a window; empty fields select all.
type Filter struct {
	// Edge selects the entries of one edge.
	Edge string
	// Rule selects the entries whose rule contains it.
	Rule string
}

// Top returns at most TopN entries refused most within window (rounded to
// whole buckets: WindowMinute is 4 buckets) and selected by f, most
// refused first.
func (t *Top) Top(window time.Duration, f Filter) []Entry {
	if t == nil {
		return nil
	}
	n := int64(window / BucketWidth)
	n = max(1, min(n, Buckets))
	t.Advance()
	t.mu.Lock()
	now := t.bucket.Load()
	sum := map[entryKey]*Entry{}
	for b := now - n + 1; b <= now; b++ {
		if b < 0 {
			continue
		}
		s := &t.ring[b%Buckets]
		if s.start != b {
			continue
		}
		for _, c := range s.items {
			if f.Edge != "" && c.k.edge != f.Edge {
				continue
			}
			e, ok := sum[c.k]
			if !ok {
				e = &Entry{Edge: c.k.edge, Key: c.k.key, Truncated: c.k.trunc}
				sum[c.k] = e
			}
			e.Count += c.count
			e.Error += c.err
		}
	}
	t.mu.Unlock()
	out := make([]Entry, 0, len(sum))
	for k, e := range sum {
		e.Rule = ruleString(k.rule)
		if f.Rule != "" && !strings.Contains(e.Rule, f.Rule) {
			continue
		}
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		if out[i].Key != out[j].Key {
			return out[i].Key < out[j].Key
		}
		if out[i].Edge != out[j].Edge {
			return out[i].Edge < out[j].Edge
		}
		return out[i].Rule < out[j].Rule
	})
	if len(out) > TopN {
		out = out[:TopN]
	}
	return out
}

// ruleString describes a limit for the page.
func ruleString(l funnel.Limit) string {
	if l.Algorithm == funnel.GCRA {
		return "gcra " + l.String()
	}
	return l.String()
}
