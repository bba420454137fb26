package respserver

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/auth"
	"github.com/funnelrl/funnel/internal/lograte"
	"github.com/funnelrl/funnel/resp"
)

// DefaultMaxClients is the default bound on connected clients, as in Redis.
const DefaultMaxClients = 10000

// DefaultMaxOutputBuffer is the default bound on the replies that wait for a
// client that does not read them: 32 MiB.
const DefaultMaxOutputBuffer = 32 << 20

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("resp: server closed")

// Config configures a Server. The zero Config serves without authentication
// and with the default limits.
type Config struct {
	// Password, when not empty, is the password of the "default" user, and
	// clients must authenticate (AUTH or HELLO ... AUTH) before any command
	// but AUTH, HELLO, QUIT and RESET, as with Redis's requirepass.
	Password string
	// Users maps further user names to their passwords. When it is not
	// empty, clients must authenticate even if Password is empty.
	Users map[string]string
	// Credentials, when not nil, checks the users and their passwords in
	// place of Password and Users, which are then ignored: a program that
	// serves several protocols hands each the same set (the daemon gives
	// its internal/auth set). Clients must authenticate when it is
	// Enabled.
	Credentials Credentials
	// HandshakeTimeout bounds the TLS handshake of a connection accepted
	// on a TLS listener (see Serve); zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MaxClients bounds the connected clients; zero means
	// DefaultMaxClients. A client over the bound is told
	// "-ERR max number of clients reached" and disconnected; but when
	// clients must authenticate, it takes instead the place of the client
	// that has gone longest without authenticating, if any, which is
	// closed: clients without credentials never keep one that has them
	// out.
	MaxClients int
	// IdleTimeout disconnects a client idle for that long; zero means never
	// (Redis's timeout 0).
	IdleTimeout time.Duration
	// AuthTimeout disconnects a client that has not authenticated that
	// long after it connected (or after a RESET), when clients must
	// authenticate: idle or not, a client without credentials holds a
	// place for no longer. Zero means DefaultAuthTimeout; a negative
	// value, never.
	AuthTimeout time.Duration
	// Slots, when not nil, is a bound on connections that the server
	// shares with other listeners (the process's descriptors): a
	// connection takes one of its slots, or is refused as one over
	// MaxClients is, and gives it back once closed.
	Slots Slots
	// Limits bound what one client may send.
	Limits resp.Limits
	// EventLoops chooses how connections are served. An event loop serves
	// many connections on one thread with epoll, as Redis does: it runs
	// every command of a ready client, and the store's calls, on that
	// thread. That suits a store that decides in memory; a store that waits
	// on the network would hold up every client of the loop meanwhile.
	//
	// A TLS listener's connections are always served by a goroutine each:
	// the event loops read and write sockets, not TLS records.
	//
	// Zero (the default) means event loops, as many as suit the machine,
	// for TCP listeners on Linux when the store is a NonBlockingStore that
	// says it does not block; a goroutine per connection otherwise. A
	// positive number asks for that many event loops whatever the store (on
	// Linux, for TCP listeners; other listeners and platforms get
	// goroutines). A negative number means a goroutine per connection.
	EventLoops int
	// MaxOutputBuffer bounds, in bytes, the replies that wait for a client
	// that does not read them, as Redis's client-output-buffer-limit does;
	// zero means DefaultMaxOutputBuffer. An event loop stops running a
	// client's commands while its replies wait, so only a single large reply
	// (CLIENT LIST with very many clients) comes near the bound; a client
	// over it is disconnected. With a goroutine per connection, the
	// goroutine waits for the client instead, holding about 64 KiB of
	// replies at most.
	MaxOutputBuffer int
	// Logger receives connection-level events; nil means slog.Default().
	Logger *slog.Logger
	// Fail is the answer to a decision that the store could not make
	// (funnel.Unavailable) and answered with an error; the zero value is
	// funnel.FailClosed. A store's own fallback (a Result with Fallback
	// set, as the Redis store gives when Redis cannot be reached in time)
	// is answered as it is.
	Fail funnel.FailMode
	// FailClosed chooses the reply to a fail-closed fallback, Fail's or
	// the store's own. The zero value, FailClosedError, is the one that
	// cannot be mistaken for a decision.
	FailClosed FailClosedReply
	// Persistence, when not nil, returns the lines ("name:value") of
	// INFO's Persistence section, as a program that saves the store fills
	// them (Redis's rdb_last_save_time, rdb_last_bgsave_status, ...). Nil
	// leaves the section out.
	Persistence func() []string
}

