package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// chunkReader returns its chunks one per Read call, then io.EOF.
type chunkReader struct {
	chunks [][]byte
	reads  int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.chunks) > 0 && len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	c.reads++
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	return n, nil
}

// splitAt returns a reader that delivers in[:i] and in[i:] in separate reads.
func splitAt(in string, i int) io.Reader {
	return &chunkReader{chunks: [][]byte{[]byte(in[:i]), []byte(in[i:])}}
}

// readAll reads commands until an error and returns them, copied, with the
// error.
func readAll(t testing.TB, rd *Reader) ([][]string, error) {
	t.Helper()
	var cmds [][]string
	for range 100000 {
		args, err := rd.ReadCommand()
		if err != nil {
			return cmds, err
		}
		if len(args) == 0 {
			t.Fatalf("ReadCommand returned no arguments and no error")
		}
		cmd := make([]string, len(args))
		for i, a := range args {
			cmd[i] = string(a)
		}
		cmds = append(cmds, cmd)
	}
	t.Fatalf("ReadCommand never returned an error")
	return nil, nil
}

// sameErr reports whether got is want, or a *ProtocolError with the same
// message.
func sameErr(got, want error) bool {
	var g, w *ProtocolError
	if errors.As(got, &g) && errors.As(want, &w) {
		return g.Msg == w.Msg
	}
	return got == want
}

func cmds(c ...[]string) [][]string { return c }
func cmd(args ...string) []string   { return args }

func protoErr(msg string) error { return &ProtocolError{Msg: msg} }

var throttle = "*6\r\n$11\r\nCL.THROTTLE\r\n$7\r\nuser:42\r\n$2\r\n15\r\n$2\r\n30\r\n$2\r\n60\r\n$1\r\n1\r\n"

type readerCase struct {
	name   string
	limits Limits
	in     string
	want   [][]string
	err    error
}

