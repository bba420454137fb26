package metrics

import (
	"context"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/prometheus/client_golang/prometheus"
)

// Store operations, the values of the op label.
const (
	opThrottle = iota
	opReset
	opTTL
	opDo
	opBans
	opUnban
	opGCRA    // Redis's GCRA command (gcra.go)
	opReserve // reservations (reserve.go)
	opSettle
	numOps
)

var opNames = [numOps]string{"throttle", "reset", "ttl", "do", "bans", "unban", "gcra", "reserve", "settle"}

// Kinds of store errors, the values of the kind label.
const (
	kindUnavailable = iota
	kindCanceled
	kindWrongType
	kindCrossSlot
	kindInvalid
	kindOther
	numKinds
)

var kindNames = [numKinds]string{"unavailable", "canceled", "wrong_type", "cross_slot", "invalid", "other"}

// opMetrics are one operation's series, looked up once.
type opMetrics struct {
	time   prometheus.Observer
	errors [numKinds]prometheus.Counter
}

// kindOf labels a store error by its class (funnel.ClassOf).
func kindOf(err error) int {
	switch funnel.ClassOf(err) {
	case funnel.ClassUnavailable:
		return kindUnavailable
	case funnel.ClassCanceled:
		return kindCanceled
	case funnel.ClassWrongType:
		return kindWrongType
	case funnel.ClassCrossSlot:
		return kindCrossSlot
	case funnel.ClassInvalid:
		return kindInvalid
	}
	return kindOther
}

// done records a call of op that started at start.
func (m *Metrics) done(op int, start time.Time, err error, fallback bool) {
	o := &m.ops[op]
	o.time.Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		o.errors[kindOf(err)].Inc()
	case fallback:
		o.errors[kindUnavailable].Inc()
	}
}

// InstrumentStore returns a store that passes every call to s and records
// its latency (store_duration_seconds) and its errors (store_errors_total;
// a result with Fallback set counts as an unavailable store). A Do call of
// one funnel decision without a ban, the commonest call, is labelled
// op="throttle", other Do calls op="do". The store reports NonBlocking as s
// does, and its groups of keys (funnel.Grouper). With a nil m it returns s
// unchanged.
func InstrumentStore(s funnel.Store, m *Metrics) funnel.Store {
	if m == nil {
		return s
	}
	return &Store{inner: s, m: m}
}

// Store is a funnel.Store that records the latency and the errors of the
// store it wraps. Build one with InstrumentStore.
type Store struct {
	inner funnel.Store
	m     *Metrics
}

var _ funnel.Store = (*Store)(nil)

// Do calls the wrapped store's Do.
func (s *Store) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	start := time.Now()
	err := s.inner.Do(ctx, ops, res)
	fallback := false
	if err == nil && len(ops) > 0 && len(res) > 0 {
		fallback = res[0].Fallback
	}
	op := opDo
	if len(ops) == 1 && ops[0].Kind == funnel.OpTake && ops[0].Limit.Algorithm == funnel.GCRA && ops[0].Limit.Ban == 0 {
		op = opThrottle
	}
	s.m.done(op, start, err, fallback)
	return err
}

// Reset calls the wrapped store's Reset.
func (s *Store) Reset(ctx context.Context, key string) (bool, error) {
	start := time.Now()
	ok, err := s.inner.Reset(ctx, key)
	s.m.done(opReset, start, err, false)
	return ok, err
}

// TTL calls the wrapped store's TTL.
func (s *Store) TTL(ctx context.Context, key string) (time.Duration, bool, error) {
	start := time.Now()
	d, ok, err := s.inner.TTL(ctx, key)
	s.m.done(opTTL, start, err, false)
	return d, ok, err
}

// Bans calls the wrapped store's Bans.
func (s *Store) Bans(ctx context.Context) ([]funnel.Ban, error) {
	start := time.Now()
	b, err := s.inner.Bans(ctx)
	s.m.done(opBans, start, err, false)
	return b, err
}

// Unban calls the wrapped store's Unban.
func (s *Store) Unban(ctx context.Context, key string) (bool, error) {
	start := time.Now()
	ok, err := s.inner.Unban(ctx, key)
	s.m.done(opUnban, start, err, false)
	return ok, err
}

// NonBlocking reports whether the wrapped store says that its calls never
// wait (see resp.NonBlockingStore); recording metrics does not wait.
func (s *Store) NonBlocking() bool { return funnel.NonBlockingOf(s.inner) }

// Keys returns the keys the wrapped store holds, when it counts them
// (funnel.KeyCounter).
func (s *Store) Keys() (int, bool) { return funnel.KeysOf(s.inner) }

// Evictions returns the keys the wrapped store evicted
// (funnel.EvictionCounter).
func (s *Store) Evictions() uint64 { return funnel.EvictionsOf(s.inner) }

// Group returns the wrapped store's group of key when it has groups
// (funnel.Grouper), else 0: keys of one call go together.
func (s *Store) Group(key string) int {
	return funnel.GroupOf(s.inner, key)
}

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() funnel.Store { return s.inner }