// DefaultAuthTimeout is the default of Config.AuthTimeout.
const DefaultAuthTimeout = 10 * time.Second

// Slots is a bound on connections shared with other listeners, as
// Config.Slots takes it. Its methods must be safe for concurrent use.
type Slots interface {
	// TryAcquire takes a slot and reports whether one was free.
	TryAcquire() bool
	// Release gives back a slot taken by TryAcquire.
	Release()
}

// FailClosedReply is how a Server answers a fail-closed fallback.
type FailClosedReply int

const (
	// FailClosedError answers the error "-TRYAGAIN store unavailable: the
	// request was not decided", which a client can tell apart from a
	// refusal. (Some clients retry TRYAGAIN by themselves, as they do in a
	// resharding Redis Cluster: go-redis up to Options.MaxRetries times.)
	FailClosedError FailClosedReply = iota
	// FailClosedRefuse answers the command's usual refusal, for clients
	// that need its integers: limited, with a retry after of one second
	// (never 0, which would invite an instant retry), 0 remaining and a
	// reset after of 0.
	FailClosedRefuse
)

// storeDownText is the text of the error reply to a fail-closed fallback
// under FailClosedError, and of every other command that the store could
// not answer (funnel.Unavailable): the one reply to "the store is down",
// as FailClosedError documents it. (redis-cell runs inside Redis and has
// no reply of its own for it.)
const storeDownText = "TRYAGAIN store unavailable: the request was not decided"

// fallbackReset is the reset after (the last integer of CL.THROTTLE's and
// GCRA's replies, the fifth of FUNNEL.ALLOW's, FUNNEL.RESERVE's,
// FUNNEL.ALLOWALL's results and FUNNEL.ACQUIRE's) of every reply to a
// fallback, fail-open or fail-closed: -1, which no decision answers (a
// decision's reset after is 0 or more), so that a client can tell "the
// store did not decide" from a decision. Every command says the same
// guess: a fail-open reply is allowed with the whole limit remaining and
// no wait (nothing was counted, and the next request is admitted as well:
// a remaining of 0 would tell a client that paces itself to stop), as
// CL.THROTTLE's [0, limit, limit, -1, -1] and FUNNEL.ALLOW's [1, limit,
// limit, -1, -1, 0, 0]; FailClosedRefuse is limited with nothing remaining
// and a retry after of 1 s, [1, limit, 0, 1, -1] and [0, limit, 0, 1000,
// -1, 0, 0].
const fallbackReset = -1

// NonBlockingStore is a store that may say that its calls never wait on the
// network, a disk or a lock held for long, as an in-memory store's do. With
// Config.EventLoops zero, a Server serves a store with event loops only if
// the store says so, since the loops call the store on their own threads.
// (funnel.NonBlockingOf tells; the wrappers of a store pass it through.)
type NonBlockingStore interface {
	funnel.Store
	funnel.NonBlocker
}

// Server serves funnel decisions over the Redis protocol: redis-cell's
// CL.THROTTLE, and the commands that Redis clients send on connect. Create
// one with New; it is safe for concurrent use.
type Server struct {
	store   funnel.Store
	lim     *funnel.Limiter // the store's limiter family (FUNNEL.* commands)
	cfg     Config
	log     *slog.Logger
	started time.Time

	nextID   atomic.Int64
	closing  atomic.Bool
	accepted atomic.Int64
	rejected atomic.Int64
	evicted  atomic.Int64
	// Fallbacks are rare (the store is down): counted here, not per batch.
	failOpen, failClosed atomic.Int64
	// A store that fails, or a failed authentication, is logged at most
	// once a second.
	storeDown, authWarn *lograte.Sometimes

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	unauth    connList   // the clients that have not authenticated, oldest first
	done      counters   // of connections that have closed
	loops     *loopGroup // started by the first Serve that uses them
	connWG    sync.WaitGroup

	// testHookDrained, when not nil, is called by a connection's goroutine
	// when Shutdown's drain has found it drained, before it ends it.
	testHookDrained func(net.Conn)
}

