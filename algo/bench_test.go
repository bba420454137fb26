package algo

import (
	"strconv"
	"testing"
	"time"
)

// The benchmarks run one key at a steady rate: every decision admits or
// refuses about as often as a busy key does, and the state is carried from
// one call to the next as a store would.

func BenchmarkFixedDecide(b *testing.B) {
	b.ReportAllocs()
	p := WindowParams{Count: 1000, Period: 1000}
	now, st := epoch, Fixed{}
	for b.Loop() {
		now += 500_000
		st, _, _ = FixedDecide(now, st, p.Count, EpochSpan(now, p.Period), 1)
	}
}

func BenchmarkFixedDecideCalendar(b *testing.B) {
	b.ReportAllocs()
	loc := mustZone(b, "Europe/Paris")
	now, st := epoch, Fixed{}
	for b.Loop() {
		now += 500_000
		st, _, _ = FixedDecide(now, st, 1000, CalendarSpan(now, 'd', loc), 1)
	}
}

func BenchmarkCalendarSpan(b *testing.B) {
	for _, unit := range []byte{'d', 'w', 'm'} {
		b.Run(string(unit), func(b *testing.B) {
			b.ReportAllocs()
			loc := mustZone(b, "America/New_York")
			now := epoch
			for b.Loop() {
				now += 1e9
				CalendarSpan(now, unit, loc)
			}
		})
	}
}

func BenchmarkSlidingDecide(b *testing.B) {
	b.ReportAllocs()
	p := WindowParams{Count: 1000, Period: 1000}
	now, st := epoch, Sliding{}
	for b.Loop() {
		now += 500_000
		st, _, _ = SlidingDecide(now, st, p, 1)
	}
}

func BenchmarkLogDecide(b *testing.B) {
	b.ReportAllocs()
	p := WindowParams{Count: 100, Period: 1000}
	now, log := epoch, []int64(nil)
	for b.Loop() {
		now += 5_000_000 // 200 a second: half are refused
		log, _, _ = LogDecide(now, log, p, 1)
	}
}

func BenchmarkLeakyDecide(b *testing.B) {
	b.ReportAllocs()
	p := mustGCRA(b, 100, 1000, time.Second)
	now, tat := epoch, int64(0)
	for b.Loop() {
		now += 500_000
		tat, _, _ = LeakyDecide(now, tat, p, 10, 1)
	}
}

func BenchmarkRefund(b *testing.B) {
	b.ReportAllocs()
	p := mustGCRA(b, 100, 1000, time.Second)
	now, tat := epoch, epoch+int64(50*time.Millisecond)
	for b.Loop() {
		now += 1
		tat, _, _ = LeakyDecide(now, tat, p, 0, 1)
		tat, _ = Refund(now, tat, p, 1)
	}
}

// BenchmarkAcquire takes and releases leases of 10, with one id in 16
// refused for lack of room.
func BenchmarkAcquire(b *testing.B) {
	b.ReportAllocs()
	p := ConcParams{WindowParams: WindowParams{Count: 10, Period: 60_000}}
	ids := make([]string, 16)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	now, leases := epoch, make([]Lease, 0, 16)
	i := 0
	for b.Loop() {
		now += 100_000
		id := ids[i%len(ids)]
		if i%2 == 0 {
			leases, _, _ = Acquire(now, leases, p, id, 1)
		} else {
			leases, _ = Release(now, leases, ids[(i+5)%len(ids)])
		}
		i++
	}
}
