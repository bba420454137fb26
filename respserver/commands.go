package respserver

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/cell"
	"github.com/funnelrl/funnel/internal/version"
)

// command describes one command: how it runs and what COMMAND reports.
type command struct {
	name     string
	arity    int // as in Redis: n exactly, or -n for at least n
	flags    []string
	firstKey int
	lastKey  int
	step     int
	noAuth   bool // may run before authentication
	run      func(c *conn, args [][]byte)
	doc      commandDoc
}

type commandDoc struct {
	summary    string
	since      string
	group      string
	complexity string
	args       []argDoc
}

type argDoc struct {
	name     string
	typ      string // "key", "integer", "string", "pure-token", "oneof", "block"
	optional bool
	multiple bool
	token    string
	args     []argDoc // of a "block" or "oneof"
}

// commands is the command table, by lower-case name.
var commands map[string]*command

func init() {
	list := []*command{
		{name: "cl.throttle", arity: -1, flags: []string{"write", "module"}, firstKey: 1, lastKey: 1, step: 1, run: cmdThrottle,
			doc: commandDoc{summary: "Applies a rate limit (GCRA funnel) to a key, as redis-cell's CL.THROTTLE.", since: "0.1.0", group: "module", complexity: "O(1)",
				args: []argDoc{{name: "key", typ: "key"}, {name: "max_burst", typ: "integer"}, {name: "count", typ: "integer"},
					{name: "period", typ: "integer"}, {name: "quantity", typ: "integer", optional: true}}}},
		{name: "gcra", arity: -5, flags: []string{"write", "denyoom", "fast"}, firstKey: 1, lastKey: 1, step: 1, run: cmdGCRA, doc: gcraDoc},
		{name: "funnel.allow", arity: -5, flags: []string{"write"}, firstKey: 1, lastKey: 1, step: 1, run: cmdFunnelAllow,
			doc: commandDoc{summary: "Applies a limit of the family (gcra, leaky_bucket, fixed_window, sliding_window, sliding_log) to a key. Durations in milliseconds. With PEEK, asks whether QUANTITY units would be admitted, charging nothing (retry_after_ms -1 when no wait would admit them). Reply: allowed, limit, remaining, retry_after_ms, reset_after_ms, delay_ms, banned.", since: "0.2.0", group: "funnel", complexity: "O(1); O(log N) for sliding_log",
				args: append(limitArgDocs(true), argDoc{name: "peek", typ: "pure-token", token: "PEEK", optional: true})}},
		{name: "funnel.charge", arity: -7, flags: []string{"write"}, firstKey: 1, lastKey: 1, step: 1, run: cmdFunnelCharge,
			doc: commandDoc{summary: "Records QUANTITY units of a key already spent under a limit (a cost known afterwards), into debt when they do not fit: the key is refused until the debt has drained. Reply: FUNNEL.ALLOW's; allowed is 0 when the key is now over its limit, retry_after_ms the time until its debt has drained.", since: "0.2.0", group: "funnel", complexity: "O(1); O(log N) for sliding_log",
				args: chargeArgDocs()}},
		{name: "funnel.reserve", arity: -7, flags: []string{"write"}, firstKey: 1, lastKey: 1, step: 1, run: cmdFunnelReserve,
			doc: commandDoc{summary: fmt.Sprintf("Reserves QUANTITY units of a key (the estimate of a cost known afterwards, at least 1): takes them as FUNNEL.ALLOW does and, when admitted, records a reservation for FUNNEL.SETTLE that lives TTL ms (default %d, at most %d; one never settled is settled at its estimate). Reply: FUNNEL.ALLOW's (allowed, limit, remaining, retry_after_ms, reset_after_ms, delay_ms, banned), then the reservation id, nil when refused or a fallback.", funnel.DefaultReservationTTL/time.Millisecond, funnel.MaxReservationTTL/time.Millisecond), since: "0.2.0", group: "funnel", complexity: "O(1); O(log N) for sliding_log",
				args: reserveArgDocs()}},
		{name: "funnel.settle", arity: 4, flags: []string{"write"}, firstKey: 1, lastKey: 1, step: 1, run: cmdFunnelSettle,
			doc: commandDoc{summary: "Settles a reservation of FUNNEL.RESERVE at the actual units spent: above the estimate the difference is charged (into debt), below it is given back (what the key still counts of the estimate). A reservation settled before is not settled again; an unknown or expired one is an error. Reply: the key after the settle, as FUNNEL.CHARGE answers (allowed, limit, remaining, retry_after_ms, reset_after_ms, delay_ms, banned), then again: 1 if the reservation was settled before (nothing changed), else 0.", since: "0.2.0", group: "funnel", complexity: "O(1); O(log N) for sliding_log",
				args: []argDoc{{name: "key", typ: "key"}, {name: "reservation_id", typ: "string"}, {name: "actual", typ: "integer"}}}},
		{name: "funnel.allowall", arity: -7, flags: []string{"write", "movablekeys"}, run: cmdFunnelAllowAll,
			doc: commandDoc{summary: "Applies several limits at once, all-or-nothing: all are charged or none. Reply: allowed, refused_index, retry_after_ms, and each limit's FUNNEL.ALLOW reply.", since: "0.2.0", group: "funnel", complexity: "O(N) where N is the number of limits",
				args: []argDoc{{name: "numlimits", typ: "integer"}, {name: "limit", typ: "block", token: "LIMIT", multiple: true, args: limitArgDocs(true)}}}},
		{name: "funnel.acquire", arity: -4, flags: []string{"write"}, firstKey: 1, lastKey: 1, step: 1, run: cmdFunnelAcquire,
			doc: commandDoc{summary: "Takes a lease of a concurrency limit (OpenResty limit.conn): at most count held at once, each expiring after ttl_ms unless released; with BURST, n more are granted, each told to wait delay_ms: DELAY (the default unit delay, which the latencies of releases then move) × floor((leases held − 1) / count). Reply: allowed, limit, remaining, retry_after_ms, reset_after_ms, lease_id or nil, delay_ms.", since: "0.2.0", group: "funnel", complexity: "O(N) where N is the number of leases held",
				args: []argDoc{{name: "key", typ: "key"}, {name: "count", typ: "integer"}, {name: "ttl_ms", typ: "integer"}, {name: "lease_id", typ: "string", token: "ID", optional: true},
					{name: "burst", typ: "integer", token: "BURST", optional: true}, {name: "delay_ms", typ: "integer", token: "DELAY", optional: true}}}},
		{name: "funnel.release", arity: -3, flags: []string{"write", "fast"}, firstKey: 1, lastKey: 1, step: 1, run: cmdFunnelRelease,
			doc: commandDoc{summary: "Releases a lease of a concurrency limit; LATENCY reports how long its request took, which moves the key's unit delay to the mean of the two (an error, changing nothing, when the lease is not held). Reply: 1 if it was held, else 0.", since: "0.2.0", group: "funnel", complexity: "O(N) where N is the number of leases held",
				args: []argDoc{{name: "key", typ: "key"}, {name: "lease_id", typ: "string"}, {name: "latency_ms", typ: "integer", token: "LATENCY", optional: true}}}},
		{name: "funnel.refund", arity: -5, flags: []string{"write"}, firstKey: 1, lastKey: 1, step: 1, run: cmdFunnelRefund,
			doc: commandDoc{summary: "Gives back QUANTITY units (default 1) of a key under a limit, never below an empty state. Reply: OK.", since: "0.2.0", group: "funnel", complexity: "O(1); O(log N) for sliding_log",
				args: limitArgDocs(true)}},
		{name: "funnel.bans", arity: 1, flags: []string{"readonly"}, run: cmdFunnelBans,
			doc: commandDoc{summary: "Lists the banned keys. Reply: an array of [key, until], until in Unix milliseconds (rounded up).", since: "0.2.0", group: "funnel", complexity: "O(N) where N is the number of bans"}},
		{name: "funnel.unban", arity: 2, flags: []string{"write", "fast"}, firstKey: 1, lastKey: 1, step: 1, run: cmdFunnelUnban,
			doc: commandDoc{summary: "Lifts a key's ban. Reply: 1 if it was banned, else 0.", since: "0.2.0", group: "funnel", complexity: "O(1)",
				args: []argDoc{{name: "key", typ: "key"}}}},
		{name: "ping", arity: -1, flags: []string{"fast", "stale"}, run: cmdPing,
			doc: commandDoc{summary: "Returns the server's liveliness response.", since: "1.0.0", group: "connection", complexity: "O(1)",
				args: []argDoc{{name: "message", typ: "string", optional: true}}}},
		{name: "echo", arity: 2, flags: []string{"fast", "stale"}, run: cmdEcho,
			doc: commandDoc{summary: "Returns the given string.", since: "1.0.0", group: "connection", complexity: "O(1)",
				args: []argDoc{{name: "message", typ: "string"}}}},
		{name: "hello", arity: -1, flags: []string{"noscript", "loading", "stale", "fast", "no_auth"}, noAuth: true, run: cmdHello,
			doc: commandDoc{summary: "Handshakes with the server: protocol version, authentication, client name.", since: "6.0.0", group: "connection", complexity: "O(1)",
				args: []argDoc{{name: "protover", typ: "integer", optional: true}, {name: "auth", typ: "block", token: "AUTH", optional: true,
					args: []argDoc{{name: "username", typ: "string"}, {name: "password", typ: "string"}}},
					{name: "clientname", typ: "string", token: "SETNAME", optional: true}}}},
		{name: "auth", arity: -2, flags: []string{"noscript", "loading", "stale", "fast", "no_auth"}, noAuth: true, run: cmdAuth,
			doc: commandDoc{summary: "Authenticates the connection.", since: "1.0.0", group: "connection", complexity: "O(N) where N is the number of passwords defined for the user",
				args: []argDoc{{name: "username", typ: "string", optional: true}, {name: "password", typ: "string"}}}},
		{name: "client", arity: -2, flags: []string{"noscript", "loading", "stale"}, run: cmdClient,
			doc: commandDoc{summary: "A container for client connection commands: ID, GETNAME, SETNAME, INFO, LIST, SETINFO, TRACKING, CACHING, NO-EVICT, NO-TOUCH.", since: "2.4.0", group: "connection", complexity: "Depends on subcommand."}},
		{name: "select", arity: 2, flags: []string{"loading", "stale", "fast"}, run: cmdSelect,
			doc: commandDoc{summary: "Changes the selected database; Funnel has database 0 only.", since: "1.0.0", group: "connection", complexity: "O(1)",
				args: []argDoc{{name: "index", typ: "integer"}}}},
		{name: "command", arity: -1, flags: []string{"loading", "stale"}, run: cmdCommand,
			doc: commandDoc{summary: "Returns detailed information about the commands: COUNT, DOCS, INFO, LIST.", since: "2.8.13", group: "server", complexity: "O(N) where N is the total number of commands"}},
		{name: "info", arity: -1, flags: []string{"loading", "stale"}, run: cmdInfo,
			doc: commandDoc{summary: "Returns information and statistics about the server.", since: "1.0.0", group: "server", complexity: "O(1)",
				args: []argDoc{{name: "section", typ: "string", optional: true, multiple: true}}}},
		{name: "dbsize", arity: 1, flags: []string{"readonly", "fast"}, run: cmdDBSize,
			doc: commandDoc{summary: "Returns the number of keys the store holds (a store that counts them: the memory store).", since: "1.0.0", group: "server", complexity: "O(1)"}},
		{name: "quit", arity: -1, flags: []string{"noscript", "loading", "stale", "fast", "no_auth"}, noAuth: true, run: cmdQuit,
			doc: commandDoc{summary: "Closes the connection.", since: "1.0.0", group: "connection", complexity: "O(1)"}},
		{name: "reset", arity: 1, flags: []string{"noscript", "loading", "stale", "fast", "no_auth"}, noAuth: true, run: cmdReset,
			doc: commandDoc{summary: "Resets the connection.", since: "6.2.0", group: "connection", complexity: "O(1)"}},
		{name: "del", arity: -2, flags: []string{"write"}, firstKey: 1, lastKey: -1, step: 1, run: cmdDel,
			doc: commandDoc{summary: "Deletes limiter keys: their next request finds a full bucket.", since: "1.0.0", group: "generic", complexity: "O(N) where N is the number of keys",
				args: []argDoc{{name: "key", typ: "key", multiple: true}}}},
		{name: "exists", arity: -2, flags: []string{"readonly", "fast"}, firstKey: 1, lastKey: -1, step: 1, run: cmdExists,
			doc: commandDoc{summary: "Counts the given limiter keys that hold state (a bucket not full).", since: "1.0.0", group: "generic", complexity: "O(N) where N is the number of keys",
				args: []argDoc{{name: "key", typ: "key", multiple: true}}}},
		{name: "pttl", arity: 2, flags: []string{"readonly", "fast"}, firstKey: 1, lastKey: 1, step: 1, run: cmdPTTL,
			doc: commandDoc{summary: "Returns the milliseconds until a limiter key's bucket is full again, or -2.", since: "2.6.0", group: "generic", complexity: "O(1)",
				args: []argDoc{{name: "key", typ: "key"}}}},
		{name: "config", arity: -2, flags: []string{"admin", "noscript", "loading", "stale"}, run: cmdConfig,
			doc: commandDoc{summary: "Reads the server's configuration (CONFIG GET); Funnel's is set by its flags and file.", since: "2.0.0", group: "server", complexity: "O(N) where N is the number of parameters"}},
		{name: "ttl", arity: 2, flags: []string{"readonly", "fast"}, firstKey: 1, lastKey: 1, step: 1, run: cmdTTL,
			doc: commandDoc{summary: "Returns the seconds until a limiter key's bucket is full again, or -2.", since: "1.0.0", group: "generic", complexity: "O(1)",
				args: []argDoc{{name: "key", typ: "key"}}}},
	}
	commands = make(map[string]*command, len(list))
	for _, c := range list {
		commands[c.name] = c
	}
}

