package funnel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/console"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/metrics"
	"github.com/funnelrl/funnel/tracing"
)

// decorators are the stores that wrap another, alone and stacked.
var decorators = []struct {
	name string
	wrap func(funnel.Store) funnel.Store
	// fast: a Limiter over the decorator decides through the store's
	// FunnelTaker, the decorator observing the results (the console's, a
	// funnel.ObservingStore).
	fast bool
}{
	{"metrics", func(s funnel.Store) funnel.Store { return metrics.InstrumentStore(s, metrics.New(metrics.Options{})) }, false},
	{"tracing", func(s funnel.Store) funnel.Store { return tracing.WrapStore(s, noop.NewTracerProvider()) }, false},
	{"metrics(tracing)", func(s funnel.Store) funnel.Store {
		return metrics.InstrumentStore(tracing.WrapStore(s, noop.NewTracerProvider()), metrics.New(metrics.Options{}))
	}, false},
	{"tracing(metrics)", func(s funnel.Store) funnel.Store {
		return tracing.WrapStore(metrics.InstrumentStore(s, metrics.New(metrics.Options{})), noop.NewTracerProvider())
	}, false},
	{"console", func(s funnel.Store) funnel.Store { return console.Watch(s, console.NewTop(nil), "resp") }, true},
	{"console timing", func(s funnel.Store) funnel.Store { return console.Time(s, new(console.Latency)) }, false},
	{"console(tracing)", func(s funnel.Store) funnel.Store {
		return console.Watch(tracing.WrapStore(s, noop.NewTracerProvider()), console.NewTop(nil), "resp")
	}, false},
}

// Every decorator over the memory store says what the store says of
// itself through each optional interface (it does not block, it counts its
// keys, it groups no keys, it has GCRA), and none hands the Limiter the
// store's FunnelTaker, which would decide around it; over the console's,
// which only observes results, the Limiter decides through the store's
// FunnelTaker and tells the console itself. (With tracing, the
// RESP server used to serve a memory store from a goroutine per connection
// instead of its event loops: the tracing store did not say NonBlocking.)
func TestDecoratorsForwardOptionalInterfaces(t *testing.T) {
	ctx := context.Background()
	for _, d := range decorators {
		t.Run(d.name, func(t *testing.T) {
			inner := &fastCounter{Store: memstore.New(memstore.Options{})}
			defer inner.Close()
			s := d.wrap(inner)
			lim := funnel.New(s)
			if _, err := lim.Allow(ctx, "a", funnel.PerSecond(10)); err != nil {
				t.Fatal(err)
			}
			if got, want := funnel.NonBlockingOf(s), funnel.NonBlockingOf(inner); got != want || !got {
				t.Errorf("NonBlockingOf = %v, the store's %v", got, want)
			}
			n, ok := funnel.KeysOf(s)
			if wn, wok := funnel.KeysOf(inner); n != wn || ok != wok || n != 1 {
				t.Errorf("KeysOf = %d, %v; the store's %d, %v", n, ok, wn, wok)
			}
			if _, ok := s.(funnel.EvictionCounter); !ok {
				t.Error("the decorator does not count evictions")
			}
			if got, want := funnel.EvictionsOf(s), funnel.EvictionsOf(inner); got != want {
				t.Errorf("EvictionsOf = %d, the store's %d", got, want)
			}
			if got, want := funnel.GroupOf(s, "{x}a"), funnel.GroupOf(inner, "{x}a"); got != want {
				t.Errorf("GroupOf = %d, the store's %d", got, want)
			}
			p, err := gcra.NewCommandParams(5, 10, 60, 1)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := funnel.ForwardGCRA(ctx, s, "g", p); err != nil {
				t.Errorf("GCRA through the decorator: %v", err)
			}
			c, _ := funnel.PerSecond(10).Check()
			if r, err := funnel.ForwardReserve(ctx, s, "r", c, 3, "id", time.Second); err != nil || !r.Allowed {
				t.Errorf("Reserve through the decorator: %+v, %v", r, err)
			}
			if st, err := funnel.ForwardSettle(ctx, s, "r", "id", 1); err != nil || st.Remaining != 9 {
				t.Errorf("Settle through the decorator: %+v, %v", st, err)
			}
			if _, ok := s.(funnel.FunnelTaker); ok {
				t.Error("the decorator offers a FunnelTaker")
			}
			if fast := inner.takes > 0; fast != d.fast {
				t.Errorf("the Limiter decided through the store's FunnelTaker: %v, want %v", fast, d.fast)
			}
			// The decorator sees the decision that the Limiter makes.
			if ttl, ok, err := s.TTL(ctx, "a"); err != nil || !ok || ttl <= 0 || ttl > time.Second {
				t.Errorf("TTL = %v, %v, %v", ttl, ok, err)
			}
		})
	}
}
