package redisstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// runner runs the GCRA script through one Redis client library.
type runner interface {
	// run runs the script on key with args (EVALSHA, then EVAL on
	// NOSCRIPT) and returns the status and d of its reply. A WRONGTYPE error
	// reply is returned wrapping ErrWrongType.
	run(ctx context.Context, key string, args []string) (status, d int64, err error)
	// failed is called after a failure that may mean the cluster's
	// topology changed.
	failed()
}

// goRedisRunner runs the script through a go-redis client.
type goRedisRunner struct{ c Client }

func (g goRedisRunner) run(ctx context.Context, key string, args []string) (int64, int64, error) {
	argv := make([]any, len(args))
	for i, a := range args {
		argv[i] = a
	}
	v, err := gcraScript.Run(ctx, g.c, []string{key}, argv...).Result()
	if err != nil {
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			return 0, 0, wrongType(err.Error())
		}
		return 0, 0, err
	}
	switch v := v.(type) {
	case int64:
		return decodeInt(v)
	case []any:
		if len(v) == 3 {
			status, ok1 := v[0].(int64)
			sec, ok2 := v[1].(int64)
			nsec, ok3 := v[2].(int64)
			if ok1 && ok2 && ok3 {
				return decodeArray(status, sec, nsec)
			}
		}
	}
	return 0, 0, fmt.Errorf("%w: script reply %v", errInternal, v)
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

// rueidisScript is gcraScript for rueidis.
var rueidisScript = rueidis.NewLuaScript(gcraSource)

// rueidisRunner runs the script through a rueidis client, which pipelines
// the commands of concurrent callers on shared connections by itself.
type rueidisRunner struct{ c rueidis.Client }

func (r rueidisRunner) run(ctx context.Context, key string, args []string) (int64, int64, error) {
	res := rueidisScript.Exec(ctx, r.c, []string{key}, args)
	if err := res.Error(); err != nil {
		if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "WRONGTYPE") {
			return 0, 0, wrongType(re.Error())
		}
		return 0, 0, err
	}
	if v, err := res.AsInt64(); err == nil {
		return decodeInt(v)
	}
	if a, err := res.AsIntSlice(); err == nil && len(a) == 3 {
		return decodeArray(a[0], a[1], a[2])
	}
	return 0, 0, fmt.Errorf("%w: script reply %v", errInternal, res.String())
}

// failed does nothing: rueidis refreshes a cluster's topology by itself when
// a node fails.
func (r rueidisRunner) failed() {}

// NewRueidis returns a store that keeps its state in Redis through client, a
// rueidis client. Closing the store does not close client.
//
// rueidis pipelines the commands of concurrent callers on a few shared
// connections (auto-pipelining): under concurrency, Redis and the client
// then spend much less CPU per decision than with go-redis, which sends
// each command on a connection of its own.
func NewRueidis(client rueidis.Client, opts Options) *Store {
	return newStore(rueidisRunner{client}, opts)
}
