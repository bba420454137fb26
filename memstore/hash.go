package memstore

import (
	"math/rand/v2"
	"unsafe"
)

// memhash is the runtime's hash of memory, the one its maps and
// hash/maphash use (AES-based where the processor has it, seeded per
// process), called directly: maphash.String reaches it through two more
// calls, which cost as much as the hash of a short key. The runtime keeps it
// reachable by this name for packages such as this one.
//
//go:linkname memhash runtime.memhash
//go:noescape
func memhash(p unsafe.Pointer, seed, n uintptr) uintptr

// newSeed returns a random seed for a store's hash, so that the slots of
// keys cannot be predicted from outside the process.
func newSeed() uintptr { return uintptr(rand.Uint64()) }

// hash returns key's hash: never 0 (an empty slot), the shard from its top
// bits and the slot from its bottom bits.
func (s *Store) hash(key string) (uint64, *shard) {
	h := uint64(memhash(unsafe.Pointer(unsafe.StringData(key)), s.seed, uintptr(len(key))))
	if h == 0 {
		h = 1
	}
	return h, &s.shards[h>>s.shift] // shift is 64 for one shard: h>>64 is 0
}
