package algo

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestAcquire(t *testing.T) {
	p := ConcParams{WindowParams: WindowParams{Count: 2, Period: 1000}}
	const e = int64(1_795_350_508_971) // epoch in ms
	const life = 999_961_989           // from epoch to e+1000
	a, b := Lease{"a", e + 1000}, Lease{"b", e + 1000}
	for i, c := range []struct {
		now     int64
		p       ConcParams
		leases  []Lease
		id      string
		q       int64
		ok      bool
		rem     int64
		retry   time.Duration
		reset   time.Duration
		want    []Lease
		wantErr error
	}{
		{now: epoch, id: "a", q: 0, ok: true, rem: 2}, // a peek on an empty key changes nothing
		{now: epoch, id: "a", q: 1, ok: true, rem: 1, reset: life, want: []Lease{a}},
		{now: epoch, leases: []Lease{a}, id: "b", q: 1, ok: true, reset: life, want: []Lease{a, b}},
		{now: epoch, leases: []Lease{a, b}, id: "c", q: 1, retry: life, reset: life, want: []Lease{a, b}},
		{now: epoch, leases: []Lease{a, b}, id: "c", q: 0, ok: true, reset: life, want: []Lease{a, b}},
		{now: epoch, leases: []Lease{a, b}, id: "c", q: 2, retry: Never, reset: life, want: []Lease{a, b}},
		// Renewing a held lease, even when all are held.
		{now: epoch, leases: []Lease{a, b}, id: "a", q: 1, ok: true, reset: life, want: []Lease{a, b}},
		{now: epoch + 500*ms, leases: []Lease{a, b}, id: "a", q: 1, ok: true, reset: life, want: []Lease{{"a", e + 1500}, b}},
		// A lease expires exactly at its millisecond.
		{now: (e+1000)*ms - 1, leases: []Lease{{"a", e + 1500}, b}, id: "c", q: 1, retry: 1, reset: 500*time.Millisecond + 1, want: []Lease{{"a", e + 1500}, b}},
		{now: (e + 1000) * ms, leases: []Lease{{"a", e + 1500}, b}, id: "c", q: 1, ok: true, reset: time.Second, want: []Lease{{"a", e + 1500}, {"c", e + 2000}}},
		{now: (e + 1000) * ms, leases: []Lease{{"a", e + 1500}, b}, id: "c", q: 0, ok: true, rem: 1, reset: 500 * time.Millisecond, want: []Lease{{"a", e + 1500}, b}},
		{now: (e + 1000) * ms, leases: []Lease{{"a", e + 1500}, b}, id: "b", q: 1, ok: true, reset: time.Second, want: []Lease{{"a", e + 1500}, {"b", e + 2000}}},
		// Stale leases read as empty.
		{now: (e + 5000) * ms, leases: []Lease{a, b}, id: "c", q: 1, ok: true, rem: 1, reset: time.Second, want: []Lease{{"c", e + 6000}}},
		// More leases than Count (the limit was lowered): room for one
		// once the third earliest has expired.
		{now: epoch, p: ConcParams{WindowParams: WindowParams{Count: 1, Period: 1000}}, leases: []Lease{{"x", e + 300}, {"y", e + 100}, {"z", e + 200}}, id: "c", q: 1,
			retry: 299_961_989, reset: 299_961_989, want: []Lease{{"x", e + 300}, {"y", e + 100}, {"z", e + 200}}},
		{now: epoch, p: ConcParams{WindowParams: WindowParams{Count: 2, Period: 1000}}, leases: []Lease{{"x", e + 300}, {"y", e + 100}, {"z", e + 100}, {"w", e}}, id: "c", q: 1,
			retry: 99_961_989, reset: 299_961_989, want: []Lease{{"x", e + 300}, {"y", e + 100}, {"z", e + 100}, {"w", e}}},
		{now: epoch, leases: []Lease{a}, id: "b", q: -1, want: []Lease{a}, wantErr: ErrNegative},
	} {
		if c.p == (ConcParams{}) {
			c.p = p
		}
		in := slices.Clone(c.leases)
		got, r, err := Acquire(c.now, in, c.p, c.id, c.q)
		want := Result{Allowed: c.ok, Remaining: c.rem, RetryAfter: c.retry, ResetAfter: c.reset}
		if c.wantErr != nil {
			want = Result{}
		}
		if !slices.Equal(got, c.want) || r != want || !errors.Is(err, c.wantErr) {
			t.Errorf("%d: Acquire(epoch%+d, %v, %q, q=%d) = %v, %+v, %v; want %v, %+v, %v",
				i, c.now-epoch, c.leases, c.id, c.q, got, r, err, c.want, want, c.wantErr)
		}
		// A refusal, a peek or an error leaves the leases as they were.
		if (!r.Allowed || c.q == 0) && !slices.Equal(in, c.leases) {
			t.Errorf("%d: a refusal or a peek modified the leases: %v, were %v", i, in, c.leases)
		}
	}
}

