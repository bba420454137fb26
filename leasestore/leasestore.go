// Package leasestore shares one funnel (or one fixed or sliding window)
// among a fleet of processes at memory speed, without ever admitting more
// than the limit would: each process leases blocks of a key's units from
// the Redis store (package redisstore, gcra.Lease; a window's take) and
// spends them from memory, with no round trip.
//
// # The guarantee
//
// Replay every request that the fleet admitted, at the instant it was
// admitted, through one exact funnel with the configured limit: it admits
// every one of them (for windows, through one exact window counter: see
// Windows below). For the funnel (rate R = 1/T, tolerance τ), three rules
// make it so:
//
//   - Each key has its lifetime L_k = min(L, (τ−T)/2) (KeyLifetime; L is
//     Options.Lifetime), and the shared funnel is leased with its
//     tolerance shrunk by it, τ' = τ−L_k: the burst is reduced by R·L_k
//     units, the sustained rate unchanged (τ' ≥ (τ+T)/2 ≥ T).
//   - Each unit of a lease has a slot: the instant at which, taken as an
//     admission, it conforms to the reduced funnel (gcra.LeaseSlot): the
//     call's Redis time for the units that fitted at once, later for
//     future-dated ones. A unit is spent no earlier than its slot and
//     less than its lifetime ℓ after it; a unit not spent by then is
//     forfeited. ℓ is L_k, extended under contention by how far the
//     funnel's TAT was ahead of Redis's time before the unit: unit j of a
//     grant (0 for the first) whose funnel was d ahead before it lives
//     ℓ_j = L_k + min(d+j·T, τ'−T, L−L_k), so at most min(L, τ−T)
//     (where L−L_k ≥ τ'−T, a grant's units end one interval apart).
//   - Unspent units go back only if the key's TAT is still the lease's
//     end (a compare-and-set in the lease call), and only the units after
//     the last one spent; others are forfeited.
//
// The proof, in four steps:
//
//  1. A set of admissions conforms to a funnel (T, τ) exactly when any
//     window [a, b] holds at most (b−a+τ)/T of them (sorted, unit j
//     conforms when j−i+1 units since unit i fit in t_j−t_i+τ; the TAT
//     after unit j is the largest t_i+(j−i+1)·T).
//  2. The units that can be spent within [a, b] are those whose spend
//     window [σ, e) (e = σ+ℓ, its end) meets it: σ ≤ b and e > a. Take
//     the last of them that Redis debited, k, with slot σ_k ≤ b; every
//     other was debited before it, with its end after a. So it suffices
//     that each unit k, when debited, find G units before it whose ends
//     are after a with (G+1)·T ≤ τ+max(σ_k−a, 0), for every a; which
//     holds when the GCRA TAT of the ends of the units debited before it,
//     Z (each end taken as an admission, in the order Redis debited them:
//     Z ← max(Z, e)+T, at least the TAT of the ends sorted), is at most
//     σ_k+τ−T (the G ends after a, as admissions, leave Z ≥ a+G·T).
//  3. Redis keeps Z−L_k as the key's TAT X. Redis runs the calls one at a
//     time, at times n_1 ≤ n_2 ≤ …; a grant at n whose funnel was at
//     base = max(X, n) takes units ending at x_j = base+(j+1)·T, and unit
//     j's slot is σ_j = max(n, x_j−τ'): then X ≤ σ_j+τ'−T before it, which
//     is Z ≤ σ_j+τ−T, step 2's condition. After it, the ends' TAT is
//     max(Z, σ_j+ℓ_j)+T, and X moves to x_j (Z to x_j+L_k) exactly when
//     σ_j+ℓ_j−L_k ≤ max(X, n) before the unit. With ℓ_j = L_k that always
//     holds (σ_j ≤ max(X, n)): the funnel as before. Before unit j,
//     max(X, n) is base+j·T = n+d+j·T (d = base−n; x_{j−1} from the
//     second unit on). So with the extension δ_j = ℓ_j−L_k ≤ d+j·T it
//     holds for the units granted at once (σ_j = n), and with
//     δ_j ≤ τ'−T for the future-dated ones (σ_j = x_j−τ' = x_{j−1}+T−τ').
//     So the units' longer lives cost the funnel nothing: it is the same
//     sequence of TATs as ever. A cold key's plain decision under the
//     reduced funnel is a unit spent at n, whose end n is before n+L_k.
//     Units never spent only lower the ends' TAT. A give-back, applied
//     only when nothing followed the lease and only of the units after
//     the last one spent, removes the last units of the sequence, each of
//     which had moved X by T: X less their T's is at least what X would
//     be without them (clamped to n, higher still). The units given back
//     are debited again by the next lease.
//  4. On the node's clock a unit is spendable from when the answer came
//     back plus σ−n (Redis decided before), until when the request was
//     sent plus ℓ_j+σ−n (Redis decided after). Only differences of the
//     node's clock count; its rate is taken to be Redis's. By step 2 the
//     admissions conform to the configured funnel.
//
// A lifetime that the funnel's state does not pay for is not exact: a
// lease granted at once on an empty funnel whose units lived τ−T, spent
// at the end of their lives, with the next lease's future-dated units
// spent at theirs, admits up to (τ−T−L_k)/T units more than the funnel.
//
// The tests replay simulated fleets on a fake clock (1 to 16 nodes,
// random, on/off and overload arrivals up to 100 times the rate, smooth
// limits, round trips of 0 to 20 ms, node clocks apart) and on a real
// Redis; spending units before their slots, or the store's lifetime after
// them rather than the key's, or extending a lifetime beyond how far the
// funnel was ahead of its unit or beyond τ−T, fails them.
//
// What the fleet gives up is under-admission: the R·L_k units of burst
// (the extension of a contended key's lifetimes gives up nothing more:
// step 3), and the units leased but not spent (forfeited when their time ends,
// when the process stops, or when the key goes quiet). A limit whose
// L_k would be under MinLifetime (a burst too small for a lease to be
// spent within it), or whose tolerance is above gcra.MaxLeaseTolerance, is
// not leased: its decisions go to the Redis store one by one, exactly as
// without this package.
//
// # What is leased
//
// One decision of the funnel (GCRA) without a ban, for one key, taking at
// least one unit: Allow and CL.THROTTLE; one call of Redis's own GCRA
// command (Store.GCRA); and one take of a fixed or sliding window without
// a ban, of 1 to Count units (see Windows below).
//
// A GCRA command's key is leased as a funnel, on the command's own key and
// in its units (gcra.LeaseCommand, redisstore.Store.LeaseGCRA): µs, the
// variance as the tolerance, one token a unit, and Redis's time in whole
// milliseconds, as the command's. The rules and the proof above hold with
// τ the variance; the lease's time can be up to a millisecond before the
// call ran, so its units end a millisecond sooner (L_k at least 2 ms). A
// cold key's call is a lease of exactly its tokens spent at once, whose
// grant gives the command's exact reply under the reduced variance.
// Everything else — peeks (of n units too), refunds, charges, the sliding
// log, the leaky bucket, concurrency, bans, several limits at once — goes
// to the Redis store as it is.
//
// A charge (funnel.OpCharge, Limiter.Charge) of a leased key is exact: it
// is applied whole to the shared state in Redis (the funnel's TAT moves by
// n intervals, a window's count by n), never from the units a process
// holds. Those units were debited when they were leased, so a process may
// still spend them after a charge has put the key into debt: the debt then
// drains as if they had been spent before it, and the fleet admits no more
// than one exact funnel (or window) would. A peek of n units answers from
// Redis's state, in which the units held are spent already. A key's format stays the store's (redis-cell's for the funnel), so
// that leasing processes, plain Redis stores and the redis-cell module can
// share keys.
//
// # Decisions
//
// A decision spends from the key's leases in memory: the units whose slot
// has come and whose time has not ended, the older first. When the units
// it holds cover the request but have not all matured (future-dated
// units, under contention), the request is refused from memory with the
// wait for the last of them: a lease call would only bring units after
// them. When it holds too few, it waits for one lease call (calls for one
// key are shared: one in flight at a time); it is never refused from
// local state while the shared funnel may have room. A lease takes the
// units that fit at once and, beyond them, future-dated units up to two
// lifetimes ahead of Redis's time (gcra.LeaseRequest.Horizon): the next
// slots of the shared funnel, as admissions queued at Redis's time would
// take them. A call that grants nothing (the funnel is taken beyond the
// horizon) answers its exact RetryAfter, and the key is refused from
// memory until a call can get units (a Reset through this store forgets
// it, a reset elsewhere is not seen). A hot key's next lease is asked for
// in the background when its units run low (to what it spends here in
// about two lease round trips, from its rate since the last call and the
// calls' average duration), so that its decisions rarely wait.
//
// A key is leased only once it is warm here: a cold key (fewer than 8
// decisions within one lifetime, in this process) is decided in the Redis
// store as a plain decision under the reduced funnel, where the store
// batches it with others: the same admission as a lease of its units spent
// at once, with the store's exact result. The first lease of a warm key is
// as large as its decisions in the last lifetime; then a lease doubles when
// it is spent before it ends and halves when most of it is forfeited,
// never above MaxLease, R·L_k, nor the key's share of the reduced burst
// among the nodes that leased it within the last lifetime (the lease call
// counts them, in a sorted set beside the key, in its hash slot), unless
// the key's demand here asks for more; and never above the units that fit
// at once at the last call, nor (once measured) what the demand spends
// within their lifetime. The key's demand here (the units asked for here
// per second, admitted or not, between the last two calls, averaged with
// the one before) sizes a lease as the units it can spend within
// their lifetime ℓ (extended under contention, less the
// call's duration, and less the time it takes to spend the units still
// held where the next lease's first units mature before then): k such
// that k·(1−a·T) + 2·√(D·k) ≤ a·ℓ (a the demand per ns, a·T at most 1/2,
// D the index of dispersion of its arrivals, measured between calls: 1
// for Poisson arrivals, 0 for evenly paced ones), because a grant's units
// end one interval apart, faster than a node with part of the demand
// spends them, and the arrivals spread around their rate; ℓ is the first
// unit's, from the lesser of the funnel's leads before the key's last two
// grants, which vary with the other nodes' leases (where the extension's
// reach, L−L_k, is short of τ'−T, the units at once beyond it end
// together, and only the units after them come one interval apart). It is
// capped by the units asked for in half a store lifetime (scaled by
// 1/(1−a·T)), so that at twice the rate the fleet's leases queue within
// the horizon (2L), by the node's share of one lifetime of the rate among
// the nodes (R·L/nodes) and by MaxLease. Under contention (the last call's units
// were future-dated) the demand alone sizes the lease. So under overload
// each node takes about one lease per lifetime of its units: the Redis
// calls on a key are bounded by the fleet and the lifetimes, not by the
// traffic nor the rate, and the units follow each node's demand (a node
// that asks for more runs out sooner and leases again, at the queue's
// end).
//
// Under contention (the funnel had no room for one more unit at the last
// call or decision here) a key that holds nothing is cold again while its
// demand here is under 8 decisions per L_k, however warm it was: its
// lease would be future-dated units that it might not reach before their
// time ends, slots lost to every node, while in the store its decisions
// are exact.
//
// The Remaining and ResetAfter of a decision made from memory are estimated
// from the key's TAT at the last lease call, plus the time since and this
// process's own spending: other processes' spending since that call is not
// seen, so they can be stale by up to one lease's lifetime of the fleet's
// traffic. Limit is the reduced burst plus one.
//
// # Windows
//
// A lease of a fixed window (FixedWindow, epoch or calendar) or of a
// sliding window counter (SlidingWindow) is a take of k units of the
// window's count in the store (its Do, at Redis's time), all or nothing;
// the process then admits up to k requests from memory. A unit is spent
// only in the window it was debited in: a lease ends one lifetime after its
// request was sent, or when its window ends if that is sooner. The
// window's end is known from the take's ResetAfter, from Redis's time to
// the end of a fixed window (and to a Period after the end of a sliding
// window's current one); it is counted from the local time just before the
// call, so that the lease ends no later than its window, however long the
// call took. Within its window, when a unit is spent does not matter: a
// fixed window counts units, and a sliding window counter weighs the
// previous window's units less as the current one goes on. So no part of
// the limit is given up, as the funnel's burst is: replayed through one
// exact window counter, a window's admissions are at most the units
// debited in it, checked against what the store counted then.
//
// A window's lease is sized as a funnel's (cold keys are decided in the
// store one decision at a time, warm keys lease, doubling and halving),
// capped by a quarter of the count, MaxLease, and the units the window had
// left at the last call. A refused take of more units than the request
// needs is asked again once, for what the refusal says is left (or the
// need), so that a request is not refused while the window has room for
// it; a refusal of the need is remembered until its RetryAfter (for a
// fixed window, its end; units that other processes refund meanwhile are
// not seen, and a Reset through this store forgets it).
//
// The units left when a lease ends by its lifetime are forfeited: they
// stay debited until their window ends. With Options.WindowRefunds they go
// back instead with the key's next call, as a refund of their number (an
// OpRefund alone in its Do call). The refund is blind, which is safe for a
// count: those units were debited and will never be spent, so the window's
// count stays at least the units admitted in it. (A funnel has no count:
// its TAT moved back after other processes' leases would hand out their
// time, hence its compare-and-set.) But a refund applies to the window that
// holds Redis's time when it runs: one that arrived after its window
// rolled (a connection that stalls and delivers it later) would be taken
// off the next window, which would then admit the units twice. So refunds
// are off by default, and with them on a refund is sent only while at
// least one lifetime of its window is left: the guarantee then assumes a
// refund reaches Redis within one lifetime of being sent.
//
// What windows give up is the units leased and not spent: forfeited when
// their lease or their window ends (unless refunded), or held by a process
// that stopped. The last stay debited
// until the window ends, however long the window is: a process killed
// while leasing a daily quota strands up to a quarter of the count (or
// MaxLease units) until midnight, so set MaxLease for long windows. A
// decision from memory reports the Remaining that the window had at the
// last call, plus this process's units, and the ResetAfter of that call's
// window: other processes' spending since is not seen.
//
// # Rate shares
//
// With Options.Shares, a funnel (GCRA without a ban) whose limit allows
// it (Shared: its rate brings at least 16 units per lifetime, its limit
// is at least 64 units, its tolerance at most 2^42 ns) is leased as a share of its rate rather
// than as units, where the Backend allocates shares (ShareBackend: the
// Redis store's Share, gcra.Share in a script). Units are bounded by the
// funnel: a unit lease gets at most R·L_k units, so a smooth limit (small
// τ) or a fleet under overload calls Redis every few units. A share is
// bounded by time instead: a node calls about once per lifetime, whatever
// the traffic or the rate.
//
// The node's call reports its demand (units asked for here per second,
// refused ones included, smoothed over two lifetimes and shaded down by
// one standard deviation; unmeasured on the first call) and gets a grant
// (k, c) for about a lifetime: admit through a bucket of its own that
// drains at k parts of R (gcra.ShareParts) and holds c units. The
// allocator keeps the grants' rates and capacities reserved until each
// bucket has drained, divides R among the nodes that compete by max-min
// fairness on their demands and B (the limit) by the square roots of
// their shares, and never hands out more than what the others still hold
// (gcra.Share's invariant: at every instant the nodes' largest live
// reservations add up to at most R and B).
//
// The node's rules, on its own clock (only its differences count): a grant
// answered for a call sent at s and answered at r, decided at the
// allocator's time n, admits from r + (start−n) until s + (end−n) and
// drains until s + (hold−n), less a µs for the allocator's whole µs, so
// that it holds whatever the offset of the clocks within the round trip.
// The key has one level here: a request is admitted when the level plus
// its units is within the largest capacity among the grants that admit
// now, and the level falls at the largest rate among those that drain.
// Each call ends the node's older grants a grace after it is sent (5 ms,
// or four average round trips if longer) and caps them at a level the
// node reports (its level when it sends the call, rounded up, plus what
// its demand asks for within the grace, and one): under them it admits
// until then only while its level is within that cap, and drains until
// then plus the cap's drain. The allocator cuts their reservations to
// the same capacity and hold after it serves the call (gcra.ShareRequest's
// Grace and Level), so that a share that shrinks is given back within the
// grace and a drain, and a node whose bucket is nearly empty does not
// hold a full bucket's capacity for a full bucket's drain. The proof that
// the fleet never admits more than one exact funnel is
// internal/sharemodel's (its package doc): the exact funnel's level stays
// at most the sum of the nodes' levels, each of which stays within its
// reservation (its step 3 holds for a cut reservation: from the call's
// send on the node's level is within the cap, and it is 0 by the cut
// hold). The tests replay each node's admissions through its reservations
// as well as the fleet's through one funnel: a grant read from the
// answer's time rather than the call's, older grants not cut, a level
// reported low, or overlapping grants whose capacities add up fail them.
//
// A node renews a grant in the background a few round trips before it
// ends (with Options.NoPrefetch, in the decision that finds it due), and
// early, at least L/8 after its last call, when its demand has moved by
// more than 30% and four standard deviations; a grant whose node had no
// request lapses. The first call of a key (demand unmeasured) gets at most
// a quarter of the rate and of the capacity the others leave free, for
// L/4, so that nodes starting together all get a part; a node whose
// demand the others still hold is
// answered for L/4 too, so that it comes back once they have renewed. A
// call that grants nothing is not repeated before that grant's end:
// meanwhile the key is refused from memory.
//
// A decision made from memory reports the node's own bucket, scaled to
// the whole limit as if every node's were as full (Remaining B·(c−ℓ)/c,
// ResetAfter τ·ℓ/c, so that redis-cell's reply, which derives one from the
// other, agrees), and a refusal's RetryAfter is the time until the units
// fit in the node's bucket (until its next call when they are above its
// capacity). A peek answers from the
// node's bucket too (without a grant, the full limit). A Reset empties the
// node's bucket here: the other nodes' buckets stay as they are, and the
// fleet admits no more than one exact funnel that starts empty at the
// reset. A refund (or a take of a negative quantity, as CL.THROTTLE
// takes one) gives its units back to the node's bucket (never
// below empty: the exact funnel fed the same refunds falls as much). Takes
// of several keys leased in shares at once are decided all-or-nothing on
// their buckets here, under their shards' locks. Charges, reservations,
// and calls that mix a key leased in shares with anything else are
// refused (ErrShares): its state is the shares, not a TAT that they could
// move, nor one a plain decision in Redis could take all-or-nothing with
// it.
//
// A key leased in shares is meant to be decided only by processes that
// lease it in shares, but a fleet that mixes them with others (a store
// without leases, the redis-cell module, a process leasing in units: say
// while the mode is rolled out) still never admits more than one exact
// funnel. While a reservation is live the allocator keeps a fence in the
// funnel's own state (redis-cell's TAT key): the last hold plus the
// tolerance (gcra.ShareFence), so that a plain decision finds the bucket
// full until every node's has drained. And the allocator refuses to grant
// while the key holds a TAT ahead of its time that is not its fence
// (ErrShareMixed): the node then decides the key in the Backend plainly
// for a lifetime. Each side waits for the other's admissions to drain, so
// a mixed fleet under-admits (30–86% of what one exact funnel admits in
// TestSharesMixedFleetRedis), never over. A Reset keeps the fence while it
// is ahead. The one way past it is a refund through a plain process: it
// moves the fence back by the units it gives back, and the fence's margin
// over what the shares hold is the tolerance (B+1 units).
//
// What shares give up is under-admission: rate a node holds and does not
// use (its demand fell, or was over-estimated), refusals of a node whose
// arrivals match its share (about 1/(2c) of them with capacity c: a burst
// split among many nodes loses more), reservations held while an idle
// bucket drains, and the time shares take to follow demand that moves
// between nodes (a node renews early when its demand shifts). A request of
// more units than the node's capacity is refused until its next call.
//
// # When Redis cannot be reached
//
// A process keeps spending the units it holds until their leases end
// (they were debited, so this is exact), then answers Options.FailOpen's
// fallback (Result.Fallback set) until Redis answers again; nothing needs a
// restart. After a Redis failover that lost recent writes, or a Redis
// that restarted empty, the keys lose what the loss loses, as with the
// plain store, and the units that the processes leased before it are
// spent on top of the fresh state. For a funnel: replayed from the loss on through one
// exact funnel that starts empty then, the fleet admits at most (2L+τ)/T
// units more (R·2L plus the limit), all of them within 2L+ℓ of the loss (ℓ
// the longest lifetime, at most L). Those units' slots are at most t+2L
// (future-dated units are taken up to 2L ahead) and their ends after the
// loss t, and by step 2 of the proof at most (2L+τ)/T units have both
// (TestRedisRestartsEmptyBound restarts
// a real Redis under 10× overload and checks the bound, 8,501 units; its
// run over-admits none, as the units held, at most R·L_k, and the fresh
// reduced burst fit within the limit). For a key leased in shares the loss is
// the share state: Redis hands out the whole rate and capacity again
// while the nodes' older grants still admit until they end. Until the
// older reservations would have ended (W after the loss: the longest
// grant, ten lifetimes, plus the grace and a full bucket's drain), the
// fleet admits at most as a funnel of twice the rate and capacity would,
// so it over-admits by at most B + R·W units over one exact funnel that
// starts empty at the loss (TestSharesRedisRestartsEmptyBound checks the
// bound, 81,501 units; its run over-admits none, as the first grants
// after the loss, their demands not yet measured, take a quarter of what
// is free).
package leasestore

