package rls

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/funnelrl/funnel"
)

// refundTimeout bounds the refunds of a request refused by one group of
// its keys, which are made even when the request's context has ended.
const refundTimeout = 2 * time.Second

// allowAll decides reqs all-or-nothing, as funnel.Limiter.AllowAll does:
// in one call when the store can decide them together, else, when the
// store says which keys go together (funnel.Grouper: Redis Cluster's hash
// slots), group by group (see allowGroups).
func (s *Server) allowAll(ctx context.Context, reqs []funnel.Request) (funnel.MultiResult, error) {
	m, err := s.lim.AllowAll(ctx, reqs)
	if err == nil || !errors.Is(err, funnel.ErrCrossSlot) {
		return m, err
	}
	g, ok := s.lim.Store().(funnel.Grouper)
	if !ok {
		return m, err
	}
	return s.allowGroups(ctx, g, reqs)
}

// allowGroups decides reqs, whose keys are of several groups of g, with
// one AllowAll per group, the groups at once (on Redis Cluster, each on
// its own node). Each group is all-or-nothing, atomically. When every
// group admits, every key is charged. When a group refuses or fails, the
// groups that admitted are refunded, each key alone (see refundGroup), so
// that in the end nothing is charged, as AllowAll promises; but between
// the charge and the refund another request may find the charge and be
// refused for it. The result is AllowAll's: a refunded key reports the
// state its refund leaves, Allowed. A group's error, after the refunds,
// is the error of the whole.
func (s *Server) allowGroups(ctx context.Context, g funnel.Grouper, reqs []funnel.Request) (funnel.MultiResult, error) {
	groups := groupOf(g, reqs)
	type outcome struct {
		m   funnel.MultiResult
		err error
	}
	outs := make([]outcome, len(groups))
	each(len(groups), func(i int) {
		sub := make([]funnel.Request, len(groups[i]))
		for j, k := range groups[i] {
			sub[j] = reqs[k]
		}
		outs[i].m, outs[i].err = s.lim.AllowAll(ctx, sub)
	})
	m := funnel.MultiResult{Allowed: true, Results: make([]funnel.Result, len(reqs)), Refused: -1}
	var err error
	for i, idx := range groups {
		if outs[i].err != nil {
			m.Allowed, err = false, errors.Join(err, outs[i].err)
			continue
		}
		m.Allowed = m.Allowed && outs[i].m.Allowed
		for j, k := range idx {
			m.Results[k] = outs[i].m.Results[j]
		}
	}
	if !m.Allowed {
		each(len(groups), func(i int) {
			if outs[i].err == nil && outs[i].m.Allowed {
				s.refundGroup(ctx, reqs, groups[i], m.Results)
			}
		})
	}
	if err != nil {
		return funnel.MultiResult{}, err
	}
	for i, r := range m.Results {
		if !r.Allowed {
			if m.Refused < 0 {
				m.Refused = i
			}
			m.RetryAfter = max(m.RetryAfter, r.RetryAfter)
		}
	}
	return m, nil
}

// refundGroup gives back the charges of the keys idx of reqs, which a
// group admitted, one refund per key, on a context that keeps ctx's values
// but not its end, and writes into res the state each refund leaves. A key
// that was only peeked (0 units) or that a fallback decided (nothing was
// charged) is not refunded. A refund that fails is logged, and its charge
// stays: the key then refuses more, never admits more, until the charge
// has leaked away.
func (s *Server) refundGroup(ctx context.Context, reqs []funnel.Request, idx []int, res []funnel.Result) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
	defer cancel()
	for _, k := range idx {
		r := reqs[k]
		if r.N == 0 || res[k].Fallback {
			continue
		}
		c, err := r.Limit.Check()
		if err == nil {
			var out [1]funnel.Result
			err = s.lim.Do(rctx, []funnel.Op{{Kind: funnel.OpRefund, Key: r.Key, Limit: c, N: r.N}}, out[:])
			if err == nil {
				res[k] = out[0]
				continue
			}
		}
		s.warnDown.Do(func(held int64) {
			s.log.Warn("rls: a charge of a refused request could not be refunded", "err", err, "held_back", held)
		})
	}
}

// groupOf splits the indexes of reqs by the group of their keys, in the
// order of their first key; a key of group -1 is a group of its own.
func groupOf(g funnel.Grouper, reqs []funnel.Request) [][]int {
	var groups [][]int
	var ids []int
	for k, r := range reqs {
		id := g.Group(r.Key)
		j := -1
		if id >= 0 {
			for i, other := range ids {
				if other == id {
					j = i
					break
				}
			}
		}
		if j < 0 {
			groups, ids = append(groups, nil), append(ids, id)
			j = len(groups) - 1
		}
		groups[j] = append(groups[j], k)
	}
	return groups
}

// each calls f(0) … f(n-1) at once, f(0) on this goroutine, and returns
// when all have returned.
func each(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	if n > 0 {
		f(0)
	}
	wg.Wait()
}