// limitArgDocs documents "key algorithm count period_ms [options]".
func limitArgDocs(key bool) []argDoc {
	var a []argDoc
	if key {
		a = append(a, argDoc{name: "key", typ: "key"})
	}
	return append(a,
		argDoc{name: "algorithm", typ: "oneof", args: []argDoc{
			{name: "gcra", typ: "pure-token", token: "GCRA"}, {name: "leaky_bucket", typ: "pure-token", token: "LEAKY_BUCKET"},
			{name: "fixed_window", typ: "pure-token", token: "FIXED_WINDOW"}, {name: "sliding_window", typ: "pure-token", token: "SLIDING_WINDOW"},
			{name: "sliding_log", typ: "pure-token", token: "SLIDING_LOG"}}},
		argDoc{name: "count", typ: "integer"},
		argDoc{name: "period_ms", typ: "integer"},
		argDoc{name: "burst", typ: "integer", token: "BURST", optional: true},
		argDoc{name: "quantity", typ: "integer", token: "QUANTITY", optional: true},
		argDoc{name: "delay", typ: "oneof", optional: true, args: []argDoc{
			{name: "delay", typ: "integer", token: "DELAY"}, {name: "nodelay", typ: "pure-token", token: "NODELAY"}}},
		argDoc{name: "calendar", typ: "oneof", token: "CALENDAR", optional: true, args: []argDoc{
			{name: "day", typ: "pure-token", token: "DAY"}, {name: "week", typ: "pure-token", token: "WEEK"}, {name: "month", typ: "pure-token", token: "MONTH"}}},
		argDoc{name: "tz", typ: "string", token: "TZ", optional: true},
		argDoc{name: "ban_ms", typ: "integer", token: "BAN", optional: true},
	)
}

