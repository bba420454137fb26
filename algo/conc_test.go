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
	p := WindowParams{Count: 2, Period: 1000}
	const e = int64(1_795_350_508_971) // epoch in ms
	const life = 999_961_989           // from epoch to e+1000
	a, b := Lease{"a", e + 1000}, Lease{"b", e + 1000}
	for i, c := range []struct {
		now     int64
		p       WindowParams
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
		{now: epoch, p: WindowParams{Count: 1, Period: 1000}, leases: []Lease{{"x", e + 300}, {"y", e + 100}, {"z", e + 200}}, id: "c", q: 1,
			retry: 299_961_989, reset: 299_961_989, want: []Lease{{"x", e + 300}, {"y", e + 100}, {"z", e + 200}}},
		{now: epoch, p: WindowParams{Count: 2, Period: 1000}, leases: []Lease{{"x", e + 300}, {"y", e + 100}, {"z", e + 100}, {"w", e}}, id: "c", q: 1,
			retry: 99_961_989, reset: 299_961_989, want: []Lease{{"x", e + 300}, {"y", e + 100}, {"z", e + 100}, {"w", e}}},
		{now: epoch, leases: []Lease{a}, id: "b", q: -1, want: []Lease{a}, wantErr: ErrNegative},
	} {
		if c.p == (WindowParams{}) {
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
	p := WindowParams{Count: 1, Period: 1000}
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
// remaining and reset agree, and that every RetryAfter is exact.
func runConc(t *testing.T, p WindowParams, steps []byte) {
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
			want := Result{Allowed: q == 0 || held || int64(len(model)) < p.Count, RetryAfter: r.RetryAfter}
			if want.Allowed && q == 1 {
				model[id] = nowMS + p.Period
			}
			want.Remaining = max(0, p.Count-int64(len(model)))
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
		if live != len(model) || int64(live) > p.Count {
			t.Fatalf("%d live leases, want %d (at most %d)", live, len(model), p.Count)
		}
	}
}

func TestConcurrencyProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct{ count, period int64 }{{1, 1}, {2, 1000}, {5, 7}, {10, 60_000}} {
		runConc(t, WindowParams{Count: c.count, Period: c.period}, randomSteps(r, 3*5000))
	}
}

func FuzzConcurrency(f *testing.F) {
	f.Add(int64(2), int64(1000), []byte{0, 0, 2, 0, 1, 2, 0, 2, 2, 4, 2, 2, 0, 0, 0, 5, 3, 1})
	f.Add(int64(1), int64(1), []byte{3, 0, 2, 4, 1, 2, 5, 1, 2, 6, 1, 1})
	f.Fuzz(func(t *testing.T, count, period int64, steps []byte) {
		p, err := NewWindowParams(count, time.Duration(period)*time.Millisecond)
		if err != nil || count > 100 {
			return
		}
		runConc(t, p, steps)
	})
}

func TestBanned(t *testing.T) {
	for _, c := range []struct {
		now, until int64
		banned     bool
		left       int64
	}{
		{epoch, 0, false, 0},
		{epoch, epoch, false, 0}, // a ban ends exactly at its instant
		{epoch, epoch + 1, true, 1},
		{epoch, epoch + int64(time.Hour), true, int64(time.Hour)},
		{epoch, epoch - 1, false, 0},
	} {
		if banned, left := Banned(c.now, c.until); banned != c.banned || left != c.left {
			t.Errorf("Banned(epoch, epoch%+d) = %v, %d; want %v, %d", c.until-epoch, banned, left, c.banned, c.left)
		}
	}
}
