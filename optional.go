package funnel

// The optional interfaces of a Store, beside the contract (Store): what a
// store may say about itself, which a store that wraps another (metrics,
// traces) passes through with the helpers below, so that wrapping a store
// changes nothing that its users see. FunnelTaker is the exception: a
// wrapper that observes decisions must not pass it through (one that
// observes only their results offers ObservingStore instead).

// NonBlocker is implemented by a Store that may say that its calls never
// wait on the network, a disk or a lock held for long, as the memory
// store's do: the RESP server then serves it from event loops.
type NonBlocker interface {
	// NonBlocking reports whether the store's calls return without waiting.
	NonBlocking() bool
}

// NonBlockingOf reports whether s says that its calls never wait. A store
// that wraps another says it through this.
func NonBlockingOf(s Store) bool {
	nb, ok := s.(NonBlocker)
	return ok && nb.NonBlocking()
}

// KeyCounter is implemented by a Store that can count the keys it holds
// (the memory store), as the RESP server's INFO shows them.
type KeyCounter interface {
	// Keys returns the number of keys the store holds, and false when it
	// cannot count them.
	Keys() (int, bool)
}

// KeysOf returns the number of keys s holds, and false when s cannot count
// them. A store that wraps another counts through this.
func KeysOf(s Store) (int, bool) {
	if kc, ok := s.(KeyCounter); ok {
		return kc.Keys()
	}
	return 0, false
}

// EvictionCounter is implemented by a Store that evicts keys to stay within
// a bound (the memory store with MaxKeys), as INFO's evicted_keys shows.
type EvictionCounter interface {
	// Evictions returns the number of keys evicted since the store was
	// made.
	Evictions() uint64
}

// EvictionsOf returns the keys s evicted: 0 for a store that does not
// evict. A store that wraps another counts through this.
func EvictionsOf(s Store) uint64 {
	if ec, ok := s.(EvictionCounter); ok {
		return ec.Evictions()
	}
	return 0
}