// chargeArgDocs documents FUNNEL.CHARGE's arguments: FUNNEL.ALLOW's, with
// QUANTITY required.
func chargeArgDocs() []argDoc {
	a := limitArgDocs(true)
	for i := range a {
		if a[i].token == "QUANTITY" {
			a[i].optional = false
		}
	}
	return a
}

// reserveArgDocs documents FUNNEL.RESERVE's arguments: FUNNEL.CHARGE's
// (QUANTITY, the estimate, required), then TTL.
func reserveArgDocs() []argDoc {
	return append(chargeArgDocs(), argDoc{name: "ttl_ms", typ: "integer", token: "TTL", optional: true})
}

// commandNames returns the table's names, sorted.
func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// lookup finds the command named by name, in any case, without allocating.
func (c *conn) lookup(name []byte) *command {
	if len(name) > len(c.lower) {
		return nil
	}
	l := c.lower[:len(name)]
	for i, b := range name {
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		l[i] = b
	}
	return commands[string(l)]
}

// exec runs one command and appends its reply.
func (c *conn) exec(args [][]byte) {
	cmd := c.lookup(args[0])
	if cmd == nil {
		c.unknownCommand(args)
		return
	}
	// Redis checks the arity before the authentication.
	if (cmd.arity > 0 && len(args) != cmd.arity) || len(args) < -cmd.arity {
		c.wr.WriteError("ERR wrong number of arguments for '" + cmd.name + "' command")
		return
	}
	if !c.authed && !cmd.noAuth {
		c.wr.WriteError("NOAUTH Authentication required.")
		return
	}
	cmd.run(c, args)
}

// unknownCommand replies as Redis 7 does: the name cut to 128 bytes, then
// each argument quoted and cut to what is left of 128 bytes, while the
// arguments so far are under 128 bytes. Like Redis's "%.128s", the name and
// the arguments end at a NUL byte.
func (c *conn) unknownCommand(args [][]byte) {
	var b strings.Builder
	b.WriteString("ERR unknown command '")
	b.Write(trunc(cstr(args[0]), 128))
	b.WriteString("', with args beginning with: ")
	n := 0 // bytes of arguments written
	for _, a := range args[1:] {
		if n >= 128 {
			break
		}
		a = trunc(cstr(a), 128-n)
		b.WriteByte('\'')
		b.Write(a)
		b.WriteString("' ")
		n += len(a) + 3
	}
	c.wr.WriteError(b.String())
}

