// Package eventually is the tests' one wait for a condition that another
// goroutine, process or server makes true: it polls the condition and
// fails the test if it does not hold within a deadline generous enough for
// a loaded machine under the race detector. A test that can advance a
// clock instead advances it; this is for what no test clock drives (a file
// watcher, a server's goroutines, a real Redis).
package eventually

import (
	"testing"
	"time"
)

// Within is how long True waits: long beside what any condition takes on
// an idle machine, so that a loaded one does not fail a test that is right.
const Within = 10 * time.Second

// every is how often True polls.
const every = 5 * time.Millisecond

// True polls cond every few milliseconds until it holds, and fails t,
// naming what it waited for, if it does not within Within. It returns how
// long it waited.
func True(t testing.TB, what string, cond func() bool) time.Duration {
	t.Helper()
	return TrueWithin(t, Within, what, cond)
}

// TrueWithin is True with a deadline of its own, for a condition that may
// take longer than Within (a Redis Cluster's failover).
func TrueWithin(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(every)
	}
	return time.Since(start)
}
