package resp

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

func TestWriter(t *testing.T) {
	for _, c := range []struct {
		name         string
		write        func(w *Writer)
		resp2, resp3 string
	}{
		{"simple string", func(w *Writer) { w.WriteSimpleString("OK") }, "+OK\r\n", "+OK\r\n"},
		{"simple string CRLF", func(w *Writer) { w.WriteSimpleString("a\r\nb") }, "+a  b\r\n", "+a  b\r\n"},
		{"error", func(w *Writer) { w.WriteError("ERR unknown command 'x'") },
			"-ERR unknown command 'x'\r\n", "-ERR unknown command 'x'\r\n"},
		{"error CRLF", func(w *Writer) { w.WriteError("ERR a\nb\rc") }, "-ERR a b c\r\n", "-ERR a b c\r\n"},
		{"int", func(w *Writer) { w.WriteInt(42) }, ":42\r\n", ":42\r\n"},
		{"int zero", func(w *Writer) { w.WriteInt(0) }, ":0\r\n", ":0\r\n"},
		{"int negative", func(w *Writer) { w.WriteInt(-1) }, ":-1\r\n", ":-1\r\n"},
		{"int min", func(w *Writer) { w.WriteInt(math.MinInt64) },
			":-9223372036854775808\r\n", ":-9223372036854775808\r\n"},
		{"bulk", func(w *Writer) { w.WriteBulk([]byte("a\r\nb")) }, "$4\r\na\r\nb\r\n", "$4\r\na\r\nb\r\n"},
		{"bulk empty", func(w *Writer) { w.WriteBulk(nil) }, "$0\r\n\r\n", "$0\r\n\r\n"},
		{"bulk string", func(w *Writer) { w.WriteBulkString("héllo") }, "$6\r\nhéllo\r\n", "$6\r\nhéllo\r\n"},
		{"null", func(w *Writer) { w.WriteNull() }, "$-1\r\n", "_\r\n"},
		{"null array", func(w *Writer) { w.WriteNullArray() }, "*-1\r\n", "_\r\n"},
		{"array", func(w *Writer) {
			w.WriteArray(5)
			for _, n := range []int64{0, 16, 15, 0, 3} {
				w.WriteInt(n)
			}
		}, "*5\r\n:0\r\n:16\r\n:15\r\n:0\r\n:3\r\n", "*5\r\n:0\r\n:16\r\n:15\r\n:0\r\n:3\r\n"},
		{"array empty", func(w *Writer) { w.WriteArray(0) }, "*0\r\n", "*0\r\n"},
		{"array negative", func(w *Writer) { w.WriteArray(-1) }, "*-1\r\n", "_\r\n"},
		{"map", func(w *Writer) {
			w.WriteMap(2)
			w.WriteBulkString("proto")
			w.WriteInt(3)
			w.WriteBulkString("mode")
			w.WriteBulkString("standalone")
		}, "*4\r\n$5\r\nproto\r\n:3\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n",
			"%2\r\n$5\r\nproto\r\n:3\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"},
		{"map negative", func(w *Writer) { w.WriteMap(-1) }, "$-1\r\n", "_\r\n"},
		{"set", func(w *Writer) {
			w.WriteSet(1)
			w.WriteBulkString("a")
		}, "*1\r\n$1\r\na\r\n", "~1\r\n$1\r\na\r\n"},
		{"set negative", func(w *Writer) { w.WriteSet(-1) }, "$-1\r\n", "_\r\n"},
		{"double", func(w *Writer) { w.WriteDouble(1.5) }, "$3\r\n1.5\r\n", ",1.5\r\n"},
		{"double integral", func(w *Writer) { w.WriteDouble(3) }, "$1\r\n3\r\n", ",3\r\n"},
		{"double tenth", func(w *Writer) { w.WriteDouble(0.1) }, "$3\r\n0.1\r\n", ",0.1\r\n"},
		{"double big", func(w *Writer) { w.WriteDouble(1e21) }, "$5\r\n1e+21\r\n", ",1e+21\r\n"},
		{"double negative zero", func(w *Writer) { w.WriteDouble(math.Copysign(0, -1)) }, "$2\r\n-0\r\n", ",-0\r\n"},
		{"double inf", func(w *Writer) { w.WriteDouble(math.Inf(1)) }, "$3\r\ninf\r\n", ",inf\r\n"},
		{"double -inf", func(w *Writer) { w.WriteDouble(math.Inf(-1)) }, "$4\r\n-inf\r\n", ",-inf\r\n"},
		{"double nan", func(w *Writer) { w.WriteDouble(math.NaN()) }, "$3\r\nnan\r\n", ",nan\r\n"},
		{"double max", func(w *Writer) { w.WriteDouble(-math.MaxFloat64) },
			"$24\r\n-1.7976931348623157e+308\r\n", ",-1.7976931348623157e+308\r\n"},
		{"true", func(w *Writer) { w.WriteBool(true) }, ":1\r\n", "#t\r\n"},
		{"false", func(w *Writer) { w.WriteBool(false) }, ":0\r\n", "#f\r\n"},
		{"verbatim", func(w *Writer) { w.WriteVerbatim("txt", "Some string") },
			"$11\r\nSome string\r\n", "=15\r\ntxt:Some string\r\n"},
		{"verbatim markdown", func(w *Writer) { w.WriteVerbatim("mkd", "# a\r\n") },
			"$5\r\n# a\r\n\r\n", "=9\r\nmkd:# a\r\n\r\n"},
		{"verbatim bad format", func(w *Writer) { w.WriteVerbatim("text", "") }, "$0\r\n\r\n", "=4\r\ntxt:\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, proto := range []int{2, 3} {
				var out bytes.Buffer
				w := NewWriter(&out)
				if err := w.SetProtocol(proto); err != nil {
					t.Fatal(err)
				}
				c.write(w)
				want := c.resp2
				if proto == 3 {
					want = c.resp3
				}
				if w.Buffered() != len(want) || out.Len() != 0 {
					t.Fatalf("RESP%d: %d bytes buffered and %d written before Flush, want %d and 0",
						proto, w.Buffered(), out.Len(), len(want))
				}
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
				if got := out.String(); got != want {
					t.Errorf("RESP%d: got %q, want %q", proto, got, want)
				}
				if w.Buffered() != 0 {
					t.Errorf("RESP%d: %d bytes buffered after Flush", proto, w.Buffered())
				}
			}
		})
	}
}

