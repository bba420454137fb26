package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
)

// One script call decides a batch in order, each request seeing the ones
// before it, exactly as gcra.Decide applied one after the other; a key of the
// wrong type fails alone; answers with d past 2^50 ns come on two limbs.
func TestBatchIsSequentialDecide(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	const now int64 = 1_795_350_508_971_038_011
	s := New(c, Options{Now: func() int64 { return now }, Timeout: 10 * time.Second})
	c.Set(ctx, "far", strconv.FormatInt(now+int64(200*24*time.Hour), 10), time.Hour) // d > 2^50 ns
	c.Set(ctx, "bad", "notanumber", time.Hour)
	c.RPush(ctx, "list", "x")
	c.Set(ctx, "edge", strconv.FormatInt(9223372036854775807-int64(time.Second), 10), time.Hour)
	params := []gcra.Params{
		mustNewParams(t, 2, 1, time.Second),
		mustNewParams(t, 0, 1, time.Millisecond),
		mustNewParams(t, 1, 1, 365*24*time.Hour),
	}
	r := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "a", "far", "bad", "list", "edge", "c"}
	tats := map[string]int64{"far": now + int64(200*24*time.Hour), "edge": 9223372036854775807 - int64(time.Second)}
	var batch []*call
	var want []answer
	for i := 0; i < maxBatch; i++ {
		key := keys[r.IntN(len(keys))]
		p := params[r.IntN(len(params))]
		q := r.Int64N(p.Limit + 1)
		batch = append(batch, &call{key: key, cost: p.Interval * q, tol: p.Tolerance, done: make(chan struct{})})
		switch key {
		case "bad", "list":
			want = append(want, answer{err: ErrWrongType})
			continue
		}
		tat := tats[key]
		d := max(tat-now, 0)
		newTAT, res, err := gcra.Decide(now, tat, p, q)
		a := answer{d: d}
		switch {
		case errors.Is(err, gcra.ErrOverflow):
			a.status = 2
		case err != nil:
			t.Fatal(err)
		case res.Allowed:
			a.status = 1
			tats[key] = newTAT
		}
		want = append(want, a)
	}
	s.send(batch)
	for i, c := range batch {
		<-c.done
		w := want[i]
		if (w.err != nil) != (c.err != nil) || (w.err != nil && !errors.Is(c.err, ErrWrongType)) ||
			(w.err == nil && (c.status != w.status || c.d != w.d)) {
			t.Fatalf("request %d on %q: got status %d d %d err %v; want %+v", i, c.key, c.status, c.d, c.err, w)
		}
	}
	for key, tat := range tats {
		if got := c.Get(ctx, key).Val(); tat > now && got != strconv.FormatInt(tat, 10) {
			t.Errorf("%q holds %q, want %d", key, got, tat)
		}
	}
	if got, _ := c.LRange(ctx, "list", 0, -1).Result(); len(got) != 1 || got[0] != "x" {
		t.Errorf("list changed: %q", got)
	}
}

// Under concurrency the store batches; every decision still counts exactly
// once (many keys, each hammered by several goroutines at fixed instants).
func TestBatchingUnderLoad(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
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
					r, err := s.Throttle(context.Background(), "k"+strconv.Itoa(k), p, 1)
					if err != nil || r.Fallback {
						t.Errorf("%+v, %v", r, err)
						return
					}
					if r.Allowed {
						admitted[k].Add(1)
					}
					if i%5 == 0 {
						if _, err := s.Throttle(context.Background(), "bad", p, 1); errors.Is(err, ErrWrongType) {
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