import (
	"context"
	"crypto/rand"
	"errors"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/lograte"
	"github.com/funnelrl/funnel/redisstore"
)

// DefaultLifetime is the lifetime of a lease when Options.Lifetime is 0.
const DefaultLifetime = 200 * time.Millisecond

// Backend is the shared store that leases come from: a *redisstore.Store.
// Windows are leased through its Do, and decisions that are not leased go
// to its Do.
type Backend interface {
	funnel.Store
	// Lease applies gcra.Lease to key at the store's time, atomically.
	Lease(ctx context.Context, key string, p gcra.Params, call redisstore.LeaseCall) (redisstore.Grant, error)
}

var (
	_ Backend        = (*redisstore.Store)(nil)
	_ ShareBackend   = (*redisstore.Store)(nil)
	_ funnel.Grouper = (*Store)(nil)
)

// Options configure a Store. The zero value is a good default.
type Options struct {
	// Lifetime is how long a lease lives, from when its request is sent
	// (DefaultLifetime if 0): for a funnel, the longest a unit lives after
	// its slot, shortened for a smooth limit to half its tolerance less
	// an interval (see KeyLifetime), which under contention its units may
	// exceed up to min(Lifetime, tolerance less an interval), as far as
	// the funnel was taken ahead of their grant (see the package doc).
	// Longer leases make fewer calls for
	// keys of low rates, and cost R·Lifetime units of each leased funnel's
	// burst; a window's lease ends with its window if that is sooner.
	// Future-dated units are taken up to twice the lifetime ahead.
	Lifetime time.Duration
	// MaxLease caps the units of one lease (0: no cap but the rate's and
	// the burst's share per node for a funnel, a quarter of the count for a window; see
	// the package doc).
	MaxLease int64
	// WindowRefunds gives the unspent units of a window's lease back to
	// the window (an OpRefund before the key's next lease, while at least
	// a lifetime of the window is left). Off by default, and they are
	// forfeited: a refund applies to the window that holds Redis's time
	// when it runs, so one delayed past its window's end (a stalled
	// connection) would give its units to the next window, and over-admit
	// by them. On, the fleet under-admits less, and the guarantee assumes
	// every refund reaches Redis within one lifetime.
	WindowRefunds bool
	// Shares leases funnels in rate shares rather than in units, where
	// the Backend allocates them (a ShareBackend) and the limit allows it
	// (Shared): each process decides a key from memory through a bucket
	// of its own, whose rate and capacity the Backend keeps reserved for
	// it, so that Redis calls on a key are bounded by the fleet and the
	// lifetime, below, near and over the limit alike (see the package
	// doc's Rate shares). A key leased in shares must be decided only by
	// processes that lease it in shares: plain decisions of it (a Redis
	// store without leases, the redis-cell module, a process leasing in
	// units) would admit on top of the fleet's shares. Set it on every
	// process of a fleet, and never switch it while keys are live.
	Shares bool
	// NoPrefetch turns off the background lease calls of hot keys: each
	// lease is then asked for by the decision that finds none, which
	// waits for it.
	NoPrefetch bool
	// FailOpen makes decisions admit requests when Redis cannot be reached
	// and the key holds no units (fail-open). By default it refuses them.
	// It should match the Redis store's own FailOpen.
	FailOpen bool
	// Now is the process's monotonic clock in nanoseconds, for tests; nil
	// means the time since the store was made. Only its differences count:
	// the shared funnel runs on the Redis store's clock.
	Now func() int64
	// Logger receives a warning when a lease call fails, at most once a
	// second (slog.Default() if nil).
	Logger *slog.Logger
}

