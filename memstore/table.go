package memstore

import (
	"math"
	"sync/atomic"
	"unsafe"
)

// The table of one shard: open addressing with linear probing, read without
// locks, written under the shard's mutex.
//
// Each key lives in an entry: one small pointer-free allocation holding the
// key's TAT (updated by compare-and-swap, so deciding for a key the table
// holds takes no lock) followed by the key's bytes. A slot holds the key's
// hash and a pointer to its entry; entries are shared by every generation of
// a shard's table, so a table can be rebuilt (grown, shrunk, purged of
// tombstones) while readers still use the old one.
//
// Deleting a key (sweep, eviction, reset) happens under the lock: its entry's
// TAT is set to dead by compare-and-swap, then its slot's pointer is cleared
// and the slot becomes a tombstone (hash kept, so probe chains stay intact).
// A reader that still holds the entry sees dead, or fails its own
// compare-and-swap, and retries under the lock; so every decision is applied
// to the key's current state, exactly once.

// dead is the TAT of a deleted entry. No real TAT is negative.
const dead = math.MinInt64

// locked is the TAT of an entry that a Do call holds, with its shard's lock,
// while it decides several keys at once. Lock-free paths that meet it go
// to the shard's lock, which makes them wait for the call to end; paths
// that hold the lock never meet another call's locked entry.
const locked = dead + 1

// entry is the header of a key's allocation; the key's bytes follow it.
type entry struct {
	tat atomic.Int64
	n   int64 // length of the key
}

const entrySize = int(unsafe.Sizeof(entry{}))

// newEntry allocates the entry of key with TAT tat. The allocation holds no
// pointers (the garbage collector does not scan it) and is 8-byte aligned,
// as the atomic TAT requires.
func newEntry(key string, tat int64) *entry {
	words := make([]uint64, (entrySize+len(key)+7)/8)
	e := (*entry)(unsafe.Pointer(&words[0]))
	e.tat.Store(tat)
	e.n = int64(len(key))
	if len(key) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(e), entrySize)), len(key)), key)
	}
	return e
}

// key returns the entry's key. The string aliases the entry, which never
// changes its key.
func (e *entry) key() string {
	if e.n == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(e), entrySize)), int(e.n))
}

// size is the entry's allocation size in bytes.
func (e *entry) size() int { return (entrySize + int(e.n) + 7) / 8 * 8 }

// slot is one place of a table. hash 0 means empty; a non-zero hash with a
// nil entry is a tombstone (or an insertion under way).
type slot struct {
	hash atomic.Uint64
	e    atomic.Pointer[entry]
}

type table struct {
	slots []slot
	mask  uint64
}

// minSlots is the smallest table.
const minSlots = 8

func newTable(n int) *table {
	return &table{slots: make([]slot, n), mask: uint64(n - 1)}
}

// find returns the live entry of key, whose hash is h, or nil. It takes no
// lock. A table always has an empty slot, so the probe ends.
func (t *table) find(h uint64, key string) *entry {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		switch hh := s.hash.Load(); hh {
		case h:
			if e := s.e.Load(); e != nil && e.key() == key {
				return e
			}
		case 0:
			return nil
		}
	}
}

// findSlot returns the slot that holds key's live entry, or nil. The caller
// holds the shard's lock.
func (t *table) findSlot(h uint64, key string) *slot {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		switch hh := s.hash.Load(); hh {
		case h:
			if e := s.e.Load(); e != nil && e.key() == key {
				return s
			}
		case 0:
			return nil
		}
	}
}

// put places e, whose key is absent, in the first empty slot or tombstone of
// its probe chain, and reports whether it used an empty slot. The caller
// holds the shard's lock and has made room.
func (t *table) put(h uint64, e *entry) (usedEmpty bool) {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		hh := s.hash.Load()
		if hh == 0 || s.e.Load() == nil {
			// Entry first, then hash: a reader that sees the hash sees the
			// entry.
			s.e.Store(e)
			s.hash.Store(h)
			return hh == 0
		}
	}
}
