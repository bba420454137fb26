package memstore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/storetest"
)

// snapKey is a key of the snapshot tests, with the limit it is used under.
type snapKey struct {
	key   string
	limit funnel.Limit
	lease string
	// window says the key's state is counted in windows of the wall clock,
	// which a snapshot from the future does not move (see ReadSnapshot).
	window bool
}

var snapKeys = []snapKey{
	{key: "gcra", limit: funnel.Limit{Count: 10, Period: time.Minute, Burst: 4}},
	{key: "leaky", limit: funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Minute, Burst: 4}},
	{key: "fixed", limit: funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Hour}, window: true},
	{key: "sliding", limit: funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 10, Period: time.Hour}, window: true},
	{key: "daily-ny", limit: funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Calendar: funnel.Daily, Location: zone("America/New_York")}, window: true},
	{key: "log", limit: funnel.Limit{Algorithm: funnel.SlidingLog, Count: 10, Period: time.Minute}},
	{key: "conc", limit: funnel.Limit{Algorithm: funnel.Concurrency, Count: 10, Period: time.Minute}, lease: "x"},
	{key: "banned", limit: funnel.Limit{Count: 1, Period: time.Hour, Ban: 10 * time.Minute}},
	{key: "\x00binary\xff key", limit: funnel.Limit{Count: 5, Period: time.Minute}},
}

// zone loads a time zone for snapKeys.
func zone(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// spend charges every key of snapKeys several times over a few seconds,
// and bans "banned".
func spend(t *testing.T, s *memstore.Store, clock *storetest.Clock) {
	t.Helper()
	for i := range 4 {
		for _, k := range snapKeys {
			lease := k.lease
			if lease != "" {
				lease = fmt.Sprint(lease, i)
			}
			op := funnel.Op{Kind: funnel.OpTake, Key: k.key, Limit: check(t, k.limit), N: 1, Lease: lease}
			do(t, s, op)
		}
		clock.Add(1500 * time.Millisecond)
	}
}

// peek returns what a peek at each key of snapKeys answers.
func peek(t *testing.T, s *memstore.Store) []funnel.Result {
	t.Helper()
	var out []funnel.Result
	for _, k := range snapKeys {
		out = append(out, do(t, s, funnel.Op{Kind: funnel.OpTake, Key: k.key, Limit: check(t, k.limit)})[0])
	}
	return out
}

// newStoreAt returns a store on clock.
func newStoreAt(t *testing.T, opts memstore.Options, clock *storetest.Clock) *memstore.Store {
	opts.Now = clock.Now
	s := memstore.New(opts)
	t.Cleanup(func() { s.Close() })
	return s
}

func snapshot(t testing.TB, s *memstore.Store) []byte {
	t.Helper()
	var b bytes.Buffer
	st, err := s.WriteSnapshot(&b)
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes != int64(b.Len()) {
		t.Fatalf("stats say %d bytes, wrote %d", st.Bytes, b.Len())
	}
	return b.Bytes()
}

// A snapshot restored later answers every algorithm as the store that
// wrote it does at the same instant: the time that passed counts.
func TestSnapshotRoundTrip(t *testing.T) {
	for _, later := range []time.Duration{0, time.Millisecond, 7 * time.Second, 59 * time.Second, 2 * time.Hour} {
		t.Run(later.String(), func(t *testing.T) {
			// One boot, on which the time since the write is proven: all of
			// it counts (an unproven 2 h would be bounded, see
			// TestSnapshotClockSteps).
			a, ca := newStore(t, memstore.Options{SweepInterval: -1})
			spend(t, a, ca)
			a = restoreInto(t, a, ca, memstore.Options{SweepInterval: -1, Boot: bootOn("one", ca)})
			data := snapshot(t, a)
			cb := storetest.NewClock(ca.Now() + int64(later))
			b := newStoreAt(t, memstore.Options{SweepInterval: -1, Boot: bootOn("one", cb)}, cb)
			st, err := b.ReadSnapshot(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if st.Keys+st.Dropped != int64(len(snapKeys)) || st.Clamped != 0 || st.Bytes != int64(len(data)) || !st.Proven {
				t.Fatalf("stats %+v, want %d keys restored or dropped, of %d bytes", st, len(snapKeys), len(data))
			}
			ca.Add(later)
			want, got := peek(t, a), peek(t, b)
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("%q (%v) after %v: restored %+v, want %+v", snapKeys[i].key, snapKeys[i].limit.Algorithm, later, got[i], want[i])
				}
			}
			if ab, _ := a.Bans(context.Background()); int64(len(ab)) != st.Bans {
				t.Errorf("restored %d bans, the store held %d", st.Bans, len(ab))
			}
		})
	}
}

