package funnel_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
)

// BoundKey keeps a key of up to MaxKeyLen bytes and maps a longer one to
// "sha256:" and the hex SHA-256 of the whole key; StoreKey puts the prefix,
// never hashed, before it.
func TestBoundKey(t *testing.T) {
	at := strings.Repeat("a", funnel.MaxKeyLen)
	over := at + "b"
	sum := sha256.Sum256([]byte(over))
	hashed := "sha256:" + hex.EncodeToString(sum[:])
	for _, c := range []struct{ prefix, key, want string }{
		{"", "", ""},
		{"", "user:42", "user:42"},
		{"", at, at},
		{"", over, hashed},
		{"p:", "user:42", "p:user:42"},
		{"p:", over, "p:" + hashed},
		{strings.Repeat("p", 2000), "k", strings.Repeat("p", 2000) + "k"},
	} {
		if got := funnel.StoreKey(c.prefix, c.key); got != c.want {
			t.Errorf("StoreKey(%.10q, %d bytes) = %.20q (%d bytes), want %.20q", c.prefix, len(c.key), got, len(got), c.want)
		}
	}
	if a, b := funnel.BoundKey(over), funnel.BoundKey(strings.Repeat("a", funnel.MaxKeyLen-1)+"cb"); a == b || len(a) != 71 {
		t.Errorf("two long keys: %q, %q", a, b)
	}
}

// Unavailable is true for a store that cannot decide, and only while the
// caller's context is alive.
func TestUnavailable(t *testing.T) {
	down := fmt.Errorf("store: %w", funnel.ErrUnavailable)
	alive := context.Background()
	gone, cancel := context.WithCancel(alive)
	cancel()
	late, cancel2 := context.WithDeadline(alive, time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"nil", alive, nil, false},
		{"down", alive, down, true},
		{"the store's own deadline", alive, fmt.Errorf("store: %w", context.DeadlineExceeded), true},
		{"down, client gone", gone, down, false},
		{"down, deadline passed", late, down, false},
		{"invalid limit", alive, funnel.ErrInvalidLimit, false},
		{"wrong type", alive, funnel.ErrWrongType, false},
		{"a bug", alive, errors.New("boom"), false},
	} {
		if got := funnel.Unavailable(c.ctx, c.err); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// FailMode.Fallback is a result marked as a fallback, allowed only when
// open, with the limit's capacity; the zero FailMode is FailClosed.
func TestFailModeFallback(t *testing.T) {
	var zero funnel.FailMode
	if zero != funnel.FailClosed || zero.String() != "closed" || funnel.FailOpen.String() != "open" {
		t.Fatalf("zero %v, open %v", zero, funnel.FailOpen)
	}
	limit := funnel.PerMinute(10).WithBurst(4)
	if got, want := funnel.FailClosed.Fallback(limit), (funnel.Result{Fallback: true, Limit: 5}); got != want {
		t.Errorf("closed: %+v, want %+v", got, want)
	}
	if got, want := funnel.FailOpen.Fallback(limit), (funnel.Result{Fallback: true, Allowed: true, Limit: 5}); got != want {
		t.Errorf("open: %+v, want %+v", got, want)
	}
	if got := funnel.FailOpen.Fallback(funnel.Limit{}); got.Limit != 0 || !got.Allowed {
		t.Errorf("an invalid limit: %+v", got)
	}
}
