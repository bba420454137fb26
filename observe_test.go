package funnel_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/memstore"
)

// seen is an Observer that keeps what it is told.
type seen struct {
	mu   sync.Mutex
	keys []string
	lims []funnel.Checked
	res  []funnel.Result
}

func (s *seen) Observe(_ context.Context, key string, c funnel.Checked, r funnel.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, key)
	s.lims = append(s.lims, c)
	s.res = append(s.res, r)
}

func (s *seen) take() ([]string, []funnel.Checked, []funnel.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, l, r := s.keys, s.lims, s.res
	s.keys, s.lims, s.res = nil, nil, nil
	return k, l, r
}

// fastCounter is the memory store, counting the decisions made through its
// FunnelTaker.
type fastCounter struct {
	*memstore.Store
	mu    sync.Mutex
	takes int
}

func (f *fastCounter) TakeFunnel(ctx context.Context, key string, p gcra.Params, n int64) (gcra.Result, error) {
	f.mu.Lock()
	f.takes++
	f.mu.Unlock()
	return f.Store.TakeFunnel(ctx, key, p, n)
}

// watching is an ObservingStore over a store: what the console's is.
type watching struct {
	funnel.Store
	o funnel.Observer
}

func (w watching) Observed() (funnel.Store, funnel.Observer) { return w.Store, w.o }

// The Limiter tells its Observer of every take that is refused, delayed or
// a fallback, through every path (the store's FunnelTaker included), and of
// nothing else; over an ObservingStore it decides through the wrapped
// store's FunnelTaker.
func TestObserver(t *testing.T) {
	ctx := context.Background()
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	fc := &fastCounter{Store: ms}
	o := &seen{}
	for _, build := range []struct {
		name string
		lim  *funnel.Limiter
	}{
		{"WithObserver", funnel.New(fc).WithObserver(o)},
		{"ObservingStore", funnel.New(watching{fc, o})},
	} {
		t.Run(build.name, func(t *testing.T) {
			lim := build.lim
			fc.takes = 0
			one := funnel.PerHour(1).WithBurst(0)
			pre := build.name + ":"
			// Admitted through the fast path: not observed.
			if r, err := lim.Allow(ctx, pre+"a", one); err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			if k, _, _ := o.take(); len(k) != 0 || fc.takes != 1 {
				t.Fatalf("admitted: observed %q, %d fast takes", k, fc.takes)
			}
			// Refused through AllowN, AllowChecked and Do (all fast).
			c, err := one.Check()
			if err != nil {
				t.Fatal(err)
			}
			lim.Allow(ctx, pre+"a", one)
			lim.AllowChecked(ctx, pre+"a", &c, 1)
			ops := []funnel.Op{{Kind: funnel.OpTake, Key: pre + "a", Limit: c, N: 1}}
			res := make([]funnel.Result, 1)
			if err := lim.Do(ctx, ops, res); err != nil {
				t.Fatal(err)
			}
			k, ls, rs := o.take()
			if len(k) != 3 || fc.takes != 4 {
				t.Fatalf("refused: observed %q, %d fast takes", k, fc.takes)
			}
			for i := range k {
				if k[i] != pre+"a" || rs[i].Allowed || ls[i].GCRA != c.GCRA || ls[i].Limit != one {
					t.Errorf("refusal %d: %q %+v %+v", i, k[i], ls[i], rs[i])
				}
			}
			// Refused with a ban (not the fast path), in AllowAll, and a
			// lease refused; a peek and a refund are not observed.
			banned := one
			banned.Ban = time.Hour
			lim.Allow(ctx, pre+"b", banned)
			lim.Allow(ctx, pre+"b", banned)
			lim.Peek(ctx, pre+"a", one)
			lim.Refund(ctx, pre+"c", funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1, Period: time.Minute}, 1)
			m, err := lim.AllowAll(ctx, []funnel.Request{{Key: pre + "d", Limit: one, N: 1}, {Key: pre + "a", Limit: one, N: 1}})
			if err != nil || m.Allowed {
				t.Fatal(m, err)
			}
			conc := funnel.Limit{Algorithm: funnel.Concurrency, Count: 1, Period: time.Minute}
			lim.Acquire(ctx, pre+"e", conc)
			lim.Acquire(ctx, pre+"e", conc)
			k, _, rs = o.take()
			want := []string{pre + "b", pre + "a", pre + "e"}
			if len(k) != len(want) {
				t.Fatalf("observed %q, want %q", k, want)
			}
			for i := range want {
				if k[i] != want[i] || rs[i].Allowed {
					t.Errorf("observed %q %+v, want %q refused", k[i], rs[i], want[i])
				}
			}
			if !rs[0].Banned {
				t.Errorf("the ban's refusal: %+v", rs[0])
			}
			// A leaky bucket's delayed admission is observed, its first
			// (without a delay) is not.
			leaky := funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 1, Period: time.Second, Burst: 5}
			lim.Allow(ctx, pre+"f", leaky)
			r, err := lim.Allow(ctx, pre+"f", leaky)
			if err != nil || !r.Allowed || r.Delay <= 0 {
				t.Fatal(r, err)
			}
			if k, _, rs := o.take(); len(k) != 1 || rs[0].Delay != r.Delay {
				t.Fatalf("delayed: observed %q %+v", k, rs)
			}
		})
	}
}

// fallbackStore answers every decision with a fail-open fallback.
type fallbackStore struct{ funnel.Store }

func (fallbackStore) Do(_ context.Context, ops []funnel.Op, res []funnel.Result) error {
	for i := range ops {
		res[i] = funnel.Result{Allowed: true, Fallback: true}
	}
	return nil
}

// A fallback, admitted or not, is observed, for a plain funnel as for the
// rest: a store that may answer a fallback decides through Do, since a
// FunnelTaker answers none.
func TestObserverFallback(t *testing.T) {
	ctx := context.Background()
	o := &seen{}
	lim := funnel.New(fallbackStore{}).WithObserver(o)
	lim.Allow(ctx, "fast", funnel.PerSecond(1))
	banned := funnel.PerSecond(1)
	banned.Ban = time.Minute
	lim.Allow(ctx, "slow", banned)
	if k, _, rs := o.take(); len(k) != 2 || !rs[0].Fallback || !rs[1].Fallback {
		t.Fatalf("observed %q %+v", k, rs)
	}
}

// Observers stack, and a nil one changes nothing.
func TestWithObserverStacks(t *testing.T) {
	ms := memstore.New(memstore.Options{})
	defer ms.Close()
	a, b := &seen{}, &seen{}
	base := funnel.New(ms)
	if base.WithObserver(nil) != base {
		t.Fatal("WithObserver(nil) is a new Limiter")
	}
	lim := funnel.New(watching{ms, a}).WithObserver(b)
	one := funnel.PerHour(1).WithBurst(0)
	lim.Allow(context.Background(), "k", one)
	lim.Allow(context.Background(), "k", one)
	ka, _, _ := a.take()
	kb, _, _ := b.take()
	if len(ka) != 1 || len(kb) != 1 {
		t.Fatalf("observed %q and %q", ka, kb)
	}
	if _, ok := lim.Store().(watching); !ok {
		t.Fatal("Store() is not the store given to New")
	}
}