var readerCases = []readerCase{
	// Multibulk.
	{name: "ping", in: "*1\r\n$4\r\nPING\r\n", want: cmds(cmd("PING")), err: io.EOF},
	{name: "throttle", in: throttle, want: cmds(cmd("CL.THROTTLE", "user:42", "15", "30", "60", "1")), err: io.EOF},
	{name: "binary", in: "*2\r\n$3\r\nGET\r\n$8\r\na\r\nb\x00c\r\n\r\n",
		want: cmds(cmd("GET", "a\r\nb\x00c\r\n")), err: io.EOF},
	{name: "all bytes", in: "*1\r\n$256\r\n" + allBytes() + "\r\n", want: cmds(cmd(allBytes())), err: io.EOF},
	{name: "empty bulk", in: "*3\r\n$4\r\nECHO\r\n$0\r\n\r\n$0\r\n\r\n", want: cmds(cmd("ECHO", "", "")), err: io.EOF},
	{name: "star in bulk", in: "*2\r\n$1\r\n*\r\n$2\r\n*1\r\n", want: cmds(cmd("*", "*1")), err: io.EOF},
	{name: "lenient CRLF", in: "*2\rX$3\rYfooAB$1\r\nxCD", want: cmds(cmd("foo", "x")), err: io.EOF},
	{name: "zero and negative counts", in: "*0\r\n*-1\r\n*-10\r\n*-9223372036854775808\r\n*1\r\n$1\r\nx\r\n",
		want: cmds(cmd("x")), err: io.EOF},

	// Inline.
	{name: "inline", in: "PING\r\n", want: cmds(cmd("PING")), err: io.EOF},
	{name: "inline LF", in: "SET k v\n", want: cmds(cmd("SET", "k", "v")), err: io.EOF},
	{name: "inline spaces", in: " \t SET   k\tv \t\r\n", want: cmds(cmd("SET", "k", "v")), err: io.EOF},
	{name: "inline CR inside", in: "SET k\rv\r\r\n", want: cmds(cmd("SET", "k", "v")), err: io.EOF},
	{name: "inline VT and FF", in: "ECHO a\vb \f c\f\r\n", want: cmds(cmd("ECHO", "a\vb", "c\f")), err: io.EOF},
	{name: "blank lines", in: "\r\n\n   \r\n\t\n\v\f\r\nPING\n\n", want: cmds(cmd("PING")), err: io.EOF},
	{name: "double quotes", in: `SET "a b" "c"` + "\r\n", want: cmds(cmd("SET", "a b", "c")), err: io.EOF},
	{name: "single quotes", in: `SET 'a b' 'c'` + "\r\n", want: cmds(cmd("SET", "a b", "c")), err: io.EOF},
	{name: "escapes", in: `ECHO "\x41\x7a\xFF\n\r\t\b\a\\\"\z\'"` + "\n",
		want: cmds(cmd("ECHO", "Az\xff\n\r\t\b\a\\\"z'")), err: io.EOF},
	{name: "bad hex", in: `ECHO "\xzz" "\x4" "\x"` + "\n", want: cmds(cmd("ECHO", "xzz", "x4", "x")), err: io.EOF},
	{name: "single quote escapes", in: `ECHO '\'\n\x41"'` + "\n", want: cmds(cmd("ECHO", `'\n\x41"`)), err: io.EOF},
	{name: "empty quoted", in: `ECHO "" ''` + "\n", want: cmds(cmd("ECHO", "", "")), err: io.EOF},
	{name: "quote mid argument", in: `ECHO a"b c" d'e f'` + "\n", want: cmds(cmd("ECHO", "ab c", "de f")), err: io.EOF},
	{name: "quote then VT", in: "ECHO \"a\"\vb\n", want: cmds(cmd("ECHO", "a", "b")), err: io.EOF},
	{name: "NUL ends line", in: "ECHO a\x00b \"c\n", want: cmds(cmd("ECHO", "a")), err: io.EOF},
	{name: "star inside inline", in: "ECHO *1\r\n", want: cmds(cmd("ECHO", "*1")), err: io.EOF},

	// Pipelines.
	{name: "pipeline", in: "*1\r\n$4\r\nPING\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$1\r\nx\r\nECHO y\n" + throttle,
		want: cmds(cmd("PING"), cmd("PING"), cmd("ECHO", "x"), cmd("ECHO", "y"),
			cmd("CL.THROTTLE", "user:42", "15", "30", "60", "1")), err: io.EOF},
	{name: "commands before error", in: "PING\r\n*1\r\n$4\r\nPING\r\n*x\r\n*1\r\n$4\r\nPING\r\n",
		want: cmds(cmd("PING"), cmd("PING")), err: ErrInvalidMultibulkLength},

	// End of input.
	{name: "empty", in: "", err: io.EOF},
	{name: "truncated bulk", in: "*1\r\n$4\r\nPI", err: io.ErrUnexpectedEOF},
	{name: "truncated CRLF", in: "*1\r\n$4\r\nPING\r", err: io.ErrUnexpectedEOF},
	{name: "truncated count", in: "*1\r", err: io.ErrUnexpectedEOF},
	{name: "truncated inline", in: "PING", err: io.ErrUnexpectedEOF},
	{name: "truncated blank", in: "PING\r\n  ", want: cmds(cmd("PING")), err: io.ErrUnexpectedEOF},

	// Invalid multibulk length.
	{name: "count not a number", in: "*abc\r\n", err: ErrInvalidMultibulkLength},
	{name: "count empty", in: "*\r\n", err: ErrInvalidMultibulkLength},
	{name: "count leading zero", in: "*01\r\n", err: ErrInvalidMultibulkLength},
	{name: "count plus", in: "*+1\r\n", err: ErrInvalidMultibulkLength},
	{name: "count minus zero", in: "*-0\r\n", err: ErrInvalidMultibulkLength},
	{name: "count minus", in: "*-\r\n", err: ErrInvalidMultibulkLength},
	{name: "count space", in: "*1 \r\n", err: ErrInvalidMultibulkLength},
	{name: "count NUL", in: "*1\x00\r\n", err: ErrInvalidMultibulkLength},
	{name: "count overflow", in: "*99999999999999999999\r\n", err: ErrInvalidMultibulkLength},
	{name: "count underflow", in: "*-9223372036854775809\r\n", err: ErrInvalidMultibulkLength},
	{name: "count over default", in: "*1048577\r\n", err: ErrInvalidMultibulkLength},
	{name: "count at default", in: "*1048576\r\n", err: io.ErrUnexpectedEOF},
	{name: "count at limit", limits: Limits{MaxArrayLen: 2}, in: "*2\r\n$1\r\na\r\n$1\r\nb\r\n",
		want: cmds(cmd("a", "b")), err: io.EOF},
	{name: "count over limit", limits: Limits{MaxArrayLen: 2}, in: "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n",
		err: ErrInvalidMultibulkLength},

	// Invalid bulk length.
	{name: "bulk negative", in: "*1\r\n$-1\r\n", err: ErrInvalidBulkLength},
	{name: "bulk not a number", in: "*1\r\n$abc\r\n", err: ErrInvalidBulkLength},
	{name: "bulk empty", in: "*1\r\n$\r\n", err: ErrInvalidBulkLength},
	{name: "bulk leading zero", in: "*1\r\n$01\r\nx\r\n", err: ErrInvalidBulkLength},
	{name: "bulk overflow", in: "*1\r\n$99999999999999999999\r\n", err: ErrInvalidBulkLength},
	{name: "bulk over default", in: "*1\r\n$524289\r\n", err: ErrInvalidBulkLength},
	{name: "bulk at limit", limits: Limits{MaxBulkLen: 5}, in: "*1\r\n$5\r\nhello\r\n",
		want: cmds(cmd("hello")), err: io.EOF},
	{name: "bulk over limit", limits: Limits{MaxBulkLen: 5}, in: "*1\r\n$6\r\nhello!\r\n", err: ErrInvalidBulkLength},

	// Expected '$'.
	{name: "expected dollar", in: "*1\r\n:1\r\n", err: protoErr("Protocol error: expected '$', got ':'")},
	{name: "expected dollar CR", in: "*1\r\n\r\n", err: protoErr("Protocol error: expected '$', got ' '")},
	{name: "expected dollar LF", in: "*1\r\n\n\r\n", err: protoErr("Protocol error: expected '$', got ' '")},
	{name: "expected dollar byte", in: "*1\r\n\xff\r\n", err: protoErr("Protocol error: expected '$', got '\xff'")},
	{name: "expected dollar redis test", in: "*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n",
		err: protoErr("Protocol error: expected '$', got 'f'")},
	{name: "bulk shorter than said", in: "*2\r\n$5\r\nfoo\r\n$1\r\nx\r\n",
		err: protoErr("Protocol error: expected '$', got ' '")},

	// Unbalanced quotes.
	{name: "unterminated double", in: "ECHO \"abc\r\n", err: ErrUnbalancedQuotes},
	{name: "unterminated single", in: "ECHO 'abc\r\n", err: ErrUnbalancedQuotes},
	{name: "escaped closing quote", in: "ECHO \"abc\\\"\r\n", err: ErrUnbalancedQuotes},
	{name: "trailing backslash", in: "ECHO \"abc\\\r\n", err: ErrUnbalancedQuotes},
	{name: "double then text", in: "ECHO \"a\"b\r\n", err: ErrUnbalancedQuotes},
	{name: "single then text", in: "ECHO 'a'b\r\n", err: ErrUnbalancedQuotes},
	{name: "quote in NUL", in: "ECHO \"a\x00\"\n", err: ErrUnbalancedQuotes},

	// Over-long lines.
	{name: "inline at limit", limits: Limits{MaxInlineLen: 8}, in: "12345678\n",
		want: cmds(cmd("12345678")), err: io.EOF},
	{name: "inline CRLF at limit", limits: Limits{MaxInlineLen: 8}, in: "1234567\r\n",
		want: cmds(cmd("1234567")), err: io.EOF},
	{name: "inline over limit", limits: Limits{MaxInlineLen: 8}, in: "123456789\n", err: ErrTooBigInlineRequest},
	{name: "inline over limit no LF", limits: Limits{MaxInlineLen: 8}, in: "123456789", err: ErrTooBigInlineRequest},
	{name: "inline waits", limits: Limits{MaxInlineLen: 8}, in: "12345678", err: io.ErrUnexpectedEOF},
	{name: "count line over limit", limits: Limits{MaxInlineLen: 8}, in: "*12345678", err: ErrTooBigMbulkCount},
	{name: "count line at limit", limits: Limits{MaxInlineLen: 8}, in: "*1234567\r\n", err: ErrInvalidMultibulkLength},
	{name: "bulk line over limit", limits: Limits{MaxInlineLen: 8}, in: "*1\r\n$12345678", err: ErrTooBigBulkCount},
	{name: "bulk line junk", limits: Limits{MaxInlineLen: 8}, in: "*1\r\nXXXXXXXXXXXXX", err: ErrTooBigBulkCount},
	{name: "bulk line at limit", limits: Limits{MaxInlineLen: 8}, in: "*1\r\n$1234567\r\n", err: ErrInvalidBulkLength},
	{name: "inline over default", in: strings.Repeat("a", 64<<10+1), err: ErrTooBigInlineRequest},
	{name: "inline at default", in: strings.Repeat("a", 64<<10) + "\n",
		want: cmds(cmd(strings.Repeat("a", 64<<10))), err: io.EOF},
	{name: "count line over default", in: "*" + strings.Repeat("1", 64<<10), err: ErrTooBigMbulkCount},
	{name: "bulk line over default", in: "*1\r\n" + strings.Repeat("X", 70000), err: ErrTooBigBulkCount},

	// Query buffer.
	{name: "query buffer bulk", limits: Limits{MaxInlineLen: 16, MaxQueryBuffer: 64},
		in:  "*1\r\n$60\r\n" + strings.Repeat("x", 60) + "\r\n",
		err: ErrQueryBufferFull},
	{name: "query buffer bulk header only", limits: Limits{MaxInlineLen: 16, MaxQueryBuffer: 64},
		in: "*1\r\n$60\r\n", err: ErrQueryBufferFull},
	{name: "query buffer two bulks", limits: Limits{MaxInlineLen: 16, MaxQueryBuffer: 64},
		in:  "*2\r\n$40\r\n" + strings.Repeat("x", 40) + "\r\n$40\r\n" + strings.Repeat("y", 40) + "\r\n",
		err: ErrQueryBufferFull},
	{name: "query buffer many args", limits: Limits{MaxInlineLen: 16, MaxQueryBuffer: 64},
		in:  "*100\r\n" + strings.Repeat("$1\r\na\r\n", 100),
		err: ErrQueryBufferFull},
	{name: "query buffer exact", limits: Limits{MaxInlineLen: 16, MaxQueryBuffer: 64},
		in:   "*1\r\n$53\r\n" + strings.Repeat("x", 53) + "\r\n" + "*1\r\n$53\r\n" + strings.Repeat("y", 53) + "\r\n",
		want: cmds(cmd(strings.Repeat("x", 53)), cmd(strings.Repeat("y", 53))), err: io.EOF},
	{name: "query buffer raised for inline", limits: Limits{MaxInlineLen: 16, MaxQueryBuffer: 4},
		in: "ECHO 0123456789\r\n", want: cmds(cmd("ECHO", "0123456789")), err: io.EOF},
}

