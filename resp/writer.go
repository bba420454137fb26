package resp

import (
	"io"
	"math"
	"strconv"
)

const (
	// writerBufSize is the initial capacity of a Writer's buffer.
	writerBufSize = 4 << 10
	// flushThreshold is the buffered size past which a Writer flushes by
	// itself, so that a long reply does not sit whole in memory.
	flushThreshold = 64 << 10
	// keepWriterBuf is the largest buffer a Writer keeps after a flush.
	keepWriterBuf = 1 << 20
)

// Writer encodes replies into an internal buffer, which Flush writes to the
// underlying io.Writer in one call. The buffer is also flushed by itself
// whenever it exceeds 64 KiB, so a write method may block on the
// underlying writer.
//
// The write methods do not return errors: the first error of the underlying
// writer is kept, later replies are discarded, and Flush returns it.
//
// A Writer encodes RESP2 until SetProtocol(3). The RESP3-only types then
// have their own encoding; in RESP2 they fall back to what Redis sends to a
// RESP2 client. Arrays, maps and sets are written as a header followed by
// their elements, written by further calls.
//
// Create one with NewWriter; the zero Writer is not usable. A Writer is not
// safe for concurrent use.
type Writer struct {
	dst   io.Writer
	buf   []byte
	proto int
	err   error
}

// NewWriter returns a Writer of RESP2 replies to dst.
func NewWriter(dst io.Writer) *Writer {
	return &Writer{dst: dst, buf: make([]byte, 0, writerBufSize), proto: 2}
}

// Reset discards the buffered replies and any error, sets the protocol back
// to RESP2, and makes the Writer write to dst. It lets a Writer be reused
// for another connection.
func (w *Writer) Reset(dst io.Writer) {
	buf := w.buf[:0]
	if cap(buf) > keepWriterBuf {
		buf = make([]byte, 0, writerBufSize)
	}
	*w = Writer{dst: dst, buf: buf, proto: 2}
}

// SetProtocol sets the protocol version of the following replies: 2 or 3,
// as negotiated by HELLO. Any other version is ErrUnsupportedProtocol and
// leaves the version as it was.
func (w *Writer) SetProtocol(version int) error {
	if version != 2 && version != 3 {
		return ErrUnsupportedProtocol
	}
	w.proto = version
	return nil
}

// Protocol returns the protocol version of the replies: 2 or 3.
func (w *Writer) Protocol() int { return w.proto }

// Buffered returns the number of bytes buffered and not yet flushed.
func (w *Writer) Buffered() int { return len(w.buf) }

// Flush writes the buffered replies to the underlying writer. It returns the
// first error of the underlying writer, now or in an earlier flush.
func (w *Writer) Flush() error {
	if w.err != nil {
		w.buf = w.buf[:0]
		return w.err
	}
	if len(w.buf) == 0 {
		return nil
	}
	n, err := w.dst.Write(w.buf)
	if err == nil && n < len(w.buf) {
		err = io.ErrShortWrite
	}
	w.buf = w.buf[:0]
	if cap(w.buf) > keepWriterBuf {
		w.buf = make([]byte, 0, writerBufSize)
	}
	w.err = err
	return err
}

// autoFlush flushes the buffer if it has grown past flushThreshold.
func (w *Writer) autoFlush() {
	if len(w.buf) >= flushThreshold {
		w.Flush()
	}
}

// appendLine appends a line made of prefix and s, with any CR or LF of s
// replaced by a space so that the line cannot be split or end early.
func (w *Writer) appendLine(prefix byte, s string) {
	w.buf = append(w.buf, prefix)
	start := len(w.buf)
	w.buf = append(w.buf, s...)
	for i := start; i < len(w.buf); i++ {
		if c := w.buf[i]; c == '\r' || c == '\n' {
			w.buf[i] = ' '
		}
	}
	w.buf = append(w.buf, '\r', '\n')
}

// appendHeader appends a line made of prefix and n.
// twoDigits holds "00" to "99", two bytes each.
const twoDigits = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" +
	"30313233343536373839" + "40414243444546474849" + "50515253545556575859" +
	"60616263646566676869" + "70717273747576777879" + "80818283848586878889" + "90919293949596979899"

// appendHeader appends the line of prefix and n, such as ":42\r\n": the
// path of every integer of every reply.
func (w *Writer) appendHeader(prefix byte, n int64) {
	if uint64(n) < 10 {
		// The commonest: 0, 1, an array of 5.
		w.buf = append(w.buf, prefix, byte('0'+n), '\r', '\n')
		return
	}
	// The line is built backwards in one buffer, two digits at a time, and
	// appended once.
	var b [24]byte // prefix, sign, 19 digits, CRLF
	i := len(b) - 2
	b[i], b[i+1] = '\r', '\n'
	u := uint64(n)
	if n < 0 {
		u = -u // also for math.MinInt64, in unsigned arithmetic
	}
	for u >= 100 {
		q := u / 100
		r := 2 * (u - 100*q)
		i -= 2
		b[i], b[i+1] = twoDigits[r], twoDigits[r+1]
		u = q
	}
	if u >= 10 {
		i -= 2
		b[i], b[i+1] = twoDigits[2*u], twoDigits[2*u+1]
	} else {
		i--
		b[i] = byte('0' + u)
	}
	if n < 0 {
		i--
		b[i] = '-'
	}
	i--
	b[i] = prefix
	w.buf = append(w.buf, b[i:]...)
}

// WriteSimpleString writes a simple string reply ("+OK"). A CR or LF in s is
// written as a space.
func (w *Writer) WriteSimpleString(s string) {
	w.appendLine('+', s)
	w.autoFlush()
}