func TestRelease(t *testing.T) {
	const e = int64(1_795_350_508_971)
	a, b := Lease{"a", e + 1000}, Lease{"b", e + 500}
	for _, c := range []struct {
		now    int64
		leases []Lease
		id     string
		want   []Lease
		held   bool
	}{
		{epoch, []Lease{a, b}, "a", []Lease{b}, true},
		{epoch, []Lease{a, b}, "b", []Lease{a}, true},
		{epoch, []Lease{a, b}, "c", []Lease{a, b}, false},
		{(e+500)*ms - 1, []Lease{a, b}, "b", []Lease{a}, true},
		{(e + 500) * ms, []Lease{a, b}, "b", []Lease{a}, false}, // expired exactly at its millisecond
		{(e + 500) * ms, []Lease{a, b}, "c", []Lease{a}, false},
		{(e + 1000) * ms, []Lease{a, b}, "a", []Lease{}, false},
		{epoch, nil, "a", nil, false},
	} {
		got, held := Release(c.now, slices.Clone(c.leases), c.id)
		if !slices.Equal(got, c.want) || held != c.held {
			t.Errorf("Release(epoch%+d, %v, %q) = %v, %v; want %v, %v", c.now-epoch, c.leases, c.id, got, held, c.want, c.held)
		}
	}
	// Release then acquire: the lease given back can be taken by another.
	p := ConcParams{WindowParams: WindowParams{Count: 1, Period: 1000}}
	l, _, _ := Acquire(epoch, nil, p, "a", 1)
	if _, r, _ := Acquire(epoch, l, p, "b", 1); r.Allowed {
		t.Fatal("two leases of one")
	}
	l, _ = Release(epoch, l, "a")
	if l, r, _ := Acquire(epoch, l, p, "b", 1); !r.Allowed || len(l) != 1 || l[0].ID != "b" {
		t.Fatalf("after a release: %v %+v", l, r)
	}
}

func TestKthExpiry(t *testing.T) {
	leases := []Lease{{"a", 30}, {"b", 10}, {"c", 20}, {"d", 10}, {"e", 5}, {"f", 40}}
	for k, want := range []int64{10, 10, 20, 30, 40, -1} {
		if got := kthExpiry(leases, 5, int64(k+1)); got != want {
			t.Errorf("kthExpiry(%d) = %d, want %d", k+1, got, want)
		}
	}
}