// Stats counts what a Store has done since it was made.
type Stats struct {
	// Decisions is the number of leased decisions; Local of them were
	// answered from memory without waiting for a lease call.
	Decisions, Local int64
	// LocalRefusals were refused from memory (a recent refusal's
	// RetryAfter had not passed).
	LocalRefusals int64
	// Calls is the number of lease calls, Prefetches of them made in the
	// background, and Failed of them failed. A window's lease call is one
	// to three store calls: a refund, a take, and a take asked again.
	Calls, Prefetches, Failed int64
	// Direct is the number of decisions of cold keys sent to the store as
	// plain decisions (a funnel's under the reduced funnel), one store
	// call each.
	Direct int64
	// Leased is the units granted; Spent of them were admitted, Forfeited
	// expired unspent, and GivenBack were sent back with a later call (a
	// funnel's go back only if no other charge came after their lease; a
	// window's are refunded).
	Leased, Spent, Forfeited, GivenBack int64
	// Fallbacks were answered with the fallback because a lease call failed.
	Fallbacks int64
}

// shards is the number of locks the keys' state is spread over.
const shards = 64

// Store is a funnel.Store that leases plain funnel and window decisions
// from a Backend and sends everything else to it. It is safe for
// concurrent use.
type Store struct {
	b        Backend
	opts     Options
	lifetime int64
	now      func() int64
	seed     maphash.Seed
	shards   [shards]shard
	failLog  *lograte.Sometimes
	log      *slog.Logger
	node     string       // this store's name among the nodes leasing a key
	shares   ShareBackend // non-nil when funnels are leased in shares
	rtt      atomic.Int64 // the lease calls' average duration, in ns
	stats    struct {
		decisions, local, localRefusals, calls, prefetches, failed, direct atomic.Int64
		leased, spent, forfeited, givenBack, fallbacks                     atomic.Int64
	}
	stop      chan struct{}
	done      chan struct{}
	once      sync.Once
	prefetchs sync.WaitGroup // lease calls in the background
	// ignoreWindowEnd and refundLate, set by tests only before use, let
	// window leases outlive their window, and refunds go at any time: the
	// mutations the tests must catch.
	ignoreWindowEnd, refundLate bool
	// fullLifetime, set by tests only before use, lets funnel leases
	// live the store's lifetime rather than their key's: a mutation.
	fullLifetime bool
	// earlyUnits, set by tests only before use, lets future-dated units
	// be spent from their grant on, before their slots: a mutation.
	earlyUnits bool
	// extendAlways and extendPastTolerance, set by tests only before use,
	// let a grant's units live longer than the key's lifetime however
	// little the funnel was ahead of the grant, or past τ'−T: mutations.
	extendAlways, extendPastTolerance bool
	// warm is the decisions of a key within a lifetime that make it
	// lease (the const warm; tests measure others).
	warm int64
	// shareNoMargin, shareNoTruncate and shareAdditive, set by tests only
	// before use, break the share mode's node rules: a grant read from
	// the answer's time rather than the call's, older grants kept whole
	// (not cut to the grace and the level) through a renewal, and
	// overlapping grants whose capacities and rates add up.
	shareNoMargin, shareNoTruncate, shareAdditive bool
	// shareMinLimit, set by tests only when not 0, replaces the least
	// limit leased in shares (minShareLimit), to measure smaller ones.
	shareMinLimit int64
	// shareLowLevel, set by tests only before use, reports a level two
	// units under the one the node keeps within: a mutation.
	shareLowLevel bool
	// shareFixedLife, set by tests only before use, keeps every grant at
	// the store's lifetime, for the tests that measure it.
	shareFixedLife bool
	// resetRace, set by tests only before use, keeps the units of lease
	// calls that a Reset overtook: the race the tests must catch.
	resetRace bool
}

