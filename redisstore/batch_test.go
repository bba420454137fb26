package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
)

// One script call decides a batch in order, each request seeing the ones
// before it, exactly as gcra.Decide applied one after the other; a key of the
// wrong type fails alone; answers with d past 2^50 ns come on two limbs.
// Seeds above 20 send batches of one limit and quantity, each key once (the
// script's "u" batches, without an argument per request). The
// keys are left as the requests one after the other would leave them: each
// holds its last TAT, expiring when it is reached, and a key whose last
// request left its TAT at now (as absent) is deleted.
func TestBatchIsSequentialDecide(t *testing.T) {
	t.Parallel()
	for _, path := range FunnelPaths {
		t.Run(path.Name, func(t *testing.T) {
			t.Parallel()
			testBatchIsSequentialDecide(t, path.Start(t))
		})
	}
}

func testBatchIsSequentialDecide(t *testing.T, srv *redistest.Server) {
	c := srv.Client()
	ctx := context.Background()
	const now int64 = 1_795_350_508_971_038_011
	s := New(c, Options{Now: func() int64 { return now }, Timeout: 10 * time.Second})
	params := []gcra.Params{
		mustNewParams(t, 2, 1, time.Second),
		mustNewParams(t, 0, 1, time.Millisecond),
		mustNewParams(t, 1, 1, 365*24*time.Hour),
		mustNewParams(t, 3, 1, 1500*time.Microsecond+7),
		// a tolerance of 250 years: "edge" reaches int64's end
		mustNewParams(t, 250, 1, 365*24*time.Hour),
	}
	keys := []string{"a", "b", "a", "far", "bad", "list", "edge", "c", "stale", "atnow", "stale", "atnow"}
	// the keys of a uniform batch: each once, the preset ones among them
	ukeys := []string{"a", "b", "c", "far", "bad", "list", "edge", "stale", "atnow"}
	for i := len(ukeys); i < maxBatch; i++ {
		ukeys = append(ukeys, "u"+strconv.Itoa(i))
	}
	for seed := uint64(1); seed <= 30; seed++ {
		// The state of each key, as Redis would hold it after each request
		// in turn: its TAT if it exists.
		held := map[string]int64{
			"far":  now + int64(200*24*time.Hour), // d > 2^50 ns
			"edge": 9223372036854775807 - int64(time.Second),
			// comes once in every batch that is not uniform
			"edge1": 9223372036854775807 - int64(time.Second),
			"stale": now - int64(time.Second), // expired by the injected clock only
			"atnow": now,
		}
		written := map[string]bool{}
		for key := range held {
			c.Del(ctx, key)
		}
		c.Del(ctx, "a", "b", "c", "list")
		for key, tat := range held {
			c.Set(ctx, key, strconv.FormatInt(tat, 10), time.Hour)
		}
		c.Set(ctx, "bad", "notanumber", time.Hour)
		c.RPush(ctx, "list", "x")
		for i := 9; i < maxBatch; i++ {
			c.Del(ctx, "u"+strconv.Itoa(i))
		}
		r := rand.New(rand.NewPCG(seed, 2))
		uniform := seed > 20
		up := params[r.IntN(len(params))]
		uq := r.Int64N(up.Limit+2) - 1 // a refund of 1 at times
		r.Shuffle(len(ukeys), func(i, j int) { ukeys[i], ukeys[j] = ukeys[j], ukeys[i] })
		if uniform {
			// half of the other keys hold a TAT up to twice the tolerance
			// ahead, so that decisions fall on both sides of it
			for i := 9; i < maxBatch; i += 2 {
				key := "u" + strconv.Itoa(i)
				span := min(up.Tolerance, (math.MaxInt64-now)/2-int64(time.Millisecond))
				held[key] = now + 1 + r.Int64N(2*span+int64(time.Millisecond))
				c.Set(ctx, key, strconv.FormatInt(held[key], 10), time.Hour)
			}
		}
		var batch []*call
		var want []reply
		for i := 0; i < maxBatch; i++ {
			key := keys[r.IntN(len(keys))]
			p := params[r.IntN(len(params))]
			q := r.Int64N(p.Limit + 1)
			if r.IntN(4) == 0 {
				q = -1 - r.Int64N(p.Limit+1) // a refund, sometimes past an empty bucket
			}
			if r.IntN(4) == 0 || (seed%2 == 0 && (key == "stale" || key == "atnow")) {
				q = 0 // on every other seed, these keys get peeks only
			}
			if uniform {
				key, p, q = ukeys[i], up, uq
			} else if i == 0 {
				// past int64's end: status 2, nothing written
				key, p, q = "edge1", params[4], 1
			}
			cost, err := gcra.Cost(p, q)
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, &call{req: req{key: key, cost: cost, tol: p.Tolerance}, queued: time.Now(), done: make(chan struct{})})
			switch key {
			case "bad", "list":
				want = append(want, reply{err: ErrWrongType})
				continue
			}
			tat, exists := held[key]
			d := max(tat-now, 0)
			newTAT, res, err := gcra.Decide(now, tat, p, q)
			a := reply{d: d}
			switch {
			case errors.Is(err, gcra.ErrOverflow):
				a.status = 2
			case err != nil:
				t.Fatal(err)
			case res.Allowed && newTAT > now:
				a.status = 1
				held[key] = newTAT
				written[key] = true
			case res.Allowed:
				a.status = 1
				if exists {
					delete(held, key)
					written[key] = true
				}
			}
			want = append(want, a)
		}
		s.send(batch)
		for i, c := range batch {
			<-c.done
			w := want[i]
			if (w.err != nil) != (c.err != nil) || (w.err != nil && !errors.Is(c.err, ErrWrongType)) ||
				(w.err == nil && (c.status != w.status || c.d != w.d)) {
				t.Fatalf("seed %d, request %d on %q: got status %d d %d err %v; want %+v", seed, i, c.key, c.status, c.d, c.err, w)
			}
		}
		for _, key := range []string{"a", "b", "c", "far", "edge", "edge1", "stale", "atnow"} {
			tat, exists := held[key]
			got, err := c.Get(ctx, key).Result()
			switch {
			case !exists && err != redis.Nil:
				t.Errorf("seed %d: %q holds %q, %v; want no key", seed, key, got, err)
			case exists && got != strconv.FormatInt(tat, 10):
				t.Errorf("seed %d: %q holds %q, %v; want %d", seed, key, got, err, tat)
			}
		}
		// The keys written expire at their last TAT, in whole ms rounded up,
		// plus the ten minutes of an injected clock.
		for _, key := range []string{"a", "b", "c"} {
			tat, exists := held[key]
			if !exists {
				continue
			}
			want := (tat-now+999_999)/1e6 + nowSlack.Milliseconds()
			if got := c.PTTL(ctx, key).Val().Milliseconds(); got > want || got < want-1000 {
				t.Errorf("seed %d: %q has PTTL %d ms, want %d", seed, key, got, want)
			}
		}
		// A key that no request wrote keeps the expiry it was set with (a
		// TAT that would pass int64 writes nothing).
		for _, key := range []string{"far", "edge", "edge1"} {
			if written[key] {
				continue
			}
			if got := c.PTTL(ctx, key).Val(); got > time.Hour || got < time.Hour-time.Minute {
				t.Errorf("seed %d: %q has PTTL %v, want the hour it was set with", seed, key, got)
			}
		}
		if got, _ := c.LRange(ctx, "list", 0, -1).Result(); len(got) != 1 || got[0] != "x" {
			t.Errorf("list changed: %q", got)
		}
	}
}