// counters are a connection's statistics.
type counters struct {
	commands, allowed, limited int64
	ledger                     ledgerCounts
}

// ledgerCounts count the calls of the limiter family that are not plain
// throttles: charges, reserves and settles, as Stats reports them. They are
// published under the connection's mu (they are rarer than throttles).
type ledgerCounts struct {
	charges, chargesInDebt            int64
	reservesAdmitted, reservesRefused int64
	settles, settlesAgain             int64
	settlesInDebt, settlesUnknown     int64
}

// add adds o to l.
func (l *ledgerCounts) add(o ledgerCounts) {
	l.charges += o.charges
	l.chargesInDebt += o.chargesInDebt
	l.reservesAdmitted += o.reservesAdmitted
	l.reservesRefused += o.reservesRefused
	l.settles += o.settles
	l.settlesAgain += o.settlesAgain
	l.settlesInDebt += o.settlesInDebt
	l.settlesUnknown += o.settlesUnknown
}

// New returns a server of store configured by cfg.
func New(store funnel.Store, cfg Config) *Server {
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = DefaultMaxClients
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxOutputBuffer <= 0 {
		cfg.MaxOutputBuffer = DefaultMaxOutputBuffer
	}
	if cfg.Credentials == nil {
		cfg.Credentials = auth.New(cfg.Password, cfg.Users)
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	switch {
	case !cfg.Credentials.Enabled() || cfg.AuthTimeout < 0:
		cfg.AuthTimeout = 0 // never
	case cfg.AuthTimeout == 0:
		cfg.AuthTimeout = DefaultAuthTimeout
	}
	return &Server{
		store:     store,
		lim:       funnel.New(store),
		cfg:       cfg,
		log:       cfg.Logger,
		started:   time.Now(),
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
		storeDown: lograte.New(time.Second),
		authWarn:  lograte.New(time.Second),
	}
}

// authRequired reports whether clients must authenticate.
func (s *Server) authRequired() bool { return s.cfg.Credentials.Enabled() }

// Serve accepts connections on ln and serves them, with event loops or a
// goroutine per connection as Config.EventLoops says. It returns
// ErrServerClosed after Shutdown or Close, or the listener's error.
//
// To serve over TLS, pass a listener of crypto/tls (tls.NewListener): its
// connections are served by a goroutine each, which completes the
// handshake within Config.HandshakeTimeout before it reads a command, so
// that a client that never sends its hello does not hold a connection; a
// handshake that fails or takes longer closes the connection. A
// connection counts against MaxClients from the moment it is accepted.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	loops := s.loopsFor(ln)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors or a transient failure: wait, as
				// net/http does, rather than spin.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("resp: accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.accepted.Add(1)
		if loops != nil {
			loops.accept(nc)
			continue
		}
		if c := newConn(s, nc, nc); s.admit(c, nc, nil) {
			go c.serve()
		}
	}
}

// admit registers c, a new connection over nc, and calls place (when it is
// not nil) under the server's lock; or it refuses nc, telling the client why,
// closes it and returns false when the server is full or closing.
func (s *Server) admit(c *conn, nc net.Conn, place func()) bool {
	s.mu.Lock()
	closing := s.closing.Load()
	var victim *conn
	room := len(s.conns) < s.cfg.MaxClients
	if !room && s.authRequired() {
		victim = s.unauth.head
		room = victim != nil
	}
	ok := !closing && room && (s.cfg.Slots == nil || s.cfg.Slots.TryAcquire())
	full := !closing && !ok
	if ok {
		if victim != nil {
			// It goes when its goroutine or loop closes it: until then
			// the clients exceed MaxClients by one.
			s.unauth.remove(victim)
			s.evicted.Add(1)
			victim.evict()
			s.log.Debug("resp: client without credentials closed to make room", "client", victim.id, "addr", victim.raddr)
		}
		s.conns[c] = struct{}{}
		if !c.authed {
			s.unauth.push(c)
		}
		s.connWG.Add(1)
		if place != nil {
			place()
		}
	}
	s.mu.Unlock()
	if ok {
		return true
	}
	if !full {
		nc.Close()
		return false
	}
	s.rejected.Add(1)
	tell := func() {
		// A TLS connection reads the client's hello before it writes:
		// the deadline bounds both.
		nc.SetDeadline(time.Now().Add(time.Second))
		io.WriteString(nc, "-ERR max number of clients reached\r\n")
		nc.Close()
	}
	if _, ok := nc.(*tls.Conn); ok {
		go tell() // not in the accept loop, which a handshake would hold up
	} else {
		tell()
	}
	return false
}