// WriteError writes an error reply. msg is the whole text after '-', which
// by convention starts with an error code: "ERR unknown command",
// "WRONGTYPE Operation against a key holding the wrong kind of value". A CR
// or LF in msg is written as a space, as Redis does.
func (w *Writer) WriteError(msg string) {
	w.appendLine('-', msg)
	w.autoFlush()
}

// WriteInt writes an integer reply.
func (w *Writer) WriteInt(n int64) {
	w.appendHeader(':', n)
	w.autoFlush()
}

// WriteInts writes an array reply of the integers vs, as WriteArray and
// WriteInt would, in one call.
func (w *Writer) WriteInts(vs ...int64) {
	w.appendHeader('*', int64(len(vs)))
	for _, v := range vs {
		w.appendHeader(':', v)
	}
	w.autoFlush()
}

// WriteBulk writes a bulk string reply holding b, which may be any bytes. A
// nil b is an empty bulk string, not a null: see WriteNull.
func (w *Writer) WriteBulk(b []byte) {
	w.appendHeader('$', int64(len(b)))
	w.buf = append(w.buf, b...)
	w.buf = append(w.buf, '\r', '\n')
	w.autoFlush()
}

// WriteBulkString writes a bulk string reply holding s, which may be any
// bytes.
func (w *Writer) WriteBulkString(s string) {
	w.appendHeader('$', int64(len(s)))
	w.buf = append(w.buf, s...)
	w.buf = append(w.buf, '\r', '\n')
	w.autoFlush()
}

// WriteNull writes a null: "_" in RESP3, and the null bulk string "$-1" in
// RESP2.
func (w *Writer) WriteNull() {
	if w.proto == 3 {
		w.buf = append(w.buf, "_\r\n"...)
	} else {
		w.buf = append(w.buf, "$-1\r\n"...)
	}
	w.autoFlush()
}

// WriteNullArray writes a null array: "_" in RESP3, and "*-1" in RESP2.
func (w *Writer) WriteNullArray() {
	if w.proto == 3 {
		w.buf = append(w.buf, "_\r\n"...)
	} else {
		w.buf = append(w.buf, "*-1\r\n"...)
	}
	w.autoFlush()
}

// WriteArray writes the header of an array of n elements, which the caller
// then writes. A negative n writes a null array.
func (w *Writer) WriteArray(n int) {
	if n < 0 {
		w.WriteNullArray()
		return
	}
	w.appendHeader('*', int64(n))
	w.autoFlush()
}

// WriteMap writes the header of a map of n key-value pairs, which the caller
// then writes, key first: "%n" in RESP3, and an array of 2n elements in
// RESP2. A negative n writes a null.
func (w *Writer) WriteMap(n int) {
	switch {
	case n < 0:
		w.WriteNull()
		return
	case w.proto == 3:
		w.appendHeader('%', int64(n))
	default:
		w.appendHeader('*', 2*int64(n))
	}
	w.autoFlush()
}

// WriteSet writes the header of a set of n elements, which the caller then
// writes: "~n" in RESP3, and an array in RESP2. A negative n writes a null.
func (w *Writer) WriteSet(n int) {
	switch {
	case n < 0:
		w.WriteNull()
		return
	case w.proto == 3:
		w.appendHeader('~', int64(n))
	default:
		w.appendHeader('*', int64(n))
	}
	w.autoFlush()
}

// WriteDouble writes a floating-point number: ",f" in RESP3, and a bulk
// string in RESP2. The number is written in the shortest form that reads
// back as f ("1.5", "1e+21"), and infinities and NaN as "inf", "-inf" and
// "nan", as Redis does.
func (w *Writer) WriteDouble(f float64) {
	var tmp [32]byte
	text := appendDouble(tmp[:0], f)
	if w.proto == 3 {
		w.buf = append(w.buf, ',')
	} else {
		w.appendHeader('$', int64(len(text)))
	}
	w.buf = append(w.buf, text...)
	w.buf = append(w.buf, '\r', '\n')
	w.autoFlush()
}

// appendDouble appends the text of f as Redis writes it.
func appendDouble(b []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(b, "inf"...)
	case math.IsInf(f, -1):
		return append(b, "-inf"...)
	case math.IsNaN(f):
		return append(b, "nan"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// WriteBool writes a boolean: "#t" or "#f" in RESP3, and the integer 1 or 0
// in RESP2.
func (w *Writer) WriteBool(v bool) {
	switch {
	case w.proto == 3 && v:
		w.buf = append(w.buf, "#t\r\n"...)
	case w.proto == 3:
		w.buf = append(w.buf, "#f\r\n"...)
	case v:
		w.buf = append(w.buf, ":1\r\n"...)
	default:
		w.buf = append(w.buf, ":0\r\n"...)
	}
	w.autoFlush()
}

// WriteVerbatim writes a verbatim string: text in the format named by
// format, "txt" for plain text or "mkd" for Markdown. In RESP3 it is
// "=len\r\nfmt:text", where a format that is not three bytes long is written
// as "txt"; in RESP2 it is a bulk string of text alone.
func (w *Writer) WriteVerbatim(format, text string) {
	if w.proto != 3 {
		w.WriteBulkString(text)
		return
	}
	if len(format) != 3 {
		format = "txt"
	}
	w.appendHeader('=', int64(len(text)+4))
	w.buf = append(w.buf, format...)
	w.buf = append(w.buf, ':')
	w.buf = append(w.buf, text...)
	w.buf = append(w.buf, '\r', '\n')
	w.autoFlush()
}
