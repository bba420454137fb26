package memstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"time"
	"unsafe"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
)

// snapReader restores the records of a snapshot into a store.
type snapReader struct {
	s     *Store
	r     io.Reader
	off   int64 // bytes read
	block bytes.Buffer
	base  int64 // the instant (store's clock) that the snapshot's instants are relative to
	wall  int64 // the wall-clock time since the write (negative: the clock was stepped back)
	// The boot and the time since it at the read (see Options.Boot), and
	// whether a clock record was read.
	bootID    string
	sinceBoot time.Duration
	booted    bool
	clocked   bool
	basems    int64 // base in ms
	wms       int64 // the snapshot's wall time in ms: the base of window starts
	now       int64 // the store's time at the read
	keys      int64 // key records read
	bans      int64 // ban records read
	st        SnapshotStats
	blocks    int
	blockAt   int64 // offset of the block being read
}

// ReadSnapshot restores a snapshot written by WriteSnapshot into the store,
// which must hold no keys and no bans, and returns what it restored. Call
// it before the store serves decisions.
//
// Every instant is moved by the wall-clock time that passed since the
// snapshot was written, so a key restored later has recovered that much (a
// funnel refilled, a ban shortened), and states that are empty by now are
// not restored. A snapshot whose wall time lies in the future (the clock was
// stepped back) is restored as if written now: no key gets a fresh burst,
// and no ban lasts longer than it had left. The windows of the window
// algorithms are windows of the wall clock and are kept as they are; from
// a snapshot from the future, a window ahead of now counts as the window
// that holds now (see algo.FixedDecide), calendar windows in any zone
// included.
// Keys beyond MaxKeys are not restored.
//
// A snapshot that is truncated, corrupt, not a snapshot, or of a newer
// version than this package reads is an error that wraps
// ErrCorruptSnapshot and is a *SnapshotError, which says at which byte the
// fault lies; an error of r is returned as it is. On any error the store is
// left empty: no part of a bad snapshot is restored.
func (s *Store) ReadSnapshot(r io.Reader) (SnapshotStats, error) {
	if st := s.Stats(); st.Keys > 0 || st.Bans > 0 {
		return SnapshotStats{}, errNotEmpty
	}
	sr := &snapReader{s: s, r: r}
	err := sr.read()
	sr.st.Bytes = sr.off
	if err != nil {
		s.clear()
		return SnapshotStats{}, err
	}
	return sr.st, nil
}

func (sr *snapReader) fail(at int64, format string, args ...any) error {
	return &SnapshotError{Offset: at, Reason: fmt.Sprintf(format, args...)}
}

// full reads len(b) bytes; a short read is io.ErrUnexpectedEOF, nothing at
// all io.EOF.
func (sr *snapReader) full(b []byte) error {
	n, err := io.ReadFull(sr.r, b)
	sr.off += int64(n)
	return err
}

func (sr *snapReader) read() error {
	if err := sr.header(); err != nil {
		return err
	}
	var frame [frameSize]byte
	for {
		sr.blockAt = sr.off
		switch err := sr.full(frame[:]); {
		case err == io.EOF:
			return sr.fail(sr.off, "truncated: the file ends after %d blocks, without the end record", sr.blocks)
		case err == io.ErrUnexpectedEOF:
			return sr.fail(sr.off, "truncated in the frame of block %d", sr.blocks+1)
		case err != nil:
			return err
		}
		n := binary.BigEndian.Uint32(frame[:])
		if n == 0 || n > maxBlock {
			return sr.fail(sr.blockAt, "block %d has a length of %d bytes (want 1 to %d)", sr.blocks+1, n, maxBlock)
		}
		sr.block.Reset()
		// CopyN grows the buffer only as bytes arrive: a corrupt length
		// does not allocate the memory it claims.
		m, err := io.CopyN(&sr.block, sr.r, int64(n))
		sr.off += m
		switch {
		case err == io.EOF:
			return sr.fail(sr.off, "truncated in block %d, which should hold %d bytes from byte %d", sr.blocks+1, n, sr.blockAt)
		case err != nil:
			return err
		}
		payload := sr.block.Bytes()
		if got := blockCRC(frame[:4], payload); got != binary.BigEndian.Uint32(frame[4:]) {
			return sr.fail(sr.blockAt, "checksum mismatch in block %d (%d bytes): CRC-32C %08x, want %08x",
				sr.blocks+1, n, got, binary.BigEndian.Uint32(frame[4:]))
		}
		sr.blocks++
		end, err := sr.records(payload)
		if err != nil || !end {
			if err != nil {
				return err
			}
			continue
		}
		var one [1]byte
		if n, _ := sr.r.Read(one[:]); n > 0 {
			return sr.fail(sr.off, "data after the end record")
		}
		return nil
	}
}