type shard struct {
	mu    sync.Mutex
	keys  map[string]*entry
	wkeys map[string]*wentry // window keys
	skeys map[string]*sentry // keys leased in shares
}

// New returns a Store that leases from b. Close stops its sweeper.
func New(b Backend, opts Options) *Store {
	if opts.Lifetime <= 0 {
		opts.Lifetime = DefaultLifetime
	}
	s := &Store{b: b, opts: opts, lifetime: int64(opts.Lifetime), now: opts.Now, seed: maphash.MakeSeed(),
		log: opts.Logger, stop: make(chan struct{}), done: make(chan struct{}), node: rand.Text(), warm: warm}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.failLog = lograte.New(time.Second)
	if s.now == nil {
		start := time.Now()
		s.now = func() int64 { return int64(time.Since(start)) }
	}
	for i := range s.shards {
		s.shards[i].keys = map[string]*entry{}
		s.shards[i].wkeys = map[string]*wentry{}
		s.shards[i].skeys = map[string]*sentry{}
	}
	if sb, ok := b.(ShareBackend); ok && opts.Shares {
		s.shares = sb
	}
	go s.sweep()
	return s
}

// Close stops the sweeper and waits for the lease calls made in the
// background. Units held are forfeited (they stay debited in Redis, and
// the keys refill at their rate). It does not close the Backend; the Store
// must not be used after it.
func (s *Store) Close() error {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.prefetchs.Wait()
	})
	return nil
}

