package funnel_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

// TestWaitCancelledRefunds: a Wait whose context ends before its delay has
// passed gives its units back; a Peek shows them there again.
func TestWaitCancelledRefunds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var now atomic.Int64
		now.Store(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano())
		s := memstore.New(memstore.Options{Now: now.Load})
		defer s.Close()
		lim := funnel.New(s)
		ctx := context.Background()
		// One unit each 100 ms, 4 more queued; the first passes at once.
		limit := funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 4}
		if r, err := lim.Wait(ctx, "k", limit, 1); err != nil || !r.Allowed || r.Delay != 0 {
			t.Fatalf("first: %+v %v", r, err)
		}
		before, err := lim.Peek(ctx, "k", limit)
		if err != nil {
			t.Fatal(err)
		}

		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		var got funnel.Result
		go func() {
			var err error
			got, err = lim.Wait(wctx, "k", limit, 2)
			done <- err
		}()
		synctest.Wait() // Wait is charged and sleeps its delay
		if r, err := lim.Peek(ctx, "k", limit); err != nil || r.Remaining != before.Remaining-2 {
			t.Fatalf("while waiting: remaining %d, want %d (%v)", r.Remaining, before.Remaining-2, err)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait: %v, want context.Canceled", err)
		}
		if got != (funnel.Result{}) {
			t.Errorf("Wait returned %+v, want the zero Result", got)
		}
		after, err := lim.Peek(ctx, "k", limit)
		if err != nil || after != before {
			t.Errorf("after the cancelled Wait: %+v %v\nwant %+v", after, err, before)
		}
	})
}

// refundStore is a Store that answers as its do field says.
type refundStore struct {
	do func(ctx context.Context, ops []funnel.Op, res []funnel.Result) error
}

func (f *refundStore) Reset(context.Context, string) (bool, error) { return false, nil }
func (f *refundStore) TTL(context.Context, string) (time.Duration, bool, error) {
	return 0, false, nil
}
func (f *refundStore) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	return f.do(ctx, ops, res)
}
func (f *refundStore) Bans(context.Context) ([]funnel.Ban, error)  { return nil, nil }
func (f *refundStore) Unban(context.Context, string) (bool, error) { return false, nil }

// TestWaitRefundFails: a Wait cancelled before its delay whose refund fails
// returns an error that wraps the context's and the store's, and the
// refund was asked on a context that had not ended, with ctx's values.
func TestWaitRefundFails(t *testing.T) {
	type ctxKey struct{}
	errDown := fmt.Errorf("store: connection refused: %w", funnel.ErrUnavailable)
	var refunds atomic.Int32
	st := &refundStore{do: func(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
		switch ops[0].Kind {
		case funnel.OpTake:
			res[0] = funnel.Result{Allowed: true, Limit: 5, Remaining: 2, Delay: time.Hour}
			return nil
		default:
			refunds.Add(1)
			_, bounded := ctx.Deadline()
			if ctx.Err() != nil || !bounded || ctx.Value(ctxKey{}) != "v" || ops[0].N != 3 {
				t.Errorf("refund of %d units on a context with err %v, deadline %v, value %v", ops[0].N, ctx.Err(), bounded, ctx.Value(ctxKey{}))
			}
			return errDown
		}
	}}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	cancel()
	limit := funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 4}
	r, err := funnel.New(st).Wait(ctx, "k", limit, 3)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, funnel.ErrUnavailable) {
		t.Errorf("Wait: %v, want both the context's and the store's error", err)
	}
	if r != (funnel.Result{}) {
		t.Errorf("Wait returned %+v, want the zero Result", r)
	}
	if refunds.Load() != 1 {
		t.Errorf("%d refunds, want 1", refunds.Load())
	}
}
