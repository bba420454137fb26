package leasestore

import (
	"math/rand/v2"
	"testing"
)

// TestSlotsEnded checks slots.ended, which counts the units ended by a
// time in closed form, and slots.first, against each unit's end,
// delay(j)+ext(j), one by one: leases with units at once and future-dated ones, extensions that
// reach their most before, at or after the first future-dated unit (the
// last past τ'−T, as a mutation makes them), and none.
func TestSlotsEnded(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		b := slots{n: 1 + r.Int64N(40), step: 1 + r.Int64N(5)}
		b.off = r.Int64N(200) - 150
		if r.IntN(4) > 0 {
			most := r.Int64N(120)
			b.extend(min(r.Int64N(150), most), most)
		}
		for lim := int64(-20); lim < 400; lim += 1 + r.Int64N(3) {
			want := int64(0)
			for j := range b.n {
				if max(0, b.off+j*b.step)+min(b.ext+j*b.step, b.most) <= lim {
					want++
				}
			}
			if got := b.ended(lim); got != want {
				t.Fatalf("%+v: ended(%d) = %d, want %d", b, lim, got, want)
			}
			b.next = r.Int64N(b.n + 1)
			if got := b.first(b.exp + lim); got != max(b.next, want) {
				t.Fatalf("%+v: first at %d = %d, want %d", b, lim, got, max(b.next, want))
			}
		}
	}
}