func allBytes() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}

// check runs one case against one way of delivering its input.
func (c readerCase) check(t *testing.T, how string, src io.Reader) {
	t.Helper()
	got, err := readAll(t, NewReader(src, c.limits))
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) || !sameErr(err, c.err) {
		t.Fatalf("%s: got %q, %v; want %q, %v", how, got, err, c.want, c.err)
	}
}

func TestReader(t *testing.T) {
	for _, c := range readerCases {
		t.Run(c.name, func(t *testing.T) {
			c.check(t, "whole", strings.NewReader(c.in))
			c.check(t, "one byte per read", iotest.OneByteReader(strings.NewReader(c.in)))
			c.check(t, "data with EOF", iotest.DataErrReader(strings.NewReader(c.in)))
			c.check(t, "half reads", iotest.HalfReader(strings.NewReader(c.in)))
			if len(c.in) > 1024 {
				return // every split of the long inputs is slow and adds nothing
			}
			for i := 0; i <= len(c.in); i++ {
				c.check(t, fmt.Sprintf("split at %d", i), splitAt(c.in, i))
			}
		})
	}
}

func TestReaderErrorIsSticky(t *testing.T) {
	rd := NewReader(strings.NewReader("*1\r\n$-1\r\n*1\r\n$4\r\nPING\r\n"), Limits{})
	for range 3 {
		if _, err := rd.ReadCommand(); err != ErrInvalidBulkLength {
			t.Fatalf("ReadCommand: %v, want %v", err, ErrInvalidBulkLength)
		}
		if rd.Ready() {
			t.Fatal("Ready after a protocol error")
		}
	}
	var pe *ProtocolError
	_, err := rd.ReadCommand()
	if !errors.As(err, &pe) || pe.Msg != "Protocol error: invalid bulk length" {
		t.Fatalf("errors.As: %v", err)
	}
	if err.Error() != "resp: Protocol error: invalid bulk length" {
		t.Fatalf("Error() = %q", err.Error())
	}
}

