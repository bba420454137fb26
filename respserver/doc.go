// Package respserver serves funnel decisions over the Redis protocol. It reads
// commands and writes replies with package resp's codec, and holds what the
// codec does not: the listeners and connections, the serving modes, TLS,
// authentication and the command table.
//
// # Commands
//
// Decisions are redis-cell's CL.THROTTLE and Funnel's own FUNNEL.* family
// (FUNNEL.ALLOW, with PEEK a probe, FUNNEL.CHARGE, a cost known afterwards,
// FUNNEL.RESERVE and FUNNEL.SETTLE, a cost estimated first and settled
// afterwards, FUNNEL.ALLOWALL, FUNNEL.ACQUIRE, FUNNEL.RELEASE, FUNNEL.REFUND,
// FUNNEL.BANS, FUNNEL.UNBAN). Beside them the server answers
// the commands that Redis clients and tools send on their own: PING, ECHO,
// HELLO, AUTH, CLIENT, SELECT, COMMAND, INFO, CONFIG, QUIT and RESET, and
// DEL, EXISTS, TTL and PTTL on the keys of the store. Replies are those of
// redis-server (or of redis-cell) for the same request, in RESP2 or, after
// HELLO 3, RESP3. A decision that the store could not make is answered as
// Config.Fail and Config.FailClosed say; any other command that the store
// could not answer, with the error -TRYAGAIN store unavailable. A key longer than funnel.MaxKeyLen
// is stored under its hash (funnel.BoundKey), as on every edge.
//
// # Serving modes
//
// A Server serves each connection in one of two ways, chosen by
// Config.EventLoops:
//
//   - Event loops (Linux, TCP listeners): each loop serves many connections
//     on one thread with epoll, as Redis does, running every command of a
//     ready client and the store's calls on that thread, and writing the
//     replies of a batch with one write. This suits a store that decides in
//     memory (a NonBlockingStore that says it does not block).
//   - A goroutine per connection: for a store that waits on the network,
//     for TLS listeners, and on other platforms.
//
// Both modes give the same replies; they differ in how many threads and
// system calls a request costs.
//
// Create a Server with New, serve listeners with Serve, and stop with
// Shutdown or Close. A Server is safe for concurrent use.
package respserver