// A snapshot written at a wall time later than the reader's clock (which
// was stepped back) is restored as if written now: nothing refills and no
// ban grows. Window counts of a window ahead of now count as the current
// window's: when the clock went back by whole windows they answer as
// before (a calendar day: as many units, a longer wait to its end),
// otherwise they count as much (back 20 h crosses New York's midnight: the
// calendar window of the day before counts the next day's units).
func TestSnapshotFromTheFuture(t *testing.T) {
	for _, back := range []time.Duration{time.Hour, 90 * time.Minute, 7 * time.Second, 20 * time.Hour} {
		t.Run(back.String(), func(t *testing.T) {
			a, ca := newStore(t, memstore.Options{SweepInterval: -1})
			spend(t, a, ca)
			data := snapshot(t, a)
			b, cb := newStore(t, memstore.Options{SweepInterval: -1})
			cb.Set(ca.Now() - int64(back))
			st, err := b.ReadSnapshot(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if st.Clamped != back {
				t.Fatalf("clamped by %v, want %v", st.Clamped, back)
			}
			for _, d := range []time.Duration{0, 3 * time.Second} {
				ca.Add(d)
				cb.Add(d)
				want, got := peek(t, a), peek(t, b)
				for i := range want {
					k := snapKeys[i]
					switch {
					case !k.window || back == time.Hour && k.limit.Calendar == funnel.NoCalendar:
						if got[i] != want[i] {
							t.Errorf("%q: restored %+v, want %+v", k.key, got[i], want[i])
						}
					case got[i].Remaining > want[i].Remaining:
						t.Errorf("%q: restored with %d remaining, had %d", k.key, got[i].Remaining, want[i].Remaining)
					}
				}
			}
		})
	}
}

// bootOn is an Options.Boot of the boot id, whose time since the boot is
// clock's.
func bootOn(id string, clock *storetest.Clock) func() (string, time.Duration, bool) {
	return func() (string, time.Duration, bool) { return id, time.Duration(clock.Now()), true }
}

// restoreInto moves s's state into a new store on clock with opts, through
// a snapshot written and read at once.
func restoreInto(t *testing.T, s *memstore.Store, clock *storetest.Clock, opts memstore.Options) *memstore.Store {
	t.Helper()
	r := newStoreAt(t, opts, clock)
	if _, err := r.ReadSnapshot(bytes.NewReader(snapshot(t, s))); err != nil {
		t.Fatal(err)
	}
	return r
}

// A wall clock stepped between a snapshot's write and its restore moves no
// limit: on the boot that wrote it, the time that passed is the monotonic
// clock's (a step of an hour forward refilled every key and ended the ban;
// a step back counted no time at all); on another boot, or without the
// evidence, the wall clock's time counts up to RestoreMaxElapsed.
func TestSnapshotClockSteps(t *testing.T) {
	const passed = 10 * time.Second
	for _, c := range []struct {
		name    string
		step    time.Duration // of the wall clock, beyond the time that passed
		boot    string        // of the restore ("one" wrote the snapshot; "" none)
		max     time.Duration // Options.RestoreMaxElapsed
		counted time.Duration // the time the restore counts as passed
	}{
		{"forward, same boot", time.Hour, "one", 0, passed},
		{"back, same boot", -time.Hour, "one", 0, passed},
		{"forward, another boot", 5 * time.Hour, "two", 0, memstore.DefaultRestoreMaxElapsed},
		{"forward, no evidence", 5 * time.Hour, "", 0, memstore.DefaultRestoreMaxElapsed},
		{"forward, another boot, bound 1m", 5 * time.Hour, "two", time.Minute, time.Minute},
		{"forward, another boot, no bound", 5 * time.Hour, "two", -1, 5*time.Hour + passed},
		{"back, another boot", -time.Hour, "two", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			// mono is the monotonic clock of boot "one"; the wall clocks
			// of the writer and the reader are ca and cb.
			a, ca := newStore(t, memstore.Options{SweepInterval: -1})
			spend(t, a, ca)
			mono := storetest.NewClock(ca.Now())
			a = restoreInto(t, a, ca, memstore.Options{SweepInterval: -1, Boot: bootOn("one", mono)})
			data := snapshot(t, a)
			mono.Add(passed)
			cb := storetest.NewClock(ca.Now() + int64(passed+c.step))
			opts := memstore.Options{SweepInterval: -1, RestoreMaxElapsed: c.max}
			if c.boot != "" {
				opts.Boot = bootOn(c.boot, mono)
			}
			b := newStoreAt(t, opts, cb)
			st, err := b.ReadSnapshot(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if proven := c.boot == "one"; st.Proven != proven || proven && st.Stepped != c.step {
				t.Errorf("stats %+v", st)
			}
			if st.Keys+st.Dropped != int64(len(snapKeys)) {
				t.Fatalf("stats %+v", st)
			}
			// b, at the restore's time, answers as a at the write's time
			// plus what the restore counts, but for the windows of the
			// wall clock, which are kept as they are.
			ca.Add(c.counted)
			want, got := peek(t, a), peek(t, b)
			for i := range want {
				if k := snapKeys[i]; !k.window && got[i] != want[i] {
					t.Errorf("%q (%v): restored %+v, want %+v (as after %v)", k.key, k.limit.Algorithm, got[i], want[i], c.counted)
				}
			}
		})
	}
}

// States that are empty are not written, nor restored.
func TestSnapshotSkipsEmptyStates(t *testing.T) {
	a, ca := newStore(t, memstore.Options{SweepInterval: -1})
	spend(t, a, ca)
	ca.Add(24 * time.Hour) // past New York's midnight too
	data := snapshot(t, a)
	b, cb := newStore(t, memstore.Options{SweepInterval: -1})
	cb.Set(ca.Now())
	st, err := b.ReadSnapshot(bytes.NewReader(data))
	if err != nil || st.Keys != 0 || st.Bans != 0 || b.Len() != 0 {
		t.Fatalf("restored %+v, %v; %d keys held: want nothing", st, err, b.Len())
	}
	if len(data) > 64 {
		t.Fatalf("a snapshot of nothing takes %d bytes", len(data))
	}
}

// blocks returns the offsets at which the blocks of a snapshot start, and
// its length.
func blocks(t *testing.T, data []byte) []int {
	var at []int
	for i := 32; i < len(data); {
		at = append(at, i)
		i += 8 + int(binary.BigEndian.Uint32(data[i:]))
	}
	return append(at, len(data))
}

// bigStore holds n funnel keys and a few of each other algorithm.
func bigStore(t *testing.T, n int) (*memstore.Store, *storetest.Clock) {
	s, clock := newStore(t, memstore.Options{SweepInterval: -1})
	g := check(t, funnel.Limit{Count: 10, Period: time.Hour})
	for i := range n {
		do(t, s, takeOp(fmt.Sprint("key:", i), g, 1))
	}
	spend(t, s, clock)
	return s, clock
}

// A snapshot cut anywhere, and one with any bit changed, is refused with
// the offset of the fault, and leaves the store empty.
func TestSnapshotDamaged(t *testing.T) {
	s, clock := bigStore(t, 20000)
	data := snapshot(t, s)
	offsets := blocks(t, data)
	if len(offsets) < 4 {
		t.Fatalf("only %d blocks: the test wants several", len(offsets)-1)
	}
	refused := func(what string, d []byte) {
		t.Helper()
		r := newStoreAt(t, memstore.Options{SweepInterval: -1}, clock)
		_, err := r.ReadSnapshot(bytes.NewReader(d))
		var se *memstore.SnapshotError
		if !errors.Is(err, memstore.ErrCorruptSnapshot) || !errors.As(err, &se) {
			t.Fatalf("%s: err = %v, want a SnapshotError", what, err)
		}
		if se.Offset < 0 || se.Offset > int64(len(d)) {
			t.Fatalf("%s: offset %d outside the %d bytes read", what, se.Offset, len(d))
		}
		if st := r.Stats(); st.Keys != 0 || st.Bans != 0 {
			t.Fatalf("%s: %v, and the store holds %+v", what, err, st)
		}
	}
	for _, at := range append([]int{0, 1, 31, 32, 33}, offsets[:len(offsets)-1]...) {
		refused(fmt.Sprintf("cut at byte %d", at), data[:at])
		refused(fmt.Sprintf("cut at byte %d + 9", at), data[:min(at+9, len(data)-1)])
	}
	refused("a byte after the end", append(bytes.Clone(data), 0))

	// Every bit of a small snapshot.
	sc := storetest.NewClock(clock.Now())
	small := newStoreAt(t, memstore.Options{SweepInterval: -1}, sc)
	spend(t, small, sc)
	sdata := snapshot(t, small)
	for i := range len(sdata) * 8 {
		d := bytes.Clone(sdata)
		d[i/8] ^= 1 << (i % 8)
		refused(fmt.Sprintf("bit %d flipped", i), d)
	}
	// And a bit in each block of the large one.
	for i, at := range offsets[:len(offsets)-1] {
		d := bytes.Clone(data)
		d[(at+offsets[i+1])/2] ^= 4
		refused(fmt.Sprintf("a bit of the block at %d flipped", at), d)
	}
}

func TestSnapshotFaultsSaid(t *testing.T) {
	s, clock := newStore(t, memstore.Options{SweepInterval: -1})
	spend(t, s, clock)
	data := snapshot(t, s)
	future := bytes.Clone(data)
	future[9] = 3
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "byte 0: empty file"},
		{"magic", []byte("REDIS0011 and then some more bytes........"), "not a Funnel snapshot"},
		{"version", future, "byte 8: format version 3; this Funnel reads versions 1 to 2"},
		{"header", data[:20], "truncated in the header"},
		{"cut", data[:32], "truncated: the file ends after 0 blocks"},
	} {
		r, _ := newStore(t, memstore.Options{SweepInterval: -1})
		_, err := r.ReadSnapshot(bytes.NewReader(c.data))
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%s: err = %v, want it to say %q", c.name, err, c.want)
		}
	}
	// A store that holds keys is not restored into.
	if _, err := s.ReadSnapshot(bytes.NewReader(data)); err == nil {
		t.Error("restored into a store that holds keys")
	}
}

