package leasestore

// IgnoreWindowEnd makes s's window leases outlive their window (they then
// last their whole lifetime): a mutation the window tests must catch.
// Call it before s is used.
func IgnoreWindowEnd(s *Store) { s.ignoreWindowEnd = true }

// RefundLate makes s refund a window's unspent units however late, even
// after their window has ended: a mutation the window tests must catch.
// Call it before s is used.
func RefundLate(s *Store) { s.refundLate = true }

// FullLifetime makes s's funnel leases live the store's whole lifetime
// even when the key's own (KeyLifetime) is shorter, under the same reduced
// tolerance: a mutation the funnel tests must catch. Call it before s is
// used.
func FullLifetime(s *Store) { s.fullLifetime = true }

// EarlyUnits makes s spend a funnel lease's future-dated units from the
// grant on, before their slots (each still ending a lifetime after its
// slot): a mutation the funnel tests must catch. Call it before s is used.
func EarlyUnits(s *Store) { s.earlyUnits = true }

// ResetRace makes s keep the units of funnel lease calls that a Reset
// overtook: the race the Reset test must catch. Call it before s is used.
func ResetRace(s *Store) { s.resetRace = true }

// SetWarm sets the decisions of a key within a lifetime that make s lease
// it (8 by default), for the tests that measure the threshold. Call it
// before s is used.
func SetWarm(s *Store, n int64) { s.warm = n }

// ExtendAlways makes s's funnel leases live the longest extended lifetime
// (min(Lifetime, τ−T)) whatever the funnel's state at their grant, not
// only as far as the funnel was ahead of it: a mutation the funnel tests
// must catch. Call it before s is used.
func ExtendAlways(s *Store) { s.extendAlways = true }

// ExtendPastTolerance lets s extend a lease's lifetime as far as the
// funnel was ahead of its grant up to the store's lifetime, past τ−T: a
// mutation the funnel tests must catch. Call it before s is used.
func ExtendPastTolerance(s *Store) { s.extendPastTolerance = true }

// ShareNoMargin makes s read a share's grant from the time its answer
// came back rather than the time its call was sent: a mutation the share
// tests must catch. Call it before s is used.
func ShareNoMargin(s *Store) { s.shareNoMargin = true }

// ShareNoTruncate makes s keep admitting under its older grants through
// a renewal, while the allocator ends them a grace after the call: a
// mutation the share tests must catch. Call it before s is used.
func ShareNoTruncate(s *Store) { s.shareNoTruncate = true }

// ShareAdditive makes s add up the capacities and rates of a key's
// overlapping grants rather than take the largest: a mutation the share
// tests must catch. Call it before s is used.
func ShareAdditive(s *Store) { s.shareAdditive = true }

// ShareMinLimit makes s lease in shares the funnels whose limit is at
// least n units rather than 64, other conditions of Shared unchanged, for
// the tests that measure smaller limits. Call it before s is used.
func ShareMinLimit(s *Store, n int64) { s.shareMinLimit = n }

// NodeName returns the name s gives itself among the nodes leasing a key.
func NodeName(s *Store) string { return s.node }

// ShareLowLevel makes s report to the allocator a level two units under
// the one it keeps its older grants within: a mutation the share tests
// must catch. Call it before s is used.
func ShareLowLevel(s *Store) { s.shareLowLevel = true }

// ShareFixedLife keeps s's share grants at its lifetime, not lengthened
// for slow keys, for the tests that compare. Call it before s is used.
func ShareFixedLife(s *Store) { s.shareFixedLife = true }