// Shutdown shuts the server down gracefully. It closes the listeners, then
// drains every connection by one rule, with event loops as with a goroutine
// per connection: the server goes on reading the client's commands, running
// them and writing their replies until every reply is written to the socket
// and the socket holds nothing more to read; then it closes the connection.
// So every command that has reached the server by then is answered, a
// pipeline that goes on arriving while the server answers its start
// included, and no connection is closed with input unread, which would make
// the system reset it and drop the replies not yet delivered. An idle client
// is disconnected at once. A client that was sending when the drain began
// may still be, its last bytes in flight when the socket looks empty: sent
// in answer to the window that the last replies opened, they arrive before
// the client's system acknowledges those replies, so the server waits for
// that acknowledgement (on Linux), reading and answering what comes
// meanwhile. Then it ends its side of the stream, and reads and drops what
// still arrives until the client's system has acknowledged the end too:
// from then on the client reads every reply then the end of the stream,
// even if a byte it sends later resets the connection. Each wait lasts 5 s
// at most (a client that reads nothing acknowledges nothing); the system
// signals no acknowledgement, so the server asks for it, every 100 µs at
// first, up to every 10 ms. The part of a command whose rest has not arrived
// is dropped. Over TLS, the server looks into crypto/tls's buffers as well
// as into the socket. Where the server cannot look into a socket (a
// connection that is not one, or a platform other than Unix), a connection
// is drained once its replies to the commands read are written.
//
// Shutdown returns nil once every connection is closed. When ctx ends
// first, it closes the remaining connections at once, as Close does, and
// returns ctx's error: ctx bounds the drain, which a client that never stops
// sending would otherwise prolong for ever.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	s.mu.Lock()
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		// Wake the goroutines that wait for input, so that they see that
		// the server is closing; a goroutine that is busy sees it when it
		// next has answered all it has read. (The event loops are woken
		// below.)
		if c.nc != nil {
			c.nc.SetReadDeadline(time.Now())
		}
	}
	loops := s.loops
	s.mu.Unlock()
	loops.wake()
	done := make(chan struct{})
	go func() { s.connWG.Wait(); close(done) }()
	select {
	case <-done:
		s.stopLoops()
		return nil
	case <-ctx.Done():
		s.Close()
		<-done
		return ctx.Err()
	}
}

// Close closes the listeners and every connection at once. The event loops
// have stopped, and their connections are closed, when it returns.
func (s *Server) Close() error {
	s.closing.Store(true)
	s.mu.Lock()
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		if c.nc != nil {
			closeNow(c.nc)
		}
	}
	s.mu.Unlock()
	s.stopLoops()
	return nil
}

// stopLoops stops the event loops, if any, closing their connections, and
// waits for them to end.
func (s *Server) stopLoops() {
	s.mu.Lock()
	g := s.loops
	s.loops = nil
	s.mu.Unlock()
	g.stop()
}

func (s *Server) forget(c *conn) {
	if s.cfg.Slots != nil {
		s.cfg.Slots.Release()
	}
	s.mu.Lock()
	delete(s.conns, c)
	s.unauth.remove(c)
	s.done.commands += c.stats.commands.Load()
	s.done.allowed += c.stats.allowed.Load()
	s.done.limited += c.stats.limited.Load()
	c.mu.Lock()
	s.done.ledger.add(c.ledger)
	c.mu.Unlock()
	s.mu.Unlock()
	s.connWG.Done()
}

