package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
)

// siblingOf is the key of key's sibling name (its shares hash, its
// fence's copy), for the keys of these tests: beside a hash tag, or key
// made the tag.
func siblingOf(key, name string) string {
	if strings.Contains(key, "{") {
		return key + "\x00" + name
	}
	return "{" + key + "}\x00" + name
}

// sameShares reports how st, a key's shares read from Redis, differs from
// want, gcra.Share's map, field by field ("" when they agree).
func sameShares(st, want map[string]*gcra.ShareNode) string {
	if len(st) != len(want) {
		return fmt.Sprintf("%d nodes, want %d", len(st), len(want))
	}
	for name, w := range want {
		g := st[name]
		switch {
		case g == nil:
			return fmt.Sprintf("node %q missing", name)
		case g.Demand != w.Demand || g.Seen != w.Seen:
			return fmt.Sprintf("node %q: demand %d seen %d, want %d and %d", name, g.Demand, g.Seen, w.Demand, w.Seen)
		case len(g.Res) != len(w.Res):
			return fmt.Sprintf("node %q: reservations %+v, want %+v", name, g.Res, w.Res)
		}
		for i := range w.Res {
			if g.Res[i] != w.Res[i] {
				return fmt.Sprintf("node %q: reservation %d %+v, want %+v", name, i, g.Res[i], w.Res[i])
			}
		}
	}
	return ""
}

// sharesText writes a key's shares for a message, node by node.
func sharesText(st map[string]*gcra.ShareNode) string {
	var b strings.Builder
	for name, nd := range st {
		fmt.Fprintf(&b, "%s: %+v; ", name, *nd)
	}
	return b.String()
}

// shareParams draws a funnel for shares: rates from 10 a second to a
// million, bursts from 0 to a million.
func shareParams(t testing.TB, r *rand.Rand) gcra.Params {
	for {
		burst := []int64{0, 1, 3, 10, 500, 10_000, 1_000_000}[r.IntN(7)]
		count := []int64{10, 100, 2_000, 20_000, 1_000_000}[r.IntN(5)]
		period := []time.Duration{time.Second, time.Minute, time.Hour}[r.IntN(3)]
		p, err := gcra.NewParams(burst, count, period)
		if err != nil {
			t.Fatal(err)
		}
		if p.Tolerance <= gcra.MaxLeaseTolerance {
			return p
		}
	}
}

