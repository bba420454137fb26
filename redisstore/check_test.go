package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
)

// Check finds what would make every decision a fallback, before the first
// one: a wrong password, a database that does not exist, a Redis that is
// not there.
func TestCheck(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--requirepass", "s3cret")
	down := redistest.StartServer(t)
	down.Stop()
	for _, tc := range []struct {
		name, url, want string
	}{
		{"Good", "redis://:s3cret@" + srv.Addr + "/0", ""},
		{"WrongPassword", "redis://:wrong@" + srv.Addr + "/0", "WRONGPASS"},
		{"NoPassword", "redis://" + srv.Addr + "/0", "NOAUTH"},
		{"MissingDB", "redis://:s3cret@" + srv.Addr + "/99", "DB index is out of range"},
		{"Down", "redis://" + down.Addr + "/0", "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.url, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = s.Check(ctx)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, funnel.ErrUnavailable)):
				t.Fatalf("Check: %v; want an unavailable store, %q", err, tc.want)
			case strings.Contains(fmt.Sprint(err), "s3cret"):
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

// deadlineRunner is a runner that records the deadline of each call and
// answers as Redis would time out. It does not answer TIME (the measure of
// Redis's clock, which a first decision starts in the background).
type deadlineRunner struct {
	deadlines chan time.Time
}

func (r deadlineRunner) eval(ctx context.Context, sc *script, _, _ []string) ([]int64, error) {
	if sc == timeScript {
		return nil, context.DeadlineExceeded
	}
	d, _ := ctx.Deadline()
	r.deadlines <- d
	return nil, context.DeadlineExceeded
}
func (deadlineRunner) failed()            {}
func (deadlineRunner) grouping() grouping { return groupAll }

// A batch's call ends when the store's timeout has passed since its oldest
// decision was queued, not a whole timeout after it was sent: no decision
// waits longer than the timeout, queue and call together.
func TestBatchDeadlineIsTheOldestDecisions(t *testing.T) {
	r := deadlineRunner{deadlines: make(chan time.Time, 1)}
	s := newStore(r, Options{Timeout: 100 * time.Millisecond})
	queued := time.Now().Add(-70 * time.Millisecond)
	batch := []*call{
		{req: req{key: "a", cost: 1, tol: 1}, queued: queued, done: make(chan struct{})},
		{req: req{key: "b", cost: 1, tol: 1}, queued: queued.Add(30 * time.Millisecond), done: make(chan struct{})},
	}
	s.send(batch)
	if got, want := <-r.deadlines, queued.Add(100*time.Millisecond); !got.Equal(want) {
		t.Fatalf("deadline %v after the oldest was queued, want 100ms", got.Sub(queued))
	}
	for _, c := range batch {
		if !errors.Is(c.err, context.DeadlineExceeded) {
			t.Errorf("%s: err %v", c.key, c.err)
		}
	}
}

// command answers as a Redis that has not loaded Funnel's module.
func (deadlineRunner) command(context.Context, string, []string, []string) ([]int64, error) {
	return nil, errNoModule
}

// errNoModule is the error of a Redis without Funnel's module.
var errNoModule = errors.New("ERR unknown command 'FUNNEL.GCRA', with args beginning with: '1'")
