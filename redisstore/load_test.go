package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/storetest"
)

// load is 8 goroutines asking s for key under p until halted, as the
// failover tests run them while a master dies.
type load struct {
	ok, admitted, fallback, errs atomic.Int64
	resumedAt                    atomic.Int64 // time of the first decision after a fallback
	stop                         chan struct{}
	once                         sync.Once
	wg                           sync.WaitGroup
}

func startLoad(t *testing.T, s *redisstore.Store, key string, p gcra.Params) *load {
	l := &load{stop: make(chan struct{})}
	ctx := context.Background()
	for w := 0; w < 8; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; i < 1_000_000; i++ { // bounded; stop ends it sooner
				select {
				case <-l.stop:
					return
				default:
				}
				r, err := storetest.Throttle(ctx, s, key, p, 1)
				switch {
				case err != nil:
					if l.errs.Add(1) == 1 {
						t.Errorf("Throttle: %v", err)
					}
				case r.Fallback:
					l.fallback.Add(1)
				default:
					l.ok.Add(1)
					if l.fallback.Load() > 0 && l.resumedAt.Load() == 0 {
						l.resumedAt.CompareAndSwap(0, time.Now().UnixNano())
					}
					if r.Allowed {
						l.admitted.Add(1)
					}
				}
			}
		}()
	}
	return l
}

// halt stops the load and waits for it; it may be called more than once.
func (l *load) halt() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}
