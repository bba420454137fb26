package bench

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

const (
	// numKeys is the number of keys of the keys100k scenario.
	numKeys = 100_000
	// seqLen is the length of the precomputed random key sequence (a power of
	// two, so that walking it wraps with a mask).
	seqLen = 1 << 20
	// memKeys is the number of distinct keys the memory benchmark inserts.
	memKeys = 1_000_000
	// hotKey is the key of the hot scenario.
	hotKey = "user:0000042"
)

// keyName returns the i-th key, "user:%07d", appended to buf.
func keyName(buf []byte, i int) []byte {
	buf = append(buf, "user:"...)
	for d := 1_000_000; d > 1 && i < d; d /= 10 {
		buf = append(buf, '0')
	}
	return strconv.AppendInt(buf, int64(i), 10)
}

var (
	keysOnce sync.Once
	keys     []string // numKeys distinct key strings
	keySeq   []uint32 // seqLen random indices into keys
)

// keyData returns the keys of the keys100k scenario and a random sequence of
// indices into them, built once and outside any timed loop.
func keyData() ([]string, []uint32) {
	keysOnce.Do(func() {
		keys = make([]string, numKeys)
		for i := range keys {
			keys[i] = string(keyName(nil, i))
		}
		r := rand.New(rand.NewPCG(1, 2))
		keySeq = make([]uint32, seqLen)
		for i := range keySeq {
			keySeq[i] = uint32(r.IntN(numKeys))
		}
	})
	return keys, keySeq
}

// BenchmarkAllow measures one request of one unit, allowed, under
// throughputSpec, from b.RunParallel goroutines (so -cpu 1,2 shows the cost
// of contention).
//
// hot sends every request to one key. keys100k sends them to 100,000 keys
// that each limiter already holds (all were requested once before the
// timer starts), in a precomputed random order: each goroutine walks the
// same random sequence of key indices from its own random starting point.
//
// Under throughputSpec a Funnel key is full again 1µs after its request.
// Funnel's background sweep (once a second) drops a key only when its bucket
// has been full for a whole interval, so the keys of this run, each asked for
// many times a second, stay held like the other limiters' keys.
func BenchmarkAllow(b *testing.B) {
	b.Run("hot", func(b *testing.B) {
		for _, k := range kinds {
			b.Run(k.name, func(b *testing.B) { benchHot(b, k) })
		}
	})
	b.Run("keys100k", func(b *testing.B) {
		for _, k := range kinds {
			if k.keyed {
				b.Run(k.name, func(b *testing.B) { benchKeys(b, k) })
			}
		}
	})
}

func benchHot(b *testing.B, k limiterKind) {
	l := k.new(throughputSpec)
	defer l.close()
	if p, ok := l.(preparer); ok {
		p.prepare(hotKey)
	}
	var c outcomes
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var local outcomes
		for pb.Next() {
			local.count(l.allow(hotKey))
		}
		c.add(&local)
	})
	b.StopTimer()
	c.report(b)
}

// seeds gives each RunParallel goroutine its own random source.
var seeds atomic.Uint64

func benchKeys(b *testing.B, k limiterKind) {
	keys, seq := keyData()
	l := k.new(throughputSpec)
	defer l.close()
	for _, key := range keys {
		if p, ok := l.(preparer); ok {
			p.prepare(key)
		} else if _, err := l.allow(key); err != nil {
			b.Fatal(err)
		}
	}
	var c outcomes
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(seeds.Add(1), 0x9e3779b97f4a7c15))
		i := r.Uint32()
		var local outcomes
		for pb.Next() {
			local.count(l.allow(keys[seq[i&(seqLen-1)]]))
			i++
		}
		c.add(&local)
	})
	b.StopTimer()
	c.report(b)
}

// outcomes counts the requests of a benchmark that did not simply pass.
type outcomes struct {
	mu             sync.Mutex
	denied, failed int64
}

// count records the result of one request, in a goroutine's own outcomes.
func (o *outcomes) count(ok bool, err error) {
	switch {
	case err != nil:
		o.failed++
	case !ok:
		o.denied++
	}
}

// add merges a goroutine's counts into o.
func (o *outcomes) add(local *outcomes) {
	o.mu.Lock()
	o.denied += local.denied
	o.failed += local.failed
	o.mu.Unlock()
}

// report reports the share of requests that were refused (denied/op) or
// returned an error (errors/op), each only when there were any. Under
// throughputSpec none should be refused; an error is the limiter giving up,
// such as throttled's store after too many failed compare-and-swaps.
func (o *outcomes) report(b *testing.B) {
	if o.denied > 0 {
		b.ReportMetric(float64(o.denied)/float64(b.N), "denied/op")
	}
	if o.failed > 0 {
		b.ReportMetric(float64(o.failed)/float64(b.N), "errors/op")
	}
}

// BenchmarkMemoryPerKey measures the heap each keyed limiter keeps per key:
// it requests one unit for each of 1,000,000 distinct keys ("user:%07d")
// under memorySpec, so that every key stays limited, and divides the growth
// of the live heap (after a full GC) by the number of keys.
//
// Each key is a fresh string, built outside the limiter as a request would
// bring it: a limiter that keeps the caller's string and one that copies it
// are both charged for exactly one copy. The limiter itself is built inside
// the measurement, so its fixed overhead is included (amortised over the
// keys).
//
// Metrics: B/key (heap growth per key), allocs/key (allocations made while
// inserting, per key, including key strings the limiter did not keep),
// key-B (the length of one key, for comparison with a target such as "≤ 64
// bytes per key plus the key's length") and ns/key (time to insert one key;
// ns/op is the time to insert all 1,000,000 keys).
func BenchmarkMemoryPerKey(b *testing.B) {
	for _, k := range kinds {
		if k.keyed && k.name != "funnel-limiter" { // funnel-limiter has funnel-memstore's memory
			b.Run(k.name, func(b *testing.B) { benchMemory(b, k) })
		}
	}
}

func benchMemory(b *testing.B, k limiterKind) {
	var grown, allocs uint64
	var before, after runtime.MemStats
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		l := k.new(memorySpec)
		buf := make([]byte, 0, 32)
		for i := range memKeys {
			buf = keyName(buf[:0], i)
			if ok, err := l.allow(string(buf)); !ok || err != nil {
				b.Fatalf("%s: key %d not allowed: %v", k.name, i, err)
			}
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(l)
		l.close()
		if after.HeapAlloc > before.HeapAlloc {
			grown += after.HeapAlloc - before.HeapAlloc
		}
		allocs += after.Mallocs - before.Mallocs
	}
	keys := float64(b.N) * memKeys
	b.ReportMetric(float64(grown)/keys, "B/key")
	b.ReportMetric(float64(allocs)/keys, "allocs/key")
	b.ReportMetric(float64(len(keyName(nil, memKeys-1))), "key-B")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/keys, "ns/key")
}
