// Package lograte logs an event that may repeat on every request (a store
// that is down, a refused credential) at most once per interval, with the
// count of the records it held back, so that a flood of requests cannot
// flood the log.
package lograte

import (
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Sometimes runs a logging function at most once per interval. The zero
// value is not usable; build one with New. It is safe for concurrent use.
type Sometimes struct {
	every rate.Sometimes
	held  atomic.Int64
}

// New returns a Sometimes that runs at most once per interval (the first
// call always runs).
func New(interval time.Duration) *Sometimes {
	return &Sometimes{every: rate.Sometimes{Interval: interval}}
}

// Do calls log with the number of calls held back since the last one that
// ran, if interval has passed since then; otherwise it only counts this
// call.
func (s *Sometimes) Do(log func(held int64)) {
	ran := false
	s.every.Do(func() {
		ran = true
		log(s.held.Swap(0))
	})
	if !ran {
		s.held.Add(1)
	}
}
