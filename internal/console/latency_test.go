package console

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Every duration falls in a bucket whose largest duration is at most 1/128
// above it, buckets are in order, and none is past the last.
func TestLatencyBuckets(t *testing.T) {
	check := func(ns uint64) {
		i := latencyIndex(ns)
		if i < 0 || i >= latencyBuckets {
			t.Fatalf("%d ns: bucket %d of %d", ns, i, latencyBuckets)
		}
		up := latencyUpper(i)
		if ns < 1<<latencyMaxBits && (up < ns || float64(up-ns) > float64(ns)/LatencySubBuckets) {
			t.Fatalf("%d ns: bucket %d up to %d", ns, i, up)
		}
		if i > 0 && latencyIndex(latencyUpper(i-1)) != i-1 || latencyIndex(latencyUpper(i-1)+1) != i && ns < 1<<latencyMaxBits {
			t.Fatalf("bucket %d: not contiguous with the one before", i)
		}
	}
	for ns := range uint64(1 << 16) {
		check(ns)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		check(r.Uint64N(1 << latencyMaxBits))
	}
	check(1<<latencyMaxBits - 1)
	if latencyIndex(1<<63) != latencyBuckets-1 {
		t.Fatal("a very long duration is not in the last bucket")
	}
}

// The quantiles of the last minute are within 1/128 above the exact ones,
// and durations older than a minute are forgotten.
func TestLatencyQuantiles(t *testing.T) {
	var h Latency
	start := time.Unix(1_700_000_010, 0) // 10 s into a 15 s bucket
	if q, n := h.Quantiles(start, 0.5); q != nil || n != 0 {
		t.Fatalf("empty = %v, %d", q, n)
	}
	r := rand.New(rand.NewPCG(3, 4))
	var all []time.Duration
	for i := range 20000 {
		d := time.Duration(50_000 + r.ExpFloat64()*200_000) // Redis-like: 50 µs and a tail
		all = append(all, d)
		h.Observe(d, start.Add(time.Duration(i)*time.Millisecond)) // 20 s: two buckets
	}
	slices.Sort(all)
	now := start.Add(20 * time.Second)
	q, n := h.Quantiles(now, 0.5, 0.99, 1)
	if n != 20000 {
		t.Fatalf("counted %d", n)
	}
	for k, want := range []time.Duration{all[9999], all[19799], all[19999]} {
		if q[k] < want || float64(q[k]-want) > float64(want)/LatencySubBuckets {
			t.Errorf("quantile %d = %v, exact %v", k, q[k], want)
		}
	}
	// A minute later, those are gone; a new duration reuses a slot.
	later := now.Add(time.Minute)
	h.Observe(time.Millisecond, later)
	if q, n := h.Quantiles(later, 0.5); n != 1 || q[0] < time.Millisecond || q[0] > time.Millisecond+time.Millisecond/128 {
		t.Fatalf("a minute later = %v, %d", q, n)
	}
}

// BenchmarkLatencyObserve is the cost of timing a store decision, beside
// its two clock reads.
func BenchmarkLatencyObserve(b *testing.B) {
	var h Latency
	now := time.Now()
	for b.Loop() {
		h.Observe(123456, now)
	}
}