func TestReaderReadyAndBuffered(t *testing.T) {
	src := &chunkReader{chunks: [][]byte{
		[]byte("PING\r\n*1\r\n$4\r\nPING\r\n\r\nECHO"),
		[]byte(" x\r\n"),
	}}
	rd := NewReader(src, Limits{})
	if rd.Ready() || rd.Buffered() != 0 {
		t.Fatal("Ready or Buffered before any read")
	}
	step := func(want string, ready bool, buffered int) {
		t.Helper()
		args, err := rd.ReadCommand()
		if err != nil || fmt.Sprintf("%q", args) != want {
			t.Fatalf("ReadCommand = %q, %v; want %s", args, err, want)
		}
		if got := rd.Ready(); got != ready {
			t.Fatalf("after %s: Ready = %v", want, got)
		}
		if got := rd.Buffered(); got != buffered {
			t.Fatalf("after %s: Buffered = %d, want %d", want, got, buffered)
		}
	}
	step(`["PING"]`, true, 20)
	step(`["PING"]`, false, 4) // the blank line is skipped, "ECHO" is partial
	if src.reads != 1 {
		t.Fatalf("%d reads before the partial command, want 1", src.reads)
	}
	step(`["ECHO" "x"]`, false, 0)
	if _, err := rd.ReadCommand(); err != io.EOF {
		t.Fatalf("ReadCommand at the end: %v", err)
	}
}