// Stats are a server's counters.
type Stats struct {
	// Clients is the number of connected clients.
	Clients int
	// Accepted counts connections accepted, including rejected ones.
	Accepted int64
	// Rejected counts connections refused because of MaxClients.
	Rejected int64
	// Evicted counts clients without credentials closed to make room for
	// a new one (see MaxClients).
	Evicted int64
	// Commands counts commands processed.
	Commands int64
	// Allowed and Limited count decisions (CL.THROTTLE and FUNNEL.*) by
	// outcome. Fallbacks are counted in them too (fail-open as allowed,
	// fail-closed as limited).
	Allowed, Limited int64
	// FailOpen and FailClosed count the decisions the store could not make
	// and answered with its fail-open or fail-closed fallback.
	FailOpen, FailClosed int64
	// Charges counts the costs recorded by FUNNEL.CHARGE, and
	// ChargesInDebt those of them that left their key over its limit (the
	// reply's allowed 0: the key is refused until the debt has drained).
	// A charge the store could not record is counted in neither.
	Charges, ChargesInDebt int64
	// ReservesAdmitted and ReservesRefused count FUNNEL.RESERVE by outcome,
	// as Allowed and Limited (which count them too) do: a reservation is
	// recorded for each admitted one but fail-open fallbacks.
	ReservesAdmitted, ReservesRefused int64
	// Settles counts the reservations settled by FUNNEL.SETTLE, and
	// SettlesInDebt those of them that left their key over its limit (an
	// actual cost above the estimate charged into debt). SettlesAgain counts
	// the settles of a reservation settled before (nothing changed), and
	// SettlesUnknown those refused for an unknown or expired reservation.
	Settles, SettlesInDebt, SettlesAgain, SettlesUnknown int64
}

// Stats returns the server's counters. Counts of a connected client are
// brought up to date each time it has answered all the commands it sent.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Clients:  len(s.conns),
		Accepted: s.accepted.Load(),
		Rejected: s.rejected.Load(),
		Evicted:  s.evicted.Load(),
		Commands: s.done.commands,
		Allowed:  s.done.allowed,
		Limited:  s.done.limited,

		FailOpen:   s.failOpen.Load(),
		FailClosed: s.failClosed.Load(),
	}
	l := s.done.ledger
	for c := range s.conns {
		st.Commands += c.stats.commands.Load()
		st.Allowed += c.stats.allowed.Load()
		st.Limited += c.stats.limited.Load()
		c.mu.Lock()
		l.add(c.ledger)
		c.mu.Unlock()
	}
	st.Charges, st.ChargesInDebt = l.charges, l.chargesInDebt
	st.ReservesAdmitted, st.ReservesRefused = l.reservesAdmitted, l.reservesRefused
	st.Settles, st.SettlesInDebt, st.SettlesAgain, st.SettlesUnknown = l.settles, l.settlesInDebt, l.settlesAgain, l.settlesUnknown
	return st
}

// conn is one client connection.
type conn struct {
	s *Server
	// The op and result of CL.THROTTLE, reused from command to command;
	// op's limit is the one limitText holds the text of.
	op        [1]funnel.Op
	res       [1]funnel.Result
	limitText limitText
	nc        net.Conn // with a goroutine per connection; nil in an event loop
	raddr     net.Addr
	laddr     net.Addr
	rd        *resp.Reader
	wr        *resp.Writer
	id        int64
	created   time.Time

	// Guarded by mu: read by CLIENT INFO/LIST of other connections, and by
	// Stats.
	mu     sync.Mutex
	ledger ledgerCounts // published from batch
	name   string
	lib    [2]string // CLIENT SETINFO lib-name, lib-ver
	user   string
	proto  int
	last   time.Time // when the client last sent commands

	tlsIn  *tlsInput // what rd reads on a TLS connection; nil otherwise
	authed bool
	// unauthSince is when the client connected, or last lost its
	// credentials (RESET), for AuthTimeout.
	unauthSince time.Time
	// The neighbours of the client in the server's list of clients
	// without credentials; guarded by the server's mu.
	uprev, unext *conn
	inUnauth     bool
	// kill closes the client's connection from another goroutine, in an
	// event loop (with a goroutine per connection, closing nc does).
	kill  func()
	quit  bool
	batch counters // since the last flush, published into stats then
	stats struct{ commands, allowed, limited atomic.Int64 }
	lower [32]byte // scratch for the lower-cased command name
}

