package xds

import (
	"errors"
	"time"
)

// Backoff paces the reconnections of a Client: exponential from Initial,
// doubling at each failed attempt up to Max, with a random part. The zero
// value is envoyproxy/ratelimit's default (XDS_CLIENT_BACKOFF_*): from 10
// seconds to a minute, half of each delay random.
type Backoff struct {
	// Initial is the delay before the first reconnection; 0 means 10s.
	Initial time.Duration
	// Max bounds every delay; 0 means a minute.
	Max time.Duration
	// Jitter is the part of each delay that is random, from 0 to 1: a delay
	// d becomes one in [d*(1-Jitter), d], so that clients that lost the
	// same server do not all come back at once. 0 means 0.5; a negative
	// value means none.
	Jitter float64
}

// Defaults of Backoff.
const (
	DefaultInitial = 10 * time.Second
	DefaultMax     = time.Minute
	DefaultJitter  = 0.5
)

// ErrBackoff reports a Backoff whose fields do not fit together.
var ErrBackoff = errors.New("xds: backoff: want 0 <= initial <= max and jitter <= 1")

func (b Backoff) validate() error {
	if b.Initial < 0 || b.Max < 0 || b.Jitter > 1 || (b.Max > 0 && b.Initial > b.Max) {
		return ErrBackoff
	}
	return nil
}

// withDefaults fills the zero fields.
func (b Backoff) withDefaults() Backoff {
	if b.Initial == 0 {
		b.Initial = DefaultInitial
		if b.Max > 0 && b.Max < b.Initial {
			b.Initial = b.Max
		}
	}
	if b.Max == 0 {
		b.Max = max(DefaultMax, b.Initial)
	}
	if b.Jitter == 0 {
		b.Jitter = DefaultJitter
	}
	if b.Jitter < 0 {
		b.Jitter = 0
	}
	return b
}

// Delay returns the wait before reconnection attempt n (from 0), for a
// random number r in [0, 1): Initial*2^n, at most Max, less its random
// part Jitter*r. It never exceeds Max and never falls below
// Initial*(1-Jitter).
func (b Backoff) Delay(n int, r float64) time.Duration {
	b = b.withDefaults()
	d := b.Initial
	for i := 0; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	return d - time.Duration(float64(d)*b.Jitter*r)
}
