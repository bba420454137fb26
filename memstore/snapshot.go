package memstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
)

// Snapshots (see the package documentation, "Snapshots", for the format).

// snapMagic opens every snapshot.
const snapMagic = "FUNLSNAP"

// SnapshotVersion is the version of the snapshot format that WriteSnapshot
// writes and the newest that ReadSnapshot reads (it reads version 1, which
// has no clock record, too).
const SnapshotVersion = 2

const (
	headerSize = 32
	frameSize  = 8 // a block's length and checksum
	// blockTarget is the payload size at which a block is closed. A record
	// is never split, so a block holding one large record is larger.
	blockTarget = 64 << 10
	// maxBlock bounds a block's payload: a larger length is corruption.
	maxBlock = 64 << 20
)

// Record kinds, the first byte of each record.
const (
	recEnd     = 0 // the last record: the counts of keys and bans
	recTAT     = 1 // a funnel or leaky bucket key
	recFixed   = 2
	recSliding = 3
	recLog     = 4
	recConc    = 5
	recBan     = 6
	recCmd     = 7 // a key of Redis's GCRA command
	recClock   = 8 // the boot and the time since it at the write: the first record, if any
	recResv    = 9 // a reservation (reserve.go)
	numRecs    = 10
)

// recVersions[k] is the newest version of record kind k that this package
// writes and reads. A record kind gains a version when its fields change;
// the reader keeps reading the older versions. Concurrency records are at
// version 2: the key's unit delay (ns, 0 when none) follows the leases.
// Reservation records are at version 2: a funnel's TAT just after the
// take follows the limit.
var recVersions = [numRecs]uint8{1, 1, 1, 1, 1, 2, 1, 1, 1, 2}

var recNames = [numRecs]string{"end", "funnel", "fixed_window", "sliding_window", "sliding_log", "concurrency", "ban", "gcra_command", "clock", "reservation"}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorruptSnapshot is wrapped by every SnapshotError: the snapshot read is
// truncated, corrupt, not a snapshot, or of a newer version than this
// package reads.
var ErrCorruptSnapshot = errors.New("memstore: bad snapshot")

// errNotEmpty is ReadSnapshot's error on a store that holds keys or bans.
var errNotEmpty = errors.New("memstore: ReadSnapshot needs an empty store")

// SnapshotError says what is wrong with a snapshot, and where.
type SnapshotError struct {
	// Offset is the byte of the snapshot at which the fault was found:
	// the start of the header, block or record that is wrong, or the end
	// of what could be read.
	Offset int64
	// Reason says what is wrong.
	Reason string
}

// Error returns the reason, with the offset.
func (e *SnapshotError) Error() string {
	return fmt.Sprintf("memstore: bad snapshot at byte %d: %s", e.Offset, e.Reason)
}

// Unwrap returns ErrCorruptSnapshot.
func (e *SnapshotError) Unwrap() error { return ErrCorruptSnapshot }

// SnapshotStats describe a snapshot written or read.
type SnapshotStats struct {
	// Written is the wall-clock time at which the snapshot was written.
	Written time.Time
	// Keys and Bans are the numbers of keys and bans in the snapshot. A
	// read counts the keys and bans restored: those that were still live
	// and fit under MaxKeys.
	Keys, Bans int64
	// Reservations is the number of reservations (Store.Reserve) in the
	// snapshot; on a read, of those restored: those whose TTL had not
	// ended.
	Reservations int64
	// Dropped counts, on a read, the keys restored neither because their
	// state was empty by then nor because MaxKeys was reached.
	Dropped int64
	// Bytes is the size of the snapshot.
	Bytes int64
	// Clamped is, on a read, how far in the future the snapshot's wall time
	// was (the clock was stepped back since it was written); unless the
	// time that passed is proven (Proven), the snapshot is then restored as
	// if it had been written now.
	Clamped time.Duration
	// Proven reports, on a read, that the time that passed since the write
	// was measured on the monotonic clock of the boot that wrote it (see
	// Options.Boot), whatever the wall clock did; Stepped is then how far
	// the wall clock moved beyond it (negative: back).
	Proven  bool
	Stepped time.Duration
	// Bounded is, on a read that could not prove the time that passed,
	// how much of the wall clock's elapsed time was not counted
	// (Options.RestoreMaxElapsed): keys were restored as if written that
	// much later.
	Bounded time.Duration
}

