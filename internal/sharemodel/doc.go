// Package sharemodel is a research model, in simulated time, of leasing a
// funnel (GCRA) to a fleet as rate shares rather than units: each node
// decides from memory through its own small funnel, whose rate and
// capacity an allocator (Redis, in a real implementation) hands out so
// that the fleet as a whole never admits more than one exact funnel.
// Nothing in the module calls it; it measured the protocol and pinned
// down the rules that make it safe. The protocol is built in gcra.Share
// (the allocator, in integers), redisstore's share.lua (the same on a
// hash in Redis) and leasestore's Options.Shares (the node), which adds
// one rule this model does not have: a call reports the level its node
// keeps its older grants within, and the allocator cuts their
// reservations to it (gcra.ShareRequest's Level).
//
// # The protocol
//
// The funnel has rate R = 1/T and capacity B = burst+1 units (gcra.Params'
// Limit: a request of one unit is admitted at t iff the bucket's level,
// max(TAT−t, 0)/T, plus one is at most B). The allocator keeps, per key,
// one reservation list per node. A node calls it with its measured demand
// (its arrival rate, refused requests included, averaged over about 2L);
// the allocator answers with a grant (now, start, end, hold, k, c): admit
// in [start, end) through a local bucket of rate k and capacity c, whose
// rate and capacity stay reserved until hold = end + ⌈c/k⌉ (the time a
// full bucket takes to drain at k). In the model start is the call's time
// and end = start + L; a grant lasts L/4 when the node's demand is not yet
// measured or when the other nodes still hold more than a fifth of the
// rate its own demand needs, so that it comes back once they have renewed;
// with a call budget b (Config.CallBudget) grants last N/(b·Σ demand), at
// least L and at most a maximum, so that slow limits keep their calls
// within about b of their decisions. k and c are whole parts of R and of B
// (RateParts parts of R; levels in units of 1/(RateParts·T), so all
// arithmetic is exact in int64).
//
// The allocator's rule, for node n at time now:
//
//   - Each node's holding at an instant t is the largest rate and the
//     largest capacity among its reservations live at t (start ≤ t < hold):
//     one bucket per node, so overlapping grants of one node count once.
//   - The new reservation takes k ≤ R − Σ_{m≠n} ρ_m(now) and
//     c ≤ B − Σ_{m≠n} β_m(now), the others' holdings at now. Every
//     reservation starts at the call that made it, so the others' holdings
//     can only fall after now, and what is free at now is free until the
//     new hold: the invariant (I) below holds after the grant (the node's
//     own older reservations combine with the new one by max, and each
//     satisfied (I) when it was made).
//   - A node's target is its max-min fair share (water-filling) of R among
//     the nodes that hold a reservation or called within 1.25 lifetimes of
//     their grant, on their demands shaded by one standard deviation of
//     the estimate (a share goes to what the node will surely use: in
//     overload an unused share is lost, while a share below the demand
//     only hands rate to a node that uses it); demands that leave rate
//     over get it split equally.
//     The capacity is split in proportion to the square root of the
//     targets (a bucket whose arrivals match its rate refuses about 1/(2c)
//     of them, and this split minimises the sum), at most what the bucket
//     drains in max(τ, L), at least one unit. A node whose demand is not
//     yet measured (its first call) takes at most R/4, and a capacity that
//     drains within L/4, so that the first caller of a cold key does not
//     hold the whole funnel while the others start.
//
// The invariant, with ρ_n(t) and β_n(t) node n's holdings at t:
//
//	(I) for every t, Σ_n ρ_n(t) ≤ R and Σ_n β_n(t) ≤ B.
//
// Neither the targets nor the lifetimes matter to safety: only (I) and the
// node's rules below do.
//
// The node's rule. The call was decided after the node sent it (at s, on
// the node's clock) and before its answer came back (at r), so the
// allocator's time u reads on the node's clock somewhere in
// [u + s − now, u + r − now]. The node takes a grant to hold only where it
// holds for every offset in that range:
//
//   - it admits under it on [start + r − now, end + s − now);
//   - it drains under it on [start + r − now, hold + s − now).
//
// It keeps one level ℓ for the key. A request is admitted iff ℓ + 1 ≤ the
// largest capacity among the grants it may admit under at that instant;
// between admissions ℓ falls at the largest rate among the grants it may
// drain under (0 when there is none). Only differences of the node's own
// clock count: its rate is taken to be the allocator's (a clock whose rate
// may differ from it by ε would end both windows sooner by ε times their
// length from s, and drain at k/(1+ε)). The node renews on a timer a few
// round trips before end + s − now (prefetch), reporting its demand,
// unless it had no request since its last call: then the grant lapses and
// its rate goes back to the pool when its hold passes.
//
// Two refinements let shares follow demand that moves between nodes. A
// node renews early, at least L/8 after its last call, when its arrivals
// since that call are off the demand it reported by more than 30% and by
// more than four standard deviations of a Poisson count; it then reports
// their rate unsmoothed. And every call ends the node's older grants: the
// node admits under them only until s + g and drains under them only
// until s + g + ⌈c/k⌉ (g a grace of 5 ms, well above a round trip; a node
// whose answer is later pauses), and the allocator cuts their holds to
// now + g + ⌈c/k⌉, which on the node's clock reads at or after those
// instants. So a node whose share shrank gives it back within g + τ of
// its call, not when its old grant would have ended.
//
// # Why the fleet never admits more than one exact funnel
//
// Let G(t) be the level of one exact funnel fed every admission of the
// fleet at its allocator time, and ℓ_n(t) node n's level, seen in allocator
// time (node n's local time is t + o_n); d_n(t) the rate at which ℓ_n falls
// then.
//
//  1. If Σ_n d_n(t) ≤ R at every t, then G(t) ≤ Σ_n ℓ_n(t) at every t. Both
//     sides rise by one at each admission; between admissions, while G > 0
//     the difference G − Σℓ changes at −R + Σ_{ℓ_n>0} d_n ≤ 0, and while
//     G = 0 it is at most 0 anyway.
//  2. d_n(t) ≤ ρ_n(t): node n drains at t at the rate k of a grant whose
//     drain window, read with every possible offset, holds t, so t is in
//     [start, hold) and that reservation is live. By (I), Σ d_n ≤ R.
//  3. ℓ_n(t) ≤ β_n(t): after the node's last admission u ≤ t, made under a
//     grant g, ℓ_n(u) ≤ c_g; in allocator time u < end_g − δ and the node
//     drains at k_g or more until hold_g − δ (δ ≥ 0 the same for both, the
//     part of the round trip after the decision), at least ⌈c_g/k_g⌉ after
//     u, by which time ℓ_n is 0. Before that t < hold_g, and g's
//     reservation holds β_n(t) ≥ c_g ≥ ℓ_n(t). A later call that ends g
//     moves its end to at most now' + g and its hold to now' + g +
//     ⌈c_g/k_g⌉ on both sides, and the same argument holds with them.
//  4. So when node n admits at t: G(t) + 1 ≤ Σ_{m≠n} ℓ_m(t) + ℓ_n(t) + 1 ≤
//     Σ_{m≠n} β_m(t) + β_n(t) ≤ B (the node admits only if ℓ_n + 1 is within
//     the capacity of a grant live at t), and the exact funnel admits it too.
//     Admissions at one instant are taken one after the other; each step
//     holds with the levels after the previous ones.
//
// The tests replay every admission through one exact funnel
// (gcra.Decide, in allocator time) and fail on any refusal. They also run
// each rule broken on purpose (Mutation): a grant's rate and capacity
// released at its end rather than its hold, Σc = 2B, grants past R while
// the others still hold their rate, a renewal that forgets the node's
// earlier grants (its level, up to the old capacity, no longer reserved),
// older grants ended in the allocator but still drained by the node, and
// the node reading the allocator's times as its own clock's: in each case
// the replay finds an over-admission within 20 seeds. The allocator also
// checks (I) after every grant (Config.Check).
//
// # What it costs
//
// Calls: about one per node per L (a grant lasts L, renewals need one
// round trip of margin); a node whose demand is unmeasured, or whose
// needs the others still hold, comes back after L/4, and one whose demand
// shifts renews early, never within L/8 of its last call: at most 8 per
// node and L, bounded by N and L whatever the traffic or the rate. Calls per decision are that divided by
// the traffic, N/(L·f·R): at L = 200 ms, 16 nodes make about 80 calls a
// second, 0.004/f per decision at 20,000/s but 0.04/f at 2,000/s.
//
// Under-admission: in overload every node whose demand is above its share
// keeps its bucket full and admits exactly its share; what is lost is (a)
// share a node does not use (its demand was over-estimated, or fell), (b)
// the refusals of a node whose arrivals match its share (≈ 1/(2c) of
// them with capacity c, so small bursts split N ways lose most: with
// burst 10 on 16 nodes a node's share of B is under one unit and at most
// 11 nodes can hold a share at all), (c) capacity and rate held by
// reservations whose bucket is already empty (the hold after a lapse or a
// shrink, up to max(τ, L)), and (d) the time shares take to follow demand
// that moves: a share cannot be taken back before its holder calls, so
// each move costs about the detection (L/8 or more), the holder's grace
// and tail (g + τ), and the new holder's next call. Below the limit every node gets its demand
// plus an equal part of the rest, and what is lost is the bursts a local
// bucket of B/N cannot absorb that one bucket of B would.
//
// # Measured
//
// go test ./internal/sharemodel -run TestShareFigures -v -args -figures
// simulates the table (about 30 s on two cores): rates 20,000/s (bursts 10,
// 500, 10,000) and 2,000/s (bursts 10, 500), 3 and 16 nodes, equal and
// 10:1 demand, factors 0.5 to 100, L = 200 ms, Poisson arrivals, one-way
// delays up to 100 µs, clocks up to 1 ms apart; then the 2,000/s rows again
// with grants lengthened to a call budget, and 10:1 demand whose heavy node
// moves every second or every quarter second. No row over-admits. In the
// steady window:
//
//   - Calls: one per node per L, 80 a second for 16 nodes and 15 for 3,
//     whatever the factor: at 20,000/s 0.008 per decision at 0.5× and
//     0.004 at 1.05× for 16 nodes (unit leases: about 0.13 and 0.027); at
//     2,000/s with L = 200 ms 0.08 at 0.5× and 0.039 at 1.05×, and at most
//     0.0085 with lifetimes lengthened to a budget of 0.8% (up to 2 s).
//   - Under-admission, demand at or above R, steady demand: bursts of 500
//     and 10,000 at most 1.5% of R (1.3% at 20,000/s), 2.1% with 2 s
//     lifetimes. Burst 10 fails: 3 nodes lose up to 12.6% of R at 1.05×
//     (one exact funnel 3%), 16 nodes 30 to 65% (a node's part of B = 11
//     units is under one unit).
//   - Demand that moves: 4.1% of R at 1.05× when the heavy node moves
//     every second (7.2% at 2,000/s), 14.4% every quarter second; 1.9% and
//     3.4% at 1.5×; nothing from 2× on.
//   - Below the limit, requests refused that one exact funnel admits: at
//     most 0.8% of its admissions for bursts of 500 and 10,000 (1.1% with
//     2 s lifetimes; 3.4% with demand moving every second, 6.1% at
//     2,000/s, 15% every quarter second), about 10% for burst 10 on 3
//     nodes at 0.9×.
//
// # What Redis would need
//
// A script, per call, on a hash beside the key in its hash slot
// ({key}:shares): one field per node id (a process incarnation, so that a
// restarted process never inherits a level it does not know), holding its
// live reservations (start, hold, k, c, at most two or three: the current
// grant and the ones still draining), its last demand and the time of its
// last call, all in Redis time (TIME, in µs, the grant's end rounded
// down and its hold up). The script cuts the
// caller's older reservations to now + g + ⌈c/k⌉, prunes the
// reservations whose hold has passed, sums the others' holdings at now
// (O(N)), water-fills (O(N log N) on N ≤ a few dozen), appends the new
// reservation, sets the hash's expiry to the largest hold, and answers
// (now, start, end, hold, k, c). The rate and capacity are integers (parts
// of R and of B), so the node's bucket is exact.
//
// The redis-cell format does not survive: the state is the reservations,
// not a TAT, and the funnel's TAT key is neither read nor written. A plain
// client deciding on the TAT key (a Funnel Redis store, or the redis-cell
// module's CL.THROTTLE) would see a full bucket and admit up to R and B on
// top of the fleet's shares. A module cannot be taught to look at the
// hash, so the safest rule is that a limit is leased in shares only when
// every process deciding on it speaks the share protocol (configured per
// limit, never switched at run time while keys are live), and that the
// share script refuses to grant (answering an error the client turns into
// plain decisions) while the TAT key holds a TAT in the future, which
// catches a mix within τ in one direction only. (Built since: the share
// script also keeps a fence in the TAT key while any reservation is live,
// the last hold plus τ, which a plain client reads as a full bucket until
// every share has drained, and tells its own fence from a plain client's
// TAT by keeping a copy in the hash; so the mix is caught both ways, at
// the cost of under-admission while it lasts.) Funnel's own plain
// decisions on a share-leased key could go through the same script as a
// pool: a bucket kept in Redis that drains at whatever rate the shares
// leave at each instant, R − Σρ(t), and whose level p the grants leave
// room for (c ≤ B − Σβ − p), exact because its level and clock are
// Redis's. That is also the hybrid refinement (a node's overflow beyond
// its share decided in the pool), which this model does not simulate: in
// overload the shares hold all of R, so a pool would need rate kept back
// from them, and every request decided in it is a call.
package sharemodel
