package leasestore

// maxLeases is the most blocks a key holds; a new one beyond them
// forfeits the oldest.
const maxLeases = 4

// block is the units held from one lease call (a funnel's lease, a
// window's take).
type block struct {
	units int64 // left to spend
	exp   int64 // local time it ends
	// end is, for a funnel, the key's TAT right after the grant (Redis
	// time): the end its give-back compares with; for a window, the local
	// time by which its window has certainly ended.
	end int64
}

// blocks is a key's blocks, the older first: typically the current one
// and the one a prefetch brought; a decision of several units may need
// more. The zero blocks holds nothing.
type blocks struct {
	b [maxLeases]block
	n int
}

// held is the units the blocks hold.
func (bs *blocks) held() int64 {
	var n int64
	for i := 0; i < bs.n; i++ {
		n += bs.b[i].units
	}
	return n
}

// spend takes q units, the older blocks first, and reports whether the
// newest block was spent out.
func (bs *blocks) spend(q int64) (spentOut bool) {
	for q > 0 && bs.n > 0 {
		l := &bs.b[0]
		n := min(l.units, q)
		l.units -= n
		q -= n
		if l.units == 0 {
			spentOut = spentOut || bs.n == 1
			bs.drop()
		}
	}
	return spentOut
}

// drop removes the oldest block.
func (bs *blocks) drop() {
	copy(bs.b[:], bs.b[1:bs.n])
	bs.n--
	bs.b[bs.n] = block{}
}

// add appends b, after dropping the oldest block when they are full, and
// returns the units of the block dropped.
func (bs *blocks) add(b block) (dropped int64) {
	if bs.n == maxLeases {
		dropped = bs.b[0].units
		bs.drop()
	}
	bs.b[bs.n] = b
	bs.n++
	return dropped
}

// clear drops every block and returns their units.
func (bs *blocks) clear() int64 {
	n := bs.held()
	*bs = blocks{}
	return n
}