// Under concurrency the store batches; every decision still counts exactly
// once (many keys, each hammered by several goroutines at fixed instants).
func TestBatchingUnderLoad(t *testing.T) {
	t.Parallel()
	for _, path := range FunnelPaths {
		t.Run(path.Name, func(t *testing.T) {
			t.Parallel()
			testBatchingUnderLoad(t, path.Start(t))
		})
	}
}

func testBatchingUnderLoad(t *testing.T, srv *redistest.Server) {
	clock := atomic.Int64{}
	clock.Store(1_795_350_508_971_038_011)
	s := New(srv.Client(), Options{Now: clock.Load, Timeout: 10 * time.Second})
	p := mustNewParams(t, 4, 10, time.Second) // T = 100 ms, limit 5
	const keys, workers, steps = 16, 32, 10
	var admitted [keys]atomic.Int64
	var wrong atomic.Int64
	srv.Client().Set(context.Background(), "bad", "x", time.Hour)
	for step := 0; step < steps; step++ {
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					k := (w + i) % keys
					r, err := s.throttle(context.Background(), "k"+strconv.Itoa(k), p, 1, -1)
					if err != nil || r.Fallback {
						t.Errorf("%+v, %v", r, err)
						return
					}
					if r.Allowed {
						admitted[k].Add(1)
					}
					if i%5 == 0 {
						if _, err := s.throttle(context.Background(), "bad", p, 1, -1); errors.Is(err, ErrWrongType) {
							wrong.Add(1)
						}
					}
				}
			}(w)
		}
		wg.Wait()
		clock.Add(int64(250 * time.Millisecond))
	}
	want := p.Limit + int64(steps-1)*int64(250*time.Millisecond)/p.Interval
	for k := range admitted {
		if got := admitted[k].Load(); got != want {
			t.Errorf("key %d admitted %d, want exactly %d", k, got, want)
		}
	}
	// Every batch ends: nothing queued, nothing counted in flight. (A
	// flusher hands out its last answers before it finds the queue empty and
	// stops: wait for that, bounded.)
	idle := func() string {
		s.batches.mu.Lock()
		defer s.batches.mu.Unlock()
		for slot, g := range s.batches.groups {
			if g.active != 0 || len(g.queue) != 0 {
				return fmt.Sprintf("group %d after the load: %d active, %d queued", slot, g.active, len(g.queue))
			}
		}
		return ""
	}
	for deadline := time.Now().Add(5 * time.Second); idle() != "" && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if why := idle(); why != "" {
		t.Error(why)
	}
	if s.batched.Load() == 0 {
		t.Error("32 goroutines never made a batch")
	}
	t.Logf("%d of %d decisions in batches", s.batched.Load(), steps*workers*24)
	if n := wrong.Load(); n != steps*workers*4 {
		t.Errorf("%d WRONGTYPE errors, want %d", n, steps*workers*4)
	}
}