// newConn returns the connection of a client accepted as nc, whose commands
// are read from and replies written to rw: nc itself, or an event loop's
// socket.
func newConn(s *Server, nc net.Conn, rw io.ReadWriter) *conn {
	now := time.Now()
	c := &conn{
		s:       s,
		raddr:   nc.RemoteAddr(),
		laddr:   nc.LocalAddr(),
		wr:      resp.NewWriter(rw),
		id:      s.nextID.Add(1),
		created: now,
		last:    now,
		user:    "default",
		proto:   2,
		authed:  !s.authRequired(),

		unauthSince: now,
	}
	if rw == nc {
		c.nc = nc
	}
	var in io.Reader = rw
	if tc, ok := rw.(*tls.Conn); ok {
		c.tlsIn = &tlsInput{tc: tc}
		in = c.tlsIn
	}
	c.rd = resp.NewReader(in, s.cfg.Limits)
	return c
}

func (c *conn) serve() {
	defer c.s.forget(c)
	defer c.nc.Close()
	if tc, ok := c.nc.(*tls.Conn); ok && !c.handshake(tc) {
		return
	}
	idle := c.s.cfg.IdleTimeout
	if idle > 0 {
		// A client that takes none of its replies for IdleTimeout is
		// idle too: its write fails, and it is closed, as an event loop
		// closes it.
		c.wr = resp.NewWriter(deadlineWriter{c.nc, idle})
	}
	var idleAt time.Time // the read deadline of IdleTimeout or AuthTimeout; zero: none
	busy := false        // Shutdown's drain has found the client sending
	for {
		if !c.rd.Ready() {
			// Every command read so far is answered: flush once for the
			// whole batch, then wait for more.
			ran := c.batch.commands > 0
			c.publish()
			if err := c.wr.Flush(); err != nil {
				return
			}
			if at := c.deadline(time.Now()); !at.IsZero() || !idleAt.IsZero() {
				idleAt = at
				c.nc.SetReadDeadline(idleAt)
			}
			// Shutdown sets closing, then a deadline that wakes the read:
			// a deadline set here before closing is seen is overridden.
			if c.s.closing.Load() {
				busy = busy || ran
				if c.drained() && !(busy && c.inputBeforeAcked()) {
					if h := c.s.testHookDrained; h != nil {
						h(c.nc)
					}
					if busy {
						// The client may still be sending (see Shutdown).
						c.drainClose()
					}
					return
				}
				busy = true
				c.nc.SetReadDeadline(idleAt) // undo Shutdown's wake-up
			}
		}
		args, err := c.rd.ReadCommand()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && c.s.closing.Load() && (idleAt.IsZero() || time.Now().Before(idleAt)) {
				// Shutdown's wake-up, not IdleTimeout: the Reader has kept
				// what it had read.
				continue
			}
			if c.readFailed(err) {
				lingerClose(c.nc)
			}
			return
		}
		c.batch.commands++
		c.exec(args)
		if c.quit {
			c.publish()
			c.wr.Flush()
			return
		}
	}
}

// evict closes the client's connection from another goroutine, to make
// room for a new client. It is called with the server's mu held.
func (c *conn) evict() {
	switch {
	case c.nc != nil:
		closeNow(c.nc)
	case c.kill != nil:
		c.kill()
	}
}

// setAuthed records whether the client has authenticated: a client without
// credentials joins the end of the server's list of them, the clients it
// may close to make room.
func (c *conn) setAuthed(authed bool) {
	if authed == c.authed {
		return
	}
	c.authed = authed
	if !authed {
		c.unauthSince = time.Now()
	}
	s := c.s
	s.mu.Lock()
	if _, open := s.conns[c]; open {
		if authed {
			s.unauth.remove(c)
		} else {
			s.unauth.push(c)
		}
	}
	s.mu.Unlock()
}

// connList is a list of clients, oldest first, linked through their uprev
// and unext.
type connList struct{ head, tail *conn }