// runConc drives Acquire and Release over the arrivals steps encodes (three
// bytes each: the clock, the lease id, and acquire, peek or release),
// against a map of lease ids to expiries, and checks that no more than
// Count unexpired leases are ever held, that a held lease is renewed, that
// remaining and reset agree, that a lease beyond Count waits its delay,
// and that every RetryAfter is exact.
func runConc(t *testing.T, p ConcParams, steps []byte) {
	c := clock{now: epoch, period: p.Period * ms}
	var (
		leases []Lease
		model  = map[string]int64{}
		edge   int64
	)
	for i := 0; i+2 < len(steps); i += 3 {
		c.advance(steps[i], edge)
		now := c.now
		nowMS := Millis(now)
		for id, exp := range model {
			if exp <= nowMS {
				delete(model, id)
			}
		}
		id := strconv.Itoa(int(steps[i+1]) % int(p.Count+3))
		_, held := model[id]
		switch op := steps[i+2] % 8; {
		case op == 0:
			var ok bool
			if leases, ok = Release(now, leases, id); ok != held {
				t.Fatalf("Release(%q) = %v, held %v", id, ok, held)
			}
			delete(model, id)
		default:
			q := int64(1)
			if op == 1 {
				q = 0
			}
			before := slices.Clone(leases)
			got, r, err := Acquire(now, leases, p, id, q)
			if err != nil {
				t.Fatal(err)
			}
			most := p.Count + p.Burst
			want := Result{Allowed: q == 0 || held || int64(len(model)) < most, RetryAfter: r.RetryAfter}
			if want.Allowed && (q == 0 && int64(len(model)) < most || q == 1 && !held) {
				conn := int64(len(model)) + 1
				if conn > p.Count {
					want.Delay = min(time.Duration(p.Delay*((conn-1)/p.Count)), time.Duration(p.Period*ms))
				}
			}
			if want.Allowed && q == 1 {
				model[id] = nowMS + p.Period
			}
			want.Remaining = max(0, most-int64(len(model)))
			if len(model) > 0 {
				last := int64(0)
				for _, exp := range model {
					last = max(last, exp)
				}
				want.ResetAfter = time.Duration(last*ms - now)
			}
			if r != want {
				t.Fatalf("%+v at epoch%+d, %d held, %q (held %v) q=%d: %+v, want %+v", p, now-epoch, len(model), id, held, q, r, want)
			}
			if !r.Allowed || q == 0 {
				if !slices.Equal(got, before) {
					t.Fatalf("a refusal or a peek changed the leases: %v to %v", before, got)
				}
				edge = now + int64(r.RetryAfter)
			}
			checkExact(t, "Acquire", now, r, func(at int64) bool {
				_, r, _ := Acquire(at, slices.Clone(before), p, id, q)
				return r.Allowed
			})
			leases = got
		}
		live := 0
		for _, l := range leases {
			if l.Expires > nowMS {
				live++
				if model[l.ID] != l.Expires {
					t.Fatalf("lease %v, want expiry %d", l, model[l.ID])
				}
			}
		}
		if live != len(model) || int64(live) > p.Count+p.Burst {
			t.Fatalf("%d live leases, want %d (at most %d)", live, len(model), p.Count+p.Burst)
		}
	}
}

func TestConcurrencyProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct{ count, period, burst, delay int64 }{{1, 1, 0, 0}, {2, 1000, 0, 0}, {5, 7, 0, 0}, {10, 60_000, 0, 0},
		{1, 1000, 3, 300 * ms}, {2, 1000, 5, 70 * ms}, {3, 7, 4, 5 * ms}, {2, 60_000, 2, 0}} {
		p := ConcParams{WindowParams: WindowParams{Count: c.count, Period: c.period}, Burst: c.burst, Delay: c.delay}
		runConc(t, p, randomSteps(r, 3*5000))
	}
}

func FuzzConcurrency(f *testing.F) {
	f.Add(int64(2), int64(1000), int64(0), int64(0), []byte{0, 0, 2, 0, 1, 2, 0, 2, 2, 4, 2, 2, 0, 0, 0, 5, 3, 1})
	f.Add(int64(1), int64(1), int64(0), int64(0), []byte{3, 0, 2, 4, 1, 2, 5, 1, 2, 6, 1, 1})
	f.Add(int64(2), int64(1000), int64(3), int64(400*ms), []byte{0, 0, 2, 0, 1, 2, 0, 2, 2, 4, 2, 2, 0, 3, 2, 5, 4, 1})
	f.Fuzz(func(t *testing.T, count, period, burst, delay int64, steps []byte) {
		p, err := NewConcParams(count, time.Duration(period)*time.Millisecond, burst, time.Duration(delay))
		if err != nil || count+burst > 100 {
			return
		}
		runConc(t, p, steps)
	})
}

func TestBanned(t *testing.T) {
	for _, c := range []struct {
		now, Until int64
		banned     bool
		left       int64
	}{
		{epoch, 0, false, 0},
		{epoch, epoch, false, 0}, // a ban ends exactly at its instant
		{epoch, epoch + 1, true, 1},
		{epoch, epoch + int64(time.Hour), true, int64(time.Hour)},
		{epoch, epoch - 1, false, 0},
	} {
		if banned, left := Banned(c.now, c.Until); banned != c.banned || left != c.left {
			t.Errorf("Banned(epoch, epoch%+d) = %v, %d; want %v, %d", c.Until-epoch, banned, left, c.banned, c.left)
		}
	}
}

