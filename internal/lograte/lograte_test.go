package lograte

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestSometimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(time.Second)
		var logged []int64
		log := func(held int64) { logged = append(logged, held) }
		s.Do(log) // the first runs
		for i := 0; i < 5; i++ {
			s.Do(log) // held back
		}
		time.Sleep(time.Second)
		s.Do(log) // runs, with the five held back
		s.Do(log)
		time.Sleep(999 * time.Millisecond)
		s.Do(log) // still within the second
		time.Sleep(time.Millisecond)
		s.Do(log)
		if want := []int64{0, 5, 2}; len(logged) != len(want) || logged[0] != want[0] || logged[1] != want[1] || logged[2] != want[2] {
			t.Fatalf("logged %v, want %v", logged, want)
		}
	})
}

// Under contention, every call is either logged or counted, once.
func TestSometimesConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(time.Millisecond)
		var mu sync.Mutex
		var ran, held int64
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Go(func() {
				for i := 0; i < 1000; i++ {
					s.Do(func(h int64) { mu.Lock(); ran++; held += h; mu.Unlock() })
					if i%100 == 0 {
						time.Sleep(time.Millisecond)
					}
				}
			})
		}
		wg.Wait()
		time.Sleep(time.Millisecond)
		s.Do(func(h int64) { ran++; held += h })
		if ran+held != 8001 {
			t.Fatalf("%d ran + %d held = %d, want 8001", ran, held, ran+held)
		}
	})
}
