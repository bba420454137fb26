package daemon

import (
	"github.com/funnelrl/funnel/leasestore"
	"github.com/funnelrl/funnel/metrics"
	"github.com/funnelrl/funnel/redisstore"
)

// openLeases puts a leasing store in front of the Redis store s: plain
// funnel decisions spend units leased from Redis, from memory.
func (d *Daemon) openLeases(s *redisstore.Store) error {
	ls := leasestore.New(s, leasestore.Options{
		Lifetime: d.cfg.Lease,
		MaxLease: d.cfg.LeaseMax,
		Shares:   d.cfg.LeaseShares,
		FailOpen: d.cfg.FailOpen,
		Logger:   d.log,
	})
	closeRedis := d.close
	d.store = metrics.InstrumentStore(ls, d.metrics)
	d.close = func() error {
		ls.Close()
		return closeRedis()
	}
	d.log.Info("leasing the Redis store's funnels", "lifetime", d.cfg.Lease, "max_units", d.cfg.LeaseMax, "shares", d.cfg.LeaseShares)
	return d.metrics.Leases(func() metrics.LeaseStats {
		s := ls.Stats()
		return metrics.LeaseStats{
			Decisions: s.Decisions, Local: s.Local, LocalRefusals: s.LocalRefusals,
			Calls: s.Calls, Prefetches: s.Prefetches, Failed: s.Failed,
			Leased: s.Leased, Spent: s.Spent, Forfeited: s.Forfeited, GivenBack: s.GivenBack,
			Fallbacks: s.Fallbacks,
		}
	})
}