func TestWriterProtocol(t *testing.T) {
	w := NewWriter(io.Discard)
	if w.Protocol() != 2 {
		t.Fatalf("new Writer speaks RESP%d", w.Protocol())
	}
	for _, v := range []int{0, 1, 4, -3} {
		if err := w.SetProtocol(v); err != ErrUnsupportedProtocol {
			t.Errorf("SetProtocol(%d) = %v", v, err)
		}
	}
	if err := w.SetProtocol(3); err != nil || w.Protocol() != 3 {
		t.Fatalf("SetProtocol(3) = %v, Protocol() = %d", err, w.Protocol())
	}
	if err := w.SetProtocol(1); err == nil || w.Protocol() != 3 {
		t.Fatalf("a refused version changed the protocol to %d", w.Protocol())
	}
	w.WriteNull()
	w.Reset(io.Discard)
	if w.Protocol() != 2 || w.Buffered() != 0 {
		t.Fatalf("after Reset: RESP%d, %d bytes buffered", w.Protocol(), w.Buffered())
	}
}

// failWriter accepts n bytes, then fails.
type failWriter struct {
	n      int
	err    error
	writes int
}

func (f *failWriter) Write(p []byte) (int, error) {
	f.writes++
	if len(p) <= f.n {
		f.n -= len(p)
		return len(p), nil
	}
	n := f.n
	f.n = 0
	return n, f.err
}

func TestWriterErrors(t *testing.T) {
	errBoom := errors.New("boom")
	fw := &failWriter{n: 5, err: errBoom}
	w := NewWriter(fw)
	w.WriteSimpleString("OK")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	w.WriteSimpleString("OK")
	if err := w.Flush(); err != errBoom {
		t.Fatalf("Flush = %v, want %v", err, errBoom)
	}
	w.WriteInt(1)
	if err := w.Flush(); err != errBoom || w.Buffered() != 0 || fw.writes != 2 {
		t.Fatalf("after an error: Flush = %v, %d buffered, %d writes", err, w.Buffered(), fw.writes)
	}

	short := writerFunc(func(p []byte) (int, error) { return len(p) - 1, nil })
	w = NewWriter(short)
	w.WriteInt(1)
	if err := w.Flush(); err != io.ErrShortWrite {
		t.Fatalf("short write: %v", err)
	}

	w = NewWriter(writerFunc(func(p []byte) (int, error) { t.Fatal("empty flush wrote"); return 0, nil }))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestWriterFlushesLargeReplies(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	big := strings.Repeat("x", flushThreshold)
	w.WriteBulkString(big)
	if w.Buffered() != 0 || out.Len() != len(big)+len("$65536\r\n\r\n") {
		t.Fatalf("after a %d-byte reply: %d buffered, %d written", len(big), w.Buffered(), out.Len())
	}
	for range flushThreshold / 4 {
		w.WriteInt(1)
	}
	if w.Buffered() >= flushThreshold {
		t.Fatalf("%d bytes buffered", w.Buffered())
	}
	w.Flush()
	if out.Len() != len(big)+len("$65536\r\n\r\n")+flushThreshold {
		t.Fatalf("%d bytes written", out.Len())
	}
}

func TestWriterAllocs(t *testing.T) {
	w := NewWriter(io.Discard)
	bulk := []byte("some value")
	for _, c := range []struct {
		name  string
		write func()
	}{
		{"int", func() { w.WriteInt(-1234567) }},
		{"int array", func() {
			w.WriteArray(5)
			w.WriteInt(0)
			w.WriteInt(16)
			w.WriteInt(15)
			w.WriteInt(-1)
			w.WriteInt(3)
		}},
		{"simple string", func() { w.WriteSimpleString("OK") }},
		{"error", func() { w.WriteError("ERR wrong number of arguments for 'cl.throttle' command") }},
		{"bulk", func() { w.WriteBulk(bulk) }},
		{"bulk string", func() { w.WriteBulkString("some value") }},
		{"null", func() { w.WriteNull() }},
		{"double", func() { w.WriteDouble(3.25) }},
		{"bool", func() { w.WriteBool(true) }},
		{"map", func() { w.WriteMap(1); w.WriteBulk(bulk); w.WriteInt(1) }},
		{"verbatim", func() { w.WriteVerbatim("txt", "some value") }},
	} {
		for _, proto := range []int{2, 3} {
			w.SetProtocol(proto)
			allocs := testing.AllocsPerRun(1000, func() {
				c.write()
				w.Flush()
			})
			if allocs != 0 {
				t.Errorf("%s, RESP%d: %v allocations, want 0", c.name, proto, allocs)
			}
		}
	}
}