// wallNow returns the wall-clock time in ns since the Unix epoch: the
// store's own clock when one was given (it is taken to be a wall clock),
// the real one otherwise.
func (s *Store) wallNow() int64 {
	if s.now != nil {
		return s.now()
	}
	return time.Now().UnixNano()
}

// snapWriter encodes records into blocks. buf holds closed blocks, ready to
// be written, then the open one, whose frame starts at open.
type snapWriter struct {
	w        io.Writer
	buf      []byte
	open     int
	bytes    int64
	s, sms   int64 // the store's time at the write, in ns and ms
	wms      int64 // the wall time at the write, in ms: the base of window starts
	keys     int64
	bans     int64
	resvs    int64
	writeErr error
}

// WriteSnapshot writes a snapshot of the store's live states and bans to w,
// and returns what it wrote. Decisions go on meanwhile: the keys of a
// funnel are read without a lock, the other states and the bans one shard
// at a time under the shard's lock, and each shard's records are written
// out before the next shard is read, so the memory it takes beyond the
// store's is about one shard's records. Each key's state is one that the key
// held during the write; a decision made during the write may or may not
// be in it. The caller makes the snapshot durable (see the package
// documentation).
func (s *Store) WriteSnapshot(w io.Writer) (SnapshotStats, error) {
	now, wall := s.Now(), s.wallNow()
	var bootID string
	var sinceBoot time.Duration
	booted := false
	if s.boot != nil {
		bootID, sinceBoot, booted = s.boot()
	}
	sw := &snapWriter{w: w, s: now, sms: algo.Millis(now), wms: algo.Millis(wall), buf: make([]byte, 0, blockTarget+4096)}
	hint := int64(0)
	for i := range s.shards {
		sh := &s.shards[i]
		hint += int64(sh.table.Load().count())
	}
	var h [headerSize]byte
	copy(h[:8], snapMagic)
	binary.BigEndian.PutUint16(h[8:], SnapshotVersion)
	binary.BigEndian.PutUint64(h[12:], uint64(wall))
	binary.BigEndian.PutUint64(h[20:], uint64(hint))
	binary.BigEndian.PutUint32(h[28:], crc32.Checksum(h[:28], castagnoli))
	sw.buf = append(sw.buf, h[:]...)
	sw.startBlock()
	if booted {
		// The evidence of the time that a restore on this boot finds
		// passed, whatever the wall clock did meanwhile.
		sw.head(recClock, bootID)
		sw.buf = binary.AppendUvarint(sw.buf, uint64(sinceBoot))
	}
	for i := range s.shards {
		sw.shard(&s.shards[i])
		if sw.writeErr != nil {
			return sw.stats(wall), sw.writeErr
		}
	}
	sw.buf = append(sw.buf, recEnd, recVersions[recEnd])
	sw.buf = binary.AppendUvarint(sw.buf, uint64(sw.keys))
	sw.buf = binary.AppendUvarint(sw.buf, uint64(sw.bans))
	sw.closeBlock()
	sw.flush()
	return sw.stats(wall), sw.writeErr
}

func (sw *snapWriter) stats(wall int64) SnapshotStats {
	return SnapshotStats{Written: time.Unix(0, wall), Keys: sw.keys, Bans: sw.bans, Reservations: sw.resvs, Bytes: sw.bytes}
}

