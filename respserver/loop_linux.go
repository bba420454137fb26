//go:build linux

package respserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/funnelrl/funnel"
)

// Event loops.
//
// With a goroutine per connection, each request costs a netpoller wake-up,
// a read, the command, a write, a read that finds nothing (EAGAIN) and a
// park, with hand-offs between threads; on a small machine that is most of
// the server's time. An event loop serves many connections on one thread,
// as Redis does: one epoll_wait reports every ready client, and for each the
// loop reads what is there, runs every complete command and writes the
// replies with one write.
//
// Ownership of descriptors. The accept goroutine accepts with the listener's
// Accept (the listener stays Go's: closing it stops Serve as usual), then
// duplicates the connection's descriptor and closes the Go connection, which
// removes the original from Go's netpoller. From then on only the loop knows
// the duplicate: it is registered with the loop's epoll, read, written and
// closed by the loop's goroutine alone, so Go's netpoller and the loop never
// both own a descriptor. The loop deregisters a descriptor (EPOLL_CTL_DEL)
// before closing it, so that a copy briefly held by a forked child cannot
// leave a registration behind that reports events under a reused number.
//
// Reading. The loop's epoll is level-triggered. A Reader reads through the
// connection's lconn, whose Read returns errWouldBlock (which ReadCommand
// passes through, and which is not sticky) when the socket is empty. A read
// that returns less than it asked for means the socket is drained for now,
// so the next Read says errWouldBlock without a system call. A loop reads at
// most readBudget bytes from a client per wake-up before it turns to the
// others; the rest is reported again by the next epoll_wait.
//
// Writing and back-pressure. The replies of a batch go out in one send. What
// the socket does not take waits in the connection's output buffer, the loop
// watches EPOLLOUT instead of EPOLLIN, and it runs no more of the client's
// commands (nor reads) until the buffer is written: a client that does not
// read its replies holds at most one batch of them. A client whose waiting
// replies exceed Config.MaxOutputBuffer is disconnected. Writes use
// MSG_NOSIGNAL: a reset peer is an EPIPE error and never a SIGPIPE.
//
// Time. Each loop reads the clock once per epoll_wait. IdleTimeout and
// AuthTimeout are checked by a sweep of the loop's connections every tenth
// of the shorter timeout (at least every 10 ms, at most every second): a
// client is idle when it has neither sent commands nor taken replies for
// that long, and closed for want of credentials when it has not
// authenticated AuthTimeout after it connected, idle or not.
//
// Shutdown. When a loop sees that the server is closing, it serves each of
// its connections once, and from then on closes a connection as soon as it
// is drained, as Server.Shutdown says: when, after serving it, no reply
// waits and a look at the socket (MSG_PEEK) finds nothing more to read. A
// connection whose replies wait is served as usual until they are written.
// Close and the end of Shutdown stop the loops, which close their
// connections and descriptors.

const (
	// loopEvents is the most ready connections one epoll_wait reports.
	loopEvents = 256
	// readBudget is the most bytes a loop reads from one client per
	// wake-up, so that a client with a long pipeline does not hold up the
	// others.
	readBudget = 64 << 10
	// keepOutBuf is the largest output buffer a connection keeps once its
	// replies are written.
	keepOutBuf = 64 << 10
	// yieldEvery is how often a busy loop yields to the scheduler: well
	// within the 10 ms after which sysmon deems a goroutine long-running.
	yieldEvery = 5 * time.Millisecond
)

// errWouldBlock is what an event loop connection's Read returns when the
// socket has nothing more to read for now.
var errWouldBlock = errors.New("resp: no input ready")

// errOutputLimit closes a client whose waiting replies exceed
// Config.MaxOutputBuffer.
var errOutputLimit = errors.New("resp: output buffer limit exceeded")

// defaultEventLoops returns the number of event loops of EventLoops 0: one
// for every two CPUs that Go may use, rounded up. Loops compete for the CPUs
// with the kernel's network work and with clients on the same machine. On
// two CPUs shared with redis-benchmark (-c 50 -r 100000), one loop served
// CL.THROTTLE faster than two: medians of six runs, 0.96 and 0.94 times
// Redis's GET with -P 1, 0.74 and 0.62 times with -P 16 (a goroutine per
// connection: 0.75 and 0.52). Larger machines were not measured.
func defaultEventLoops() int { return (runtime.GOMAXPROCS(0) + 1) / 2 }

