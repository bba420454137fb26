package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Batching. When several decisions wait for Redis at once, the store decides
// them in one script call: Redis then reads the time, starts the script,
// reads the keys (one MGET) and answers once per batch rather than once per
// decision, writes a key that several decisions change once, and the client
// sends one command. A decision that finds no other in flight is sent at once
// from its caller's goroutine, so batching adds no latency when the store is
// idle. Under load, decisions queue while batches are in flight, and the next
// batch takes up to maxBatch of them, in order of arrival. Three batches in
// flight keep one Redis busy (it runs one while the others travel: with two,
// 32 callers on one CPU left Redis idle a third of the time, and with three
// they made 1.1 to 1.5 times as many decisions), and the fewer batches, the
// larger each one and the less CPU each decision costs Redis and the client:
// a fourth goes out only when a full batch waits (Redis is far, or slower
// than the callers), up to maxActive. On a Redis Cluster a
// batch holds keys of one hash slot only.

const (
	// maxBatch is the most decisions one script call makes.
	maxBatch = 64
	// pipelined is the number of batches in flight at once for one group
	// (all keys, or one cluster slot) while no full batch waits.
	pipelined = 3
	// maxActive is the most batches in flight at once for one group.
	maxActive = 8
	// minStart is the number of waiting decisions for which one more batch
	// goes out while others are in flight.
	minStart = 8
)

// errQueueTimeout is the error of a decision that waited longer than the
// store's timeout for a batch to take it.
var errQueueTimeout = errors.New("redisstore: timed out waiting for Redis to take the decision")

// req is one decision: a funnel's take (gcra.lua), or a window's
// (window.lua) when alg is set.
type req struct {
	key       string // with the store's prefix
	cost, tol int64  // a funnel's, in ns
	// a window's: "f" (fixed) or "s" (sliding), the quantity, the count
	// and the period in ms
	alg              string
	q, count, period int64
}

// reply is the script's answer to a req: for a funnel, status and d (see
// gcra.lua), or err (wraps ErrWrongType); for a window, Redis's now in ns,
// code and prev (see window.lua).
type reply struct {
	status, d       int64
	now, code, prev int64
	err             error
}

// call is one decision waiting in a batch.
type call struct {
	req
	reply
	queued time.Time
	state  atomic.Int32 // callWaiting, callDone or callAbandoned
	done   chan struct{}
}

const (
	callWaiting int32 = iota
	callDone
	callAbandoned // its caller's context ended first
)

// group is the queue of decisions that may share a batch.
type group struct {
	b      *batcher
	queue  []*call
	active int // batches being sent, including one sent inline
}

// batcher holds the groups of a store's decisions of one script: the
// funnels' (gcra.lua) or the windows' (window.lua).
type batcher struct {
	mu     sync.Mutex
	groups map[uint16]*group
}

// decide applies one throttle decision (cost and tolerance in ns) to key and
// returns the script's status and d for it.
func (s *Store) decide(ctx context.Context, key string, cost, tol int64) (status, d int64, err error) {
	r, err := s.run(ctx, &s.batches, req{key: s.prefix + key, cost: cost, tol: tol})
	if err == nil {
		err = r.err
	}
	return r.status, r.d, err
}

// decideWindow applies one take of q units of key under a window (alg "f"
// or "s", count, period in ms) and returns Redis's now in ns and the
// script's code and prev for it (see window.lua).
func (s *Store) decideWindow(ctx context.Context, key, alg string, q, count, period int64) (now, code, prev int64, err error) {
	r, err := s.run(ctx, &s.wbatches, req{key: s.prefix + key, alg: alg, q: q, count: count, period: period})
	return r.now, r.code, r.prev, err
}

// run decides r, in a batch of b's when others are in flight.
func (s *Store) run(ctx context.Context, b *batcher, r req) (reply, error) {
	mode := s.runner.grouping()
	if mode == groupNone {
		return s.sendOne(ctx, r)
	}
	var slot uint16
	if mode == groupSlot {
		slot = keySlot(r.key)
	}
	b.mu.Lock()
	g := b.groups[slot]
	if g == nil {
		g = &group{b: b}
		b.groups[slot] = g
	}
	if g.active == 0 {
		// Idle: send it from here, under the caller's own context.
		g.active = 1
		b.mu.Unlock()
		rep, err := s.sendOne(ctx, r)
		b.mu.Lock()
		if len(g.queue) > 0 {
			go s.flush(g) // keeps the active slot for the decisions that came meanwhile
		} else {
			g.active--
		}
		b.mu.Unlock()
		return rep, err
	}
	c := &call{req: r, queued: time.Now(), done: make(chan struct{})}
	g.queue = append(g.queue, c)
	// Another batch goes out at once only when enough decisions wait for
	// it; a few wait for a batch in flight to come back, and go together.
	n := len(g.queue)
	start := n >= minStart && (g.active < pipelined || (g.active < maxActive && n >= maxBatch))
	if start {
		g.active++
	}
	b.mu.Unlock()
	if start {
		go s.flush(g)
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callAbandoned) {
			return reply{}, fmt.Errorf("redisstore: %w", ctx.Err())
		}
		<-c.done // its answer is being delivered
	}
	return c.reply, c.err
}

