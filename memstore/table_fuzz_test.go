package memstore

import (
	"strconv"
	"strings"
	"testing"
)

// fuzzKeys is the key space of FuzzTable: few enough keys that a sequence
// meets the same ones again, of several lengths (the empty key too).
var fuzzKeys = func() (keys [64]string) {
	for k := range keys {
		if k > 0 {
			keys[k] = strings.Repeat("k", k%5) + strconv.Itoa(k)
		}
	}
	return keys
}()

// fuzzHash is key k's hash in FuzzTable: one key in four shares the hash 1
// (so that find must compare keys), one in four has a small hash (so that
// probe chains of neighbouring slots run into each other), and the others a
// spread one. None is 0, an empty slot's hash.
func fuzzHash(k int) uint64 {
	switch k % 4 {
	case 0:
		return 1
	case 1:
		return uint64(k)
	}
	z := uint64(k) * 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	return z ^ z>>31 | 1<<63
}

// Table operations of FuzzTable, one per three bytes (operation, key, value).
const (
	fuzzPut     = iota // add the key with TAT value+1, or set its TAT
	fuzzDelete         // remove the key, as Reset does
	fuzzRebuild        // rebuild the table for the keys held and up to 7 more
	fuzzSweep          // drop the keys whose TAT is at most value, as the sweep does
	fuzzOps
)

// FuzzTable applies sequences of puts, deletes, rebuilds and sweeps to one
// shard's table, through the functions the store uses, and checks the table
// against a map after each: every key held is found with its TAT (by the
// lock-free find and by findSlot), no other key is found, each is held in
// one slot whose hash is the key's, the shard's counts of keys and
// tombstones are the table's, and the table never fills (at most three
// quarters of its slots are used, so every probe ends).
func FuzzTable(f *testing.F) {
	// Fill past a few growths, sweep all, fill again over the tombstones.
	var grow []byte
	for k := range 64 {
		grow = append(grow, fuzzPut, byte(k), 200)
	}
	grow = append(grow, fuzzSweep, 0, 255)
	for k := range 64 {
		grow = append(grow, fuzzPut, byte(63-k), byte(k))
	}
	f.Add(grow)
	// Keys of one hash, deleted from the middle of their chain, then found
	// past the tombstones and put back in them.
	var chain []byte
	for k := 0; k < 64; k += 4 {
		chain = append(chain, fuzzPut, byte(k), byte(k))
	}
	chain = append(chain, fuzzDelete, 8, 0, fuzzDelete, 20, 0, fuzzPut, 60, 9, fuzzPut, 20, 1, fuzzRebuild, 0, 3)
	f.Add(chain)
	// Puts and deletes that leave tombstones until a rebuild, and a sweep
	// that shrinks the table.
	var churn []byte
	for i := range 200 {
		churn = append(churn, byte(i%2), byte(i*7), byte(i))
	}
	churn = append(churn, fuzzSweep, 0, 100, fuzzRebuild, 0, 0)
	f.Add(churn)
	f.Add([]byte{fuzzPut, 0, 0, fuzzPut, 0, 5, fuzzDelete, 0, 0, fuzzDelete, 0, 0, fuzzRebuild, 0, 255})

	f.Fuzz(func(t *testing.T, ops []byte) {
		sh := &shard{}
		sh.table.Store(newTable(minSlots))
		model := make(map[int]int64)
		for i := 0; i+3 <= len(ops); i += 3 {
			op, k, v := int(ops[i])%fuzzOps, int(ops[i+1])%len(fuzzKeys), int64(ops[i+2])
			key, h := fuzzKeys[k], fuzzHash(k)
			switch op {
			case fuzzPut:
				if e := sh.table.Load().find(h, key); e != nil {
					e.tat.Store(v + 1)
				} else {
					sh.insert(h, newEntry(key, v+1))
				}
				model[k] = v + 1
			case fuzzDelete:
				s := sh.table.Load().findSlot(h, key)
				if _, ok := model[k]; ok != (s != nil) {
					t.Fatalf("op %d: delete %q: slot %v, held %v", i/3, key, s, ok)
				}
				if s != nil {
					if tat, ok := sh.remove(s, dead); !ok || tat != model[k] {
						t.Fatalf("op %d: delete %q: removed %v with TAT %d, want %d", i/3, key, ok, tat, model[k])
					}
					delete(model, k)
				}
			case fuzzRebuild:
				sh.rebuild(sh.live + int(v%8))
			case fuzzSweep:
				want := 0
				for k, tat := range model {
					if tat <= v {
						delete(model, k)
						want++
					}
				}
				if n := sh.sweep(v); n != want {
					t.Fatalf("op %d: sweep at %d dropped %d keys, want %d", i/3, v, n, want)
				}
			}
			checkTable(t, i/3, sh, model)
		}
	})
}

// checkTable fails t unless sh's table holds exactly the keys of model with
// their TATs, and its counts agree.
func checkTable(t *testing.T, op int, sh *shard, model map[int]int64) {
	t.Helper()
	tb := sh.table.Load()
	// Counts first: find on a table without an empty slot would not return.
	live, tombs, empty := 0, 0, 0
	seen := make(map[string]bool)
	for i := range tb.slots {
		s := &tb.slots[i]
		switch e := s.e.Load(); {
		case s.hash.Load() == 0:
			empty++
			if e != nil {
				t.Fatalf("op %d: slot %d holds %q with hash 0", op, i, e.key())
			}
		case e == nil:
			tombs++
		default:
			live++
			if seen[e.key()] {
				t.Fatalf("op %d: %q held in two slots", op, e.key())
			}
			seen[e.key()] = true
		}
	}
	if live != len(model) || sh.live != live || sh.tombs != tombs {
		t.Fatalf("op %d: %d keys held (shard says %d, model %d), %d tombstones (shard says %d)", op, live, sh.live, len(model), tombs, sh.tombs)
	}
	if (live+tombs)*4 > len(tb.slots)*3 || empty == 0 {
		t.Fatalf("op %d: %d keys and %d tombstones in %d slots", op, live, tombs, len(tb.slots))
	}
	for k, key := range fuzzKeys {
		h := fuzzHash(k)
		e, s := tb.find(h, key), tb.findSlot(h, key)
		want, held := model[k]
		switch {
		case !held && (e != nil || s != nil):
			t.Fatalf("op %d: %q found, but not held", op, key)
		case !held:
		case e == nil || s == nil || s.e.Load() != e:
			t.Fatalf("op %d: %q held, but found %v by find and %v by findSlot", op, key, e, s)
		case e.key() != key || e.tat.Load() != want:
			t.Fatalf("op %d: %q found as %q with TAT %d, want %d", op, key, e.key(), e.tat.Load(), want)
		case s.hash.Load() != h:
			t.Fatalf("op %d: %q in a slot of hash %#x, want %#x", op, key, s.hash.Load(), h)
		}
	}
}