// Stats returns the store's counts.
func (s *Store) Stats() Stats {
	st := &s.stats
	return Stats{
		Decisions: st.decisions.Load(), Local: st.local.Load(), LocalRefusals: st.localRefusals.Load(),
		Calls: st.calls.Load(), Prefetches: st.prefetches.Load(), Failed: st.failed.Load(), Direct: st.direct.Load(),
		Leased: st.leased.Load(), Spent: st.spent.Load(), Forfeited: st.forfeited.Load(),
		GivenBack: st.givenBack.Load(), Fallbacks: st.fallbacks.Load(),
	}
}

// MinLifetime is the shortest lifetime a funnel is leased for: a limit
// whose own lifetime (KeyLifetime) would be shorter is not leased, as a
// lease would end before it could be spent.
const MinLifetime = time.Millisecond

// KeyLifetime returns how long the leases of a funnel p live when the
// store's lifetime is lifetime: L_k = min(lifetime, (τ−T)/2) (τ the
// tolerance, T the interval), so that a smooth limit (τ < 2·lifetime) is
// leased too, for a shorter time, and the reduced tolerance τ−L_k stays at
// least (τ+T)/2 ≥ T: the burst given up is at most half of it, the
// sustained rate none. It returns 0 when p is not leased: L_k under
// MinLifetime, or a tolerance that with the lifetime (the horizon of
// future-dated units) is above gcra.MaxLeaseTolerance.
func KeyLifetime(p gcra.Params, lifetime time.Duration) time.Duration {
	l := int64(lifetime)
	if p.Interval <= 0 || p.Tolerance < p.Interval || l <= 0 || p.Tolerance > gcra.MaxLeaseTolerance-l {
		return 0
	}
	lk := min(l, (p.Tolerance-p.Interval)/2)
	if lk < int64(MinLifetime) {
		return 0
	}
	return time.Duration(lk)
}