// loopGroup is a server's event loops.
type loopGroup struct {
	s     *Server
	loops []*eventLoop
	next  int // the loop of the next connection; guarded by s.mu
	wg    sync.WaitGroup
}

// loopsFor returns the event loops that serve the connections of ln,
// starting them if they are not yet, or nil when ln's connections are served
// by goroutines. It is called with s.mu held.
func (s *Server) loopsFor(ln net.Listener) *loopGroup {
	n := s.cfg.EventLoops
	if _, tcp := ln.(*net.TCPListener); !tcp || n < 0 {
		return nil
	}
	if n == 0 && !funnel.NonBlockingOf(s.store) {
		return nil
	}
	if s.loops != nil {
		return s.loops
	}
	if n == 0 {
		n = defaultEventLoops()
	}
	g := &loopGroup{s: s}
	for i := range n {
		l, err := newLoop(s, i)
		if err != nil {
			for _, l := range g.loops {
				l.release()
			}
			s.log.Warn("resp: event loops are not available; serving a goroutine per connection", "err", err)
			return nil
		}
		g.loops = append(g.loops, l)
	}
	g.wg.Add(len(g.loops))
	for _, l := range g.loops {
		go func() {
			defer g.wg.Done()
			l.run()
		}()
	}
	s.loops = g
	return g
}

// accept hands nc over to one of the loops, in turn, or refuses it.
func (g *loopGroup) accept(nc net.Conn) {
	s := g.s
	fd, err := takeFD(nc)
	if err != nil {
		s.log.Warn("resp: cannot take over a connection", "addr", nc.RemoteAddr(), "err", err)
		nc.Close()
		return
	}
	lc := &lconn{fd: fd, slot: -1}
	lc.c = newConn(s, nc, lc)
	lc.c.kill = func() { lc.l.kill(lc) } // lc.l is set by then (under s.mu)
	placed := s.admit(lc.c, nc, func() {
		lc.l = g.loops[g.next]
		g.next = (g.next + 1) % len(g.loops)
		lc.l.mu.Lock()
		lc.l.incoming = append(lc.l.incoming, lc)
		lc.l.mu.Unlock()
	})
	if !placed {
		unix.Close(fd)
		return
	}
	// The loop owns the duplicate now: let Go's netpoller forget the
	// original.
	nc.Close()
	lc.l.wake()
}

