package leasestore

// IgnoreWindowEnd makes s's window leases outlive their window (they then
// last their whole lifetime): the mutation the window tests must catch.
// Call it before s is used.
func IgnoreWindowEnd(s *Store) { s.ignoreWindowEnd = true }
