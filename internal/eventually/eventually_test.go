package eventually_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/eventually"
)

// True returns once another goroutine makes the condition hold.
func TestTrue(t *testing.T) {
	var done atomic.Bool
	go func() {
		time.Sleep(20 * time.Millisecond) // another goroutine's work
		done.Store(true)
	}()
	eventually.True(t, "the flag", done.Load)
	if !done.Load() {
		t.Fatal("returned before the condition held")
	}
}

// recorder is a testing.TB that records a failure instead of stopping.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	panic(r)
}

// TrueWithin fails the test when the condition does not hold in time.
func TestTrueWithinFails(t *testing.T) {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil && p != r {
				panic(p)
			}
		}()
		eventually.TrueWithin(r, 30*time.Millisecond, "never", func() bool { return false })
	}()
	if r.failed == "" {
		t.Fatal("a condition that never holds did not fail the test")
	}
}
