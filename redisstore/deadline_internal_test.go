package redisstore

import (
	"context"
	"errors"
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
	s.stampDeadline(gcraLua, args, deadline.Add(-s.margin(deadline))) // as evalBy does
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
	// A caller's deadline nearer than a quarter of the timeout keeps a
	// quarter of what is left, not a deadline in the past.
	if m := s.margin(time.Now().Add(40 * time.Millisecond)); m > 10*time.Millisecond || m < 9*time.Millisecond {
		t.Fatalf("margin of a 40 ms deadline on a 100 ms store: %v, want about 10ms", m)
	}
	if m := s.margin(time.Now().Add(-time.Second)); m != 0 {
		t.Fatalf("margin of a deadline passed: %v", m)
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

// lateRunner answers every call as a script refused for its deadline.
type lateRunner struct{ clockRunner }

func (r *lateRunner) eval(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	if sc == timeScript {
		return r.clockRunner.eval(ctx, sc, keys, args)
	}
	r.args <- append([]string(nil), args...)
	return nil, errLate
}

// A call refused for its deadline before it could have been late (a Redis
// whose clock is ahead of the offset measured) turns deadlines off for a
// while, rather than have every decision fail.
func TestDeadlineSkew(t *testing.T) {
	r := &lateRunner{clockRunner{args: make(chan []string, 1)}}
	s := newStore(r, Options{Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err := s.measureClock(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"-", ""} {
		if _, err := s.evalTimed(context.Background(), gcraLua, []string{"k"}, []string{"t", "", "", "0"}); !errors.Is(err, errLate) {
			t.Fatalf("call %d: %v", i, err)
		}
		if args := <-r.args; args[1] != want {
			t.Fatalf("call %d: args %q, want %q at 1", i, args, want)
		}
	}
}

// command answers as a Redis that has not loaded Funnel's module.
func (*clockRunner) command(context.Context, string, []string, []string) ([]int64, error) {
	return nil, errNoModule
}