// Keys beyond MaxKeys are not restored.
func TestSnapshotMaxKeys(t *testing.T) {
	s, clock := bigStore(t, 100)
	data := snapshot(t, s)
	r := newStoreAt(t, memstore.Options{SweepInterval: -1, MaxKeys: 50}, clock)
	st, err := r.ReadSnapshot(bytes.NewReader(data))
	if err != nil || st.Keys != 50 || r.Len() != 50 {
		t.Fatalf("restored %+v, %v; holds %d; want 50 keys", st, err, r.Len())
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n -= len(p); w.n < 0 {
		return 0, io.ErrShortWrite
	}
	return len(p), nil
}

func TestSnapshotWriteError(t *testing.T) {
	s, _ := bigStore(t, 10000)
	if _, err := s.WriteSnapshot(&failWriter{n: 70000}); !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("err = %v, want the writer's", err)
	}
}

// The conformance suite, with a snapshot written every 10 ms while it runs
// (and each one read back): decisions stay exact, and every snapshot is
// whole.
func TestConformanceWhileSnapshotting(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() int64) funnel.Store {
		s := memstore.New(memstore.Options{Now: now})
		done := make(chan struct{})
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			var b bytes.Buffer
			for {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				b.Reset()
				if _, err := s.WriteSnapshot(&b); err != nil {
					t.Error(err)
					return
				}
				r := memstore.New(memstore.Options{Now: now, SweepInterval: -1})
				if _, err := r.ReadSnapshot(&b); err != nil {
					t.Errorf("a snapshot taken under load: %v", err)
				}
				r.Close()
			}
		}()
		t.Cleanup(func() {
			close(done)
			<-stopped
			s.Close()
		})
		return s
	})
}