func TestReaderPipelineReadsOnce(t *testing.T) {
	const n = 50 // 50 throttle commands fit in the first 4 KiB read
	in := strings.Repeat(throttle, n)
	src := &chunkReader{chunks: [][]byte{[]byte(in)}}
	rd := NewReader(src, Limits{})
	for i := range n {
		args, err := rd.ReadCommand()
		if err != nil || len(args) != 6 || string(args[1]) != "user:42" {
			t.Fatalf("command %d: %q, %v", i, args, err)
		}
		if ready := rd.Ready(); ready != (i < n-1) {
			t.Fatalf("command %d: Ready = %v", i, ready)
		}
	}
	if src.reads != 1 {
		t.Fatalf("%d reads for %d bytes", src.reads, len(in))
	}
}

func TestReaderArgsCapacity(t *testing.T) {
	for _, in := range []string{"*2\r\n$1\r\na\r\n$1\r\nb\r\n", "a b\r\n"} {
		rd := NewReader(strings.NewReader(in), Limits{})
		args, err := rd.ReadCommand()
		if err != nil {
			t.Fatal(err)
		}
		_ = append(args[0], 'X', 'X', 'X', 'X')
		if string(args[1]) != "b" {
			t.Fatalf("%q: appending to args[0] changed args[1] to %q", in, args[1])
		}
	}
}

func TestReaderLargeBulkSplit(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), DefaultMaxBulkLen/16)
	var in bytes.Buffer
	fmt.Fprintf(&in, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\nPING\r\n", len(big)/2, big[:len(big)/2], len(big), big)
	rd := NewReader(iotest.HalfReader(&chunked{b: in.Bytes(), n: 1000}), Limits{MaxQueryBuffer: 2 << 20})
	args, err := rd.ReadCommand()
	if err != nil || len(args) != 3 || !bytes.Equal(args[2], big) || !bytes.Equal(args[1], big[:len(big)/2]) {
		t.Fatalf("big command: %d args, %v", len(args), err)
	}
	if len(rd.buf) > 2<<20 {
		t.Fatalf("buffer grew to %d", len(rd.buf))
	}
	args, err = rd.ReadCommand()
	if err != nil || string(args[0]) != "PING" {
		t.Fatalf("after the big command: %q, %v", args, err)
	}
	if _, err := rd.ReadCommand(); err != io.EOF {
		t.Fatal(err)
	}
	if len(rd.buf) > keepBufSize {
		t.Fatalf("buffer kept at %d bytes after the big command", len(rd.buf))
	}
}

// chunked delivers b at most n bytes per Read.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[n:]
	return n, nil
}

// flaky fails its first Read with err, then reads from r.
type flaky struct {
	r   io.Reader
	err error
}