// header reads the header and sets the mapping of the snapshot's instants
// to the store's clock.
func (sr *snapReader) header() error {
	var h [headerSize]byte
	switch err := sr.full(h[:]); {
	case err == io.EOF:
		return sr.fail(0, "empty file: no header")
	case err == io.ErrUnexpectedEOF:
		return sr.fail(sr.off, "truncated in the header (%d of %d bytes)", sr.off, headerSize)
	case err != nil:
		return err
	}
	if string(h[:8]) != snapMagic {
		return sr.fail(0, "not a Funnel snapshot (it starts with %q, want %q)", h[:8], snapMagic)
	}
	if v := binary.BigEndian.Uint16(h[8:]); v == 0 || v > SnapshotVersion {
		return sr.fail(8, "format version %d; this Funnel reads versions 1 to %d", v, SnapshotVersion)
	}
	if got, want := crc32.Checksum(h[:28], castagnoli), binary.BigEndian.Uint32(h[28:]); got != want {
		return sr.fail(28, "header checksum mismatch: CRC-32C %08x, want %08x", got, want)
	}
	if f := binary.BigEndian.Uint16(h[10:]); f != 0 {
		return sr.fail(10, "unknown flags %#x", f)
	}
	written := int64(binary.BigEndian.Uint64(h[12:]))
	sr.now = sr.s.Now()
	sr.wall = sr.s.wallNow() - written
	if sr.wall < 0 {
		sr.st.Clamped = time.Duration(-sr.wall)
	}
	if sr.s.boot != nil {
		sr.bootID, sr.sinceBoot, sr.booted = sr.s.boot()
	}
	// Until a clock record proves otherwise, the time that passed is the
	// wall clock's, bounded.
	sr.setElapsed(sr.wall, false)
	sr.wms = algo.Millis(written)
	sr.st.Written = time.Unix(0, written)
	return nil
}

// setElapsed sets the time that passed since the write to elapsed: an
// instant written as d after the write's time is restored as d after
// (now - elapsed). A negative time (a wall clock stepped back) counts as
// none; one that is not proven (by the monotonic clock of one boot) is
// bounded by Options.RestoreMaxElapsed.
func (sr *snapReader) setElapsed(elapsed int64, proven bool) {
	sr.st.Proven, sr.st.Bounded = proven, 0
	if elapsed < 0 {
		elapsed = 0
	}
	if max := int64(sr.s.restoreMax); !proven && max > 0 && elapsed > max {
		sr.st.Bounded = time.Duration(elapsed - max)
		elapsed = max
	}
	sr.base = sr.now - elapsed
	sr.basems = algo.Millis(sr.base)
}

// clock reads a clock record: when it names this boot, the time since the
// write is the difference of the times since the boot, whatever the wall
// clock did.
func (sr *snapReader) clock(c *cursor, at int64) error {
	if sr.keys > 0 || sr.bans > 0 || sr.clocked {
		return sr.fail(at, "a clock record that is not the first record")
	}
	sr.clocked = true
	id := view(c.bytes())
	since := c.uvarint()
	if c.bad != "" {
		return sr.fail(at, "clock record: %s", c.bad)
	}
	if since > math.MaxInt64 {
		return sr.fail(at, "clock record: a time since the boot of %d ns", since)
	}
	if !sr.booted || id != sr.bootID {
		return nil // another boot: nothing proves the time that passed
	}
	elapsed := int64(sr.sinceBoot) - int64(since)
	if elapsed < 0 {
		return sr.fail(at, "clock record: written %v after this boot began, later than now (%v)", time.Duration(since), sr.sinceBoot)
	}
	sr.st.Stepped = time.Duration(sr.wall - elapsed)
	sr.setElapsed(elapsed, true)
	return nil
}

// cursor reads the fields of one block's records.
type cursor struct {
	b   []byte
	i   int
	bad string
}

func (c *cursor) uvarint() uint64 {
	if c.bad != "" {
		return 0
	}
	v, n := binary.Uvarint(c.b[c.i:])
	if n <= 0 {
		c.bad = "a malformed number"
		return 0
	}
	c.i += n
	return v
}

// count reads a non-negative number that fits an int64.
func (c *cursor) count() int64 {
	v := c.uvarint()
	if v > 1<<62 {
		c.bad = fmt.Sprintf("a count of %d", v)
		return 0
	}
	return int64(v)
}

func (c *cursor) varint() int64 {
	if c.bad != "" {
		return 0
	}
	v, n := binary.Varint(c.b[c.i:])
	if n <= 0 {
		c.bad = "a malformed number"
		return 0
	}
	c.i += n
	return v
}

