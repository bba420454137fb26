package resp

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"testing"
	"testing/iotest"
)

// smallLimits make the fuzzer reach every limit with short inputs.
var smallLimits = Limits{MaxBulkLen: 40, MaxArrayLen: 8, MaxInlineLen: 32, MaxQueryBuffer: 128}

// countingReader counts the Read calls that reach r.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// outcome reads every command from src and returns them with the final
// error as one comparable string. It checks the Reader's invariants as it
// goes; with ready, it also checks that a true Ready means that the next
// ReadCommand does not read.
func outcome(t *testing.T, src io.Reader, lim Limits, ready bool) string {
	t.Helper()
	cr := &countingReader{r: src}
	rd := NewReader(cr, lim)
	l := rd.lim
	var out bytes.Buffer
	for range 1 << 20 {
		reads := cr.reads
		wasReady := ready && rd.Ready()
		args, err := rd.ReadCommand()
		if wasReady && (err != nil || cr.reads != reads) {
			t.Fatalf("Ready was true, then ReadCommand read %d times and returned %v", cr.reads-reads, err)
		}
		if len(rd.buf) > l.MaxQueryBuffer || cap(rd.buf) > l.MaxQueryBuffer {
			t.Fatalf("buffer of %d bytes, over MaxQueryBuffer %d", cap(rd.buf), l.MaxQueryBuffer)
		}
		if cap(rd.args) > max(l.MaxQueryBuffer, keepArgs) {
			t.Fatalf("argument slice of %d, for MaxQueryBuffer %d", cap(rd.args), l.MaxQueryBuffer)
		}
		if err != nil {
			fmt.Fprintf(&out, "error: %v", err)
			return out.String()
		}
		if len(args) == 0 || len(args) > max(l.MaxArrayLen, l.MaxInlineLen/2+1) {
			t.Fatalf("%d arguments", len(args))
		}
		for _, a := range args {
			if len(a) > max(l.MaxBulkLen, l.MaxInlineLen) || cap(a) != len(a) {
				t.Fatalf("argument of %d bytes and capacity %d", len(a), cap(a))
			}
		}
		fmt.Fprintf(&out, "%q\n", args)
	}
	t.Fatal("no error after 1<<20 commands")
	return ""
}

// addReaderSeeds adds the inputs of the table tests, and a few more, to f.
func addReaderSeeds(f *testing.F) {
	for _, c := range readerCases {
		if len(c.in) <= 1024 {
			f.Add([]byte(c.in))
		}
	}
	for _, s := range []string{
		"*2\r\n$3\r\nGET\r\n$40\r\n0123456789012345678901234567890123456789\r\n",
		"*8\r\n" + string(bytes.Repeat([]byte("$1\r\nx\r\n"), 8)),
		"*9\r\n",
		"*1\r\n$41\r\n",
		"a b c d e f g h i j k l m n o p\r\n",
		"\"\\x00\\xff\" '\\''\n\n\r\n",
	} {
		f.Add([]byte(s))
	}
}

// FuzzReader feeds arbitrary bytes to Readers with small and default limits,
// delivered whole, one byte at a time, in chunks, and with Ready between
// commands. None may panic or exceed its limits, and all must agree.
func FuzzReader(f *testing.F) {
	addReaderSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, lim := range []Limits{smallLimits, {}} {
			in := func() io.Reader { return bytes.NewReader(bytes.Clone(data)) }
			want := outcome(t, in(), lim, false)
			for _, how := range []struct {
				name  string
				src   io.Reader
				ready bool
			}{
				{"one byte", iotest.OneByteReader(in()), false},
				{"data with EOF", iotest.DataErrReader(in()), true},
				{"chunks of 3", &chunked{b: bytes.Clone(data), n: 3}, true},
				{"chunks of 7", &chunked{b: bytes.Clone(data), n: 7}, false},
				{"half", iotest.HalfReader(in()), true},
			} {
				if got := outcome(t, how.src, lim, how.ready); got != want {
					t.Fatalf("limits %+v, %s:\n%s\nwhole:\n%s", lim, how.name, got, want)
				}
			}
		}
	})
}

// quote writes arg as a double-quoted inline argument, escaped as Redis's
// sdscatrepr does.
func quote(b *bytes.Buffer, arg []byte) {
	b.WriteByte('"')
	for _, c := range arg {
		switch c {
		case '\\', '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\a':
			b.WriteString(`\a`)
		case '\b':
			b.WriteString(`\b`)
		default:
			if c >= ' ' && c <= '~' {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(b, `\x%02x`, c)
			}
		}
	}
	b.WriteByte('"')
}