func trunc(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// cstr returns b up to its first NUL byte, as C's string functions see it.
func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// str returns b as a string without copying. The string aliases the read
// buffer: it must not be kept past the current command.
func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func cmdThrottle(c *conn, args [][]byte) {
	op := &c.op[0]
	var q int64
	var err error
	if c.limitText.holds(args) {
		// The limit of the connection's last CL.THROTTLE, parsed and
		// checked then: clients send the same few limits again and again.
		q, err = cell.ParseQuantity(args[1:])
	} else {
		c.limitText.forget()
		if q, err = cell.ParseLimitInto(args[1:], &op.Limit); err == nil {
			c.limitText.keep(args)
		}
	}
	if err != nil {
		c.wr.WriteError(err.Error())
		return
	}
	// The key aliases the read buffer: stores copy a key they keep, and the
	// op lets it go after the call.
	op.Kind, op.Key, op.N = funnel.OpTake, storeKey(args[1]), q
	err = c.s.lim.Do(context.Background(), c.op[:], c.res[:])
	op.Key = ""
	if err != nil {
		if e := cell.Translate(err); e != err {
			c.wr.WriteError(e.Error()) // gcra's own errors, in redis-cell's texts
			return
		}
		if !c.fellBack(err) {
			return
		}
		c.res[0] = c.s.cfg.Fail.Fallback(op.Limit.Limit)
	}
	res := c.res[0]
	p := op.Limit.GCRA
	switch {
	case res.Fallback:
		if c.decided(&res) {
			return
		}
		if !res.Allowed {
			// The refusal of FailClosedRefuse: nothing remaining (Reply
			// would derive remaining from a reset after of 0), retry in 1 s.
			c.wr.WriteArray(5)
			for _, v := range [5]int64{1, p.Limit, 0, cell.Seconds(res.RetryAfter), fallbackReset} {
				c.wr.WriteInt(v)
			}
			return
		}
	case res.Allowed:
		c.batch.allowed++
	default:
		c.batch.limited++
	}
	reply := cell.Reply(p, res)
	if res.Fallback {
		reply[4] = fallbackReset // fail-open: allowed, the whole limit remaining
	}
	c.wr.WriteInts(reply[:]...)
}

// limitText is the text of the limit (max_burst, count, period) of a
// connection's last CL.THROTTLE whose limit was valid, when it was short
// enough to keep.
type limitText struct {
	buf [45]byte
	n   [3]uint8 // lengths of the three arguments in buf
	ok  bool
}

// holds reports whether args (CL.THROTTLE's, from the command name on)
// give the limit whose text t holds.
func (t *limitText) holds(args [][]byte) bool {
	if !t.ok || len(args) < 5 {
		return false
	}
	at := 0
	for i, a := range args[2:5] {
		n := int(t.n[i])
		if !bytes.Equal(a, t.buf[at:at+n]) {
			return false
		}
		at += n
	}
	return true
}

// keep remembers the limit's text of args, a CL.THROTTLE whose limit was
// valid, if it fits.
func (t *limitText) keep(args [][]byte) {
	at := 0
	for i, a := range args[2:5] {
		if len(a) > 15 {
			return
		}
		t.n[i] = uint8(copy(t.buf[at:], a))
		at += len(a)
	}
	t.ok = true
}

// forget drops the text kept.
func (t *limitText) forget() { t.ok = false }

// wrongTypeError is Redis's own reply to a command on a key that holds the
// wrong kind of value, which CL.THROTTLE, PTTL and the other key commands
// give for a key that holds anything but a funnel's state.
const wrongTypeError = "WRONGTYPE Operation against a key holding the wrong kind of value"

// replyError answers an error of the limiter or the store, by its class
// (funnel.ClassOf), in this one place: the client's mistakes (an invalid
// limit or quantity, a key of another type, keys of several hash slots)
// with their text, which is safe to send and never logged (any client
// could flood the log with them); a store that cannot decide
// (funnel.Unavailable) with storeDownText, the one reply to "the store is
// down", which a client can tell apart from a refusal and may retry; and
// anything else (a bug) with "ERR internal error". The detail of the last
// two is logged at most once a second, never sent.
func (c *conn) replyError(err error) {
	switch funnel.ClassOf(err) {
	case funnel.ClassInvalid:
		c.wr.WriteError(limitError(err).Error())
		return
	case funnel.ClassWrongType:
		c.wr.WriteError(wrongTypeError)
		return
	case funnel.ClassCrossSlot:
		c.wr.WriteError(funnel.ErrCrossSlot.Error())
		return
	}
	if funnel.Unavailable(context.Background(), err) {
		c.s.storeDown.Do(func(held int64) { c.s.log.Warn("resp: store unavailable", "err", err, "held_back", held) })
		c.wr.WriteError(storeDownText)
		return
	}
	c.s.storeDown.Do(func(held int64) { c.s.log.Error("resp: store failed", "err", err, "held_back", held) })
	c.wr.WriteError(errInternal)
}

// errInternal is the reply to an error that is a bug, whose detail is
// logged, never sent.
const errInternal = "ERR internal error"

// fellBack handles the error of a decision: for a store that cannot decide
// (funnel.Unavailable) it reports true, and the caller answers
// Config.Fail's fallback as the store's own is answered (see decided);
// otherwise it answers the error (replyError) and reports false.
func (c *conn) fellBack(err error) bool {
	if !funnel.Unavailable(context.Background(), err) {
		c.replyError(err)
		return false
	}
	c.s.storeDown.Do(func(held int64) { c.s.log.Warn("resp: store unavailable", "err", err, "held_back", held) })
	return true
}

// storeKey is the store key of a key argument: funnel.StoreKey with no
// prefix, which is funnel.BoundKey (a key longer than funnel.MaxKeyLen is
// stored under its hash), as on every edge. A short key aliases the read
// buffer, as str does: it must not be kept past the current command
// (stores copy a key they keep). It is inlined: a short key costs a
// comparison.
func storeKey(b []byte) string { return funnel.BoundKey(str(b)) }

func cmdPing(c *conn, args [][]byte) {
	switch len(args) {
	case 1:
		c.wr.WriteSimpleString("PONG")
	case 2:
		c.wr.WriteBulk(args[1])
	default:
		c.wr.WriteError("ERR wrong number of arguments for 'ping' command")
	}
}

func cmdEcho(c *conn, args [][]byte) { c.wr.WriteBulk(args[1]) }

// cmdDBSize answers DBSIZE: the keys of a store that counts them (the
// memory store, as INFO's keyspace shows them). A store that cannot count
// its keys (Redis, where Funnel's keys share the database with others)
// answers an error rather than a number it does not know.
func cmdDBSize(c *conn, _ [][]byte) {
	n, ok := funnel.KeysOf(c.s.store)
	if !ok {
		c.wr.WriteError("ERR DBSIZE is not supported by this store: it does not count its keys")
		return
	}
	c.wr.WriteInt(int64(n))
}

func cmdSelect(c *conn, args [][]byte) {
	n, ok := cell.ParseInt(args[1])
	switch {
	case !ok:
		c.wr.WriteError("ERR value is not an integer or out of range")
	case n != 0:
		c.wr.WriteError("ERR DB index is out of range")
	default:
		c.wr.WriteSimpleString("OK")
	}
}

func cmdQuit(c *conn, _ [][]byte) {
	c.wr.WriteSimpleString("OK")
	c.quit = true
}

func cmdReset(c *conn, _ [][]byte) {
	c.wr.SetProtocol(2)
	c.mu.Lock()
	c.name, c.user, c.proto = "", "default", 2
	c.mu.Unlock()
	c.setAuthed(!c.s.authRequired())
	c.wr.WriteSimpleString("RESET")
}

// checkPassword reports whether user's password is pass, in a time that
// tells nothing of either (see Credentials).
func (c *conn) checkPassword(user, pass []byte) bool {
	if string(user) == "default" && !c.s.authRequired() {
		return true // the default user has no password: any is accepted
	}
	return c.s.cfg.Credentials.Check(string(user), string(pass))
}

func (c *conn) login(user, pass []byte) bool {
	if !c.checkPassword(user, pass) {
		c.s.authWarn.Do(func(held int64) {
			// The name only when it is a user's: a client may have sent
			// its password in its place.
			name := ""
			if c.s.cfg.Credentials.Has(string(user)) {
				name = string(user)
			}
			c.s.log.Warn("resp: authentication failed (logged once a second at most)", "client", c.id, "addr", c.raddr, "user", name, "held_back", held)
		})
		return false
	}
	c.setAuthed(true)
	c.mu.Lock()
	c.user = string(user)
	c.mu.Unlock()
	return true
}

func cmdAuth(c *conn, args [][]byte) {
	var user, pass []byte
	switch len(args) {
	case 2:
		if !c.s.authRequired() {
			c.wr.WriteError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
			return
		}
		user, pass = []byte("default"), args[1]
	case 3:
		user, pass = args[1], args[2]
	default:
		c.wr.WriteError("ERR syntax error")
		return
	}
	if !c.login(user, pass) {
		c.wr.WriteError("WRONGPASS invalid username-password pair or user is disabled.")
		return
	}
	c.wr.WriteSimpleString("OK")
}

func cmdHello(c *conn, args [][]byte) {
	proto := int64(c.wr.Protocol())
	if len(args) >= 2 {
		v, ok := cell.ParseInt(args[1])
		if !ok {
			c.wr.WriteError("ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 && v != 3 {
			c.wr.WriteError("NOPROTO unsupported protocol version")
			return
		}
		proto = v
	}
	var user, pass, name []byte
	authGiven, nameGiven := false, false
	for i := 2; i < len(args); i++ {
		more := len(args) - 1 - i
		switch opt := strings.ToLower(string(args[i])); {
		case opt == "auth" && more >= 2:
			user, pass, authGiven = args[i+1], args[i+2], true
			i += 2
		case opt == "setname" && more >= 1:
			name, nameGiven = args[i+1], true
			i++
		default:
			c.wr.WriteError("ERR Syntax error in HELLO option '" + string(trunc(args[i], 128)) + "'")
			return
		}
	}
	if authGiven && !c.login(user, pass) {
		c.wr.WriteError("WRONGPASS invalid username-password pair or user is disabled.")
		return
	}
	if !c.authed {
		c.wr.WriteError("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	if nameGiven && !validClientName(name) {
		c.wr.WriteError("ERR Client names cannot contain spaces, newlines or special characters.")
		return
	}
	c.wr.SetProtocol(int(proto))
	c.mu.Lock()
	c.proto = int(proto)
	if nameGiven {
		c.name = string(name)
	}
	c.mu.Unlock()
	c.wr.WriteMap(7)
	c.field("server", "funnel")
	c.field("version", strings.TrimPrefix(version.Version, "v"))
	c.wr.WriteBulkString("proto")
	c.wr.WriteInt(proto)
	c.wr.WriteBulkString("id")
	c.wr.WriteInt(c.id)
	c.field("mode", "standalone")
	c.field("role", "master")
	c.wr.WriteBulkString("modules")
	c.wr.WriteArray(0)
}

// validClientName reports whether name has only the characters Redis
// allows in a client name: '!' to '~'.
func validClientName(name []byte) bool {
	for _, b := range name {
		if b < '!' || b > '~' {
			return false
		}
	}
	return true
}

// cmdClient answers CLIENT through the subcommand of clientSubcommands
// that args[1] names.
func cmdClient(c *conn, args [][]byte) {
	sub := strings.ToLower(string(args[1]))
	cmd, ok := clientSubcommands[sub]
	if !ok {
		c.wr.WriteError("ERR unknown subcommand '" + string(trunc(args[1], 128)) + "'. Try CLIENT HELP.")
		return
	}
	if n := len(args); cmd.arity > 0 && n != cmd.arity || cmd.arity < 0 && n < -cmd.arity {
		c.wr.WriteError("ERR wrong number of arguments for 'client|" + sub + "' command")
		return
	}
	cmd.run(c, args)
}

// clientSubcommand is a subcommand of CLIENT: its handler, and its arity as
// in the command table (counting CLIENT and the subcommand's name): n means
// exactly n arguments, -n at least n. A request of another count is told
// the wrong number of arguments before run is called.
type clientSubcommand struct {
	arity int
	run   func(c *conn, args [][]byte)
}

// clientSubcommands are CLIENT's subcommands, by lowercase name.
var clientSubcommands = map[string]clientSubcommand{
	"id":       {arity: 2, run: clientID},
	"getname":  {arity: 2, run: clientGetName},
	"setname":  {arity: 3, run: clientSetName},
	"setinfo":  {arity: 4, run: clientSetInfo},
	"info":     {arity: 2, run: clientInfo},
	"list":     {arity: -2, run: clientList},
	"tracking": {arity: -3, run: clientTracking},
	"caching":  {arity: 3, run: clientCaching},
	"no-evict": {arity: 3, run: clientOnOff},
	"no-touch": {arity: 3, run: clientOnOff},
	"help":     {arity: -2, run: clientHelp},
}

func clientID(c *conn, args [][]byte) { c.wr.WriteInt(c.id) }

func clientGetName(c *conn, args [][]byte) {
	c.mu.Lock()
	name := c.name
	c.mu.Unlock()
	if name == "" {
		c.wr.WriteNull()
	} else {
		c.wr.WriteBulkString(name)
	}
}

func clientSetName(c *conn, args [][]byte) {
	if !validClientName(args[2]) {
		c.wr.WriteError("ERR Client names cannot contain spaces, newlines or special characters.")
		return
	}
	c.mu.Lock()
	c.name = string(args[2])
	c.mu.Unlock()
	c.wr.WriteSimpleString("OK")
}

func clientSetInfo(c *conn, args [][]byte) {
	attr := strings.ToLower(string(args[2]))
	if attr != "lib-name" && attr != "lib-ver" {
		c.wr.WriteError("ERR Unrecognized option '" + string(trunc(args[2], 128)) + "'")
		return
	}
	if !validClientName(args[3]) {
		c.wr.WriteError("ERR " + attr + " cannot contain spaces, newlines or special characters.")
		return
	}
	c.mu.Lock()
	if attr == "lib-name" {
		c.lib[0] = string(args[3])
	} else {
		c.lib[1] = string(args[3])
	}
	c.mu.Unlock()
	c.wr.WriteSimpleString("OK")
}

func clientInfo(c *conn, args [][]byte) {
	c.wr.WriteVerbatim("txt", c.info(time.Now())+"\n")
}

// clientList answers CLIENT LIST, which takes no filter here: further
// arguments are a syntax error, as Redis calls an unknown filter.
func clientList(c *conn, args [][]byte) {
	if len(args) != 2 {
		c.wr.WriteError("ERR syntax error")
		return
	}
	now := time.Now()
	var b strings.Builder
	for _, o := range c.s.clients() {
		b.WriteString(o.info(now))
		b.WriteByte('\n')
	}
	c.wr.WriteVerbatim("txt", b.String())
}

// clientTracking answers CLIENT TRACKING. Client-side caching is not
// served: tracking in OPTIN mode is accepted (rueidis asks for it on
// connect) because, with CLIENT CACHING refused, no key is ever opted in,
// so there is never anything to invalidate. Every other mode would track
// reads.
func clientTracking(c *conn, args [][]byte) {
	switch strings.ToLower(string(args[2])) {
	case "off":
		c.wr.WriteSimpleString("OK")
	case "on":
		optin, other := false, false
		for _, a := range args[3:] {
			switch strings.ToLower(string(a)) {
			case "optin":
				optin = true
			case "noloop":
			default:
				other = true
			}
		}
		if !optin || other {
			c.wr.WriteError("ERR client-side caching is not supported: only CLIENT TRACKING ON OPTIN is accepted, and no key is ever opted in")
			return
		}
		c.wr.WriteSimpleString("OK")
	default:
		c.wr.WriteError("ERR syntax error")
	}
}

func clientCaching(c *conn, args [][]byte) {
	c.wr.WriteError("ERR client-side caching is not supported: CLIENT CACHING is refused")
}

// clientOnOff answers CLIENT NO-EVICT and CLIENT NO-TOUCH, accepted for
// compatibility: either switch has no effect here.
func clientOnOff(c *conn, args [][]byte) {
	switch strings.ToLower(string(args[2])) {
	case "on", "off":
		c.wr.WriteSimpleString("OK")
	default:
		c.wr.WriteError("ERR syntax error")
	}
}

// clientHelpLines are the lines of CLIENT HELP's reply.
var clientHelpLines = []string{
	"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"GETNAME", "    Return the name of the current connection.",
	"ID", "    Return the ID of the current connection.",
	"INFO", "    Return information about the current client connection.",
	"LIST", "    Return information about client connections.",
	"SETINFO <option> <value>", "    Set client meta attr: LIB-NAME or LIB-VER.",
	"SETNAME <name>", "    Assign the name <name> to the current connection.",
	"TRACKING (ON OPTIN|OFF)", "    Accepted for compatibility: no key is ever tracked.",
	"CACHING (YES|NO)", "    Refused: client-side caching is not supported.",
	"NO-EVICT (ON|OFF)", "    Accepted for compatibility; has no effect.",
	"NO-TOUCH (ON|OFF)", "    Accepted for compatibility; has no effect.",
	"HELP", "    Print this help.",
}

func clientHelp(c *conn, args [][]byte) {
	c.wr.WriteArray(len(clientHelpLines))
	for _, l := range clientHelpLines {
		c.wr.WriteSimpleString(l)
	}
}

// clients returns the connected clients, by id.
func (s *Server) clients() []*conn {
	s.mu.Lock()
	out := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// info formats the connection as a line of CLIENT LIST.
func (c *conn) info(now time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("id=%d addr=%s laddr=%s name=%s age=%d idle=%d db=0 user=%s lib-name=%s lib-ver=%s resp=%d",
		c.id, c.raddr, c.laddr, c.name, int64(now.Sub(c.created)/time.Second),
		int64(now.Sub(c.last)/time.Second), c.user, c.lib[0], c.lib[1], c.proto)
}

func cmdDel(c *conn, args [][]byte) {
	c.countKeys(args[1:], c.s.lim.Reset)
}

func cmdExists(c *conn, args [][]byte) {
	c.countKeys(args[1:], func(ctx context.Context, key string) (bool, error) {
		_, ok, err := c.s.lim.TTL(ctx, key)
		return ok, err
	})
}

// countKeys replies with the number of keys for which f reports true, or
// with the store's error.
func (c *conn) countKeys(keys [][]byte, f func(context.Context, string) (bool, error)) {
	var n int64
	for _, k := range keys {
		ok, err := f(context.Background(), storeKey(k))
		if err != nil {
			c.replyError(err)
			return
		}
		if ok {
			n++
		}
	}
	c.wr.WriteInt(n)
}

func cmdPTTL(c *conn, args [][]byte) { c.ttl(args[1], time.Millisecond) }

func cmdTTL(c *conn, args [][]byte) { c.ttl(args[1], time.Second) }

// ttl replies with the time until key's bucket is full again in units
// (rounded as Redis rounds: to the nearest second for TTL, down to the
// millisecond for PTTL), or -2 when the key holds no state.
func (c *conn) ttl(key []byte, unit time.Duration) {
	d, ok, err := c.s.lim.TTL(context.Background(), storeKey(key))
	if err != nil {
		c.replyError(err)
		return
	}
	if !ok {
		c.wr.WriteInt(-2)
		return
	}
	ms := int64(d / time.Millisecond)
	if unit == time.Second {
		c.wr.WriteInt((ms + 500) / 1000)
		return
	}
	c.wr.WriteInt(ms)
}

func cmdCommand(c *conn, args [][]byte) {
	if len(args) == 1 {
		names := commandNames()
		c.wr.WriteArray(len(names))
		for _, n := range names {
			c.commandInfo(commands[n])
		}
		return
	}
	switch sub := strings.ToLower(string(args[1])); sub {
	case "count":
		if len(args) != 2 {
			c.wr.WriteError("ERR wrong number of arguments for 'command|count' command")
			return
		}
		c.wr.WriteInt(int64(len(commands)))
	case "list":
		names := commandNames()
		c.wr.WriteArray(len(names))
		for _, n := range names {
			c.wr.WriteBulkString(n)
		}
	case "info":
		if len(args) == 2 {
			names := commandNames()
			c.wr.WriteArray(len(names))
			for _, n := range names {
				c.commandInfo(commands[n])
			}
			return
		}
		c.wr.WriteArray(len(args) - 2)
		for _, a := range args[2:] {
			if cmd := commands[strings.ToLower(string(a))]; cmd != nil {
				c.commandInfo(cmd)
			} else {
				c.wr.WriteNullArray()
			}
		}
	case "docs":
		var found []*command
		if len(args) == 2 {
			for _, n := range commandNames() {
				found = append(found, commands[n])
			}
		} else {
			for _, a := range args[2:] {
				if cmd := commands[strings.ToLower(string(a))]; cmd != nil {
					found = append(found, cmd)
				}
			}
		}
		c.wr.WriteMap(len(found))
		for _, cmd := range found {
			c.wr.WriteBulkString(cmd.name)
			c.commandDocs(cmd)
		}
	default:
		c.wr.WriteError("ERR unknown subcommand '" + string(trunc(args[1], 128)) + "'. Try COMMAND HELP.")
	}
}

// commandInfo writes one entry of COMMAND INFO in Redis 7's shape: name,
// arity, flags, first key, last key, step, ACL categories, tips, key specs,
// subcommands.
func (c *conn) commandInfo(cmd *command) {
	c.wr.WriteArray(10)
	c.wr.WriteBulkString(cmd.name)
	c.wr.WriteInt(int64(cmd.arity))
	c.wr.WriteSet(len(cmd.flags))
	for _, f := range cmd.flags {
		c.wr.WriteSimpleString(f)
	}
	c.wr.WriteInt(int64(cmd.firstKey))
	c.wr.WriteInt(int64(cmd.lastKey))
	c.wr.WriteInt(int64(cmd.step))
	c.wr.WriteSet(0) // ACL categories
	c.wr.WriteSet(0) // tips
	if cmd.firstKey == 0 {
		c.wr.WriteSet(0)
	} else {
		// One key spec: keys from index firstKey to lastKey.
		c.wr.WriteSet(1)
		c.wr.WriteMap(4)
		c.wr.WriteBulkString("flags")
		c.wr.WriteSet(1)
		if cmd.flags[0] == "readonly" {
			c.wr.WriteSimpleString("RO")
		} else {
			c.wr.WriteSimpleString("RW")
		}
		c.wr.WriteBulkString("begin_search")
		c.wr.WriteMap(2)
		c.field("type", "index")
		c.wr.WriteBulkString("spec")
		c.wr.WriteMap(1)
		c.wr.WriteBulkString("index")
		c.wr.WriteInt(int64(cmd.firstKey))
		c.wr.WriteBulkString("find_keys")
		c.wr.WriteMap(2)
		c.field("type", "range")
		c.wr.WriteBulkString("spec")
		c.wr.WriteMap(3)
		c.wr.WriteBulkString("lastkey")
		last := int64(cmd.lastKey - cmd.firstKey)
		if cmd.lastKey < 0 {
			last = -1
		}
		c.wr.WriteInt(last)
		c.wr.WriteBulkString("keystep")
		c.wr.WriteInt(int64(cmd.step))
		c.wr.WriteBulkString("limit")
		c.wr.WriteInt(0)
		c.field("notes", "")
	}
	c.wr.WriteSet(0) // subcommands
}

// field writes one name-value pair of a map reply, both bulk strings.
func (c *conn) field(name, value string) {
	c.wr.WriteBulkString(name)
	c.wr.WriteBulkString(value)
}

// commandDocs writes one entry of COMMAND DOCS.
func (c *conn) commandDocs(cmd *command) {
	d := cmd.doc
	n := 4
	if len(d.args) > 0 {
		n++
	}
	c.wr.WriteMap(n)
	c.field("summary", d.summary)
	c.field("since", d.since)
	c.field("group", d.group)
	c.field("complexity", d.complexity)
	if len(d.args) == 0 {
		return
	}
	c.writeArgDocs(d.args)
}

// writeArgDocs writes the "arguments" of COMMAND DOCS: an array of maps,
// nested for blocks (redis-cli reads a block's arguments without checking
// that they are there).
func (c *conn) writeArgDocs(args []argDoc) {
	c.wr.WriteBulkString("arguments")
	c.wr.WriteArray(len(args))
	for _, a := range args {
		var flags []string
		if a.optional {
			flags = append(flags, "optional")
		}
		if a.multiple {
			flags = append(flags, "multiple")
		}
		m := 2
		if a.token != "" {
			m++
		}
		if len(flags) > 0 {
			m++
		}
		if len(a.args) > 0 {
			m++
		}
		c.wr.WriteMap(m)
		c.field("name", a.name)
		c.field("type", a.typ)
		if a.token != "" {
			c.field("token", a.token)
		}
		if len(flags) > 0 {
			c.wr.WriteBulkString("flags")
			c.wr.WriteSet(len(flags))
			for _, f := range flags {
				c.wr.WriteSimpleString(f)
			}
		}
		if len(a.args) > 0 {
			c.writeArgDocs(a.args)
		}
	}
}

func cmdConfig(c *conn, args [][]byte) {
	sub := strings.ToLower(string(args[1]))
	if sub != "get" {
		if sub == "set" || sub == "resetstat" || sub == "rewrite" {
			c.wr.WriteError("ERR CONFIG " + strings.ToUpper(sub) + " is not supported: Funnel is configured by its flags and configuration file")
			return
		}
		c.wr.WriteError("ERR unknown subcommand '" + string(trunc(args[1], 128)) + "'. Try CONFIG HELP.")
		return
	}
	if len(args) < 3 {
		c.wr.WriteError("ERR wrong number of arguments for 'config|get' command")
		return
	}
	params := map[string]string{
		"maxclients": strconv.Itoa(c.s.cfg.MaxClients),
		"timeout":    strconv.FormatInt(int64(c.s.cfg.IdleTimeout/time.Second), 10),
		"databases":  "1",
		"save":       "",
		"appendonly": "no",
	}
	var names []string
	for _, a := range args[2:] {
		pat := strings.ToLower(string(a))
		for name := range params {
			if ok, _ := path.Match(pat, name); ok && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	c.wr.WriteMap(len(names))
	for _, n := range names {
		c.wr.WriteBulkString(n)
		c.wr.WriteBulkString(params[n])
	}
}

func cmdInfo(c *conn, args [][]byte) {
	want := map[string]bool{}
	for _, a := range args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	all := len(want) == 0 || want["all"] || want["everything"] || want["default"]
	var b strings.Builder
	section := func(name string, lines ...string) {
		if !all && !want[strings.ToLower(name)] {
			return
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + name + "\r\n")
		for _, l := range lines {
			b.WriteString(l + "\r\n")
		}
	}
	s := c.s
	st := s.Stats()
	own := c.batch.ledger // this client's, not yet published
	up := time.Since(s.started)
	port := ""
	if _, p, err := net.SplitHostPort(c.laddr.String()); err == nil {
		port = p
	}
	section("Server",
		"redis_version:7.0.0",
		"funnel_version:"+version.Version,
		"redis_mode:standalone",
		"os:"+runtime.GOOS,
		"arch_bits:"+strconv.Itoa(strconv.IntSize),
		"go_version:"+runtime.Version(),
		"process_id:"+strconv.Itoa(os.Getpid()),
		"tcp_port:"+port,
		"uptime_in_seconds:"+strconv.FormatInt(int64(up/time.Second), 10),
		"uptime_in_days:"+strconv.FormatInt(int64(up/(24*time.Hour)), 10),
	)
	section("Clients",
		"connected_clients:"+strconv.Itoa(st.Clients),
		"maxclients:"+strconv.Itoa(s.cfg.MaxClients),
	)
	if s.cfg.Persistence != nil {
		section("Persistence", s.cfg.Persistence()...)
	}
	section("Stats",
		"total_connections_received:"+strconv.FormatInt(st.Accepted, 10),
		"total_commands_processed:"+strconv.FormatInt(st.Commands+c.batch.commands, 10),
		"rejected_connections:"+strconv.FormatInt(st.Rejected, 10),
		"evicted_clients:"+strconv.FormatInt(st.Evicted, 10),
		"throttle_allowed:"+strconv.FormatInt(st.Allowed+c.batch.allowed, 10),
		"throttle_limited:"+strconv.FormatInt(st.Limited+c.batch.limited, 10),
		"throttle_fail_open:"+strconv.FormatInt(st.FailOpen, 10),
		"throttle_fail_closed:"+strconv.FormatInt(st.FailClosed, 10),
		"charges:"+strconv.FormatInt(st.Charges+own.charges, 10),
		"charges_in_debt:"+strconv.FormatInt(st.ChargesInDebt+own.chargesInDebt, 10),
		"reserves_admitted:"+strconv.FormatInt(st.ReservesAdmitted+own.reservesAdmitted, 10),
		"reserves_refused:"+strconv.FormatInt(st.ReservesRefused+own.reservesRefused, 10),
		"settles:"+strconv.FormatInt(st.Settles+own.settles, 10),
		"settles_in_debt:"+strconv.FormatInt(st.SettlesInDebt+own.settlesInDebt, 10),
		"settles_again:"+strconv.FormatInt(st.SettlesAgain+own.settlesAgain, 10),
		"settles_unknown:"+strconv.FormatInt(st.SettlesUnknown+own.settlesUnknown, 10),
		"evicted_keys:"+strconv.FormatUint(funnel.EvictionsOf(s.store), 10),
	)
	var keyspace []string
	if n, ok := funnel.KeysOf(s.store); ok && n > 0 {
		keyspace = append(keyspace, fmt.Sprintf("db0:keys=%d,expires=%d,avg_ttl=0", n, n))
	}
	section("Keyspace", keyspace...)
	c.wr.WriteVerbatim("txt", b.String())
}