// takeFD returns a duplicate of nc's descriptor, in non-blocking mode and
// closed on exec.
func takeFD(nc net.Conn) (int, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("resp: %T has no descriptor", nc)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(sfd uintptr) {
		fd, derr = unix.FcntlInt(sfd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	// Go's descriptors are non-blocking, and the flag belongs to the open
	// file that both share; set it anyway, as a blocking read would stall
	// every client of the loop.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// wake wakes every loop, so that it sees that the server is closing.
func (g *loopGroup) wake() {
	if g == nil {
		return
	}
	for _, l := range g.loops {
		l.wake()
	}
}

// stop makes every loop close its connections and end, and waits for them.
func (g *loopGroup) stop() {
	if g == nil {
		return
	}
	for _, l := range g.loops {
		l.mu.Lock()
		l.quit = true
		l.mu.Unlock()
		l.wake()
	}
	g.wg.Wait()
}

// eventLoop is one event loop: a goroutine with an epoll instance, serving the
// connections given to it.
type eventLoop struct {
	s      *Server
	id     int
	epfd   int
	woken  atomic.Bool // a wake-up is on its way
	mu     sync.Mutex
	wakefd int      // an eventfd, guarded by mu: -1 once closed
	quit   bool     // guarded by mu: close everything and end
	newc   []*lconn // guarded by mu: spare for incoming
	// incoming are the connections handed to the loop, guarded by mu.
	incoming []*lconn
	// killed are connections to close, from other goroutines; guarded by
	// mu.
	killed []*lconn

	// The rest belongs to the loop's goroutine.
	conns     []*lconn // by descriptor
	list      []*lconn // every connection, for the sweeps
	events    [loopEvents]unix.EpollEvent
	now       time.Time // when the last epoll_wait returned
	nextSweep time.Time
	draining  bool // the server is closing: close connections once drained
	acking    int  // connections whose ackWait is set
}

func newLoop(s *Server, id int) (*eventLoop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("resp: epoll_create1: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("resp: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, fmt.Errorf("resp: epoll_ctl: %w", err)
	}
	return &eventLoop{s: s, id: id, epfd: epfd, wakefd: wakefd}, nil
}

// release closes the loop's descriptors.
func (l *eventLoop) release() {
	l.mu.Lock()
	unix.Close(l.wakefd)
	l.wakefd = -1
	l.mu.Unlock()
	unix.Close(l.epfd)
}

// wake interrupts the loop's epoll_wait, unless a wake-up is already on its
// way.
func (l *eventLoop) wake() {
	if l.woken.Swap(true) {
		return
	}
	one := [8]byte{1}
	l.mu.Lock()
	if l.wakefd >= 0 {
		unix.Write(l.wakefd, one[:])
	}
	l.mu.Unlock()
}

func (l *eventLoop) run() {
	defer l.release()
	s := l.s
	idle, auth := s.cfg.IdleTimeout, s.cfg.AuthTimeout
	sweep := idle > 0 || auth > 0
	shortest := idle
	if auth > 0 && (idle <= 0 || auth < idle) {
		shortest = auth
	}
	sweepEvery := min(max(shortest/10, 10*time.Millisecond), time.Second)
	l.now = time.Now()
	l.nextSweep = l.now.Add(sweepEvery)
	yielded := l.now
	for {
		if l.now.Sub(yielded) >= yieldEvery {
			// A goroutine that never passes through the scheduler looks to
			// sysmon like one that runs for too long: every tick it would
			// take the loop's P away during epoll_wait (and wake every
			// 20 µs to do so). Yielding now and then keeps it quiet.
			runtime.Gosched()
			yielded = l.now
		}
		timeout := l.timeout(sweep)
		if l.acking > 0 && (timeout < 0 || timeout > 1) {
			timeout = 1 // ackPoll
		}
		n, err := unix.EpollWait(l.epfd, l.events[:], timeout)
		l.now = time.Now()
		if err != nil {
			if err != unix.EINTR {
				s.log.Error("resp: epoll_wait failed", "loop", l.id, "err", err)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		quit := false
		for i := range n {
			ev := &l.events[i]
			fd := int(ev.Fd)
			if fd == l.wakefd {
				quit = l.wakeUp()
				continue
			}
			if fd < len(l.conns) && l.conns[fd] != nil {
				l.handle(l.conns[fd], ev.Events)
			}
		}
		if quit {
			for len(l.list) > 0 {
				l.close(l.list[len(l.list)-1])
			}
			return
		}
		if !l.draining && s.closing.Load() {
			l.startDrain()
		}
		if l.acking > 0 {
			l.ackPoll()
		}
		if sweep && !l.now.Before(l.nextSweep) {
			l.sweep(idle)
			l.nextSweep = l.now.Add(sweepEvery)
		}
	}
}

// timeout returns epoll_wait's timeout in milliseconds: until the next
// sweep, or -1 (none).
func (l *eventLoop) timeout(sweep bool) int {
	if !sweep {
		return -1
	}
	d := time.Until(l.nextSweep)
	if d <= 0 {
		return 0
	}
	return int((d + time.Millisecond - 1) / time.Millisecond)
}

// wakeUp takes the connections handed to the loop, and reports whether the
// loop must end.
func (l *eventLoop) wakeUp() bool {
	// Reset the eventfd, then the flag, then look: a wake-up after the
	// flag is reset writes to the eventfd again, and anything handed over
	// before it is seen below. (Resetting the flag first would let a write
	// made in between be consumed here, leaving the flag set for good.)
	var buf [8]byte
	unix.Read(l.wakefd, buf[:])
	l.woken.Store(false)
	l.mu.Lock()
	in, quit := l.incoming, l.quit
	l.incoming = l.newc[:0]
	l.mu.Unlock()
	for i, lc := range in {
		l.add(lc)
		in[i] = nil
	}
	l.mu.Lock()
	l.newc = in
	killed := l.killed
	l.killed = nil
	l.mu.Unlock()
	for _, lc := range killed {
		l.close(lc) // nothing if it is closed already
	}
	return quit
}

// kill makes the loop close lc, from another goroutine.
func (l *eventLoop) kill(lc *lconn) {
	l.mu.Lock()
	l.killed = append(l.killed, lc)
	l.mu.Unlock()
	l.wake()
}

// add registers a connection with the loop.
func (l *eventLoop) add(lc *lconn) {
	lc.last = l.now
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(lc.fd)}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, lc.fd, &ev); err != nil {
		l.s.log.Warn("resp: epoll_ctl failed; client closed", "client", lc.c.id, "addr", lc.c.raddr, "err", err)
		l.close(lc)
		return
	}
	if lc.fd >= len(l.conns) {
		l.conns = append(l.conns, make([]*lconn, lc.fd+1-len(l.conns))...)
		l.conns = l.conns[:cap(l.conns)]
	}
	l.conns[lc.fd] = lc
	lc.slot = len(l.list)
	l.list = append(l.list, lc)
	if l.draining {
		// Accepted just before Shutdown: answer what the client has sent
		// already.
		l.serve(lc)
	}
}

// close closes a connection and forgets it.
func (l *eventLoop) close(lc *lconn) {
	fd := l.detach(lc)
	if fd < 0 {
		return
	}
	unix.Close(fd)
	l.s.forget(lc.c)
}

// detach takes a connection out of the loop (and out of epoll), publishes
// its counters and returns its descriptor, which the caller closes or hands
// over; -1 when it is closed already.
func (l *eventLoop) detach(lc *lconn) int {
	fd := lc.fd
	if fd < 0 {
		return -1
	}
	if lc.ackWait {
		lc.ackWait = false
		l.acking--
	}
	if lc.slot >= 0 {
		unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, fd, nil)
		l.conns[fd] = nil
		last := l.list[len(l.list)-1]
		l.list[lc.slot], last.slot = last, lc.slot
		l.list[len(l.list)-1] = nil
		l.list = l.list[:len(l.list)-1]
		lc.slot = -1
	}
	lc.fd = -1
	lc.out = nil
	lc.c.publishAt(l.now)
	return fd
}

// end closes a connection that is done, with every reply written; one
// closed for bad input lingers first (see lingerClose), and one drained by
// Shutdown while its client was sending waits for the client to take the
// end of the stream (see conn.drainClose), on a goroutine of its own that
// closes it, still counted among the server's clients until then.
func (l *eventLoop) end(lc *lconn) {
	if !lc.linger && !lc.drainEnd {
		l.close(lc)
		return
	}
	fd, c, drained := l.detach(lc), lc.c, lc.drainEnd
	// The descriptor goes to Go's netpoller, which lingerClose waits on.
	f := os.NewFile(uintptr(fd), "")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		l.s.forget(c)
		return
	}
	l.s.mu.Lock()
	c.nc = nc // for Close
	l.s.mu.Unlock()
	go func() {
		defer l.s.forget(c)
		if drained {
			endDrained(nc)
		} else {
			lingerClose(nc)
		}
		nc.Close()
	}()
}

// handle serves a connection that epoll reports ready.
func (l *eventLoop) handle(lc *lconn, events uint32) {
	if lc.outWatch {
		// Waiting to write (EPOLLOUT, or EPOLLERR or EPOLLHUP, which the
		// write reports).
		if err := lc.flushOut(l.now); err != nil {
			l.close(lc)
			return
		}
		if lc.pending() {
			return
		}
		if lc.finish {
			l.end(lc)
			return
		}
		if err := l.watch(lc, false); err != nil {
			return
		}
		// Commands may be waiting in the Reader: run them, and read what
		// came meanwhile.
	}
	l.serve(lc)
}

// serve reads what the client has sent, runs every complete command, and
// writes the replies: the whole of them, or what the socket takes, the rest
// waiting for EPOLLOUT.
func (l *eventLoop) serve(lc *lconn) {
	c := lc.c
	lc.drained, lc.budget = false, readBudget
	ran := false
	for !lc.pending() && lc.werr == nil {
		args, err := c.rd.ReadCommand()
		if err == errWouldBlock {
			break
		}
		if err != nil {
			lc.linger = c.readFailed(err)
			lc.finish = true
			break
		}
		ran = true
		c.batch.commands++
		c.exec(args)
		if c.quit {
			lc.finish = true
			break
		}
	}
	if ran {
		lc.last = l.now
		c.publishAt(l.now)
	}
	if err := c.wr.Flush(); err != nil {
		if errors.Is(err, errOutputLimit) {
			l.s.log.Warn("resp: client closed for exceeding the output buffer limit", "client", c.id, "addr", c.raddr)
		}
		l.close(lc)
		return
	}
	switch {
	case lc.pending():
		l.watch(lc, true)
	case lc.finish:
		// Done (QUIT, an error, the end of the input), with every reply
		// written.
		l.end(lc)
	case l.s.closing.Load():
		lc.busy = lc.busy || ran
		if inputWaiting(lc.fd) {
			lc.busy = true
			break
		}
		if lc.busy && l.awaitAck(lc) {
			break
		}
		// Drained, as Shutdown says; a client that was sending may still
		// be, and its connection ends as conn.drainClose says.
		if lc.busy {
			lc.drainEnd = true
			l.end(lc)
		} else {
			l.close(lc)
		}
	}
}

// awaitAck reports whether the drained connection of a client that was
// sending waits for the client's system to acknowledge every reply written,
// as conn.inputBeforeAcked says why; the loop then serves it again at its
// next wake-up, at most a millisecond later (see ackPoll), for
// lingerTimeout at most.
func (l *eventLoop) awaitAck(lc *lconn) bool {
	if unacked(lc.fd) == 0 {
		return false
	}
	if lc.ackBy.IsZero() {
		lc.ackBy = l.now.Add(lingerTimeout)
	}
	if !l.now.Before(lc.ackBy) {
		return false
	}
	if !lc.ackWait {
		lc.ackWait = true
		l.acking++
	}
	return true
}

// ackPoll serves again the drained connections that wait for an
// acknowledgement (see awaitAck).
func (l *eventLoop) ackPoll() {
	for _, lc := range slices.Clone(l.list) {
		if lc.fd >= 0 && lc.ackWait {
			lc.ackWait = false
			l.acking--
			if !lc.outWatch {
				l.serve(lc)
			}
		}
	}
}

// watch makes epoll report when the client's socket can be written (out),
// or read. On failure it closes the connection.
func (l *eventLoop) watch(lc *lconn, out bool) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(lc.fd)}
	if out {
		ev.Events = unix.EPOLLOUT
	}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, lc.fd, &ev); err != nil {
		l.s.log.Warn("resp: epoll_ctl failed; client closed", "client", lc.c.id, "addr", lc.c.raddr, "err", err)
		l.close(lc)
		return err
	}
	lc.outWatch = out
	return nil
}