// Reduced returns the funnel that p is leased under, with its tolerance
// shrunk by its lifetime (KeyLifetime), and whether p is leased at all.
func Reduced(p gcra.Params, lifetime time.Duration) (gcra.Params, bool) {
	lk := int64(KeyLifetime(p, lifetime))
	if lk == 0 {
		return gcra.Params{}, false
	}
	r := p
	r.Tolerance = p.Tolerance - lk
	r.Limit = r.Tolerance / r.Interval
	r.Burst = r.Limit - 1
	return r, true
}

// Do decides one plain funnel or window take from the key's leases, and
// sends anything else to the Backend (see the package doc).
func (s *Store) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	if done, err := s.sharesDo(ctx, ops, res); done {
		return err
	}
	if len(ops) == 1 && len(res) > 0 {
		op := &ops[0]
		if op.Kind == funnel.OpTake && op.Limit.Algorithm == funnel.GCRA && op.Limit.Ban == 0 && op.N > 0 {
			if r, ok := Reduced(op.Limit.GCRA, s.opts.Lifetime); ok {
				return s.take(ctx, op.Key, op.Limit.GCRA, r, op.N, &res[0])
			}
		}
		if windowed(op) {
			return s.takeWindow(ctx, op.Key, &op.Limit, op.N, &res[0])
		}
	}
	return s.b.Do(ctx, ops, res)
}