func FuzzReadSnapshot(f *testing.F) {
	s := memstore.New(memstore.Options{SweepInterval: -1, Now: storetest.NewClock(storetest.Epoch).Now})
	defer s.Close()
	var b bytes.Buffer
	s.WriteSnapshot(&b)
	f.Add(bytes.Clone(b.Bytes()))
	clock := storetest.NewClock(storetest.Epoch)
	// With a clock record, of the boot the reader is on.
	s2 := memstore.New(memstore.Options{SweepInterval: -1, Now: clock.Now, Boot: bootOn("b", clock)})
	defer s2.Close()
	for _, k := range snapKeys {
		c, _ := k.limit.Check()
		var res [1]funnel.Result
		s2.Do(context.Background(), []funnel.Op{{Kind: funnel.OpTake, Key: k.key, Limit: c, N: 2, Lease: k.lease}}, res[:])
	}
	b.Reset()
	s2.WriteSnapshot(&b)
	f.Add(bytes.Clone(b.Bytes()))
	f.Fuzz(func(t *testing.T, data []byte) {
		rc := storetest.NewClock(storetest.Epoch)
		r := memstore.New(memstore.Options{SweepInterval: -1, Now: rc.Now, Boot: bootOn("b", rc)})
		defer r.Close()
		st, err := r.ReadSnapshot(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, memstore.ErrCorruptSnapshot) {
				t.Fatalf("err = %v, want ErrCorruptSnapshot", err)
			}
			if r.Len() != 0 {
				t.Fatalf("%v, and %d keys restored", err, r.Len())
			}
			return
		}
		// What was restored is written and read again the same.
		var out bytes.Buffer
		if _, err := r.WriteSnapshot(&out); err != nil {
			t.Fatal(err)
		}
		r2 := memstore.New(memstore.Options{SweepInterval: -1, Now: storetest.NewClock(storetest.Epoch).Now})
		defer r2.Close()
		st2, err := r2.ReadSnapshot(&out)
		if err != nil || st2.Keys != st.Keys || st2.Bans != st.Bans {
			t.Fatalf("read again: %+v, %v; first read %+v", st2, err, st)
		}
	})
}