// TestShareIsGcraShare runs random calls through gcra.Share on a map and
// through Store.Share at the same instants (on go-redis and on rueidis;
// two sequences change the funnel and the lifetime as they go), and checks
// that every grant and, after every call, every node's record are the
// same.
func TestShareIsGcraShare(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	var clock atomic.Int64
	opts := redisstore.Options{Now: clock.Load, Prefix: "sh:", Timeout: 20 * time.Second}
	stores := []*redisstore.Store{redisstore.New(c, opts), redisstore.NewRueidis(newRueidis(t, srv.Addr), opts)}
	var grants, none, back, unmeasured, pruned, fences int
	for seed := uint64(1); seed <= 15; seed++ {
		st := stores[seed%2] // go-redis and rueidis in turn
		r := rand.New(rand.NewPCG(seed, 23))
		p := shareParams(t, r)
		nodes := 1 + r.IntN(16)
		levels := seed == 13 // six nodes, of demands at and above a sixth
		if levels {
			nodes = 6
		}
		L := []int64{4, 1_000, 50_000, 200_000, 2_000_000, gcra.MaxShareLifetime}[r.IntN(6)]
		for L*1000/p.Interval >= 1<<32 {
			L /= 2
		}
		key := "k" + strconv.FormatUint(seed, 10)
		if seed%3 == 0 {
			key = "{t" + strconv.FormatUint(seed, 10) + "}k"
		}
		if got, err := st.ShareState(ctx, key); err != nil || len(got) != 0 {
			t.Fatalf("seed %d: shares before any call: %v, %v", seed, got, err)
		}
		want := map[string]*gcra.ShareNode{}
		now := int64(1_790_000_000_000_000) + r.Int64N(1e12)
		for i := range 400 {
			if seed >= 14 && r.IntN(4) == 0 {
				// The limit reconfigured while shares are live.
				p = shareParams(t, r)
				L = []int64{1_000, 200_000, 2_000_000}[r.IntN(3)]
				for L*1000/p.Interval >= 1<<32 {
					L /= 2
				}
			}
			switch x := r.IntN(20); {
			case x == 0:
				now -= r.Int64N(L + 1) // a clock stepped back
				back++
			case x < 4:
				now += r.Int64N(3 * L) // long enough for shares to lapse
			default:
				now += r.Int64N(L/8 + 1)
			}
			req := gcra.ShareRequest{Node: "n" + strconv.Itoa(r.IntN(nodes)), Demand: -1, Lifetime: L, Grace: r.Int64N(L/16 + 1)}
			if r.IntN(2) == 0 {
				req.Level = r.Int64N(min(p.Limit, 64) + 1) // mostly below the capacities: cuts
			} else {
				req.Level = r.Int64N(p.Limit + 1)
			}
			switch x := r.IntN(10); {
			case x == 0:
				unmeasured++
			case x == 1:
				req.Demand = r.Int64N(gcra.MaxShareDemand + 1)
			case x < 4:
				// Near an equal part of the rate, where the water-filling
				// levels off.
				req.Demand = max(gcra.ShareParts/int64(1+r.IntN(nodes))+r.Int64N(3)-1, 0)
			default:
				req.Demand = r.Int64N(4 * gcra.ShareParts / int64(nodes))
			}
			if levels {
				req.Demand = []int64{gcra.ShareParts / 6, gcra.ShareParts}[r.IntN(2)]
			}
			before := len(want)
			wg, err := gcra.Share(now, want, p, req)
			if err != nil {
				t.Fatal(err)
			}
			if len(want) < before {
				pruned++
			}
			clock.Store(now*1000 + r.Int64N(1000)) // the script keeps whole µs
			g, err := st.Share(ctx, key, p, req)
			if err != nil {
				t.Fatalf("seed %d call %d %+v: %v", seed, i, req, err)
			}
			if g != wg {
				t.Fatalf("seed %d call %d %+v (%+v, L %d): grant %+v, gcra.Share %+v", seed, i, req, p, L, g, wg)
			}
			got, err := st.ShareState(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if d := sameShares(got, want); d != "" {
				t.Fatalf("seed %d call %d %+v: %s", seed, i, req, d)
			}
			if f := gcra.ShareFence(want, wg.Now, p); f > 0 {
				// The fence, in the key and in its copy.
				tat, _ := c.Get(ctx, "sh:"+key).Result()
				cp, _ := c.Get(ctx, siblingOf("sh:"+key, "fence")).Result()
				if w := strconv.FormatInt(f, 10); tat != w || cp != w {
					t.Fatalf("seed %d call %d: the fence is %q in the key and %q in its copy, gcra.ShareFence %s", seed, i, tat, cp, w)
				}
				fences++
			}
			if g.K > 0 {
				grants++
			} else {
				none++
			}
		}
	}
	t.Logf("%d grants, %d of nothing; %d clocks stepped back, %d unmeasured demands, %d calls that dropped nodes, %d fences written", grants, none, back, unmeasured, pruned, fences)
	if grants < 1000 || none < 100 || pruned < 50 || fences < 1000 {
		t.Fatal("the calls do not cover grants, refusals and dropped nodes")
	}
}

// TestShareConcurrent has 16 nodes call for shares of one key on Redis's
// own clock, concurrently, with demands that change, and checks after
// every call that the reservations in Redis never hold more than the
// funnel.
func TestShareConcurrent(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := context.Background()
	st := redisstore.New(srv.Client(), redisstore.Options{Timeout: 20 * time.Second})
	p := mkParams(t, 499, 20_000, time.Second)
	const L = 200_000 // µs
	var wg sync.WaitGroup
	var granted, calls atomic.Int64
	errs := make(chan error, 16)
	for n := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(n), 5))
			for range 100 {
				d := int64(-1)
				if r.IntN(5) > 0 {
					d = r.Int64N(gcra.ShareParts / 4)
				}
				g, err := st.Share(ctx, "hot", p, gcra.ShareRequest{Node: "node" + strconv.Itoa(n), Demand: d, Lifetime: L, Grace: 1_000, Level: p.Limit})
				if err != nil {
					errs <- err
					return
				}
				calls.Add(1)
				if g.K > 0 {
					granted.Add(1)
				}
				s, err := st.ShareState(ctx, "hot")
				if err != nil {
					errs <- err
					return
				}
				if !gcra.ShareHolds(s, g.Now, p) {
					errs <- fmt.Errorf("node %d: the shares hold more than the funnel after %+v: %s", n, g, sharesText(s))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d calls, %d granted", calls.Load(), granted.Load())
	if granted.Load() == 0 {
		t.Fatal("nothing granted")
	}
}

// TestShareMixed checks both guards. The fence: while a reservation is
// live the funnel's key holds gcra.ShareFence, so that a plain decision of
// it refuses until every reservation has drained (a reset keeps it), and then admits. The
// mix: while the key holds a TAT after now that is not the fence (a plain
// decision, or a TAT written there), Share grants nothing, answers
// ErrShareMixed and changes nothing; a TAT in the past is no obstacle. On
// go-redis and on rueidis, on an injected clock.
func TestShareMixed(t *testing.T) {
	t.Parallel()
	for _, lib := range []string{"go-redis", "rueidis"} {
		t.Run(lib, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			c := srv.Client()
			ctx := context.Background()
			var clock atomic.Int64
			clock.Store(1_790_000_000_000_000_000)
			opts := redisstore.Options{Now: clock.Load, Timeout: 10 * time.Second}
			st := redisstore.New(c, opts)
			if lib == "rueidis" {
				st = redisstore.NewRueidis(newRueidis(t, srv.Addr), opts)
			}
			p := mkParams(t, 9, 10, time.Second)
			req := gcra.ShareRequest{Node: "a", Demand: gcra.ShareParts, Lifetime: 200_000, Grace: 5_000}
			g, err := st.Share(ctx, "k", p, req)
			if err != nil || g.K == 0 {
				t.Fatalf("%+v, %v", g, err)
			}
			shares, err := st.ShareState(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			fence := gcra.ShareFence(shares, g.Now, p)
			if fence != g.Hold*1000+p.Tolerance {
				t.Fatalf("the fence %d of one grant %+v", fence, g)
			}
			if v, _ := c.Get(ctx, "k").Result(); v != strconv.FormatInt(fence, 10) {
				t.Fatalf("the key holds %q, the fence is %d", v, fence)
			}
			dump := func() string {
				t.Helper()
				v, err := c.Dump(ctx, "{k}\x00shares").Result()
				if err != nil {
					t.Fatal(err)
				}
				ms, _ := c.PExpireTime(ctx, "{k}\x00shares").Result()
				f, _ := c.Get(ctx, "k").Result()
				cp, _ := c.Get(ctx, "{k}\x00fence").Result()
				return v + "/" + ms.String() + "/" + f + "/" + cp
			}
			// A plain decision under the same limit refuses until the
			// grant has drained (its hold) and one interval more, however
			// empty the bucket would be without shares.
			plain := func() funnel.Result {
				t.Helper()
				res := make([]funnel.Result, 1)
				op := funnel.Op{Kind: funnel.OpTake, Key: "k", N: 1, Limit: funnel.Checked{GCRA: p}}
				if err := st.Do(ctx, []funnel.Op{op}, res); err != nil {
					t.Fatal(err)
				}
				return res[0]
			}
			before := dump()
			for _, at := range []int64{g.Now * 1000, g.End * 1000, g.Hold*1000 + p.Interval - 1000} {
				clock.Store(at)
				if r := plain(); r.Allowed || r.RetryAfter <= 0 {
					t.Fatalf("a plain decision at %d, before the hold %d µs and an interval: %+v", at, g.Hold, r)
				}
			}
			if dump() != before {
				t.Fatal("a refused plain decision changed the key or its shares")
			}
			// A reset keeps the fence, and so does one after the key was
			// deleted by something else: the shares still admit.
			for _, del := range []bool{false, true} {
				if del {
					c.Del(ctx, "k")
				}
				if _, err := st.Reset(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				if v, _ := c.Get(ctx, "k").Result(); v != strconv.FormatInt(fence, 10) {
					t.Fatalf("after a reset (deleted first: %v) the key holds %q, the fence is %d", del, v, fence)
				}
				if r := plain(); r.Allowed {
					t.Fatalf("a plain decision after a reset (deleted first: %v): %+v", del, r)
				}
			}
			// The same node calls again while its grant is live: the fence
			// is its own, so it is granted, and the fence moves on.
			clock.Store(g.Now*1000 + 1_000_000)
			if _, err := st.Share(ctx, "k", p, req); err != nil {
				t.Fatalf("Share on its own fence: %v", err)
			}
			shares, _ = st.ShareState(ctx, "k")
			fence2 := gcra.ShareFence(shares, g.Now+1000, p)
			if fence2 <= fence {
				t.Fatalf("the fence %d after a renewal, %d before", fence2, fence)
			}
			var last int64
			for _, nd := range shares {
				for _, r := range nd.Res {
					last = max(last, r.Hold)
				}
			}
			clock.Store(last*1000 + p.Interval)
			if r := plain(); !r.Allowed {
				t.Fatalf("a plain decision once every reservation has drained: %+v", r)
			}
			before = dump()
			if _, err := st.Share(ctx, "k", p, gcra.ShareRequest{Node: "b", Demand: 10, Lifetime: 200_000}); !errors.Is(err, redisstore.ErrShareMixed) {
				t.Fatalf("Share after a plain decision: %v", err)
			}
			if dump() != before {
				t.Fatal("a Share refused as mixed changed the shares")
			}
			// A TAT in the past does not count; one an hour ahead does.
			now := clock.Load()
			c.Set(ctx, "k", strconv.FormatInt(now-int64(time.Second), 10), 0)
			if _, err := st.Share(ctx, "k", p, req); err != nil {
				t.Fatalf("Share on a TAT in the past: %v", err)
			}
			c.Set(ctx, "k", strconv.FormatInt(now+int64(time.Hour), 10), 0)
			before = dump()
			if _, err := st.Share(ctx, "k", p, req); !errors.Is(err, redisstore.ErrShareMixed) {
				t.Fatalf("Share on a TAT ahead: %v", err)
			}
			if dump() != before {
				t.Fatal("a Share refused as mixed changed the shares")
			}
			// A key of another type, shares of another type or with a bad record:
			// ErrWrongType, and nothing changes.
			c.HSet(ctx, "h", "f", "v")
			c.Set(ctx, "{s}\x00shares", "nope", 0)
			c.HSet(ctx, "{r}\x00shares", "a", "1 2 3", "b", "1 2")
			for _, key := range []string{"h", "s", "r"} {
				if _, err := st.Share(ctx, key, p, req); !errors.Is(err, funnel.ErrWrongType) {
					t.Fatalf("%s: %v", key, err)
				}
			}
			if _, err := st.ShareState(ctx, "r"); !errors.Is(err, funnel.ErrWrongType) {
				t.Fatalf("ShareState of a bad record: %v", err)
			}
			if v, _ := c.HGetAll(ctx, "{r}\x00shares").Result(); len(v) != 2 || v["a"] != "1 2 3" {
				t.Fatalf("a bad record changed: %v", v)
			}
			if n, _ := c.Exists(ctx, "{h}\x00shares").Result(); n != 0 {
				t.Fatal("a key of another type got shares")
			}
		})
	}
}

// TestShareExpiry checks the hash's expiry: on Redis's clock, the last of
// its holds and seens in whole milliseconds rounded up; with an injected
// clock, the same time from it plus the slack of tests. The funnel's key
// and the fence's copy expire with the fence.
func TestShareExpiry(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	p := mkParams(t, 999, 1000, time.Second)
	last := func(s map[string]*gcra.ShareNode) int64 {
		var top int64
		for _, nd := range s {
			top = max(top, nd.Seen)
			for _, r := range nd.Res {
				top = max(top, r.Hold)
			}
		}
		return top
	}
	st := redisstore.New(c, redisstore.Options{Timeout: 10 * time.Second})
	for i, req := range []gcra.ShareRequest{
		{Node: "a", Demand: -1, Lifetime: 200_000, Grace: 5_000},
		{Node: "b", Demand: gcra.ShareParts / 10, Lifetime: 2_000_000, Grace: 5_000},
		{Node: "a", Demand: gcra.ShareParts, Lifetime: 7, Grace: 1}, // a's older grant still drains
	} {
		g, err := st.Share(ctx, "k", p, req)
		if err != nil {
			t.Fatal(err)
		}
		s, err := st.ShareState(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		ms, err := c.Do(ctx, "PEXPIRETIME", "{k}\x00shares").Int64()
		if err != nil {
			t.Fatal(err)
		}
		if top := last(s); ms != (top+999)/1000 {
			t.Fatalf("call %d: the shares expire at %d ms, the last hold or seen is %d µs", i, ms, top)
		}
		// The fence's keys expire as a TAT's: at the fence in whole ms, or
		// the next (Redis expires a key only after its ms has passed).
		f := gcra.ShareFence(s, g.Now, p)
		for _, k := range []string{"k", "{k}\x00fence"} {
			kms, err := c.Do(ctx, "PEXPIRETIME", k).Int64()
			if err != nil || f == 0 || kms < f/1_000_000 || kms > f/1_000_000+2 {
				t.Fatalf("call %d: the fence %d ns expires at %d ms in %q (%v)", i, f, kms, k, err)
			}
		}
	}
	var clock atomic.Int64
	clock.Store(1_600_000_000_123_456_789) // years behind Redis's
	ts := redisstore.New(c, redisstore.Options{Now: clock.Load, Timeout: 10 * time.Second})
	g, err := ts.Share(ctx, "t", p, gcra.ShareRequest{Node: "a", Demand: 5, Lifetime: 200_000})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := ts.ShareState(ctx, "t")
	want := (last(s)-g.Now+999)/1000 + (10 * time.Minute).Milliseconds()
	pttl, err := c.PTTL(ctx, "{t}\x00shares").Result()
	if err != nil {
		t.Fatal(err)
	}
	if ms := pttl.Milliseconds(); ms > want || ms < want-60_000 {
		t.Fatalf("with an injected clock the shares live %d ms, want %d", ms, want)
	}
}

// TestShareCluster calls for shares on a Redis Cluster of three masters,
// on keys with and without hash tags, in slots of every master, through
// go-redis and rueidis, and checks the grants and records against
// gcra.Share.
func TestShareCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	ctx := context.Background()
	var clock atomic.Int64
	opts := redisstore.Options{Now: clock.Load, Prefix: "p:", Timeout: 10 * time.Second}
	stores := []*redisstore.Store{redisstore.New(cc, opts), redisstore.NewRueidis(newRueidis(t, cl.Addrs()...), opts)}
	p := mkParams(t, 99, 1000, time.Second)
	masters := map[int]bool{}
	now := int64(1_800_000_000_000_000)
	for i := range 30 {
		st := stores[i%3%2] // go-redis on keys with and without tags, rueidis too
		key := "key" + strconv.Itoa(i)
		if i%2 == 0 {
			key = "{tag" + strconv.Itoa(i) + "}k"
		}
		masters[cl.MasterOf("p:"+key)] = true
		want := map[string]*gcra.ShareNode{}
		for j := range 6 {
			now += 10_000
			clock.Store(now * 1000)
			req := gcra.ShareRequest{Node: "n" + strconv.Itoa(j%3), Demand: int64(j) * gcra.ShareParts / 5, Lifetime: 50_000, Grace: 1_000}
			wg, err := gcra.Share(now, want, p, req)
			if err != nil {
				t.Fatal(err)
			}
			g, err := st.Share(ctx, key, p, req)
			if err != nil || g != wg {
				t.Fatalf("%s: Share %+v, %v; gcra.Share %+v", key, g, err, wg)
			}
		}
		got, err := st.ShareState(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if d := sameShares(got, want); d != "" {
			t.Fatalf("%s: %s", key, d)
		}
	}
	if len(masters) != 3 || masters[-1] {
		t.Fatalf("the keys' masters: %v", masters)
	}
}

// TestShareBadInput checks that every request gcra.Share refuses, and a key
// with a '}' but no hash tag, is an error wrapping gcra.ErrBadLease that
// leaves Redis as it was.
func TestShareBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := srv.Client()
	ctx := context.Background()
	st := redisstore.New(c, redisstore.Options{Timeout: 10 * time.Second})
	p := mkParams(t, 9, 10, time.Second)
	ok := gcra.ShareRequest{Node: "a", Demand: 5, Lifetime: 200_000, Grace: 5_000}
	if _, err := st.Share(ctx, "k", p, ok); err != nil {
		t.Fatal(err)
	}
	before, err := c.HGetAll(ctx, "{k}\x00shares").Result()
	if err != nil {
		t.Fatal(err)
	}
	with := func(f func(*gcra.ShareRequest)) gcra.ShareRequest {
		r := ok
		f(&r)
		return r
	}
	big := mkParams(t, 1<<33, 1, time.Second)
	cases := []struct {
		key string
		p   gcra.Params
		req gcra.ShareRequest
	}{
		{"k", gcra.Params{}, ok},
		{"k", gcra.Params{Interval: 10, Tolerance: 5, Limit: 1}, ok},
		{"k", big, ok},
		{"k", mkParams(t, 100, 1, 24*time.Hour), ok},
		{"k", p, with(func(r *gcra.ShareRequest) { r.Node = "" })},
		{"k", p, with(func(r *gcra.ShareRequest) { r.Demand = -2 })},
		{"k", p, with(func(r *gcra.ShareRequest) { r.Demand = gcra.MaxShareDemand + 1 })},
		{"k", p, with(func(r *gcra.ShareRequest) { r.Lifetime = 3 })},
		{"k", p, with(func(r *gcra.ShareRequest) { r.Lifetime = gcra.MaxShareLifetime + 1 })},
		{"k", p, with(func(r *gcra.ShareRequest) { r.Grace = -1 })},
		{"k", p, with(func(r *gcra.ShareRequest) { r.Grace = r.Lifetime + 1 })},
		{"k", p, with(func(r *gcra.ShareRequest) { r.Level = -1 })},
		{"k", p, with(func(r *gcra.ShareRequest) { r.Level = p.Limit + 1 })},
		{"k", mkParams(t, 0, 1_000_000_000, time.Second), with(func(r *gcra.ShareRequest) { r.Lifetime = gcra.MaxShareLifetime })},
		{"a}b", p, ok},
	}
	for i, tc := range cases {
		_, err := st.Share(ctx, tc.key, tc.p, tc.req)
		if !errors.Is(err, gcra.ErrBadLease) {
			t.Fatalf("case %d %+v: %v", i, tc, err)
		}
		if tc.key == "a}b" && !errors.Is(err, redisstore.ErrNoShareKey) {
			t.Fatalf("a key with a '}' and no tag: %v", err)
		}
	}
	if _, err := st.ShareState(ctx, "a}b"); !errors.Is(err, redisstore.ErrNoShareKey) {
		t.Fatalf("ShareState of a key with a '}' and no tag: %v", err)
	}
	after, _ := c.HGetAll(ctx, "{k}\x00shares").Result()
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("bad requests changed the shares: %v, then %v", before, after)
	}
	if keys, _ := c.Keys(ctx, "*").Result(); len(keys) != 3 { // the hash, the fence and its copy
		t.Fatalf("keys after bad requests: %q", keys)
	}
}

// BenchmarkShare is one Share call at a time on a key whose shares hold 3
// or 16 nodes, each calling once per lifetime (an injected clock advances
// L/N per call): it reports the CPU Redis spends in the script per call
// (INFO commandstats).
func BenchmarkShare(b *testing.B) {
	srv := redistest.StartServer(b)
	c := srv.Client()
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(1_800_000_000_000_000_000)
	st := redisstore.New(c, redisstore.Options{Now: clock.Load, Timeout: 10 * time.Second})
	p := mkParams(b, 499, 20_000, time.Second)
	const L = 200_000
	for _, nodes := range []int{3, 16} {
		b.Run(strconv.Itoa(nodes)+"nodes", func(b *testing.B) {
			key := "bench" + strconv.Itoa(nodes)
			i := 0
			call := func() {
				clock.Add(L * 1000 / int64(nodes))
				n := i % nodes
				i++
				d := int64(gcra.ShareParts) * int64(1+n%3) / int64(nodes)
				if _, err := st.Share(ctx, key, p, gcra.ShareRequest{Node: "node-" + strconv.Itoa(n), Demand: d, Lifetime: L, Grace: 5_000, Level: p.Limit}); err != nil {
					b.Fatal(err)
				}
			}
			for range 10 * nodes {
				call()
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				call()
			}
			stats, err := srv.Info("commandstats")
			if err != nil {
				b.Fatal(err)
			}
			for _, kv := range strings.Split(stats["cmdstat_evalsha"], ",") {
				if k, v, _ := strings.Cut(kv, "="); k == "usec_per_call" {
					f, _ := strconv.ParseFloat(v, 64)
					b.ReportMetric(f, "redis-µs/op")
				}
			}
			s, _ := st.ShareState(ctx, key)
			var res int
			for _, nd := range s {
				res += len(nd.Res)
			}
			b.ReportMetric(float64(res)/float64(len(s)), "res/node")
		})
	}
}

// TestShareUnavailable checks that Share and ShareState fail with an error
// that wraps funnel.ErrUnavailable when Redis cannot be reached.
func TestShareUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := context.Background()
	st := redisstore.New(srv.Client(), redisstore.Options{Timeout: time.Second})
	p := mkParams(t, 9, 10, time.Second)
	req := gcra.ShareRequest{Node: "a", Demand: 5, Lifetime: 200_000, Grace: 5_000}
	if _, err := st.Share(ctx, "k", p, req); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if _, err := st.Share(ctx, "k", p, req); !errors.Is(err, funnel.ErrUnavailable) {
		t.Fatalf("Share with Redis down: %v", err)
	}
	if _, err := st.ShareState(ctx, "k"); !errors.Is(err, funnel.ErrUnavailable) {
		t.Fatalf("ShareState with Redis down: %v", err)
	}
}
