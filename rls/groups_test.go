package rls_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/testlog"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
	"github.com/funnelrl/funnel/storetest"
)

// slotStore is a memory store with Redis Cluster's constraint: the keys of
// one call must be of one group (here, the descriptor's key: the letter
// after the domain), or the call fails with ErrCrossSlot. Its refunds can
// be made to fail.
type slotStore struct {
	*memstore.Store
	failRefunds atomic.Bool
	refunds     atomic.Int64
}

func (s *slotStore) Group(key string) int { return int(key[len("m_")]) }

func (s *slotStore) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	for _, op := range ops[1:] {
		if s.Group(op.Key) != s.Group(ops[0].Key) {
			return fmt.Errorf("%w (%q)", funnel.ErrCrossSlot, op.Key)
		}
	}
	if ops[0].Kind == funnel.OpRefund {
		s.refunds.Add(1)
		if s.failRefunds.Load() {
			return fmt.Errorf("%w: connection reset", funnel.ErrUnavailable)
		}
	}
	return s.Store.Do(ctx, ops, res)
}

// A refused request over two groups refunds the group that admitted it; a
// refund that fails is logged, the request is still refused (not an
// error), and the charge stays.
func TestGroupRefunds(t *testing.T) {
	clock := storetest.NewClock(t0.UnixNano())
	store := &slotStore{Store: memstore.New(memstore.Options{Now: clock.Now})}
	defer store.Close()
	set, err := rules.Parse(strings.NewReader(`
domain: m
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 3}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 1}}
`), "m.yaml", rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log, logs := testlog.New(slog.LevelWarn)
	e := start(t, store, rls.Static(set), rls.Options{Logger: log})
	e.clock = clock
	a, b := desc("a", "x"), desc("b", "y")
	e.expectCodes(t, 1, "OK OK OK", "m", a, b)
	if r := e.ask(t, "m", a, b); codesOf(r) != "OVER_LIMIT OK OVER_LIMIT" || r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("request 2: %v", r)
	}
	if n := store.refunds.Load(); n != 1 {
		t.Fatalf("%d refunds, want 1 (a's)", n)
	}
	store.failRefunds.Store(true)
	if r := e.ask(t, "m", a, b); codesOf(r) != "OVER_LIMIT OK OVER_LIMIT" || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("request 3, its refund failing: %v", r)
	}
	if !strings.Contains(logs.String(), "could not be refunded") {
		t.Errorf("the failed refund was not logged: %q", logs.String())
	}
	store.failRefunds.Store(false)
	e.expectCodes(t, 1, "OK OK", "m", a) // a's last unit: the failed refund's charge stayed
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "m", a)
}