// BenchmarkSnapshot writes and reads a snapshot of 100,000 funnel keys in
// memory (bench/ measures 1,000,000 keys of every algorithm through a
// file): ns/op is per snapshot, B/key the snapshot's bytes per key.
func BenchmarkSnapshot(b *testing.B) {
	const n = 100_000
	clock := storetest.NewClock(storetest.Epoch)
	s := memstore.New(memstore.Options{SweepInterval: -1, Now: clock.Now})
	defer s.Close()
	c, err := funnel.Per(1, time.Hour).Check()
	if err != nil {
		b.Fatal(err)
	}
	var res [1]funnel.Result
	for i := range n {
		op := funnel.Op{Kind: funnel.OpTake, Key: fmt.Sprint("key:", i), Limit: c, N: 1}
		if err := s.Do(context.Background(), []funnel.Op{op}, res[:]); err != nil {
			b.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := s.WriteSnapshot(&buf); err != nil {
		b.Fatal(err)
	}
	b.Run("write", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := s.WriteSnapshot(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(buf.Len())/n, "B/key")
	})
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			r := memstore.New(memstore.Options{SweepInterval: -1, Now: clock.Now})
			if st, err := r.ReadSnapshot(bytes.NewReader(buf.Bytes())); err != nil || st.Keys != n {
				b.Fatalf("%+v, %v", st, err)
			}
			r.Close()
		}
	})
}