func (l *connList) push(c *conn) {
	if c.inUnauth {
		return
	}
	c.inUnauth, c.uprev, c.unext = true, l.tail, nil
	if l.tail != nil {
		l.tail.unext = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *connList) remove(c *conn) {
	if !c.inUnauth {
		return
	}
	if c.uprev != nil {
		c.uprev.unext = c.unext
	} else {
		l.head = c.unext
	}
	if c.unext != nil {
		c.unext.uprev = c.uprev
	} else {
		l.tail = c.uprev
	}
	c.inUnauth, c.uprev, c.unext = false, nil, nil
}

// deadline returns when the client, waiting for input from now on, is to
// be disconnected: after IdleTimeout, or AuthTimeout after it connected
// when it has not authenticated, whichever comes first; zero for never.
func (c *conn) deadline(now time.Time) time.Time {
	var at time.Time
	if idle := c.s.cfg.IdleTimeout; idle > 0 {
		at = now.Add(idle)
	}
	if auth := c.s.cfg.AuthTimeout; auth > 0 && !c.authed {
		if a := c.unauthSince.Add(auth); at.IsZero() || a.Before(at) {
			at = a
		}
	}
	return at
}

// unauthenticated reports whether the client has gone without credentials
// for AuthTimeout at now.
func (c *conn) unauthenticated(now time.Time) bool {
	auth := c.s.cfg.AuthTimeout
	return auth > 0 && !c.authed && now.Sub(c.unauthSince) >= auth
}

// deadlineWriter writes to a connection with a write deadline of timeout
// from the start of each write: a write that makes no progress for that
// long fails.
type deadlineWriter struct {
	nc      net.Conn
	timeout time.Duration
}

func (w deadlineWriter) Write(p []byte) (int, error) {
	w.nc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.nc.Write(p)
}

// drained reports whether the connection, whose replies are all written, is
// drained as Shutdown says: its socket holds nothing more to read.
func (c *conn) drained() bool {
	nc := c.nc
	if c.tlsIn != nil {
		if c.tlsIn.poll() {
			return false
		}
		nc = c.tlsIn.tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	waiting := false
	if rc.Control(func(fd uintptr) { waiting = inputWaiting(int(fd)) }) != nil {
		return true
	}
	return !waiting
}

// inputBeforeAcked waits, once the drain has found the connection of a
// client that was sending drained, until the client's system has
// acknowledged every reply written, and reports whether input arrived
// meanwhile. The replies carry the window that lets the client send what it
// still holds, and what it sends in answer comes before its
// acknowledgement: so the drain reads and answers it, where it would have
// arrived while the connection lingers (see drainClose), unanswered.
func (c *conn) inputBeforeAcked() bool {
	return awaitAck(c.rawConn(), func(int) bool { return true })
}

// drainClose ends the drained connection of a client that was sending: it
// ends the server's side of the stream after the last reply, then reads and
// drops what still arrives until the client's system has acknowledged that
// end (see awaitAck). From then on the client reads every reply, then the
// end of the stream, even if a byte it sends after that resets the
// connection: until then, that byte would have reset it before the end, and
// the client read the reset instead, and lost the replies still in the
// server's send buffer. The caller closes the connection.
func (c *conn) drainClose() {
	if c.tlsIn != nil {
		c.tlsIn.tc.CloseWrite() // close_notify; the socket's end below
	}
	endDrained(c.rawConn())
}

// endDrained ends the server's side of the socket nc and reads and drops
// what arrives until the peer has acknowledged it, as drainClose says.
func endDrained(nc net.Conn) {
	cw, ok := nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	awaitAck(nc, func(fd int) bool { discard(fd); return false })
}

// rawConn returns the socket of the connection: nc, or beneath TLS.
func (c *conn) rawConn() net.Conn {
	if c.tlsIn != nil {
		return c.tlsIn.tc.NetConn()
	}
	return c.nc
}

// awaitAck waits until the peer of nc has acknowledged every byte written
// to nc, its end of the stream included once sent (on Linux: SIOCOUTQ;
// elsewhere it does not wait), or until the peer closes its side, or for
// lingerTimeout at most (a client that reads nothing does not acknowledge a
// full window), or until Close closes nc. When input waits it calls input
// with the socket, and returns true at once if input does; it returns false
// otherwise. The system signals no acknowledgement: it is asked every
// 100 µs at first, doubling up to 10 ms, and at each input.
func awaitAck(nc net.Conn, input func(fd int) bool) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	defer nc.SetReadDeadline(time.Time{}) // the callers set theirs again
	wait, until := 100*time.Microsecond, time.Now().Add(lingerTimeout)
	for {
		stop, done := false, false
		if rc.Control(func(fd uintptr) {
			waiting, ended := peek(int(fd))
			if waiting {
				if stop = input(int(fd)); stop {
					return
				}
			}
			done = ended || unacked(int(fd)) == 0
		}) != nil {
			return false
		}
		switch {
		case stop:
			return true
		case done || !time.Now().Before(until):
			return false
		}
		// Wait for input, or for the next look.
		nc.SetReadDeadline(time.Now().Add(wait))
		rc.Read(func(fd uintptr) bool {
			waiting, ended := peek(int(fd))
			return waiting || ended
		})
		wait = min(2*wait, 10*time.Millisecond)
	}
}

// readFailed answers a protocol error before the connection closes. It
// reports whether the client may still be sending what the server will not
// read (a protocol error, a command over the query buffer): the connection
// then lingers (see lingerClose) once its replies are written.
func (c *conn) readFailed(err error) (linger bool) {
	c.publish()
	var pe *resp.ProtocolError
	switch {
	case errors.As(err, &pe):
		c.wr.WriteError("ERR " + pe.Msg)
		c.wr.Flush()
		c.s.log.Debug("resp: protocol error", "client", c.id, "addr", c.raddr, "err", pe.Msg)
		return true
	case errors.Is(err, resp.ErrQueryBufferFull):
		c.wr.Flush()
		c.s.log.Warn("resp: client closed for exceeding the query buffer limit", "client", c.id, "addr", c.raddr)
		return true
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, io.ErrUnexpectedEOF):
		c.wr.Flush()
	default:
		var ne net.Error
		switch {
		case !errors.As(err, &ne) || !ne.Timeout() || c.s.closing.Load():
		case c.unauthenticated(time.Now()):
			c.s.log.Debug("resp: client closed for not authenticating in time", "client", c.id, "addr", c.raddr)
		default:
			c.s.log.Debug("resp: idle client closed", "client", c.id, "addr", c.raddr)
		}
		c.wr.Flush()
	}
	return false
}

