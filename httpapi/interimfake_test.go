package httpapi_test

// TEMPORARY: a reserving store over memstore until memstore keeps
// reservations itself. Settles as the contract says for the funnel only.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

type interimRes struct {
	key      string
	limit    funnel.Checked
	estimate int64
	end      int64
	actual   int64
	settled  bool
}

type interimStore struct {
	*memstore.Store
	mu   sync.Mutex
	recs map[string]*interimRes
}

func (s *interimStore) Reserve(ctx context.Context, key string, limit funnel.Checked, estimate int64, id string, ttl time.Duration) (funnel.Result, error) {
	if err := funnel.CheckReserve(key, &limit, estimate, id, ttl); err != nil {
		return funnel.Result{}, err
	}
	res := make([]funnel.Result, 1)
	if err := s.Do(ctx, []funnel.Op{{Kind: funnel.OpTake, Key: key, Limit: limit, N: estimate}}, res); err != nil {
		return funnel.Result{}, err
	}
	if res[0].Allowed {
		s.mu.Lock()
		if s.recs == nil {
			s.recs = map[string]*interimRes{}
		}
		s.recs[id] = &interimRes{key: strings.Clone(key), limit: limit, estimate: estimate, end: s.Now() + int64(ttl)}
		s.mu.Unlock()
	}
	return res[0], nil
}

func (s *interimStore) Settle(ctx context.Context, key, id string, actual int64) (funnel.Settlement, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[id]
	if r == nil || r.key != key || s.Now() >= r.end {
		return funnel.Settlement{}, fmt.Errorf("%w: %q of key %q", funnel.ErrUnknownReservation, id, key)
	}
	res := make([]funnel.Result, 1)
	if r.settled {
		err := s.Do(ctx, []funnel.Op{{Kind: funnel.OpCharge, Key: key, Limit: r.limit}}, res)
		return funnel.Settlement{Result: res[0], Estimate: r.estimate, Actual: r.actual, Again: true}, err
	}
	d := actual - r.estimate
	switch {
	case d > 0:
		if err := s.Do(ctx, []funnel.Op{{Kind: funnel.OpCharge, Key: key, Limit: r.limit, N: d}}, res); err != nil {
			return funnel.Settlement{}, err
		}
	case d < 0:
		if err := s.Do(ctx, []funnel.Op{{Kind: funnel.OpRefund, Key: key, Limit: r.limit, N: -d}}, res); err != nil {
			return funnel.Settlement{}, err
		}
	}
	r.settled, r.actual = true, actual
	err := s.Do(ctx, []funnel.Op{{Kind: funnel.OpCharge, Key: key, Limit: r.limit}}, res)
	return funnel.Settlement{Result: res[0], Estimate: r.estimate, Actual: actual}, err
}
