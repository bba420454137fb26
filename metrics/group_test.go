package metrics_test

import (
	"testing"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/metrics"
)

// slotStore is a store that puts each key in the group of its length.
type slotStore struct{ *memstore.Store }

func (slotStore) Group(key string) int { return len(key) }

// An instrumented store says its store's groups (funnel.Grouper), and 0
// for a store that has none.
func TestInstrumentStoreGroup(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	st := memstore.New(memstore.Options{})
	defer st.Close()
	g, ok := metrics.InstrumentStore(slotStore{st}, m).(funnel.Grouper)
	if !ok {
		t.Fatal("not a funnel.Grouper")
	}
	if got := g.Group("abc"); got != 3 {
		t.Errorf("Group = %d, want 3", got)
	}
	if got := metrics.InstrumentStore(st, m).(funnel.Grouper).Group("abc"); got != 0 {
		t.Errorf("Group of a store without groups = %d, want 0", got)
	}
}
