package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Funnel's Redis module.
//
// A Redis that may load modules can load Funnel's (module/funnel.c in this
// repository; `make module` builds it): its FUNNEL.GCRA decides the
// funnel's requests as gcra.lua does, its FUNNEL.TAKES takes under
// several limits at once as takes.lua does, its FUNNEL.WINDOW fixed and
// sliding windows' takes as window.lua does, its FUNNEL.CONC a concurrency
// limit's acquires and releases as conc.lua does, and its FUNNEL.LOG the
// takes on a packed sliding log as log.lua does, from the same arguments,
// with the same replies, on the same keys, for a fraction of what the
// scripts cost Redis (the README's benchmarks say how much). A
// store uses a command where its script would go, when the Redis it talks
// to has it, and the script otherwise, each command on its own (a module
// of an older release may lack one):
//
//   - the first call tries the command. An answer means the module is
//     there, and later calls use it.
//   - An "unknown command" error, the error of a module that speaks
//     another version of the arguments, or an ACL's NOPERM for the command
//     changes nothing in Redis: the call is made again through the script,
//     and the store uses the script for moduleRetry before it tries the
//     command again (a module loaded later, or a failover to a Redis that
//     has it, is taken up within that time): one call tries it, the others
//     keep to the script until it has its answer. A proxy that does not
//     pass the command on (Envoy's redis_proxy answers "unsupported
//     command") counts as a Redis without it. The store warns, once for
//     each command, of a module of another version or of a NOPERM, and
//     says once for each that Redis does not have it.
//
// On a Redis Cluster whose nodes do not all have it, the calls that reach
// a node without it send the store back to the script, for every node,
// until it tries again. Options.ScriptOnly keeps the store on the scripts.

// The module's commands, and moduleVersion the version of their arguments
// that this package speaks (see module/funnel.c).
const (
	moduleCommand = "FUNNEL.GCRA"
	takesCommand  = "FUNNEL.TAKES"
	windowCommand = "FUNNEL.WINDOW"
	concCommand   = "FUNNEL.CONC"
	logCommand    = "FUNNEL.LOG"
	moduleVersion = "1"
)

// moduleCommands indexes the module's commands in moduleState (a script's
// moduleIndex), and says what each decides, for the logs.
var moduleCommands = [...]struct{ name, decides string }{
	{moduleCommand, "funnel decisions"},
	{takesCommand, "decisions under several limits at once"},
	{windowCommand, "fixed and sliding window decisions"},
	{concCommand, "concurrency limits' acquires and releases"},
	{logCommand, "packed sliding logs' takes"},
}

// maxModuleKeys is the most keys a call of the module's commands takes
// (MAX_KEYS in module/funnel.c): more than a store sends.
const maxModuleKeys = 127

var (
	_ = uint(maxModuleKeys - maxOps)
	_ = uint(maxModuleKeys - maxBatch)
)

// moduleRetry is how long a store that found no module in Redis uses the
// script before it tries the module again.
const moduleRetry = time.Minute

// moduleState is what a store knows of the module.
type moduleState struct {
	// off: Options.ScriptOnly.
	off bool
	// cmds is what the store knows of each command (see moduleCommands).
	cmds [len(moduleCommands)]commandState
	// clientTold is set once the store said that its client sends no
	// command but scripts.
	clientTold atomic.Bool
}

// commandState is what a store knows of one of the module's commands.
type commandState struct {
	// absentUntil is this host's time (Unix ns) until which calls go
	// through the script: a call found no command that it could use. 0:
	// use the command.
	absentUntil atomic.Int64
	// present is set once the command answered.
	present atomic.Bool
	// warned is set once the store warned that it cannot use the command,
	// told once it said that Redis does not have it.
	warned, told atomic.Bool
}

// command returns what the store knows of sc's command.
func (m *moduleState) command(sc *script) *commandState { return &m.cmds[sc.moduleIndex] }

// useModule reports whether a call of sc should try the module, and the
// absentUntil it saw (or set: the call that takes a retry due sets the
// next, so that the others keep to the script while it tries).
func (s *Store) useModule(sc *script) (bool, int64) {
	if sc.module == "" || s.module.off {
		return false, 0
	}
	c := s.module.command(sc)
	until := c.absentUntil.Load()
	if until == 0 {
		return true, 0
	}
	now := time.Now().UnixNano()
	if now < until {
		return false, until
	}
	next := now + int64(moduleRetry)
	if !c.absentUntil.CompareAndSwap(until, next) {
		return false, until
	}
	return true, next
}