// shard writes the records of sh: its funnel keys without the lock, then
// those it could not read so (held by a Do call), its family states and its
// bans under the lock.
func (sw *snapWriter) shard(sh *shard) {
	var retry []*slot
	t := sh.table.Load()
	for i := range t.slots {
		e := t.slots[i].e.Load()
		if e == nil {
			continue
		}
		switch tat := e.tat.Load(); {
		case tat <= locked:
			// Deleted (then it is gone, or moved to a newer table, which
			// the lock below sees) or held by a Do call: read it again
			// under the lock, where no entry is held.
			retry = append(retry, &t.slots[i])
		case tat > sw.s:
			sw.tat(e.key(), tat)
		}
		if sw.fill() {
			sw.flush()
		}
	}
	sh.mu.Lock()
	if len(retry) > 0 {
		cur := sh.table.Load()
		for _, sl := range retry {
			// The key may have been deleted and added again as a new entry
			// meanwhile: look it up.
			e := sl.e.Load()
			if e == nil {
				continue // deleted meanwhile
			}
			k := e.key()
			if ce := cur.find(sl.hash.Load(), k); ce != nil {
				if tat := ce.tat.Load(); tat > sw.s {
					sw.tat(k, tat)
				}
			}
		}
	}
	// Blocks are closed as they fill, and written out once the lock is
	// let go.
	for k, fs := range sh.fam {
		if fs.expires > sw.s {
			sw.fam(k, fs)
			sw.fill()
		}
	}
	for k, until := range sh.bans {
		if until > sw.s {
			sw.ban(k, until)
			sw.fill()
		}
	}
	for rk, rv := range sh.resv {
		if rv.expires > sw.s {
			sw.resv(rk, rv)
			sw.fill()
		}
	}
	sh.mu.Unlock()
	sw.closeBlock()
	sw.flush()
}

// startBlock opens a block at the end of buf.
func (sw *snapWriter) startBlock() {
	sw.open = len(sw.buf)
	sw.buf = append(sw.buf, make([]byte, frameSize)...)
}

// fill closes the open block when it holds blockTarget bytes or more, and
// reports whether it did.
func (sw *snapWriter) fill() bool {
	if len(sw.buf)-sw.open-frameSize < blockTarget {
		return false
	}
	sw.closeBlock()
	return true
}

// closeBlock closes the open block, unless it is empty, and opens another.
func (sw *snapWriter) closeBlock() {
	n := len(sw.buf) - sw.open - frameSize
	if n == 0 {
		return
	}
	if n > maxBlock && sw.writeErr == nil {
		// One record larger than a block may be (a key of millions of
		// leases): a reader would refuse the snapshot, so fail the write.
		sw.writeErr = fmt.Errorf("memstore: a snapshot record of %d bytes, beyond the %d of a block", n, maxBlock)
	}
	frame := sw.buf[sw.open:]
	binary.BigEndian.PutUint32(frame, uint32(n))
	binary.BigEndian.PutUint32(frame[4:], blockCRC(frame[:4], frame[frameSize:]))
	sw.startBlock()
}

// blockCRC is the checksum of a block: CRC-32C over its length and payload.
func blockCRC(length, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(length, castagnoli), castagnoli, payload)
}

// flush writes the closed blocks out and keeps the open one.
func (sw *snapWriter) flush() {
	if sw.writeErr != nil {
		sw.buf, sw.open = sw.buf[:0], 0
		sw.startBlock()
		return
	}
	if sw.open == 0 {
		return
	}
	n, err := sw.w.Write(sw.buf[:sw.open])
	sw.bytes += int64(n)
	if err != nil {
		sw.writeErr = err
		return
	}
	sw.buf = append(sw.buf[:0], sw.buf[sw.open:]...)
	sw.open = 0
}

func (sw *snapWriter) head(kind uint8, key string) {
	sw.buf = append(sw.buf, kind, recVersions[kind])
	sw.buf = binary.AppendUvarint(sw.buf, uint64(len(key)))
	sw.buf = append(sw.buf, key...)
}

// Instants are written relative to the store's time at the write, window
// starts (which name a window of the wall clock) relative to the wall time
// of the header, in milliseconds.

func (sw *snapWriter) tat(key string, tat int64) {
	sw.head(recTAT, key)
	sw.buf = binary.AppendVarint(sw.buf, tat-sw.s)
	sw.keys++
}

func (sw *snapWriter) ban(key string, until int64) {
	sw.head(recBan, key)
	sw.buf = binary.AppendVarint(sw.buf, until-sw.s)
	sw.bans++
}

