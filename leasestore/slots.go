package leasestore

// slots is the units of one funnel lease. Unit j (0 to n-1) has its slot
// delay(j) = max(0, off+j·step) after the Redis time of its grant: the
// units that fitted in the tolerance at once, then future-dated units one
// interval apart (gcra.LeaseSlot). On this process's clock, unit j is
// spendable from at+delay(j) (at: when the answer was back, so that its
// slot has certainly come) until exp+delay(j)+ext(j) (exp: when the
// request was sent plus the key's lifetime, so that it is spent less than
// its lifetime after its slot; ext(j) = min(ext+j·step, most), the
// extension of its lifetime under contention, see Store.extension), and
// units are spent in order. Both delay and ext grow with j, so the units
// end in order.
type slots struct {
	n     int64 // units granted
	next  int64 // the first unit neither spent nor passed over
	last  int64 // the unit after the last one spent
	used  int64 // units spent
	at    int64 // local time unit 0 matures
	exp   int64 // local time unit 0 ends, without its extension
	off   int64 // delay(j) = max(0, off+j·step)
	step  int64
	ext   int64 // ext(j) = min(ext+j·step, most), at least 0 (see extend)
	most  int64
	ja    int64 // the first unit with a delay
	jb    int64 // the first unit whose extension is most
	end   int64 // the key's TAT right after the grant (Redis time): the give-back's compare
	early bool  // tests only: units spendable before their slot (a mutation)
}

// upto is the number of units j with delay(j) <= lim.
func (b *slots) upto(lim int64) int64 {
	switch {
	case lim < 0:
		return 0
	case b.step == 0 || b.off+(b.n-1)*b.step <= lim:
		return b.n
	case lim < b.off:
		return 0
	}
	return (lim-b.off)/b.step + 1
}

// extend sets the units' extensions, ext(j) = min(ext+j·step, most), and
// the units at which the runs of ended begin: ja, the first unit with a
// delay, and jb, the first whose extension is most.
func (b *slots) extend(ext, most int64) {
	b.ext, b.most, b.ja, b.jb = ext, most, b.n, b.n
	switch {
	case b.off > 0:
		b.ja = 0
	case b.step > 0:
		b.ja = min(b.n, -b.off/b.step+1)
	}
	switch {
	case ext >= most:
		b.jb = 0
	case b.step > 0:
		b.jb = min(b.n, (most-ext+b.step-1)/b.step)
	}
}

// ended is the number of units j with delay(j)+ext(j) <= lim: the units
// ended at exp+lim.
func (b *slots) ended(lim int64) int64 {
	if b.most == 0 {
		return b.upto(lim)
	}
	// delay(j) is 0 before unit ja, off+j·step from it on; ext(j) is
	// ext+j·step before unit jb, most from it on: on each of the three
	// runs of units between them, delay(j)+ext(j) is c+d·j, and it grows
	// with j, so the units ended are the runs whose last unit has, and
	// the first units of the run after them.
	j1, j2 := min(b.ja, b.jb), max(b.ja, b.jb)
	for _, r := range [3][2]int64{{0, j1}, {j1, j2}, {j2, b.n}} {
		lo, hi := r[0], r[1]
		if lo >= hi {
			continue
		}
		var c, d int64
		if lo >= b.ja {
			c, d = b.off, b.step
		}
		if lo >= b.jb {
			c += b.most
		} else {
			c, d = c+b.ext, d+b.step
		}
		if c+d*(hi-1) <= lim {
			continue // the whole run has ended
		}
		if d == 0 || c+d*lo > lim {
			return lo
		}
		return (lim-c)/d + 1
	}
	return b.n
}

// first is the first unit still spendable or to come at now: not spent,
// not passed over, not ended. Units end in order, so while the next one
// has not ended none after it has (the common case, with no division).
func (b *slots) first(now int64) int64 {
	lim := now - b.exp
	if b.next < b.n && max(0, b.off+b.next*b.step)+min(b.ext+b.next*b.step, b.most) > lim {
		return b.next
	}
	return max(b.next, b.ended(lim))
}

// mature is the number of units whose slot has come at now.
func (b *slots) mature(now int64) int64 {
	if b.early && now >= b.at {
		return b.n
	}
	return b.upto(now - b.at)
}

// avail is the units spendable at now.
func (b *slots) avail(now int64) int64 { return max(0, b.mature(now)-b.first(now)) }

// live is the units spendable at now or later.
func (b *slots) live(now int64) int64 { return b.n - b.first(now) }

// matures is the local time unit j becomes spendable.
func (b *slots) matures(j int64) int64 {
	if b.early {
		return b.at
	}
	return b.at + max(0, b.off+j*b.step)
}

// take spends t of the units available at now.
func (b *slots) take(t, now int64) {
	b.next = b.first(now) + t
	b.last = b.next
	b.used += t
}

// leases is a key's funnel leases, the older first: typically the current
// one and the one a prefetch brought, whose units come after the current
// one's. The zero leases holds nothing.
type leases struct {
	b [maxLeases]slots
	n int
}

// avail is the units spendable at now.
func (ls *leases) avail(now int64) int64 {
	var n int64
	for i := 0; i < ls.n; i++ {
		n += ls.b[i].avail(now)
	}
	return n
}

// live is the units spendable at now or later.
func (ls *leases) live(now int64) int64 {
	var n int64
	for i := 0; i < ls.n; i++ {
		n += ls.b[i].live(now)
	}
	return n
}

// wait is the local time at which the first k units live at now are all
// spendable, or -1 when fewer than k are live. Within a lease the units
// mature in order; an older lease's may mature later on this clock than a
// newer one's (each is timed from its own answer), hence the latest of
// the leases' last units taken.
func (ls *leases) wait(k, now int64) int64 {
	at := int64(-1)
	for i := 0; i < ls.n && k > 0; i++ {
		b := &ls.b[i]
		f := b.first(now)
		t := min(k, b.n-f)
		if t > 0 {
			at = max(at, b.matures(f+t-1))
		}
		k -= t
	}
	if k > 0 {
		return -1
	}
	return at
}

// spend takes q units available at now (avail(now) >= q), the older
// leases first, and reports whether the newest lease was spent out.
func (ls *leases) spend(q, now int64) (spentOut bool) {
	for i := 0; i < ls.n && q > 0; i++ {
		b := &ls.b[i]
		t := min(b.avail(now), q)
		if t > 0 {
			b.take(t, now)
			q -= t
			if b.next == b.n && i == ls.n-1 {
				spentOut = true
			}
		}
	}
	return spentOut
}

// drop removes the oldest lease and returns its unspent units.
func (ls *leases) drop() int64 {
	u := ls.b[0].n - ls.b[0].used
	copy(ls.b[:], ls.b[1:ls.n])
	ls.n--
	ls.b[ls.n] = slots{}
	return u
}

// add appends b, after dropping the oldest lease when they are full, and
// returns the unspent units of the lease dropped.
func (ls *leases) add(b slots) (dropped int64) {
	if ls.n == maxLeases {
		dropped = ls.drop()
	}
	ls.b[ls.n] = b
	ls.n++
	return dropped
}

// clear drops every lease and returns their unspent units.
func (ls *leases) clear() int64 {
	var n int64
	for ls.n > 0 {
		n += ls.drop()
	}
	return n
}