// A connection closed for bad input lingers: it reads and drops what the
// client goes on sending, for at most lingerTimeout and lingerBytes.
const (
	lingerTimeout = 5 * time.Second
	lingerBytes   = 64 << 20
)

// lingerClose ends the connection nc, whose replies are written, as a
// connection closed for bad input: it sends the end of the stream
// (CloseWrite), then reads and drops what the client still sends until the
// client closes its side, or for lingerTimeout and lingerBytes at most. A
// socket closed with unread input is reset, and a reset can reach the
// client before it has read the reply, while it is still writing a large
// command (a 10 MB argument): its write fails, and the reply is lost. The
// caller closes nc.
func lingerClose(nc net.Conn) {
	cw, ok := nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	nc.SetReadDeadline(time.Now().Add(lingerTimeout))
	io.CopyN(io.Discard, nc, lingerBytes)
}

// publish adds the batch's counters to the connection's statistics.
func (c *conn) publish() {
	if c.batch != (counters{}) {
		c.publishAt(time.Now())
	}
}

// publishAt adds the batch's counters to the connection's statistics, and
// notes now as the time of its last commands.
func (c *conn) publishAt(now time.Time) {
	b := c.batch
	if b == (counters{}) {
		return
	}
	c.batch = counters{}
	c.stats.commands.Add(b.commands)
	if b.allowed != 0 {
		c.stats.allowed.Add(b.allowed)
	}
	if b.limited != 0 {
		c.stats.limited.Add(b.limited)
	}
	c.mu.Lock()
	c.last = now
	if b.ledger != (ledgerCounts{}) {
		c.ledger.add(b.ledger)
	}
	c.mu.Unlock()
}