// A shard whose states under its lock take several blocks is written in
// several blocks, and restored whole.
func TestSnapshotManyBlocksInOneShard(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	s := newStoreAt(t, memstore.Options{SweepInterval: -1, Shards: 1}, clock)
	c := check(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 100, Period: time.Hour})
	for i := range 5000 {
		do(t, s, takeOp(fmt.Sprint("log:", i), c, 3))
	}
	data := snapshot(t, s)
	if n := len(blocks(t, data)) - 1; n < 3 {
		t.Fatalf("%d blocks, want several", n)
	}
	r := newStoreAt(t, memstore.Options{SweepInterval: -1}, clock)
	if st, err := r.ReadSnapshot(bytes.NewReader(data)); err != nil || st.Keys != 5000 {
		t.Fatalf("restored %+v, %v", st, err)
	}
	if got := do(t, r, takeOp("log:7", c, 0))[0]; got.Remaining != 97 {
		t.Fatalf("log:7 restored with %+v, want 97 remaining", got)
	}
}

// A debt (a charge past the limit) survives a snapshot and its restore: the
// restored store refuses the key until the debt has drained, to the
// nanosecond, and forgets it then, on every algorithm that takes a charge.
func TestSnapshotKeepsDebts(t *testing.T) {
	debts := []struct {
		key   string
		limit funnel.Limit
		n     int64
	}{
		{"gcra", funnel.Limit{Count: 10, Period: time.Minute, Burst: 4}, 100}, // 10 min
		{"leaky", funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Minute, Burst: 4}, 30},
		{"fixed", funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Hour}, 500},
		{"sliding", funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 10, Period: time.Hour}, 500},
		{"log", funnel.Limit{Algorithm: funnel.SlidingLog, Count: 10, Period: time.Minute}, 500},
	}
	a, ca := newStore(t, memstore.Options{SweepInterval: -1})
	ctx := context.Background()
	lim := funnel.New(a)
	for _, d := range debts {
		if r, err := lim.Charge(ctx, d.key, d.limit, d.n); err != nil || r.Allowed {
			t.Fatalf("%s: Charge = %+v, %v; want a debt", d.key, r, err)
		}
	}
	ca.Add(3 * time.Second)
	cb := storetest.NewClock(ca.Now())
	b := newStoreAt(t, memstore.Options{SweepInterval: -1, Boot: bootOn("one", cb)}, cb)
	a = restoreInto(t, a, ca, memstore.Options{SweepInterval: -1, Boot: bootOn("one", ca)})
	if _, err := b.ReadSnapshot(bytes.NewReader(snapshot(t, a))); err != nil {
		t.Fatal(err)
	}
	lb := funnel.New(b)
	for _, d := range debts {
		want, err := lim.Peek(ctx, d.key, d.limit)
		if err != nil || want.Allowed {
			t.Fatalf("%s: Peek before = %+v, %v; want the debt", d.key, want, err)
		}
		got, err := lb.Peek(ctx, d.key, d.limit)
		if err != nil || got != want {
			t.Errorf("%s: restored %+v, %v; want %+v", d.key, got, err, want)
		}
		ttl, ok, err := b.TTL(ctx, d.key)
		if err != nil || !ok || ttl != want.ResetAfter {
			t.Errorf("%s: restored TTL %v, %v, %v; want %v", d.key, ttl, ok, err, want.ResetAfter)
		}
		// Refused until the debt has drained, to the nanosecond.
		at := cb.Now()
		cb.Set(at + int64(want.RetryAfter) - 1)
		if r, err := lb.Peek(ctx, d.key, d.limit); err != nil || r.Allowed {
			t.Errorf("%s: 1ns before the debt has drained: %+v, %v", d.key, r, err)
		}
		cb.Set(at + int64(want.RetryAfter))
		if r, err := lb.Peek(ctx, d.key, d.limit); err != nil || !r.Allowed {
			t.Errorf("%s: once the debt has drained: %+v, %v", d.key, r, err)
		}
		cb.Set(at + int64(want.ResetAfter))
		if _, ok, err := b.TTL(ctx, d.key); err != nil || ok {
			t.Errorf("%s: state held once empty: %v, %v", d.key, ok, err)
		}
		cb.Set(at)
	}
}