// Reset forgets the key here (its leases are forfeited) and in Redis. A
// lease call in flight meanwhile (a funnel's or a window's), or begun
// before Redis has reset the key, may have taken units before the reset: they are
// forfeited when it answers (spent after the reset, they would be
// admitted on top of the fresh funnel's burst). A reset through another
// process is not seen here: the units this process holds are spent as
// they are, up to one lease's worth more than the fresh funnel admits.
func (s *Store) Reset(ctx context.Context, key string) (bool, error) {
	sh := s.shard(key)
	sh.mu.Lock()
	s.forgetHere(sh, key)
	sh.mu.Unlock()
	ok, err := s.b.Reset(ctx, key)
	sh.mu.Lock()
	if !s.resetRace {
		// Units of calls answered since were taken before the reset.
		s.forgetHere(sh, key)
	}
	sh.mu.Unlock()
	return ok, err
}

// forgetHere drops what this process holds of key, funnel and window
// alike, and counts a reset, so that a lease call in flight knows that its
// answer predates it. The caller holds sh's lock.
func (s *Store) forgetHere(sh *shard, key string) {
	if e := sh.keys[key]; e != nil {
		s.forfeit(e)
		e.refusedUntil, e.callAt = 0, 0
		e.back = gcra.LeaseRequest{}
		e.resets++
	}
	if e := sh.wkeys[key]; e != nil {
		s.wforfeit(e)
		e.refusedUntil = 0
		e.resets++
	}
	s.shareReset(sh, key)
}

// TTL is the Backend's.
func (s *Store) TTL(ctx context.Context, key string) (time.Duration, bool, error) {
	return s.b.TTL(ctx, key)
}

// Bans is the Backend's.
func (s *Store) Bans(ctx context.Context) ([]funnel.Ban, error) { return s.b.Bans(ctx) }

// Unban is the Backend's.
func (s *Store) Unban(ctx context.Context, key string) (bool, error) { return s.b.Unban(ctx, key) }

// Group returns the Backend's group of key when it has groups
// (funnel.Grouper: a Redis Cluster's hash slot), else 0, so that callers
// that split their keys by group (Envoy's rate-limit service with several
// descriptors) work through leases as through the Redis store. Several
// ops in one Do call go to the Backend as they are.
func (s *Store) Group(key string) int {
	return funnel.GroupOf(s.b, key)
}

func (s *Store) shard(key string) *shard { return &s.shards[s.shardIndex(key)] }

// shardIndex is the index of key's shard in s.shards.
func (s *Store) shardIndex(key string) int { return int(maphash.String(s.seed, key) % shards) }

// errFailed marks a lease call that failed, for take to answer the
// fallback.
var errFailed = errors.New("leasestore: lease call failed")
