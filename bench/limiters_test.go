package bench

import (
	"context"
	"sync"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	sethvargo "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// spec is a limit in the terms every limiter understands: count units per
// period, with a bucket that holds count units (a burst of count at once).
type spec struct {
	count  int64
	period time.Duration
}

// throughputSpec is the limit of the throughput benchmarks: 1e9 units per
// 1000 s, a sustained 1,000,000 per second with room for 1e9 at once.
//
// The rate is the highest Funnel accepts (an emission interval of exactly
// 1µs), and the bucket is so deep that no run comes near emptying it, even on
// one hot key: every request of every limiter is allowed and charged, so
// they all take their full path (look up the state, decide, write the state
// back) and none of them short-cuts a refusal. The benchmarks check this and
// report "denied/op" and "errors/op" metrics if it ever fails.
var throughputSpec = spec{count: 1_000_000_000, period: 1000 * time.Second}

// memorySpec is the limit of the memory benchmarks: 10 per hour, so that one
// request leaves every key limited (holding state) for minutes, well beyond
// the measurement. Under throughputSpec a Funnel key is full again 1µs after
// its request, and Funnel would rightly forget it.
var memorySpec = spec{count: 10, period: time.Hour}

// preparer is a keyed reference (the floor) that must be given its keys
// before the timer starts: its allow only looks a key up.
type preparer interface {
	prepare(key string)
}

// keyed is one rate limiter seen through the benchmarks' eyes.
type keyed interface {
	// allow asks for one unit of key and reports whether it was allowed.
	allow(key string) (bool, error)
	// close stops the limiter's background work, if it has any.
	close()
}

// limiterKind names a limiter and builds one for a spec.
type limiterKind struct {
	name string
	new  func(spec) keyed
	// keyed is false for a limiter that ignores the key (the single
	// x/time/rate limiter), which only the hot-key benchmark runs.
	keyed bool
}

// kinds are the limiters compared, in table order.
var kinds = []limiterKind{
	{"funnel-memstore", newFunnelStore, true},
	{"funnel-limiter", newFunnelLimiter, true},
	{"sethvargo", newSethvargo, true},
	{"throttled", newThrottled, true},
	{"ulule", newUlule, true},
	{"xrate-single", newXrateSingle, false},
	{"floor-memstore", newFloor, true},
	{"xrate-map", newXrateMap, true},
}

var ctx = context.Background()

// funnelStore calls Limiter.AllowChecked on a memstore, with the limit checked once.
type funnelStore struct {
	store *memstore.Store
	lim   *funnel.Limiter
	c     funnel.Checked
}

func newFunnelStore(s spec) keyed {
	c, err := funnel.Per(s.count, s.period).Check()
	if err != nil {
		panic(err)
	}
	st := memstore.New(memstore.Options{})
	return &funnelStore{store: st, lim: funnel.New(st), c: c}
}

func (f *funnelStore) allow(key string) (bool, error) {
	r, err := f.lim.AllowChecked(ctx, key, &f.c, 1)
	return r.Allowed, err
}

func (f *funnelStore) close() { f.store.Close() }

// floorStore is the floor of a decision, a reference rather than a
// limiter: one lookup of the key in the memory store's table and one read of
// its clock (Store.TAT), which every decision makes, and nothing else. Its
// keys are inserted before the timer starts (prepare) by a funnel decision
// under the same limit, as the Funnel rows insert theirs, and never swept,
// so that every lookup finds its key.
type floorStore struct {
	funnelStore
}

func newFloor(s spec) keyed {
	c, err := funnel.Per(s.count, s.period).Check()
	if err != nil {
		panic(err)
	}
	st := memstore.New(memstore.Options{SweepInterval: -1})
	return &floorStore{funnelStore{store: st, lim: funnel.New(st), c: c}}
}

func (f *floorStore) prepare(key string) {
	if _, err := f.funnelStore.allow(key); err != nil {
		panic(err)
	}
}

func (f *floorStore) allow(key string) (bool, error) {
	f.store.TAT(key)
	return true, nil
}

// funnelLimiter calls funnel.Limiter.Allow, which validates the Limit and
// computes its parameters on every call.
type funnelLimiter struct {
	store *memstore.Store
	lim   *funnel.Limiter
	limit funnel.Limit
}

func newFunnelLimiter(s spec) keyed {
	store := memstore.New(memstore.Options{})
	return &funnelLimiter{store: store, lim: funnel.New(store), limit: funnel.Per(s.count, s.period)}
}

func (f *funnelLimiter) allow(key string) (bool, error) {
	r, err := f.lim.Allow(ctx, key, f.limit)
	return r.Allowed, err
}

func (f *funnelLimiter) close() { f.store.Close() }

// sethvargoStore is go-limiter's memorystore: a token bucket of count tokens
// per key, refilled each period.
type sethvargoStore struct{ store sethvargo.Store }

func newSethvargo(s spec) keyed {
	store, err := memorystore.New(&memorystore.Config{Tokens: uint64(s.count), Interval: s.period})
	if err != nil {
		panic(err)
	}
	return &sethvargoStore{store: store}
}

func (l *sethvargoStore) allow(key string) (bool, error) {
	_, _, _, ok, err := l.store.Take(ctx, key)
	return ok, err
}

func (l *sethvargoStore) close() { l.store.Close(ctx) }

// throttledGCRA is throttled's GCRA limiter over its memstore, unbounded
// (no LRU), like Funnel's default store.
type throttledGCRA struct{ rl *throttled.GCRARateLimiterCtx }

func newThrottled(s spec) keyed {
	store, err := throttledmem.NewCtx(0)
	if err != nil {
		panic(err)
	}
	quota := throttled.RateQuota{
		MaxRate:  throttled.PerDuration(int(s.count), s.period),
		MaxBurst: int(s.count - 1), // a bucket of MaxBurst+1 = count units
	}
	rl, err := throttled.NewGCRARateLimiterCtx(store, quota)
	if err != nil {
		panic(err)
	}
	return &throttledGCRA{rl: rl}
}

func (l *throttledGCRA) allow(key string) (bool, error) {
	limited, _, err := l.rl.RateLimitCtx(ctx, key, 1)
	return !limited, err
}

func (l *throttledGCRA) close() {}

// ululeMemory is ulule/limiter with its memory store: a counter per key and
// fixed window of one period.
type ululeMemory struct{ lim *ulule.Limiter }

func newUlule(s spec) keyed {
	lim := ulule.New(ululemem.NewStore(), ulule.Rate{Period: s.period, Limit: s.count})
	return &ululeMemory{lim: lim}
}

func (l *ululeMemory) allow(key string) (bool, error) {
	c, err := l.lim.Get(ctx, key)
	return !c.Reached, err
}

// close does nothing: the memory store stops its cleaner when it is
// garbage collected.
func (l *ululeMemory) close() {}

// xrateLimit converts a spec to x/time/rate's terms.
func xrateLimit(s spec) (rate.Limit, int) {
	return rate.Limit(float64(s.count) / s.period.Seconds()), int(s.count)
}

// xrateSingle is one *rate.Limiter that ignores the key: the cost of a
// decision with no per-key lookup at all, a reference rather than a keyed
// limiter.
type xrateSingle struct{ l *rate.Limiter }

func newXrateSingle(s spec) keyed { return &xrateSingle{l: rate.NewLimiter(xrateLimit(s))} }

func (l *xrateSingle) allow(string) (bool, error) { return l.l.Allow(), nil }

func (l *xrateSingle) close() {}

// xrateMap is a naive keyed x/time/rate: a map of limiters behind one
// sync.Mutex, never forgetting a key. It is not a library's keyed store, and
// cmd/benchtable does not count it among them.
type xrateMap struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	limit rate.Limit
	burst int
}

func newXrateMap(s spec) keyed {
	limit, burst := xrateLimit(s)
	return &xrateMap{m: make(map[string]*rate.Limiter), limit: limit, burst: burst}
}

func (l *xrateMap) allow(key string) (bool, error) {
	l.mu.Lock()
	lim, ok := l.m[key]
	if !ok {
		lim = rate.NewLimiter(l.limit, l.burst)
		l.m[key] = lim
	}
	l.mu.Unlock()
	return lim.Allow(), nil
}

func (l *xrateMap) close() {}