// resv writes a reservation: the end of its TTL; its id; its estimate;
// its millisecond (after the header's wall time in ms for the windows,
// whose spans it is compared with, after the write's for the others); 1
// when settled, else 0; the actual it was settled at (0 when pending); its
// limit (funnel.EncodeLimit); and (version 2) for a funnel or a leaky
// bucket the instant of the key's TAT just after the take, else 0.
func (sw *snapWriter) resv(rk resvKey, rv *reservation) {
	sw.head(recResv, rk.key)
	b := binary.AppendVarint(sw.buf, rv.expires-sw.s)
	b = binary.AppendUvarint(b, uint64(len(rk.id)))
	b = append(b, rk.id...)
	b = binary.AppendUvarint(b, uint64(rv.estimate))
	b = binary.AppendVarint(b, rv.at-resvBase(rv.limit.Algorithm, sw.sms, sw.wms))
	settled := uint64(0)
	if rv.settled {
		settled = 1
	}
	b = binary.AppendUvarint(b, settled)
	b = binary.AppendUvarint(b, uint64(rv.actual))
	enc := funnel.EncodeLimit(rv.limit.Limit)
	b = binary.AppendUvarint(b, uint64(len(enc)))
	b = append(b, enc...)
	end := int64(0)
	if k, _ := kindOf(rv.limit.Algorithm); k == kindTAT {
		end = rv.end - sw.s
	}
	sw.buf = binary.AppendVarint(b, end)
	sw.resvs++
}

// resvBase returns the base of a reservation's millisecond under an
// algorithm a: wms, the wall time's, for the windows; sms, the store's,
// for the others.
func resvBase(a funnel.Algorithm, sms, wms int64) int64 {
	if a == funnel.FixedWindow || a == funnel.SlidingWindow {
		return wms
	}
	return sms
}

func (sw *snapWriter) fam(key string, fs *fstate) {
	var rec uint8
	switch fs.kind {
	case kindFixed:
		rec = recFixed
	case kindSliding:
		rec = recSliding
	case kindLog:
		rec = recLog
	case kindConc:
		rec = recConc
	case kindCmd:
		rec = recCmd
	default:
		return
	}
	sw.head(rec, key)
	var b []byte
	if fs.kind == kindFixed || fs.kind == kindSliding {
		// A window's state empties at the end of a window of the wall
		// clock: a millisecond that names it, like the window's start.
		b = binary.AppendVarint(sw.buf, ceilMillis(fs.expires)-sw.wms)
	} else {
		b = binary.AppendVarint(sw.buf, fs.expires-sw.s)
	}
	switch fs.kind {
	case kindFixed:
		b = binary.AppendVarint(b, fs.a-sw.wms)
		b = binary.AppendUvarint(b, uint64(fs.b))
	case kindSliding:
		b = binary.AppendVarint(b, fs.a-sw.wms)
		b = binary.AppendUvarint(b, uint64(fs.b))
		b = binary.AppendUvarint(b, uint64(fs.c))
	case kindLog:
		b = binary.AppendUvarint(b, uint64(len(fs.times)))
		prev := sw.sms
		for _, t := range fs.times {
			b = binary.AppendVarint(b, t-prev)
			prev = t
		}
	case kindConc:
		n := 0
		for _, l := range fs.leases {
			if l.Expires > sw.sms {
				n++
			}
		}
		b = binary.AppendUvarint(b, uint64(n))
		for _, l := range fs.leases {
			if l.Expires > sw.sms {
				b = binary.AppendUvarint(b, uint64(len(l.ID)))
				b = append(b, l.ID...)
				b = binary.AppendVarint(b, l.Expires-sw.sms)
			}
		}
		b = binary.AppendUvarint(b, uint64(max(fs.a, 0))) // version 2
	case kindCmd:
		// The TAT in µs, after the write's time in µs.
		b = binary.AppendVarint(b, fs.a-sw.s/1000)
	}
	sw.buf = b
	sw.keys++
}

// count returns the number of live entries in t, read without the lock.
func (t *table) count() int {
	n := 0
	for i := range t.slots {
		if t.slots[i].e.Load() != nil {
			n++
		}
	}
	return n
}

// ceilMillis returns ns in whole milliseconds, rounded up.
func ceilMillis(ns int64) int64 {
	ms := algo.Millis(ns)
	if ms*int64(time.Millisecond) != ns {
		ms++
	}
	return ms
}

// addSat returns a+b, saturated to the int64 range.
func addSat(a, b int64) int64 {
	c := a + b
	switch {
	case b > 0 && c < a:
		return math.MaxInt64
	case b < 0 && c > a:
		return math.MinInt64
	}
	return c
}
