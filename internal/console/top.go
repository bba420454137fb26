package console

import (
	"container/heap"
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
}

func (s *summary) Len() int           { return len(s.items) }
func (s *summary) Less(i, j int) bool { return s.items[i].count < s.items[j].count }
func (s *summary) Swap(i, j int) {
	s.items[i], s.items[j] = s.items[j], s.items[i]
	s.idx[s.items[i].k] = i
	s.idx[s.items[j].k] = j
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

// add counts one occurrence of k: its counter, or a new one, or the
// smallest counter taken over.
func (s *summary) add(k entryKey) {
	if i, ok := s.idx[k]; ok {
		s.items[i].count++
		heap.Fix(s, i)
		return
	}
	k.key = strings.Clone(k.key) // the store's key may alias a reused buffer
	if len(s.items) < BucketCapacity {
		heap.Push(s, counter{k: k, count: 1})
		return
	}
	min := s.items[0]
	delete(s.idx, min.k)
	s.items[0] = counter{k: k, count: min.count + 1, err: min.count}
	s.idx[k] = 0
	heap.Fix(s, 0)
}

// Top is a bounded heavy-hitter sketch of refused decisions: for each
// BucketWidth of the last 15 minutes, a Space-Saving summary of the keys
// refused most, by edge and limit. Its memory is bounded whatever the
// number of keys: Buckets × BucketCapacity counters, each with a key of at
// most MaxKeyLen bytes. It is safe for concurrent use; a nil *Top records
// nothing.
//
// Record never waits: when another goroutine holds the sketch, the refusal
// is not counted but added to Skipped, so that the decision path pays a
// failed try-lock at most, and the page says how many were left out.
type Top struct {
	now     func() time.Time
	mu      sync.Mutex
	ring    [Buckets]summary
	total   atomic.Uint64 // refusals offered to Record
	skipped atomic.Uint64 // of which not counted, the sketch being busy
}

// NewTop returns an empty sketch that reads the time from now (nil means
// time.Now).
func NewTop(now func() time.Time) *Top {
	if now == nil {
		now = time.Now
	}
	t := &Top{now: now}
	for i := range t.ring {
		t.ring[i] = summary{start: -1, idx: make(map[entryKey]int)}
	}
	return t
}

// bucketOf returns the bucket number of t.
func bucketOf(t time.Time) int64 { return t.Unix() / int64(BucketWidth/time.Second) }

// Record counts one refusal of key under limit through edge.
func (t *Top) Record(edge string, limit funnel.Limit, key string) {
	if t == nil {
		return
	}
	t.total.Add(1)
	if !t.mu.TryLock() {
		t.skipped.Add(1)
		return
	}
	b := bucketOf(t.now())
	s := &t.ring[b%Buckets]
	if s.start != b {
		clear(s.idx)
		s.items = s.items[:0]
		s.start = b
	}
	k := entryKey{edge: edge, rule: limit, key: key}
	if len(key) > MaxKeyLen {
		k.key, k.trunc = key[:MaxKeyLen], true
	}
	s.add(k)
	t.mu.Unlock()
}

// Counts returns the refusals offered to Record and, of those, the ones
// not counted because the sketch was busy.
func (t *Top) Counts() (total, skipped uint64) {
	if t == nil {
		return 0, 0
	}
	return t.total.Load(), t.skipped.Load()
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
	Edge string
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
	t.mu.Lock()
	now := bucketOf(t.now())
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
		if f.Rule != "" && e.Rule != f.Rule {
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