// startDrain begins Shutdown's drain: the loop serves every connection
// that does not wait to write, so that those that are drained close, idle
// ones included. The others close when they are.
func (l *eventLoop) startDrain() {
	l.draining = true
	for _, lc := range slices.Clone(l.list) {
		if lc.fd >= 0 && !lc.outWatch {
			l.serve(lc)
		}
	}
}

// sweep closes the connections idle for idle or longer (when idle is
// positive), and those that have gone without credentials for AuthTimeout.
func (l *eventLoop) sweep(idle time.Duration) {
	for i := 0; i < len(l.list); {
		lc := l.list[i]
		switch {
		case lc.c.unauthenticated(l.now):
			if !l.s.closing.Load() {
				l.s.log.Debug("resp: client closed for not authenticating in time", "client", lc.c.id, "addr", lc.c.raddr)
			}
		case idle > 0 && l.now.Sub(lc.last) >= idle:
			if !l.s.closing.Load() {
				l.s.log.Debug("resp: idle client closed", "client", lc.c.id, "addr", lc.c.raddr)
			}
		default:
			i++
			continue
		}
		l.close(lc) // moves the last connection to i
	}
}

// lconn is the socket of a connection served by an event loop: the Reader's
// io.Reader and the Writer's io.Writer.
type lconn struct {
	c    *conn
	l    *eventLoop
	fd   int // -1 once closed
	slot int // index in l.list; -1 when not there

	drained bool // nothing more to read until the next wake-up
	budget  int  // bytes that may still be read in this wake-up

	out      []byte // replies waiting for the socket: out[off:]
	off      int
	werr     error     // the first write error: the connection is done
	outWatch bool      // epoll watches EPOLLOUT, not EPOLLIN
	finish   bool      // close once the replies are written
	linger   bool      // and linger first: closed for bad input
	drainEnd bool      // or end as conn.drainClose does: drained while busy
	busy     bool      // Shutdown's drain has found the client sending
	ackWait  bool      // drained, waiting for the client's acknowledgement (awaitAck)
	ackBy    time.Time // when the wait for it ends
	last     time.Time // the last commands or written replies, for IdleTimeout
}