func mustNewParams(t *testing.T, burst, count int64, period time.Duration) gcra.Params {
	t.Helper()
	p, err := gcra.NewParams(burst, count, period)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// keySlot agrees with Redis's CLUSTER KEYSLOT.
func TestKeySlotAgreesWithRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	c := srv.Client()
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 500; i++ {
		b := make([]byte, r.IntN(12))
		for j := range b {
			b[j] = "ab{}:\x00\xff"[r.IntN(7)]
		}
		key := string(b)
		want, err := c.ClusterKeySlot(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(key); int64(got) != want {
			t.Fatalf("keySlot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
}

// The script's argument of each request says where its limits are, where the
// first request on its key is, and whether it is the last one on it.
func TestThrottleArgs(t *testing.T) {
	c := func(key string, cost int64) *call { return &call{req: req{key: key, cost: cost, tol: 5e9}} }
	batch := []*call{c("a", 1), c("b", 1), c("a", 1), c("c", 2e9+3), c("a", 2e9+3), c("c", 2e9+3)}
	keys, args := throttleArgs(batch, make([]string, len(batch)), []string{"t", "", "", "0"})
	if want := []string{"a", "b", "a", "c", "a", "c"}; !slices.Equal(keys, want) {
		t.Errorf("keys %q, want %q", keys, want)
	}
	want := []string{"t", "", "", "0",
		strconv.Itoa(11*256 + 1), // limits at ARGV[11]; first on "a"
		"",                       // "b" comes once, same limits
		"1",                      // "a" again
		strconv.Itoa(15*256 + 4), // new limits at ARGV[15]; first on "c"
		strconv.Itoa(128 + 1),    // last on "a"
		strconv.Itoa(128 + 4),    // last on "c"
		"0", "1", "5", "0",       // ARGV[11..14]: cost 1 ns, tolerance 5 s
		"2", "3", "5", "0", // ARGV[15..18]: cost 2 s + 3 ns
	}
	if !slices.Equal(args, want) {
		t.Errorf("args\n%q, want\n%q", args, want)
	}
	// One limit and quantity, each key once: no argument per request.
	batch = []*call{c("a", 2e9+3), c("b", 2e9+3), c("c", 2e9+3)}
	_, args = throttleArgs(batch, make([]string, len(batch)), []string{"t", "", "", "0"})
	if want := []string{"u", "", "", "0", "2", "3", "5", "0"}; !slices.Equal(args, want) {
		t.Errorf("args of a uniform batch\n%q, want\n%q", args, want)
	}
	// One limit, a key twice; two limits, each key once: per request.
	for _, batch := range [][]*call{{c("a", 1), c("b", 1), c("a", 1)}, {c("a", 1), c("b", 2)}} {
		if _, args := throttleArgs(batch, make([]string, len(batch)), []string{"t", "", "", "0"}); args[0] != "t" || len(args) != 4+len(batch)+4*2 && len(args) != 4+len(batch)+4 {
			t.Errorf("args %q", args)
		}
	}
}

// Windows' takes are batched as funnels' are (window.lua): under load, with
// the clock still, each key admits exactly its count, every admitted take
// seeing the ones before it (their Remaining are count-1 down to 0, once
// each), keys coming several times in one batch; a key of another kind
// goes to family.lua and fails alone.
func TestWindowBatches(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		windowBatches(t, redistest.StartServer(t).Client())
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		// Batches of one hash slot each (three masters).
		windowBatches(t, redistest.StartCluster(t, 3, 0).Client())
	})
}

func windowBatches(t *testing.T, c redis.UniversalClient) {
	ctx := context.Background()
	const now int64 = 1_795_350_508_971_038_011
	s := New(c, Options{Now: func() int64 { return now }, Timeout: 10 * time.Second})
	if _, ok := c.(*redis.ClusterClient); ok && s.runner.grouping() != groupSlot {
		t.Fatal("a cluster's decisions are not grouped by slot")
	}
	lim := funnel.New(s)
	limits := map[string]funnel.Limit{
		"f1": {Algorithm: funnel.FixedWindow, Count: 50, Period: time.Second},
		"f2": {Algorithm: funnel.FixedWindow, Count: 70, Period: time.Minute},
		"s1": {Algorithm: funnel.SlidingWindow, Count: 40, Period: time.Second},
		"s2": {Algorithm: funnel.SlidingWindow, Count: 60, Period: 10 * time.Second},
		"z":  {Algorithm: funnel.FixedWindow, Count: 50, Period: time.Second},
	}
	c.ZAdd(ctx, "z", redis.Z{Score: 1, Member: "x"})
	keys := []string{"f1", "f2", "s1", "s2", "f1", "s1", "z"}
	var mu sync.Mutex
	remaining := map[string][]int64{}
	var wrong atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 48; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 3))
			for range 20 {
				key := keys[r.IntN(len(keys))]
				res, err := lim.Allow(ctx, key, limits[key])
				switch {
				case key == "z":
					if !errors.Is(err, funnel.ErrWrongType) {
						t.Errorf("a take on a sorted set: %+v, %v", res, err)
					}
					wrong.Add(1)
				case err != nil || res.Fallback:
					t.Errorf("%s: %+v, %v", key, res, err)
				case res.Allowed:
					mu.Lock()
					remaining[key] = append(remaining[key], res.Remaining)
					mu.Unlock()
				}
			}
		}(g)
	}
	wg.Wait()
	for key, l := range limits {
		if key == "z" {
			continue
		}
		got := remaining[key]
		slices.Sort(got)
		if int64(len(got)) != l.Count {
			t.Errorf("%s admitted %d, want %d", key, len(got), l.Count)
			continue
		}
		for i, r := range got {
			if r != int64(i) {
				t.Errorf("%s: Remaining of the admitted takes %v, want each of 0 to %d once", key, got, l.Count-1)
				break
			}
		}
	}
	if s.batched.Load() == 0 {
		t.Error("no decision was made in a batch")
	}
	if wrong.Load() == 0 {
		t.Error("no take on the sorted set")
	}
}