// TestAcquireBurst follows OpenResty limit.conn with max 2, burst 3 and a
// unit delay of 100ms: leases 3 and 4 wait one unit, 5 waits two, 6 is
// refused.
func TestAcquireBurst(t *testing.T) {
	p := ConcParams{WindowParams: WindowParams{Count: 2, Period: 1000}, Burst: 3, Delay: int64(100 * time.Millisecond)}
	var leases []Lease
	for i, w := range []struct {
		ok    bool
		rem   int64
		delay time.Duration
	}{{true, 4, 0}, {true, 3, 0}, {true, 2, 100 * time.Millisecond}, {true, 1, 100 * time.Millisecond}, {true, 0, 200 * time.Millisecond}, {false, 0, 0}} {
		// A peek reports the delay the lease would get.
		if _, r, _ := Acquire(epoch, leases, p, "peek", 0); !r.Allowed || r.Delay != w.delay || r.Remaining != w.rem+b2i(w.ok) {
			t.Errorf("peek before lease %d: %+v, want delay %v", i+1, r, w.delay)
		}
		var r Result
		leases, r, _ = Acquire(epoch, leases, p, strconv.Itoa(i), 1)
		if r.Allowed != w.ok || r.Remaining != w.rem || r.Delay != w.delay {
			t.Errorf("lease %d: %+v, want allowed %v, remaining %d, delay %v", i+1, r, w.ok, w.rem, w.delay)
		}
	}
	// Renewing a held lease is never delayed.
	if _, r, _ := Acquire(epoch, leases, p, "4", 1); !r.Allowed || r.Delay != 0 {
		t.Errorf("renewal: %+v", r)
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func TestConcDelay(t *testing.T) {
	p := ConcParams{WindowParams: WindowParams{Count: 3, Period: 1000}, Burst: 100, Delay: int64(150 * time.Millisecond)}
	for _, c := range []struct {
		conn int64
		want time.Duration
	}{{1, 0}, {3, 0}, {4, 150 * time.Millisecond}, {6, 150 * time.Millisecond}, {7, 300 * time.Millisecond}, {19, 900 * time.Millisecond}, {22, time.Second}, {MaxCount, time.Second}} {
		if got := ConcDelay(p, c.conn); got != c.want {
			t.Errorf("ConcDelay(conn %d) = %v, want %v", c.conn, got, c.want)
		}
	}
	big := ConcParams{WindowParams: WindowParams{Count: 1, Period: int64(MaxPeriod / time.Millisecond)}, Burst: MaxCount - 1, Delay: int64(MaxUnitDelay)}
	if got := ConcDelay(big, MaxCount); got != MaxPeriod {
		t.Errorf("ConcDelay saturates at %v, want %v", got, MaxPeriod)
	}
}

func TestLeave(t *testing.T) {
	for _, c := range []struct{ unit, latency, want int64 }{
		{100, 300, 200}, {100, 301, 200}, {0, 0, 1}, {1, 0, 1}, {int64(MaxUnitDelay), int64(MaxUnitDelay), int64(MaxUnitDelay)},
	} {
		if got := Leave(c.unit, c.latency); got != c.want {
			t.Errorf("Leave(%d, %d) = %d, want %d", c.unit, c.latency, got, c.want)
		}
	}
	if UnitDelay(0, 7) != 7 || UnitDelay(3, 7) != 3 {
		t.Error("UnitDelay: a key's own unit delay comes before the default")
	}
}

func TestNewConcParams(t *testing.T) {
	for _, c := range []struct {
		burst int64
		delay time.Duration
		err   error
	}{
		{0, 0, nil}, {5, time.Second, nil}, {MaxCount - 2, MaxUnitDelay, nil},
		{-1, 0, ErrNegative}, {0, -1, ErrNegative}, {MaxCount - 1, 0, ErrOverflow}, {0, MaxUnitDelay + 1, ErrOverflow},
	} {
		p, err := NewConcParams(2, time.Second, c.burst, c.delay)
		if !errors.Is(err, c.err) || err == nil && (p.Burst != c.burst || p.Delay != int64(c.delay) || p.Count != 2 || p.Period != 1000) {
			t.Errorf("NewConcParams(2, 1s, %d, %v) = %+v, %v; want %v", c.burst, c.delay, p, err, c.err)
		}
	}
	if _, err := NewConcParams(0, time.Second, 0, 0); !errors.Is(err, ErrZeroSize) {
		t.Errorf("zero count: %v", err)
	}
}

func TestHolds(t *testing.T) {
	const e = int64(1_795_350_508_971)
	leases := []Lease{{"a", e + 1000}, {"b", e}}
	for id, want := range map[string]bool{"a": true, "b": false, "c": false} {
		if got := Holds(e*ms, leases, id); got != want {
			t.Errorf("Holds(%q) = %v, want %v", id, got, want)
		}
	}
}