// bytes returns the next field of bytes, which aliases the block.
func (c *cursor) bytes() []byte {
	n := c.uvarint()
	if c.bad != "" {
		return nil
	}
	if n > uint64(len(c.b)-c.i) {
		c.bad = fmt.Sprintf("a length of %d bytes, beyond the block", n)
		return nil
	}
	b := c.b[c.i : c.i+int(n)]
	c.i += int(n)
	return b
}

// view returns b as a string that aliases it, for lookups and for the
// functions that copy a key they keep.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// records restores the records of one block and reports whether it held
// the end record, which must be its last.
func (sr *snapReader) records(payload []byte) (bool, error) {
	c := &cursor{b: payload}
	for c.i < len(c.b) {
		at := sr.blockAt + frameSize + int64(c.i)
		if len(c.b)-c.i < 2 {
			return false, sr.fail(at, "a record cut short")
		}
		kind, ver := c.b[c.i], c.b[c.i+1]
		c.i += 2
		if kind >= numRecs {
			return false, sr.fail(at, "unknown record kind %d", kind)
		}
		if ver == 0 || ver > recVersions[kind] {
			return false, sr.fail(at, "%s record of version %d; this Funnel reads versions 1 to %d", recNames[kind], ver, recVersions[kind])
		}
		if kind == recEnd {
			keys, bans := c.count(), c.count()
			switch {
			case c.bad != "":
				return false, sr.fail(at, "end record: %s", c.bad)
			case c.i != len(c.b):
				return false, sr.fail(at, "the end record is not the last of its block")
			case keys != sr.keys || bans != sr.bans:
				return false, sr.fail(at, "the end record counts %d keys and %d bans, the snapshot holds %d and %d", keys, bans, sr.keys, sr.bans)
			}
			return true, nil
		}
		if kind == recClock {
			if err := sr.clock(c, at); err != nil {
				return false, err
			}
			continue
		}
		if kind == recResv {
			if err := sr.reservation(c, ver, at); err != nil {
				return false, err
			}
			continue
		}
		if err := sr.record(c, kind, ver, at); err != nil {
			return false, err
		}
	}
	return false, nil
}

// record restores one record of a key or a ban, of version ver of its kind.
func (sr *snapReader) record(c *cursor, kind, ver uint8, at int64) error {
	key := view(c.bytes())
	d := c.varint()
	t := addSat(sr.base, d) // the instant of a ban's end, or of a state's
	var fs *fstate
	switch kind {
	case recBan:
		sr.bans++
	case recTAT:
		sr.keys++
	default:
		sr.keys++
		fs = sr.famState(c, kind, ver, t)
		if fs != nil && (kind == recFixed || kind == recSliding) {
			sr.window(fs, sr.wms+d) // d names the window's end
			t = fs.expires
		}
	}
	if c.bad != "" {
		return sr.fail(at, "%s record: %s", recNames[kind], c.bad)
	}
	if t <= sr.now || t <= 0 {
		if kind != recBan {
			sr.st.Dropped++
		}
		return nil // empty (or ended) by now
	}
	switch sr.s.restore(key, kind, t, fs) {
	case added:
		if kind == recBan {
			sr.st.Bans++
		} else {
			sr.st.Keys++
		}
	case full:
		sr.st.Dropped++
	}
	return nil
}

// reservation restores a reservation record of version ver (see
// snapWriter.resv), unless its TTL has ended. A funnel's reservation of
// version 1, which lacks the TAT after its take, gives back as that
// version did (see algo.FunnelGiveBack: an end that bounds nothing).
func (sr *snapReader) reservation(c *cursor, ver uint8, at int64) error {
	key := c.bytes()
	end := addSat(sr.base, c.varint())
	id := c.bytes()
	estimate := c.count()
	d := c.varint()
	settled := c.uvarint()
	actual := c.count()
	enc := c.bytes()
	tatEnd := int64(math.MaxInt64)
	if ver >= 2 {
		tatEnd = addSat(sr.base, c.varint())
	}
	bad := c.bad
	var limit funnel.Checked
	if bad == "" {
		l, err := funnel.DecodeLimit(string(enc))
		if err == nil {
			limit, err = l.Check()
		}
		switch {
		case err != nil:
			bad = err.Error()
		case estimate < 1 || len(id) == 0 || settled > 1 || limit.Algorithm == funnel.Concurrency:
			bad = "a reservation out of range"
		}
	}
	if bad != "" {
		return sr.fail(at, "reservation record: %s", bad)
	}
	if end <= sr.now {
		return nil // its TTL has ended
	}
	rv := &reservation{limit: limit, estimate: estimate, at: resvBase(limit.Algorithm, sr.basems, sr.wms) + d, end: tatEnd, expires: end, settled: settled == 1, actual: actual}
	_, sh := sr.s.hash(view(key))
	sh.mu.Lock()
	sh.addReservation(resvKey{string(key), string(id)}, rv)
	sh.mu.Unlock()
	sr.st.Reservations++
	return nil
}