// flush sends batches from g's queue until it is empty.
func (s *Store) flush(g *group) {
	b := g.b
	for {
		b.mu.Lock()
		var batch []*call
		now := time.Now()
		n := 0
		for ; n < len(g.queue) && len(batch) < maxBatch; n++ {
			c := g.queue[n]
			switch {
			case c.state.Load() != callWaiting:
			case s.timeout > 0 && now.Sub(c.queued) > s.timeout:
				// Redis is too slow for the load: answer with the
				// fallback rather than let the queue grow.
				c.err = errQueueTimeout
				c.deliver()
			default:
				batch = append(batch, c)
			}
		}
		clear(g.queue[:n]) // the backing array must not keep them alive
		g.queue = g.queue[n:]
		if len(g.queue) == 0 {
			g.queue = nil // let the backing array go
		}
		if len(batch) == 0 {
			g.active--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		s.send(batch)
		// Let the callers just answered run before the next batch leaves:
		// most will queue another decision at once, and go in it. (With
		// GOMAXPROCS=1 they could not run before this goroutine blocks, and
		// the next batches would be small.)
		runtime.Gosched()
	}
}

// sendOne decides one key in a script call of its own.
func (s *Store) sendOne(ctx context.Context, r req) (reply, error) {
	if r.alg != "" {
		args, err := s.args("", 0)
		if err != nil {
			return reply{}, err
		}
		v, err := s.evalTimed(ctx, windowScript, []string{r.key}, windowArgs(args[1:], r))
		if err != nil {
			return reply{}, err
		}
		out, err := decodeWindows(v, 1)
		if err != nil {
			return reply{}, err
		}
		return out[0], nil
	}
	args, err := s.args("t", 1)
	if err != nil {
		return reply{}, err
	}
	// "1536" = 6*256: the limbs are ARGV[6..9] (see throttleArgs).
	args = appendLimbs(appendLimbs(append(args, "1536"), r.cost), r.tol)
	v, err := s.evalTimed(ctx, gcraLua, []string{r.key}, args)
	if err != nil {
		return reply{}, err
	}
	answers, err := decodeAnswers(v, 1)
	if err != nil {
		return reply{}, err
	}
	return answers[0], nil
}

// windowArgs appends r's three arguments of window.lua to args: the
// quantity, the count and the period, negative for a sliding window.
func windowArgs(args []string, r req) []string {
	p := r.period
	if r.alg == "s" {
		p = -p
	}
	return append(args, limb(r.q), limb(r.count), limb(p))
}

// decodeWindows decodes window.lua's answers for n requests.
func decodeWindows(v []int64, n int) ([]reply, error) {
	if n == 1 && len(v) == 3 {
		// a lone fixed window's, without its previous count
		v = append(v[:3:3], 0)
	}
	if len(v) != 2+2*n || v[0] < 0 || v[0] > math.MaxInt64/int64(time.Second)-1 || v[1] < 0 || v[1] >= 1e9 {
		return nil, fmt.Errorf("%w: window script reply %v for %d keys", errInternal, v, n)
	}
	now := v[0]*1e9 + v[1]
	out := make([]reply, n)
	for i := range out {
		code, prev := v[2+2*i], v[3+2*i]
		if code < -1 || prev < 0 {
			return nil, fmt.Errorf("%w: window script reply %v for %d keys", errInternal, v, n)
		}
		out[i] = reply{now: now, code: code, prev: prev}
	}
	return out, nil
}

// send decides a batch in one script call, and hands each call its answer.
// The call is bounded by the store's timeout from when the batch's oldest
// decision was queued (the batch is in order of arrival), so that no
// decision waits longer than the timeout in all, queue and call together.
func (s *Store) send(batch []*call) {
	if len(batch) > 1 {
		s.batched.Add(int64(len(batch)))
	}
	sc, keys, args, err := s.batchCall(batch)
	if err == nil {
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if s.timeout > 0 {
			ctx, cancel = context.WithDeadline(ctx, batch[0].queued.Add(s.timeout))
		}
		var v []int64
		v, err = s.evalBy(ctx, sc, keys, args)
		cancel()
		if err == nil {
			decode := decodeAnswers
			if sc == windowScript {
				decode = decodeWindows
			}
			var out []reply
			if out, err = decode(v, len(batch)); err == nil {
				for i, c := range batch {
					c.reply = out[i]
					c.deliver()
				}
				return
			}
		}
	}
	for _, c := range batch {
		c.err = err
		c.deliver()
	}
}

// batchCall returns the script of batch's call, a funnels' (gcra.lua) or a
// windows' (window.lua), its keys and its arguments.
func (s *Store) batchCall(batch []*call) (*script, []string, []string, error) {
	keys := make([]string, len(batch))
	if batch[0].alg != "" {
		args, err := s.args("", 0)
		if err != nil {
			return nil, nil, nil, err
		}
		args = slices.Grow(args[1:], 3*len(batch))
		for i, c := range batch {
			keys[i] = c.key
			args = windowArgs(args, c.req)
		}
		return windowScript, keys, args, nil
	}
	args, err := s.args("t", len(batch))
	if err != nil {
		return nil, nil, nil, err
	}
	keys, args = throttleArgs(batch, keys, args)
	return gcraLua, keys, args, nil
}

// The script's argument for a request is a*256 + l*128 + f, with f the index
// of the first request on its key (at most maxBatch).
const _ = uint(127 - maxBatch)

// throttleArgs fills keys and appends to args, the script's first four
// arguments, the arguments of batch's requests (see gcra.lua): for each
// request, "" if its limit and quantity are those of the request before and
// its key comes once in the batch, else where its limbs are, where the first
// request on its key is and whether it is the last one on it; then the limbs.
// A batch of several requests under one limit and quantity, each on a key
// of its own (the commonest under load), has none of them: its first
// argument is "u" rather than "t", and its limbs follow at once.
func throttleArgs(batch []*call, keys, args []string) ([]string, []string) {
	// The first and last request (from 1) on each key.
	type run struct{ first, last int }
	runs := make(map[string]run, len(batch))
	uniform := len(batch) > 1
	for i, c := range batch {
		keys[i] = c.key
		r, ok := runs[c.key]
		if !ok {
			r.first = i + 1
		}
		r.last = i + 1
		runs[c.key] = r
		if c.cost != batch[0].cost || c.tol != batch[0].tol {
			uniform = false
		}
	}
	if uniform && len(runs) == len(batch) {
		args[0] = "u"
		return keys, appendLimbs(appendLimbs(args, batch[0].cost), batch[0].tol)
	}
	first := len(args)
	args = slices.Grow(args, 5*len(batch))[:first+len(batch)]
	for i, c := range batch {
		m := 0
		if r := runs[c.key]; r.first != r.last {
			m = r.first
			if r.last == i+1 {
				m += 128
			}
		}
		if i == 0 || c.cost != batch[i-1].cost || c.tol != batch[i-1].tol {
			m += (len(args) + 1) * 256
			args = appendLimbs(appendLimbs(args, c.cost), c.tol)
		}
		if m == 0 {
			args[first+i] = ""
		} else {
			args[first+i] = strconv.Itoa(m)
		}
	}
	return keys, args
}

// deliver wakes c's caller, unless it gave up.
func (c *call) deliver() {
	if c.state.CompareAndSwap(callWaiting, callDone) {
		close(c.done)
	}
}

// decodeAnswers decodes gcra.lua's answers for n keys: status and d, or
// err (wraps ErrWrongType).
func decodeAnswers(v []int64, n int) ([]reply, error) {
	out := make([]reply, 0, n)
	for i := 0; i < len(v); i++ {
		switch x := v[i]; {
		case x >= 0:
			out = append(out, reply{status: x & 3, d: x >> 2})
		case x >= -3 && i+2 < len(v):
			status, d, err := decodeLimbs(-1-x, v[i+1], v[i+2])
			if err != nil {
				return nil, err
			}
			out = append(out, reply{status: status, d: d})
			i += 2
		case x == -10:
			out = append(out, reply{err: wrongType("WRONGTYPE the value is not a decimal number")})
		case x == -11:
			out = append(out, reply{err: wrongType("WRONGTYPE the value is beyond int64 nanoseconds")})
		case x == -12:
			out = append(out, reply{err: wrongType("WRONGTYPE the value is not a string")})
		default:
			return nil, fmt.Errorf("%w: script reply %v", errInternal, v)
		}
	}
	if len(out) != n {
		return nil, fmt.Errorf("%w: script reply %v for %d keys", errInternal, v, n)
	}
	return out, nil
}