// FuzzRoundTrip encodes arguments made from arbitrary bytes (split at the
// first byte) as a pipeline of multibulk commands written by a Writer and of
// quoted inline commands, and reads them back.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte(" CL.THROTTLE user:42 15 30 60 1"))
	f.Add([]byte("|SET|a\r\nb|"))
	f.Add([]byte("\x00\x00\x01\x00\xff\"\\'"))
	f.Add([]byte("x"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var args [][]byte
		if len(data) > 0 {
			args = bytes.Split(data[1:], data[:1])
		}
		var in bytes.Buffer
		w := NewWriter(&in)
		for range 3 {
			w.WriteArray(len(args))
			for _, a := range args {
				w.WriteBulk(a)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		n := 3
		if len(args) > 0 {
			for i, a := range args {
				if i > 0 {
					in.WriteByte(' ')
				}
				quote(&in, a)
			}
			in.WriteString("\r\n")
			n++
		}
		if len(args) == 0 {
			n = 0 // empty commands are skipped
		}
		for _, src := range []io.Reader{bytes.NewReader(in.Bytes()), iotest.OneByteReader(bytes.NewReader(in.Bytes()))} {
			rd := NewReader(src, Limits{})
			for i := range n {
				got, err := rd.ReadCommand()
				if err != nil {
					t.Fatalf("command %d: %v", i, err)
				}
				if !slices.EqualFunc(got, args, bytes.Equal) {
					t.Fatalf("command %d: got %q, want %q", i, got, args)
				}
			}
			if _, err := rd.ReadCommand(); err != io.EOF {
				t.Fatalf("after %d commands: %v", n, err)
			}
		}
	})
}

// refSplitArgs is a literal port of Redis's sdssplitargs, on a NUL-terminated
// copy of line, without the in-place unescaping of splitArgs.
func refSplitArgs(line []byte) ([]string, bool) {
	s := append(bytes.Clone(line), 0)
	hex := func(c byte) bool { _, ok := unhex(c); return ok }
	p := 0
	vector := []string{}
	for {
		for s[p] != 0 && isSpace(s[p]) {
			p++
		}
		if s[p] == 0 {
			return vector, true
		}
		inq, insq, done := false, false, false
		current := []byte{}
		for !done {
			if inq {
				if s[p] == '\\' && s[p+1] == 'x' && hex(s[p+2]) && hex(s[p+3]) {
					hi, _ := unhex(s[p+2])
					lo, _ := unhex(s[p+3])
					current = append(current, hi*16+lo)
					p += 3
				} else if s[p] == '\\' && s[p+1] != 0 {
					p++
					c := s[p]
					switch c {
					case 'n':
						c = '\n'
					case 'r':
						c = '\r'
					case 't':
						c = '\t'
					case 'b':
						c = '\b'
					case 'a':
						c = '\a'
					}
					current = append(current, c)
				} else if s[p] == '"' {
					if s[p+1] != 0 && !isSpace(s[p+1]) {
						return nil, false
					}
					done = true
				} else if s[p] == 0 {
					return nil, false
				} else {
					current = append(current, s[p])
				}
			} else if insq {
				if s[p] == '\\' && s[p+1] == '\'' {
					p++
					current = append(current, '\'')
				} else if s[p] == '\'' {
					if s[p+1] != 0 && !isSpace(s[p+1]) {
						return nil, false
					}
					done = true
				} else if s[p] == 0 {
					return nil, false
				} else {
					current = append(current, s[p])
				}
			} else {
				switch s[p] {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				default:
					current = append(current, s[p])
				}
			}
			if s[p] != 0 {
				p++
			}
		}
		vector = append(vector, string(current))
	}
}

// FuzzSplitArgs compares splitArgs with the literal port of sdssplitargs.
func FuzzSplitArgs(f *testing.F) {
	for _, s := range []string{
		`SET "a b" 'c d'`, `"\x41\x4g\x" '\'\\'`, `a"b c"d`, `"a"b`, `'a'b`, `"abc`, `'abc`,
		"\"a\"\vb", "a\x00\"", `"\`, `''`, `""`, "\t\r\n\v\f", `"\\\"\n\r\t\b\a\z"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		want, wantOK := refSplitArgs(line)
		args, ok := splitArgs(bytes.Clone(line), nil)
		got := []string{}
		for _, a := range args {
			got = append(got, string(a))
		}
		if ok != wantOK || (ok && !slices.Equal(got, want)) {
			t.Fatalf("splitArgs(%q) = %q, %v; sdssplitargs gives %q, %v", line, got, ok, want, wantOK)
		}
	})
}

// FuzzWriteInt checks the integer line the writer builds by hand against
// strconv's, for every int64, and as a header of arrays and bulk strings.
func FuzzWriteInt(f *testing.F) {
	for _, n := range []int64{0, 1, 9, 10, -1, -9, -10, 99, 100, 1000001, math.MaxInt64, math.MinInt64, math.MinInt64 + 1} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		var out bytes.Buffer
		w := NewWriter(&out)
		w.WriteInt(n)
		if n >= 0 {
			w.WriteArray(int(n % (1 << 30)))
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		want := ":" + strconv.FormatInt(n, 10) + "\r\n"
		if n >= 0 {
			want += "*" + strconv.FormatInt(n%(1<<30), 10) + "\r\n"
		}
		if out.String() != want {
			t.Fatalf("WriteInt(%d) wrote %q, want %q", n, out.String(), want)
		}
		// WriteInts is WriteArray and a WriteInt each.
		var one, many bytes.Buffer
		w1, wn := NewWriter(&one), NewWriter(&many)
		vs := []int64{n, -n, n / 7, 0, -1}
		w1.WriteInts(vs...)
		wn.WriteArray(len(vs))
		for _, v := range vs {
			wn.WriteInt(v)
		}
		w1.Flush()
		wn.Flush()
		if one.String() != many.String() {
			t.Fatalf("WriteInts(%v) wrote %q, want %q", vs, one.String(), many.String())
		}
	})
}