func (f *flaky) Read(p []byte) (int, error) {
	if err := f.err; err != nil {
		f.err = nil
		return 0, err
	}
	return f.r.Read(p)
}

func TestReaderReadErrors(t *testing.T) {
	errBoom := errors.New("boom")
	src := io.MultiReader(strings.NewReader("*1\r\n$4\r\nPI"), &flaky{r: strings.NewReader("NG\r\n"), err: errBoom})
	rd := NewReader(src, Limits{})
	if _, err := rd.ReadCommand(); err != errBoom {
		t.Fatalf("first ReadCommand: %v, want %v", err, errBoom)
	}
	args, err := rd.ReadCommand()
	if err != nil || len(args) != 1 || string(args[0]) != "PING" {
		t.Fatalf("after a transient error: %q, %v", args, err)
	}

	rd = NewReader(iotest.ErrReader(errBoom), Limits{})
	if _, err := rd.ReadCommand(); err != errBoom {
		t.Fatalf("ErrReader: %v", err)
	}

	rd = NewReader(readerFunc(func([]byte) (int, error) { return 0, nil }), Limits{})
	if _, err := rd.ReadCommand(); err != io.ErrNoProgress {
		t.Fatalf("empty reads: %v, want io.ErrNoProgress", err)
	}

	rd = NewReader(readerFunc(func(p []byte) (int, error) { return len(p) + 1, nil }), Limits{})
	if _, err := rd.ReadCommand(); err == nil || !strings.HasPrefix(err.Error(), "resp: ") {
		t.Fatalf("bad count: %v", err)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func TestReaderReset(t *testing.T) {
	rd := NewReader(strings.NewReader("*1\r\n$-1\r\n"), Limits{MaxBulkLen: 3})
	if _, err := rd.ReadCommand(); err != ErrInvalidBulkLength {
		t.Fatal(err)
	}
	rd.Reset(strings.NewReader("*1\r\n$3\r\nabc\r\n*1\r\n$4\r\nabcd\r\n"))
	if args, err := rd.ReadCommand(); err != nil || string(args[0]) != "abc" {
		t.Fatalf("after Reset: %q, %v", args, err)
	}
	if _, err := rd.ReadCommand(); err != ErrInvalidBulkLength {
		t.Fatalf("Reset lost the limits: %v", err)
	}
}

// loop repeats b forever.
type loop struct {
	b   []byte
	off int
}

func (l *loop) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], l.b[l.off:])
		n += c
		l.off = (l.off + c) % len(l.b)
	}
	return n, nil
}

func TestReaderAllocs(t *testing.T) {
	for _, in := range []string{throttle, "CL.THROTTLE user:42 15 30 60 1\r\n", `ECHO "a\x41" 'b'` + "\n"} {
		rd := NewReader(&loop{b: []byte(in)}, Limits{})
		for range 1000 { // warm up: grow the buffer and the argument slice
			if _, err := rd.ReadCommand(); err != nil {
				t.Fatal(err)
			}
		}
		allocs := testing.AllocsPerRun(1000, func() {
			if _, err := rd.ReadCommand(); err != nil {
				t.Fatal(err)
			}
			rd.Ready()
		})
		if allocs != 0 {
			t.Errorf("%q: %v allocations per command, want 0", in, allocs)
		}
	}
}

func TestParseLen(t *testing.T) {
	for _, c := range []struct {
		in string
		n  int64
		ok bool
	}{
		{"0", 0, true},
		{"1", 1, true},
		{"-1", -1, true},
		{"10", 10, true},
		{"9223372036854775807", 1<<63 - 1, true},
		{"-9223372036854775808", -1 << 63, true},
		{"9223372036854775808", 0, false},
		{"-9223372036854775809", 0, false},
		{"18446744073709551615", 0, false},
		{"18446744073709551616", 0, false},
		{"99999999999999999999", 0, false},
		{"100000000000000000000", 0, false},
		{"", 0, false},
		{"-", 0, false},
		{"-0", 0, false},
		{"00", 0, false},
		{"01", 0, false},
		{"+1", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"1a", 0, false},
		{"0x1", 0, false},
	} {
		n, ok := parseLen([]byte(c.in))
		if n != c.n || ok != c.ok {
			t.Errorf("parseLen(%q) = %d, %v; want %d, %v", c.in, n, ok, c.n, c.ok)
		}
	}
}