// Read reads from the socket, or returns errWouldBlock when it has nothing
// for now.
func (lc *lconn) Read(p []byte) (int, error) {
	if lc.drained || lc.budget <= 0 {
		return 0, errWouldBlock
	}
	for {
		n, err := read(lc.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			lc.drained = true
			return 0, errWouldBlock
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		lc.budget -= n
		if n < len(p) {
			// A short read: the socket is empty; save the read that
			// would say EAGAIN.
			lc.drained = true
		}
		return n, nil
	}
}

// Write sends p, and keeps what the socket does not take, to be written on
// EPOLLOUT. Once replies wait, later ones wait behind them.
func (lc *lconn) Write(p []byte) (int, error) {
	if lc.werr != nil {
		return 0, lc.werr
	}
	n := len(p)
	if !lc.pending() {
		w, err := send(lc.fd, p)
		if err != nil {
			lc.werr = err
			return 0, err
		}
		p = p[w:]
		if len(p) == 0 {
			return n, nil
		}
	}
	if len(lc.out)-lc.off+len(p) > lc.c.s.cfg.MaxOutputBuffer {
		lc.werr = errOutputLimit
		return 0, lc.werr
	}
	if lc.off > 0 && lc.off == len(lc.out) {
		lc.out, lc.off = lc.out[:0], 0
	}
	lc.out = append(lc.out, p...)
	return n, nil
}

// pending reports whether replies wait for the socket.
func (lc *lconn) pending() bool { return lc.off < len(lc.out) }

// flushOut writes the waiting replies, as much as the socket takes. It
// counts written replies as activity at now.
func (lc *lconn) flushOut(now time.Time) error {
	if lc.werr != nil {
		return lc.werr
	}
	for lc.pending() {
		n, err := send(lc.fd, lc.out[lc.off:])
		if err != nil {
			lc.werr = err
			return err
		}
		if n == 0 {
			return nil
		}
		lc.off += n
		lc.last = now
		if lc.pending() {
			// A short write: the socket is full.
			return nil
		}
	}
	if cap(lc.out) > keepOutBuf {
		lc.out = nil
	}
	lc.out, lc.off = lc.out[:0], 0
	return nil
}

// The sockets are non-blocking, so read and send make raw system calls:
// without telling the scheduler, which saves its bookkeeping on the two
// calls of every request. epoll_wait, which blocks, is an ordinary call.

// read reads from the socket fd into p, which is not empty.
func read(fd int, p []byte) (int, error) {
	n, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// send writes p to the socket fd without blocking, and returns how much it
// took: 0 when the socket is full. MSG_NOSIGNAL turns a write to a reset
// connection into EPIPE, without a SIGPIPE.
func send(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)), unix.MSG_NOSIGNAL, 0, 0)
		switch errno {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, nil
		}
		return 0, errno
	}
}
