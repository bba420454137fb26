package bench

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

// snapshotKeys are the keys of BenchmarkSnapshot's stores: 1,000,000 funnel
// keys, and in the "all" store 100,000 keys of each other algorithm too.
const (
	snapshotFunnelKeys = 1_000_000
	snapshotOtherKeys  = 100_000
)

// snapshotStore fills a memory store with n funnel keys and, when others,
// snapshotOtherKeys keys of each other algorithm, each charged once (three
// times for the sliding log, so that its log holds several times), under
// limits whose states last an hour or more, longer than the benchmark.
func snapshotStore(b *testing.B, others bool) (*memstore.Store, int) {
	b.Helper()
	s := memstore.New(memstore.Options{SweepInterval: -1})
	check := func(l funnel.Limit) funnel.Checked {
		c, err := l.Check()
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	type family struct {
		prefix string
		limit  funnel.Checked
		n, q   int
	}
	fams := []family{{"funnel:", check(funnel.Per(1000, 1000*time.Hour).WithBurst(100)), snapshotFunnelKeys, 1}}
	if others {
		window := func(a funnel.Algorithm) funnel.Checked {
			return check(funnel.Limit{Algorithm: a, Count: 1000, Period: 1000 * time.Hour})
		}
		fams = append(fams,
			family{"leaky:", check(funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 1000, Period: 1000 * time.Hour, Burst: 100}), snapshotOtherKeys, 1},
			family{"fixed:", window(funnel.FixedWindow), snapshotOtherKeys, 1},
			family{"sliding:", window(funnel.SlidingWindow), snapshotOtherKeys, 1},
			family{"log:", window(funnel.SlidingLog), snapshotOtherKeys, 3},
			family{"conc:", window(funnel.Concurrency), snapshotOtherKeys, 1},
		)
	}
	ctx := context.Background()
	var res [1]funnel.Result
	keys := 0
	buf := make([]byte, 0, 32)
	for _, f := range fams {
		for i := range f.n {
			buf = strconv.AppendInt(append(buf[:0], f.prefix...), int64(i), 10)
			for q := range f.q {
				op := funnel.Op{Kind: funnel.OpTake, Key: string(buf), Limit: f.limit, N: 1, Lease: "lease-" + strconv.Itoa(q)}
				if err := s.Do(ctx, []funnel.Op{op}, res[:]); err != nil || !res[0].Allowed {
					b.Fatalf("%s: %+v, %v", buf, res[0], err)
				}
			}
		}
		keys += f.n
	}
	return s, keys
}

// BenchmarkSnapshot measures memstore's snapshots as funnel serve takes
// them: written to a file and fsynced, and restored from it, with the
// file's bytes per key (B/key, next to key-B, the length of a funnel key).
func BenchmarkSnapshot(b *testing.B) {
	for _, sc := range []struct {
		name   string
		others bool
	}{{"funnel-1M", false}, {"all-1.5M", true}} {
		b.Run(sc.name, func(b *testing.B) {
			s, keys := snapshotStore(b, sc.others)
			defer s.Close()
			path := filepath.Join(b.TempDir(), "snapshot")
			var size int64
			b.Run("write", func(b *testing.B) {
				for range b.N {
					f, err := os.Create(path)
					if err != nil {
						b.Fatal(err)
					}
					st, err := s.WriteSnapshot(f)
					if err == nil {
						err = f.Sync()
					}
					if cerr := f.Close(); err == nil {
						err = cerr
					}
					if err != nil || st.Keys != int64(keys) {
						b.Fatalf("%+v, %v; want %d keys", st, err, keys)
					}
					size = st.Bytes
				}
				b.ReportMetric(float64(size)/float64(keys), "B/key")
				b.ReportMetric(float64(len("funnel:999999")), "key-B")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/op")
			})
			b.Run("restore", func(b *testing.B) {
				for range b.N {
					f, err := os.Open(path)
					if err != nil {
						b.Fatal(err)
					}
					r := memstore.New(memstore.Options{SweepInterval: -1})
					st, err := r.ReadSnapshot(bufio.NewReaderSize(f, 1<<20))
					f.Close()
					if err != nil || st.Keys != int64(keys) {
						b.Fatalf("%+v, %v; want %d keys", st, err, keys)
					}
					b.StopTimer()
					r.Close()
					b.StartTimer()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/op")
			})
		})
	}
}