// moduleAnswered records that a call of sc that saw absentUntil at seen
// got an answer from the module (a decision, or a refusal of its own): a
// retry's call (seen not 0) ends the store's time on the script, unless
// another call found no command meanwhile; a call made while the command
// was in use leaves absentUntil as it finds it (a call to a node without
// it, in a cluster, may have set it meanwhile).
func (s *Store) moduleAnswered(sc *script, seen int64) {
	c := s.module.command(sc)
	if seen != 0 {
		if !c.absentUntil.CompareAndSwap(seen, 0) {
			return
		}
	} else if c.absentUntil.Load() != 0 {
		return
	}
	if !c.present.Load() && !c.present.Swap(true) {
		cmd := moduleCommands[sc.moduleIndex]
		s.log.Info("redisstore: Redis has loaded Funnel's module: " + cmd.decides + " go through " + cmd.name)
	}
}

// moduleMissing reports whether err says that the store cannot use the
// module: Redis's answer to a command it does not have, the module's to a
// version it does not speak, an ACL's NOPERM for the command, or a client
// that cannot send it. Each changed nothing.
func moduleMissing(err error) bool {
	if err == nil {
		return false
	}
	msg := strings.ToLower(strings.TrimPrefix(err.Error(), "ERR ")) // rueidis drops it
	return errors.Is(err, errNoCommand) || strings.HasPrefix(msg, "unknown command") ||
		strings.HasPrefix(msg, "unsupported command") || moduleWarning(err.Error())
}

// moduleWarning reports whether msg says that Redis has a module that the
// store cannot use, which a store warns of: one that speaks another version
// of its commands' arguments, or an ACL that does not let the store's user
// call one (grant it +funnel.gcra, +funnel.takes, +funnel.window,
// +funnel.conc and +funnel.log).
func moduleWarning(msg string) bool {
	msg = strings.TrimPrefix(msg, "ERR ")
	return strings.HasPrefix(msg, "funnel: version") ||
		(strings.HasPrefix(msg, "NOPERM") && strings.Contains(strings.ToLower(msg), "'funnel."))
}

// errNoCommand is the error of a go-redis client given to New that sends
// scripts only (a redis.Scripter without Process): it cannot send the
// module's command.
var errNoCommand = errors.New("redisstore: the client sends no command but scripts")

// moduleAbsent records that a call of sc found no command that it could
// use (err says why), so that its calls go through the script for
// moduleRetry.
func (s *Store) moduleAbsent(sc *script, err error) {
	c := s.module.command(sc)
	c.absentUntil.Store(time.Now().Add(moduleRetry).UnixNano())
	cmd := moduleCommands[sc.moduleIndex]
	warn := moduleWarning(err.Error())
	switch {
	case c.present.Swap(false) || (warn && !c.warned.Swap(true)):
		s.log.Warn("redisstore: Funnel's Redis module is not usable: "+cmd.decides+" go through the script", "err", err, "retry", moduleRetry)
	case !warn && errors.Is(err, errNoCommand):
		if !s.module.clientTold.Swap(true) {
			s.log.Info("redisstore: the client sends scripts only, not Funnel's Redis module's commands: decisions go through the scripts")
		}
	case !warn && !c.told.Swap(true):
		// (Redis may have none of the module, or a module of an older
		// release without this command.)
		s.log.Info("redisstore: Redis has no "+cmd.name+" (Funnel's module, module/funnel.c, which would cost it less CPU a decision): "+cmd.decides+" go through the script", "err", err)
	}
}

// moduleArgs returns a module command's arguments after its name: the version,
// the number of keys, the keys, then the script's arguments.
func moduleArgs(keys, args []string) []string {
	out := make([]string, 0, 2+len(keys)+len(args))
	out = append(out, moduleVersion, strconv.Itoa(len(keys)))
	out = append(out, keys...)
	return append(out, args...)
}

// processor is a go-redis client that sends any command (every client
// type of go-redis is).
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

func (g goRedisRunner) command(ctx context.Context, name string, keys, args []string) ([]int64, error) {
	p, ok := g.c.(processor)
	if !ok {
		return nil, errNoCommand
	}
	all := moduleArgs(keys, args)
	argv := make([]any, 1+len(all))
	argv[0] = name
	for i, a := range all {
		argv[1+i] = a
	}
	cmd := redis.NewCmd(ctx, argv...)
	// The first key is the fourth word: a cluster or ring client routes
	// the command by it.
	cmd.SetFirstKeyPos(3)
	if err := p.Process(ctx, cmd); err != nil {
		return nil, scriptError(err)
	}
	return replyInts(cmd.Val())
}

func (r rueidisRunner) command(ctx context.Context, name string, keys, args []string) ([]int64, error) {
	cmd := r.c.B().Arbitrary(name, moduleVersion, strconv.Itoa(len(keys))).Keys(keys...).Args(args...).Build()
	return resultInts(r.c.Do(ctx, cmd))
}