// window sets the end of the window state fs, in ms, as the snapshot
// names it. A snapshot from the future (see ReadSnapshot) may hold windows
// that lie ahead of now: they are kept as they are, and the decisions count
// a later window's units as the current window's (algo.FixedDecide, the
// sliding counter's roll), whatever the windows' alignment or time zone.
func (sr *snapReader) window(fs *fstate, end int64) {
	fs.expires = math.MaxInt64
	if end < math.MaxInt64/int64(time.Millisecond) {
		fs.expires = end * int64(time.Millisecond)
	}
}

// famState reads the rest of a family record, of version ver of its kind,
// whose state empties at expires. A kind's next version reads its new
// fields here, after those of the versions before.
func (sr *snapReader) famState(c *cursor, kind, ver uint8, expires int64) *fstate {
	// Every kind is at version 1 but concurrency, whose version 2 adds the
	// unit delay.
	fs := &fstate{expires: expires}
	switch kind {
	case recFixed:
		fs.kind = kindFixed
		fs.a, fs.b = sr.wms+c.varint(), c.count()
	case recSliding:
		fs.kind = kindSliding
		fs.a, fs.b, fs.c = sr.wms+c.varint(), c.count(), c.count()
	case recLog:
		fs.kind = kindLog
		n := c.count()
		if n > int64(len(c.b)-c.i) { // each time takes a byte at least
			c.bad = fmt.Sprintf("%d times, beyond the block", n)
			return nil
		}
		fs.times = make([]int64, n)
		t := sr.basems
		for i := range fs.times {
			t += c.varint()
			fs.times[i] = t
		}
	case recCmd:
		fs.kind = kindCmd
		fs.a = addSat(sr.base/1000, c.varint())
		fs.expires = cmdExpires(fs.a)
	case recConc:
		fs.kind = kindConc
		n := c.count()
		if n > int64(len(c.b)-c.i)/2 { // each lease takes two bytes at least
			c.bad = fmt.Sprintf("%d leases, beyond the block", n)
			return nil
		}
		fs.leases = make([]algo.Lease, n)
		for i := range fs.leases {
			id := c.bytes()
			fs.leases[i] = algo.Lease{ID: string(id), Expires: sr.basems + c.varint()}
		}
		if ver >= 2 {
			fs.a = c.count()
			if fs.a > int64(algo.MaxUnitDelay) {
				c.bad = fmt.Sprintf("a unit delay of %dns, above the largest", fs.a)
				return nil
			}
		}
	}
	return fs
}

// How restore went.
const (
	added    = iota // a new key or ban
	replaced        // a key or ban restored already (see restore)
	full            // a key beyond MaxKeys, not restored
)

// restore adds key's state (a TAT t when fs is nil), or its ban until t
// when kind is recBan. The functions it calls copy key.
//
// A snapshot may hold a key twice: the write reads each shard while
// decisions go on, so a key dropped (its state empty) and added again
// meanwhile may be met at its old place and its new one, or as a funnel key
// and then as a key of another algorithm. The later record holds the newer
// state: it replaces the earlier one. A ban met twice keeps the later end.
func (s *Store) restore(key string, kind uint8, t int64, fs *fstate) int {
	h, sh := s.hash(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if kind == recBan {
		_, ok := sh.bans[key]
		sh.banUntil(key, t)
		if ok {
			return replaced
		}
		return added
	}
	had := false
	if sl := sh.table.Load().findSlot(h, key); sl != nil {
		sh.remove(sl, dead)
		had = true
	} else if old := sh.fam[key]; old != nil {
		sh.deleteFam(key, old)
		had = true
	}
	if had {
		sh.release(1) // the place is taken again below
	}
	if s.max > 0 && s.takeFree(1) == 0 {
		return full
	}
	if fs == nil {
		sh.insert(h, newEntry(key, t))
	} else {
		sh.insertFam(key, fs)
	}
	if had {
		return replaced
	}
	return added
}

// clear drops every key and ban.
func (s *Store) clear() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.release(sh.held())
		sh.table.Store(newTable(minSlots))
		sh.live, sh.tombs = 0, 0
		sh.fam, sh.famPeak, sh.conc = nil, 0, 0
		sh.bans, sh.banPeak = nil, 0
		sh.mu.Unlock()
	}
}
