package console_test

import (
	"context"
	"testing"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/console"
	"github.com/funnelrl/funnel/memstore"
)

// BenchmarkAllow is the decision path of one hot key on the memory store,
// bare and with the console's recorder: admitted (a limit it never
// reaches) and refused (a limit it is always over, so that every call is
// recorded in the sketch).
func BenchmarkAllow(b *testing.B) {
	for _, tc := range []struct {
		name  string
		limit funnel.Limit
	}{
		{"allowed", funnel.PerSecond(1e9)},
		{"refused", funnel.PerHour(1)},
	} {
		for _, watched := range []bool{false, true} {
			name := tc.name + "/bare"
			if watched {
				name = tc.name + "/watched"
			}
			b.Run(name, func(b *testing.B) {
				s := memstore.New(memstore.Options{})
				defer s.Close()
				var store funnel.Store = s
				if watched {
					store = console.Watch(s, console.NewTop(nil), "resp")
				}
				lim := funnel.New(store)
				ctx := context.Background()
				lim.Allow(ctx, "hot", tc.limit)
				b.ReportAllocs()
				for b.Loop() {
					lim.Allow(ctx, "hot", tc.limit)
				}
			})
		}
	}
}
