package redisstore

import "github.com/funnelrl/funnel"

var _ funnel.Grouper = (*Store)(nil)

// Group returns the group of key (see funnel.Grouper): on Redis Cluster
// the hash slot of the stored key (Options.Prefix and key), on a single
// Redis or Sentinel's master 0 (any keys go together), and over a Ring -1
// (a Ring shards keys by their whole hash tag, not by slot, so keys are
// grouped only when Do is given them together and they share one).
func (s *Store) Group(key string) int {
	switch s.runner.grouping() {
	case groupSlot:
		return int(keySlot(s.prefix + key))
	case groupNone:
		return -1
	}
	return 0
}
