package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// grouping says which keys one script call may decide together.
type grouping int

const (
	// groupAll: any keys (a single Redis, or Sentinel's master).
	groupAll grouping = iota
	// groupSlot: keys of one hash slot (Redis Cluster).
	groupSlot
	// groupNone: one key per call (a Ring shards by its own hash).
	groupNone
)

// script is one Lua script for both client libraries.
type script struct {
	goRedis *redis.Script
	rueidis *rueidis.Lua
	// ti is the index in the arguments of the time that now.lua reads,
	// where a call carries its deadline (see stampDeadline); -1 when the
	// script takes none.
	ti int
	// module is the command of Funnel's Redis module that does what the
	// script does, from the same arguments (see module.go), or "";
	// moduleIndex is its index in moduleCommands.
	module      string
	moduleIndex int
}

// newScript returns a script that takes no deadline.
func newScript(src string) *script {
	return &script{goRedis: redis.NewScript(src), rueidis: rueidis.NewLuaScript(src), ti: -1}
}

// newTimedScript returns a script whose time arguments (now.lua's, at
// index ti of the arguments, from 0) carry each call's deadline.
func newTimedScript(src string, ti int) *script {
	sc := newScript(src)
	sc.ti = ti
	return sc
}

// withModule returns sc, done by the module's command moduleCommands[i]
// where Redis has loaded it (see module.go).
func (sc *script) withModule(i int) *script {
	sc.module, sc.moduleIndex = moduleCommands[i].name, i
	return sc
}

// gcraLua is the funnel's script (see gcraScript); ARGV[2] is its time.
// The module's FUNNEL.GCRA does the same where Redis has loaded it.
var gcraLua = (&script{goRedis: gcraScript, rueidis: rueidis.NewLuaScript(gcraSource), ti: 1}).withModule(0)

// runner runs the store's scripts through one Redis client library.
type runner interface {
	// eval runs sc on keys with args (EVALSHA, then EVAL on NOSCRIPT) and
	// returns its integer reply, or the integers of its array reply, whose
	// last element may be a string, returned as its bytes, one integer
	// each (the limit that a settle answers: see record.lua). A WRONGTYPE
	// error reply is returned wrapping ErrWrongType.
	eval(ctx context.Context, sc *script, keys, args []string) ([]int64, error)
	// command sends the module command name with its version, the number
	// of keys, the keys and args (see module.go), and returns its reply as
	// eval does.
	command(ctx context.Context, name string, keys, args []string) ([]int64, error)
	// failed is called after a failure that may mean the cluster's
	// topology changed.
	failed()
	// grouping says which keys a call may decide together.
	grouping() grouping
}

// goRedisRunner runs the script through a go-redis client.
type goRedisRunner struct{ c Client }

func (g goRedisRunner) eval(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	argv := make([]any, len(args))
	for i, a := range args {
		argv[i] = a
	}
	v, err := sc.goRedis.Run(ctx, g.c, keys, argv...).Result()
	if err != nil {
		return nil, scriptError(err)
	}
	return replyInts(v)
}

// replyInts returns a script's or the module's reply, as go-redis reads
// it, as runner.eval returns it.
func replyInts(v any) ([]int64, error) {
	switch v := v.(type) {
	case int64:
		return []int64{v}, nil
	case []any:
		out := make([]int64, len(v))
		for i, e := range v {
			n, ok := e.(int64)
			if !ok {
				if b, ok := e.(string); ok && i == len(v)-1 {
					return appendBytes(out[:i], b), nil
				}
				return nil, fmt.Errorf("%w: script reply %v", errInternal, v)
			}
			out[i] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: script reply %v", errInternal, v)
}

// scriptError maps the error replies that a script gives on purpose:
// WRONGTYPE (wrapping ErrWrongType), a call that started after its deadline
// (errLate), and the family script's clock check (errClock). Others are the
// client's errors, as they are.
func scriptError(err error) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "WRONGTYPE"):
		return wrongType(msg)
	case isLate(msg):
		return errLate
	case isClockStep(msg):
		return errClockStep
	case strings.Contains(msg, "is not near Redis time"):
		return errClock
	}
	return err
}

// stateReloader is a cluster client (*redis.ClusterClient): it keeps a map
// of which node serves which slot.
type stateReloader interface {
	ReloadState(ctx context.Context)
}

// failed asks a cluster client to read its map of slots again. go-redis
// reloads it by itself only on a MOVED reply or when it is 10 s old, and a
// dead master answers nothing: without this, decisions on its slots would
// resume up to 10 s after a replica took over. Reloads run in the
// background, one at a time, at most one per 200 ms.
func (g goRedisRunner) failed() {
	if r, ok := g.c.(stateReloader); ok {
		r.ReloadState(context.Background())
	}
}

func (g goRedisRunner) grouping() grouping {
	switch g.c.(type) {
	case *redis.ClusterClient:
		return groupSlot
	case *redis.Client:
		return groupAll
	}
	return groupNone // a Ring, or a client we do not know
}

// rueidisRunner runs the scripts through a rueidis client, which pipelines
// the commands of concurrent callers on shared connections by itself.
type rueidisRunner struct{ c rueidis.Client }

func (r rueidisRunner) eval(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	return resultInts(sc.rueidis.Exec(ctx, r.c, keys, args))
}

// resultInts returns a script's or the module's reply, as rueidis reads
// it, as runner.eval returns it.
func resultInts(res rueidis.RedisResult) ([]int64, error) {
	if err := res.Error(); err != nil {
		return nil, scriptError(err)
	}
	if v, err := res.AsInt64(); err == nil {
		return []int64{v}, nil
	}
	if a, err := res.AsIntSlice(); err == nil {
		return a, nil
	}
	if a, err := res.ToArray(); err == nil && len(a) > 0 {
		if b, err := a[len(a)-1].ToString(); err == nil {
			out := make([]int64, len(a)-1, len(a)-1+len(b))
			for i := range out {
				if out[i], err = a[i].AsInt64(); err != nil {
					return nil, fmt.Errorf("%w: script reply %v", errInternal, res.String())
				}
			}
			return appendBytes(out, b), nil
		}
	}
	return nil, fmt.Errorf("%w: script reply %v", errInternal, res.String())
}

// appendBytes appends the bytes of b to out, one integer each.
func appendBytes(out []int64, b string) []int64 {
	out = slices.Grow(out, len(b))
	for i := range len(b) {
		out = append(out, int64(b[i]))
	}
	return out
}

// failed does nothing: rueidis refreshes a cluster's topology by itself when
// a node fails.
func (r rueidisRunner) failed() {}

func (r rueidisRunner) grouping() grouping {
	switch r.c.Mode() {
	case rueidis.ClientModeCluster:
		return groupSlot
	case rueidis.ClientModeStandalone, rueidis.ClientModeSentinel:
		return groupAll
	}
	return groupNone
}

// NewRueidis returns a store that keeps its state in Redis through client, a
// rueidis client. Closing the store does not close client.
//
// rueidis pipelines the commands of concurrent callers on a few shared
// connections (auto-pipelining), so that Redis and the client spend less CPU
// per command than with go-redis, which sends each command on a connection
// of its own.
func NewRueidis(client rueidis.Client, opts Options) *Store {
	return newStore(rueidisRunner{client}, opts)
}
