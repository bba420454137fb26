package redisstore

// SetLogPack makes s keep the sliding logs of a count up to n packed, and
// larger ones in sorted sets, rather than up to 256 (0: every log in a
// sorted set, as Options.SortedSetLogs), for the tests that run both
// formats. Call it before s is used.
func SetLogPack(s *Store, n int) { s.logPack = int64(n) }
