package resp

import (
	"io"
	"strings"
	"testing"
)

// benchRead reads one command per iteration from an endless repetition of in.
func benchRead(b *testing.B, in string) {
	rd := NewReader(&loop{b: []byte(in)}, Limits{})
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rd.ReadCommand(); err != nil {
			b.Fatal(err)
		}
		rd.Ready()
	}
}

// BenchmarkReadThrottle reads "CL.THROTTLE user:42 15 30 60 1" as a
// multibulk command.
func BenchmarkReadThrottle(b *testing.B) { benchRead(b, throttle) }

// BenchmarkReadThrottleInline reads the same command as an inline command.
func BenchmarkReadThrottleInline(b *testing.B) {
	benchRead(b, "CL.THROTTLE user:42 15 30 60 1\r\n")
}

// BenchmarkReadThrottleSplit reads the multibulk command delivered 7 bytes
// per Read, the worst case of a slow client.
func BenchmarkReadThrottleSplit(b *testing.B) {
	rd := NewReader(&chunked7{loop: loop{b: []byte(throttle)}}, Limits{})
	b.SetBytes(int64(len(throttle)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rd.ReadCommand(); err != nil {
			b.Fatal(err)
		}
	}
}

// chunked7 repeats its loop at most 7 bytes per Read.
type chunked7 struct{ loop loop }

func (c *chunked7) Read(p []byte) (int, error) { return c.loop.Read(p[:min(len(p), 7)]) }

// BenchmarkWriteThrottleReply writes CL.THROTTLE's reply, an array of 5
// integers, and flushes every 64 replies as a pipelining server would.
func BenchmarkWriteThrottleReply(b *testing.B) {
	w := NewWriter(io.Discard)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w.WriteArray(5)
		w.WriteInt(0)
		w.WriteInt(16)
		w.WriteInt(15)
		w.WriteInt(-1)
		w.WriteInt(2)
		if i++; i%64 == 0 {
			w.Flush()
		}
	}
	w.Flush()
}

// BenchmarkPipeline reads 64 pipelined CL.THROTTLE commands and writes
// their replies with one flush.
func BenchmarkPipeline(b *testing.B) {
	const n = 64
	rd := NewReader(&loop{b: []byte(strings.Repeat(throttle, n))}, Limits{})
	w := NewWriter(io.Discard)
	b.SetBytes(int64(n * len(throttle)))
	b.ReportAllocs()
	for b.Loop() {
		for range n {
			args, err := rd.ReadCommand()
			if err != nil {
				b.Fatal(err)
			}
			w.WriteArray(5)
			w.WriteInt(0)
			w.WriteInt(int64(len(args)))
			w.WriteInt(15)
			w.WriteInt(-1)
			w.WriteInt(2)
		}
		w.Flush()
	}
}
