package redisstore

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// clockRunner answers TIME as this host's clock plus offset (µs), and
// records the arguments of the other calls.
type clockRunner struct {
	offset atomic.Int64
	args   chan []string
}

func (r *clockRunner) eval(_ context.Context, sc *script, _, args []string) ([]int64, error) {
	if sc == timeScript {
		us := time.Now().UnixMicro() + r.offset.Load()
		return []int64{us / 1e6, us % 1e6}, nil
	}
	r.args <- append([]string(nil), args...)
	return []int64{0}, nil
}
func (*clockRunner) failed()            {}
func (*clockRunner) grouping() grouping { return groupNone }

// A call carries its deadline moved to Redis's clock, less a quarter of the
// timeout, once the offset is measured (and none before); a move of
// Redis's clock against this host's is logged.
func TestDeadlineInRedisClock(t *testing.T) {
	r := &clockRunner{args: make(chan []string, 1)}
	var logs strings.Builder
	s := newStore(r, Options{Timeout: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	s.clock.tried.Store(time.Now().UnixNano()) // no measure in the background
	deadline := time.Now().Add(time.Second)
	args := []string{"t", "", "", "0"}
	s.stampDeadline(gcraLua, args, deadline)
	if args[1] != "" || args[2] != "" {
		t.Fatalf("a deadline before the offset is known: %q", args)
	}
	r.offset.Store(int64(time.Hour / time.Microsecond)) // Redis is an hour ahead
	if err := s.measureClock(ctx); err != nil {
		t.Fatal(err)
	}
	s.stampDeadline(gcraLua, args, deadline)
	got, err := strconv.ParseInt(args[2], 10, 64)
	if args[1] != "-" || err != nil {
		t.Fatalf("args %q", args)
	}
	// The offset is measured after the reply: at most the true one, by
	// the measure's round trip.
	want := deadline.Add(time.Hour - 25*time.Millisecond).UnixMicro()
	if got > want || got < want-int64(10*time.Millisecond/time.Microsecond) {
		t.Fatalf("deadline %d µs, want %d (less the round trip)", got, want)
	}
	// Scripts that take no deadline get none; an injected clock is left.
	other := []string{"", ""}
	s.stampDeadline(newScript("return 0"), other, deadline)
	if other[0] != "" {
		t.Fatalf("%q", other)
	}
	if logs.Len() != 0 {
		t.Fatalf("logged %s", logs.String())
	}
	r.offset.Store(int64(2 * time.Hour / time.Microsecond))
	if err := s.measureClock(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "Redis's clock moved against this host's") {
		t.Fatalf("no warning of the step: %q", logs.String())
	}
}
