package funnel

// Grouper is implemented by a Store that decides several ops in one Do
// call only when their keys share a group, and otherwise fails with an
// error that wraps ErrCrossSlot: on Redis Cluster a group is a hash slot.
// A caller whose keys are of several groups can call Do once per group;
// each call is then atomic, but the calls together are not, and restoring
// all-or-nothing (refunding the groups that admitted when another refused)
// is the caller's to do and to document. A Store that does not implement
// Grouper decides any keys of one call together.
type Grouper interface {
	// Group returns the group of key: ops whose keys have the same group,
	// at least 0, can be decided in one Do call; -1 means that key can be
	// decided only alone.
	Group(key string) int
}

// GroupOf returns s's group of key when s is a Grouper, else 0: a store
// that does not group its keys decides any keys of one call together. A
// store that wraps another says its groups through it.
func GroupOf(s Store, key string) int {
	if g, ok := s.(Grouper); ok {
		return g.Group(key)
	}
	return 0
}
