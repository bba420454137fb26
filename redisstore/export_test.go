package redisstore

// SetLogPack makes s keep the sliding logs of a count up to n packed, and
// larger ones in sorted sets, rather than up to 256 (0: every log in a
// sorted set, as Options.SortedSetLogs), for the tests that run both
// formats. Call it before s is used.
func SetLogPack(s *Store, n int) { s.logPack = int64(n) }

// SetConcRead makes conc.lua read a concurrency key whole when it holds
// up to n leases, rather than 16 (0: only a key without leases), for the
// tests that run both of its reads. Call it before s is used.
func SetConcRead(s *Store, n int) { s.concRead = int64(n) }
