package memstore_test

import (
	"testing"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() int64) funnel.Store {
		s := memstore.New(memstore.Options{Now: now})
		t.Cleanup(func() { s.Close() })
		return s
	})
}