// A restored store settles every reservation as the store that wrote the
// snapshot would have: pending ones at their actual, with the same
// give-back per algorithm; settled ones Again; those whose TTL ended
// before the restore are unknown.
func TestSnapshotKeepsReservations(t *testing.T) {
	limits := []struct {
		key   string
		limit funnel.Limit
	}{
		{"gcra", funnel.Limit{Count: 20, Period: time.Minute, Burst: 19}},
		{"leaky", funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 20, Period: time.Minute, Burst: 19}},
		{"fixed", funnel.Limit{Algorithm: funnel.FixedWindow, Count: 20, Period: time.Hour}},
		{"paris", funnel.Limit{Algorithm: funnel.FixedWindow, Count: 20, Calendar: funnel.Daily, Location: paris(t)}},
		{"sliding", funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 20, Period: time.Hour}},
		{"log", funnel.Limit{Algorithm: funnel.SlidingLog, Count: 20, Period: time.Minute}},
	}
	ca := storetest.NewClock(storetest.Epoch)
	a := newStoreAt(t, memstore.Options{SweepInterval: -1, Boot: bootOn("one", ca)}, ca)
	ctx := context.Background()
	lim := funnel.New(a)
	type held struct {
		r      funnel.Reservation
		actual int64
	}
	var all []held
	for _, l := range limits {
		for i, c := range []struct {
			est, actual int64
			ttl         time.Duration
			settle      bool
		}{{6, 2, time.Minute, false}, {2, 3, time.Minute, true}, {1, 0, 2 * time.Millisecond, false}, {1, 4, time.Minute, false}} {
			r, res, err := lim.Reserve(ctx, l.key, l.limit, c.est, c.ttl)
			if err != nil || !res.Allowed {
				t.Fatalf("%s %d: Reserve = %+v, %v", l.key, i, res, err)
			}
			if c.settle {
				if _, err := lim.Settle(ctx, r.Key, r.ID, c.actual); err != nil {
					t.Fatal(err)
				}
			}
			all = append(all, held{r, c.actual})
			ca.Add(time.Millisecond)
		}
	}
	ca.Add(3 * time.Second)
	data := snapshot(t, a)
	cb := storetest.NewClock(ca.Now())
	b := newStoreAt(t, memstore.Options{SweepInterval: -1, Boot: bootOn("one", cb)}, cb)
	st, err := b.ReadSnapshot(bytes.NewReader(data))
	if err != nil || st.Reservations != int64(3*len(limits)) {
		t.Fatalf("ReadSnapshot = %+v, %v; want %d reservations", st, err, 3*len(limits))
	}
	lb := funnel.New(b)
	for _, h := range all {
		want, werr := lim.Settle(ctx, h.r.Key, h.r.ID, h.actual)
		got, err := lb.Settle(ctx, h.r.Key, h.r.ID, h.actual)
		if got != want || (err == nil) != (werr == nil) {
			t.Errorf("%s (estimate %d, ttl %v): restored settle %+v, %v; the writer's %+v, %v", h.r.Key, h.r.Estimate, h.r.TTL, got, err, want, werr)
		}
		if h.r.TTL < time.Second && !errors.Is(err, funnel.ErrUnknownReservation) {
			t.Errorf("%s: a reservation ended before the write: %v", h.r.Key, err)
		}
	}
}

func paris(t *testing.T) *time.Location {
	l, err := funnel.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	return l
}
