package algo

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/funnelrl/funnel/gcra"
)

func mustGCRA(t testing.TB, burst, count int64, period time.Duration) gcra.Params {
	t.Helper()
	p, err := gcra.NewParams(burst, count, period)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// nginx's example, limit_req zone=one burst=12 delay=8 at 5r/s: of 13
// requests at once, the first 9 pass at once (the first is not excess, the
// next 8 are within delay), the next 4 wait, and the 14th is refused.
func TestLeakyDecideBurst(t *testing.T) {
	p := mustGCRA(t, 12, 5, time.Second) // one unit every 200 ms
	const d = 200 * time.Millisecond
	for _, c := range []struct {
		delay int64
		waits []time.Duration // of the 13 admitted requests, in order
	}{
		{8, []time.Duration{0, 0, 0, 0, 0, 0, 0, 0, 0, d, 2 * d, 3 * d, 4 * d}},
		{0, []time.Duration{0, d, 2 * d, 3 * d, 4 * d, 5 * d, 6 * d, 7 * d, 8 * d, 9 * d, 10 * d, 11 * d, 12 * d}},
		{11, []time.Duration{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, d}},
		{12, make([]time.Duration, 13)},
		{NoDelay, make([]time.Duration, 13)},
	} {
		tat := int64(0)
		for i, want := range c.waits {
			next, r, err := LeakyDecide(epoch, tat, p, c.delay, 1)
			if err != nil || !r.Allowed || r.Delay != want || r.Remaining != int64(12-i) {
				t.Fatalf("delay=%d, request %d: %+v, %v; want a wait of %v", c.delay, i+1, r, err, want)
			}
			tat = next
		}
		got, r, _ := LeakyDecide(epoch, tat, p, c.delay, 1)
		if r.Allowed || r.RetryAfter != d || r.Delay != 0 || got != tat {
			t.Fatalf("delay=%d, request 14: %+v, TAT moved by %d", c.delay, r, got-tat)
		}
	}
}

func TestLeakyDecide(t *testing.T) {
	p := mustGCRA(t, 4, 10, time.Second) // one unit every 100 ms, 5 at once
	const d = 100 * time.Millisecond
	tat3 := epoch + 3*int64(d) // three units queued at epoch
	for i, c := range []struct {
		now, tat     int64
		delay, q     int64
		ok           bool
		wait         time.Duration
		retry, reset time.Duration
		rem          int64
		want         int64
		wantErr      error
	}{
		// The first request on an idle key is not delayed, whatever delay.
		{now: epoch, q: 1, ok: true, reset: d, rem: 4, want: epoch + int64(d)},
		{now: epoch, tat: epoch - 1, q: 1, ok: true, reset: d, rem: 4, want: epoch + int64(d)},
		{now: epoch, tat: epoch, q: 1, ok: true, reset: d, rem: 4, want: epoch + int64(d)},
		// The queue ahead drains: 300 ms queued at epoch, 200 ms left 100 ms later.
		{now: epoch + int64(d), tat: tat3, q: 1, ok: true, wait: 2 * d, reset: 3 * d, rem: 2, want: tat3 + int64(d)},
		{now: epoch + int64(d), tat: tat3, delay: 1, q: 1, ok: true, wait: d, reset: 3 * d, rem: 2, want: tat3 + int64(d)},
		{now: epoch + int64(d), tat: tat3, delay: 2, q: 1, ok: true, reset: 3 * d, rem: 2, want: tat3 + int64(d)},
		{now: epoch + int64(d), tat: tat3, delay: NoDelay, q: 1, ok: true, reset: 3 * d, rem: 2, want: tat3 + int64(d)},
		{now: tat3 - 1, tat: tat3, q: 1, ok: true, wait: 1, reset: d + 1, rem: 3, want: tat3 + int64(d)},
		{now: tat3, tat: tat3, q: 1, ok: true, reset: d, rem: 4, want: tat3 + int64(d)},
		// Several units wait for the queue ahead of them.
		{now: epoch, tat: tat3, q: 2, ok: true, wait: 3 * d, reset: 5 * d, rem: 0, want: tat3 + 2*int64(d)},
		{now: epoch, tat: tat3, q: 3, retry: d, reset: 3 * d, rem: 2, want: tat3},
		{now: epoch, tat: tat3, q: 6, retry: Never, reset: 3 * d, rem: 2, want: tat3},
		// A peek never waits and changes nothing.
		{now: epoch, tat: tat3, q: 0, ok: true, reset: 3 * d, rem: 2, want: tat3},
		// Errors change nothing.
		{now: epoch, tat: tat3, delay: -1, q: 1, want: tat3, wantErr: ErrNegative},
		{now: epoch, tat: tat3, q: -1, want: tat3, wantErr: ErrNegative},
		{now: epoch, tat: tat3, q: math.MaxInt64, want: tat3, wantErr: gcra.ErrOverflow},
	} {
		got, r, err := LeakyDecide(c.now, c.tat, p, c.delay, c.q)
		want := Result{Allowed: c.ok, Remaining: c.rem, RetryAfter: c.retry, ResetAfter: c.reset, Delay: c.wait}
		if c.wantErr != nil {
			want = Result{}
		}
		if got != c.want || r != want || !errors.Is(err, c.wantErr) {
			t.Errorf("%d: LeakyDecide(epoch%+d, epoch%+d, delay=%d, q=%d) = epoch%+d, %+v, %v; want epoch%+d, %+v, %v",
				i, c.now-epoch, c.tat-epoch, c.delay, c.q, got-epoch, r, err, c.want-epoch, want, c.wantErr)
		}
	}
}

func TestRefund(t *testing.T) {
	p := mustGCRA(t, 4, 10, time.Second)
	const d = int64(100 * time.Millisecond)
	for _, c := range []struct {
		now, tat, q int64
		want        int64
		held        bool
	}{
		{epoch, epoch + 3*d, 1, epoch + 2*d, true},
		{epoch, epoch + 3*d, 2, epoch + d, true},
		{epoch, epoch + 3*d, 3, 0, false},             // back to now: empty
		{epoch, epoch + 3*d, 4, 0, false},             // never before now
		{epoch, epoch + 3*d, math.MaxInt64, 0, false}, // q·interval overflows
		{epoch, epoch + 3*d, 0, epoch + 3*d, true},
		{epoch, epoch + 3*d, -1, epoch + 3*d, true},
		{epoch + 3*d - 1, epoch + 3*d, 1, 0, false},
		{epoch, epoch + 3*d + 1, 3, epoch + 1, true},
		{epoch, epoch, 1, epoch, false}, // empty already: as it is
		{epoch, epoch - 1, 0, epoch - 1, false},
		{epoch, 0, 1, 0, false},
	} {
		got, held := Refund(c.now, c.tat, p, c.q)
		if got != c.want || held != c.held {
			t.Errorf("Refund(epoch%+d, epoch%+d, %d) = %d, %v; want %d, %v", c.now-epoch, c.tat-epoch, c.q, got, held, c.want, c.held)
		}
	}
	// Refund then take, at random instants: what was given back can be
	// taken again at once, and no more.
	r := rand.New(rand.NewPCG(7, 8))
	for range 10_000 {
		now := epoch + r.Int64N(int64(time.Second))
		tat := now - int64(time.Second) + r.Int64N(int64(2*time.Second))
		q := r.Int64N(p.Limit + 1)
		taken, res, _ := LeakyDecide(now, tat, p, 0, q)
		if !res.Allowed {
			continue
		}
		back, _ := Refund(now, taken, p, q)
		if max(back, now) != max(tat, now) {
			t.Fatalf("take %d then refund at epoch%+d: TAT epoch%+d, was epoch%+d", q, now-epoch, back-epoch, tat-epoch)
		}
		if again, res, _ := LeakyDecide(now, back, p, 0, q); !res.Allowed || again != taken {
			t.Fatalf("take %d, refund, take again at epoch%+d: %+v", q, now-epoch, res)
		}
	}
}

// nginx is limit_req's accounting, in nanoseconds rather than its
// milliseconds and thousandths of a request: excess is the queue beyond the
// request being served.
type nginx struct {
	excess, last int64
	seen         bool
}

func (n *nginx) request(now int64, p gcra.Params, delay int64) (ok bool, wait time.Duration) {
	excess := int64(0)
	if n.seen {
		excess = max(0, n.excess-(now-n.last)+p.Interval)
	}
	if excess > p.Burst*p.Interval {
		return false, 0
	}
	n.excess, n.last, n.seen = excess, now, true
	if delay < p.Burst && excess > delay*p.Interval {
		wait = time.Duration(excess - delay*p.Interval)
	}
	return true, wait
}

// runLeaky drives LeakyDecide over the arrivals steps encodes. Requests of
// one unit agree with nginx's accounting; and for any quantities, the
// admitted schedule (each request starts at now + Delay) never holds more
// than rate·t + burst + 1 units in any interval t, with delay 0 consecutive
// starts are at least the earlier request's units × interval apart, and
// every RetryAfter is exact.
func runLeaky(t *testing.T, p gcra.Params, delay int64, steps []byte) {
	c := clock{now: epoch, period: p.Interval * p.Limit}
	var (
		tat, edge int64
		ref       nginx
		bound     = int64(math.MinInt64) // max over j of start_j − units before j × interval
		units     int64                  // admitted so far
		lastStart int64
		lastQ     int64
	)
	for i := 0; i+1 < len(steps); i += 2 {
		c.advance(steps[i], edge)
		now := c.now
		q := int64(steps[i+1]) % (p.Limit + 2)
		if steps[i+1] < 128 {
			q = min(q, 1)
		}
		got, r, err := LeakyDecide(now, tat, p, delay, q)
		if err != nil {
			t.Fatal(err)
		}
		if q == 1 {
			if ok, wait := ref.request(now, p, delay); ok != r.Allowed || wait != r.Delay {
				t.Fatalf("%+v delay=%d at epoch%+d: %+v, nginx says allowed %v, wait %v", p, delay, now-epoch, r, ok, wait)
			}
		} else if q > 1 && r.Allowed {
			ref = nginx{excess: got - now - p.Interval, last: now, seen: true}
		}
		checkExact(t, "LeakyDecide", now, r, func(at int64) bool {
			_, r, _ := LeakyDecide(at, tat, p, delay, q)
			return r.Allowed
		})
		// (A peek may move a TAT in the past to now: both read as empty.)
		if r.Delay < 0 || (!r.Allowed || q == 0) && (r.Delay != 0 || max(got, now) != max(tat, now)) {
			t.Fatalf("delay %v, TAT moved by %d, for %+v", r.Delay, got-tat, r)
		}
		edge = max(tat, now) + p.Interval
		if !r.Allowed && r.RetryAfter != Never {
			edge = now + int64(r.RetryAfter)
		}
		tat = got
		if !r.Allowed || q == 0 {
			continue
		}
		start := now + int64(r.Delay)
		if start < lastStart {
			t.Fatalf("a request starts at epoch%+d, before the one admitted before it (epoch%+d)", start-epoch, lastStart-epoch)
		}
		if delay == 0 && units > 0 && start-lastStart < lastQ*p.Interval {
			t.Fatalf("with delay 0, starts epoch%+d and epoch%+d are less than %d intervals apart", lastStart-epoch, start-epoch, lastQ)
		}
		// Units from request j to this one: (units+q − before_j)·T ≤ start − start_j + tolerance.
		bound = max(bound, start-units*p.Interval)
		units += q
		if units*p.Interval-start+bound > p.Tolerance {
			t.Fatalf("%+v delay=%d: more than rate·t + burst + 1 units start within t = ... epoch%+d", p, delay, start-epoch)
		}
		lastStart, lastQ = start, q
	}
}

func TestLeakyProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct {
		burst, count int64
		period       time.Duration
	}{{0, 1, time.Second}, {12, 5, time.Second}, {4, 10, time.Second}, {20, 1500, time.Second}, {3, 7, 10 * time.Millisecond}} {
		p := mustGCRA(t, c.burst, c.count, c.period)
		for _, delay := range []int64{0, 1, c.burst / 2, c.burst, NoDelay} {
			runLeaky(t, p, delay, randomSteps(r, 2*5000))
		}
	}
}

func FuzzLeaky(f *testing.F) {
	f.Add(int64(12), int64(5), int64(1e9), uint8(8), []byte{0, 1, 0, 1, 0, 1, 4, 1, 5, 1, 200, 130})
	f.Add(int64(0), int64(1), int64(1e9), uint8(0), []byte{0, 1, 1, 1, 5, 1, 6, 1})
	f.Add(int64(20), int64(1500), int64(1e9), uint8(255), []byte{5, 1, 9, 0, 4, 4, 4, 4})
	f.Fuzz(func(t *testing.T, burst, count, period int64, delay uint8, steps []byte) {
		p, err := gcra.NewParams(burst%1000, count, time.Duration(period))
		if err != nil || p.Tolerance > 1<<50 {
			return
		}
		d := int64(delay)
		if delay == 255 {
			d = NoDelay
		}
		runLeaky(t, p, d, steps)
	})
}
