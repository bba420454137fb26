package resp

import (
	"bytes"
	"errors"
	"io"
)

// Default limits, used for the fields of Limits that are zero.
const (
	// DefaultMaxBulkLen is the default largest argument of a multibulk
	// command: 512 KiB. (Redis's proto-max-bulk-len defaults to 512 MiB; a
	// rate limiter has no use for arguments that large.)
	DefaultMaxBulkLen = 512 << 10
	// DefaultMaxArrayLen is the default largest argument count of a
	// multibulk command: 1024*1024, the limit of older Redis versions (newer
	// ones accept up to 2^31-1). Memory is bounded by MaxQueryBuffer, not by
	// this count: room for arguments is only allocated as their bytes arrive.
	DefaultMaxArrayLen = 1024 * 1024
	// DefaultMaxInlineLen is the default longest inline command line, and
	// the longest count line of a multibulk command: 64 KiB, as in Redis
	// (PROTO_INLINE_MAX_SIZE).
	DefaultMaxInlineLen = 64 << 10
	// DefaultMaxQueryBuffer is the default largest encoded size of one
	// command: 1 MiB. Redis's client-query-buffer-limit defaults to 1 GiB.
	DefaultMaxQueryBuffer = 1 << 20
)

// Limits bounds what a Reader accepts from a client. A field that is zero or
// negative takes its default (see DefaultMaxBulkLen and the others), so the
// zero Limits is the default limits.
type Limits struct {
	// MaxBulkLen is the largest argument, in bytes, of a multibulk command.
	// A longer bulk length is ErrInvalidBulkLength.
	MaxBulkLen int
	// MaxArrayLen is the largest argument count of a multibulk command. A
	// larger count is ErrInvalidMultibulkLength.
	MaxArrayLen int
	// MaxInlineLen is the longest line that a Reader accepts, in bytes: the
	// bytes before the "\n" of an inline command (so a "\r" before it
	// counts), or before the "\r" of a multibulk count line ("*3", "$11").
	// A longer line is ErrTooBigInlineRequest, ErrTooBigMbulkCount or
	// ErrTooBigBulkCount. It also bounds the argument count of an inline
	// command, which MaxArrayLen does not.
	MaxInlineLen int
	// MaxQueryBuffer is the largest encoded size, in bytes, of one command;
	// the Reader's buffer never grows past it. A larger command is
	// ErrQueryBufferFull. It is raised to MaxInlineLen+2 if it is lower, so
	// that an over-long line is reported as such.
	MaxQueryBuffer int
}

// withDefaults returns l with its zero or negative fields set to their
// defaults, and MaxQueryBuffer raised to hold a line of MaxInlineLen.
func (l Limits) withDefaults() Limits {
	if l.MaxBulkLen <= 0 {
		l.MaxBulkLen = DefaultMaxBulkLen
	}
	if l.MaxArrayLen <= 0 {
		l.MaxArrayLen = DefaultMaxArrayLen
	}
	if l.MaxInlineLen <= 0 {
		l.MaxInlineLen = DefaultMaxInlineLen
	}
	if l.MaxQueryBuffer <= 0 {
		l.MaxQueryBuffer = DefaultMaxQueryBuffer
	}
	if l.MaxQueryBuffer < l.MaxInlineLen+2 {
		l.MaxQueryBuffer = l.MaxInlineLen + 2
	}
	return l
}

const (
	// initialBufSize is the size of a Reader's buffer when it is first
	// allocated, and after a large command has been consumed.
	initialBufSize = 4 << 10
	// keepBufSize is the largest buffer a Reader keeps once it is empty.
	keepBufSize = 64 << 10
	// keepArgs is the largest argument slice a Reader keeps between commands.
	keepArgs = 1024
	// maxEmptyReads is how many times in a row a Reader accepts a read of
	// zero bytes and no error before it gives up with io.ErrNoProgress.
	maxEmptyReads = 100
)

// Kinds of the command being parsed.
const (
	kindNone      = 0
	kindInline    = 1
	kindMultibulk = 2
)

// Reader reads commands from a client. It parses multibulk and inline
// commands as redis-server does, from a buffer that it refills from the
// underlying io.Reader only when the buffered bytes do not hold a complete
// command.
//
// Like redis-server, a Reader skips the byte after each "\r" of a count line
// and the two bytes after a bulk without checking that they are "\n" and
// "\r\n". Unlike redis-server, it decides that a line is too long from the
// line alone, and not from how many bytes happen to be buffered, so that the
// outcome never depends on how the input was split into reads; and it reads
// count lines as binary, where a NUL byte is an invalid digit (redis-server
// stops at it, as at the end of a C string). In inline commands, it does
// stop at a NUL byte, as redis-server does.
//
// Create one with NewReader; the zero Reader is not usable. A Reader is not
// safe for concurrent use.
type Reader struct {
	rd  io.Reader
	lim Limits

	// buf[r:w] holds the bytes read and not yet consumed. len(buf) is the
	// buffer's size (buf is never resliced shorter).
	buf  []byte
	r, w int

	// The state of the command being parsed, which starts at buf[r]. The
	// parser resumes where it stopped when more bytes arrive, so a command
	// split across many reads is parsed in time linear in its size.
	kind int
	pos  int // next byte to parse
	scan int // where the search for the end of the current line resumes
	left int // multibulk elements still to parse; -1 before the count line
	bulk int // length of the current bulk; -1 before its length line

	// args holds the arguments parsed so far. Multibulk arguments are slices
	// of buf with buf's capacity, so that their offset can be recovered
	// (cap(buf)-cap(arg)) when buf is compacted or replaced mid-command.
	args [][]byte

	ready     bool // args holds a complete command that ReadCommand returns next
	readyFrom int  // where that command started in buf, for Buffered

	err     error // sticky: a protocol error or ErrQueryBufferFull
	readErr error // returned by the underlying reader along with data
}

// NewReader returns a Reader that reads commands from rd within limits.
func NewReader(rd io.Reader, limits Limits) *Reader {
	return &Reader{rd: rd, lim: limits.withDefaults()}
}

// Reset discards the Reader's state and buffered bytes, and makes it read
// from rd, keeping its limits and buffer. It lets a Reader be reused for
// another connection.
func (r *Reader) Reset(rd io.Reader) {
	buf, args := r.buf, r.args[:0]
	if len(buf) > keepBufSize {
		buf = nil
	}
	if cap(args) > keepArgs {
		args = nil
	}
	*r = Reader{rd: rd, lim: r.lim, buf: buf, args: args}
}

// Buffered returns the number of bytes read from the underlying reader and
// not yet returned as part of a command.
func (r *Reader) Buffered() int {
	if r.ready {
		return r.w - r.readyFrom
	}
	return r.w - r.r
}

// Ready reports whether a complete command is buffered, so that the next
// ReadCommand returns it without reading from the underlying reader. A
// server runs commands while Ready is true and flushes its replies when it
// becomes false. Ready parses the buffered bytes, so it invalidates the
// arguments returned by the previous ReadCommand. It returns false if the
// next ReadCommand returns an error.
func (r *Reader) Ready() bool {
	if r.ready {
		return true
	}
	if r.err != nil {
		return false
	}
	if r.parse() {
		r.ready = true
		return true
	}
	return false
}

// ReadCommand returns the next command: its arguments, of which there is at
// least one, the command name first. Blank inline lines and multibulk
// commands of zero or negative count are skipped, as Redis does. It reads
// from the underlying reader only if the buffered bytes do not hold a
// complete command.
//
// The arguments and the slice that holds them alias the Reader's buffer:
// they are valid only until the next call to ReadCommand, Ready or Reset.
// Copy an argument to keep it. Each argument has a capacity equal to its
// length, so appending to one never overwrites another.
//
// ReadCommand returns io.EOF when the underlying reader ends between
// commands, and io.ErrUnexpectedEOF when it ends within one. A malformed
// command is a *ProtocolError, and a command larger than
// Limits.MaxQueryBuffer is ErrQueryBufferFull; both are returned again by
// every later call. Other errors of the underlying reader are returned as
// they are, and a later call tries to read again.
func (r *Reader) ReadCommand() ([][]byte, error) {
	if r.ready {
		r.ready = false
		return r.args, nil
	}
	if r.err != nil {
		return nil, r.err
	}
	for {
		if r.parse() {
			return r.args, nil
		}
		if r.err != nil {
			return nil, r.err
		}
		if err := r.fill(); err != nil {
			if err == io.EOF && (r.kind != kindNone || r.r < r.w) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// parse parses the buffered bytes. It returns true when it has parsed a
// complete command, which is then in r.args with r.r past it. It returns
// false when it needs more bytes, or when it has found a protocol error,
// which is then in r.err.
func (r *Reader) parse() bool {
	for {
		if r.kind == kindNone {
			r.args = r.args[:0]
			if r.r == r.w {
				return false
			}
			r.pos, r.scan = r.r, r.r
			if r.buf[r.r] == '*' {
				r.kind, r.left, r.bulk = kindMultibulk, -1, -1
			} else {
				r.kind = kindInline
			}
		}
		var done bool
		if r.kind == kindInline {
			done = r.parseInline()
		} else {
			done = r.parseMultibulk()
		}
		if !done {
			return false
		}
		r.readyFrom, r.r = r.r, r.pos
		r.kind = kindNone
		if len(r.args) > 0 {
			for i, a := range r.args {
				r.args[i] = a[:len(a):len(a)]
			}
			return true
		}
		// An empty command: skip it, as Redis does.
	}
}

// Line searches.
const (
	lineMore    = iota // the delimiter is not buffered yet
	lineFound          // the delimiter is at the returned index
	lineTooLong        // the line is longer than MaxInlineLen
)

// findLine looks for the delimiter c of the line that starts at r.pos, and
// requires extra more bytes to be buffered after it. It resumes its search
// where the previous call stopped. The line, without its delimiter, may be
// MaxInlineLen bytes long: like Redis, which refuses a line once more than
// PROTO_INLINE_MAX_SIZE bytes are buffered without a delimiter, but decided
// from the line alone, so that the outcome does not depend on how the bytes
// were split into reads.
func (r *Reader) findLine(c byte, extra int) (int, int) {
	limit := r.pos + r.lim.MaxInlineLen + 1
	end := min(r.w, limit)
	if r.scan < r.pos {
		r.scan = r.pos
	}
	if i := bytes.IndexByte(r.buf[r.scan:end], c); i >= 0 {
		i += r.scan
		if i+extra >= r.w {
			r.scan = i
			return 0, lineMore
		}
		return i, lineFound
	}
	r.scan = end
	if end == limit {
		return 0, lineTooLong
	}
	return 0, lineMore
}

// parseInline parses an inline command, a line ended by "\n" or "\r\n", into
// r.args, in place in the buffer. It returns true when the line is complete.
func (r *Reader) parseInline() bool {
	nl, st := r.findLine('\n', 0)
	switch st {
	case lineMore:
		return false
	case lineTooLong:
		r.err = ErrTooBigInlineRequest
		return false
	}
	end := nl
	if end > r.pos && r.buf[end-1] == '\r' {
		end--
	}
	args, ok := splitArgs(r.buf[r.pos:end], r.args[:0])
	r.args = args
	if !ok {
		r.err = ErrUnbalancedQuotes
		return false
	}
	r.pos = nl + 1
	return true
}

// parseMultibulk parses a multibulk command into r.args, resuming where it
// stopped. It returns true when the command is complete. Like Redis, it does
// not check that the byte after each "\r" is "\n", nor that a bulk is
// followed by "\r\n": it skips two bytes.
func (r *Reader) parseMultibulk() bool {
	if r.left < 0 {
		nl, st := r.findLine('\r', 1)
		switch st {
		case lineMore:
			return false
		case lineTooLong:
			r.err = ErrTooBigMbulkCount
			return false
		}
		n, ok := parseLen(r.buf[r.pos+1 : nl])
		if !ok || n > int64(r.lim.MaxArrayLen) {
			r.err = ErrInvalidMultibulkLength
			return false
		}
		r.pos = nl + 2
		if n <= 0 {
			r.left = 0
			return true
		}
		r.left = int(n)
	}
	for r.left > 0 {
		if r.bulk < 0 {
			nl, st := r.findLine('\r', 1)
			switch st {
			case lineMore:
				return false
			case lineTooLong:
				r.err = ErrTooBigBulkCount
				return false
			}
			if c := r.buf[r.pos]; c != '$' {
				r.err = expectedDollar(c)
				return false
			}
			n, ok := parseLen(r.buf[r.pos+1 : nl])
			if !ok || n < 0 || n > int64(r.lim.MaxBulkLen) {
				r.err = ErrInvalidBulkLength
				return false
			}
			r.pos = nl + 2
			r.bulk = int(n)
		}
		if r.w-r.pos < r.bulk+2 {
			return false
		}
		r.args = append(r.args, r.buf[r.pos:r.pos+r.bulk])
		r.pos += r.bulk + 2
		r.bulk = -1
		r.left--
	}
	return true
}

// fill reads more bytes into the buffer, first moving the unconsumed bytes
// to its start and growing it if it is full, never past MaxQueryBuffer.
func (r *Reader) fill() error {
	if r.kind == kindNone && r.r == r.w && len(r.buf) > keepBufSize {
		// The buffer grew for a large command that is gone: let it go.
		r.buf, r.r, r.w = nil, 0, 0
		if cap(r.args) > keepArgs {
			r.args = nil
		}
	}
	if d := r.r; d > 0 {
		copy(r.buf, r.buf[d:r.w])
		r.rebase(r.buf, d)
		r.r, r.w, r.pos, r.scan = 0, r.w-d, r.pos-d, r.scan-d
	}
	need := r.w + 1
	if r.kind == kindMultibulk && r.left > 0 && r.bulk >= 0 {
		// The bulk's length is known: make room for all of it at once.
		need = r.pos + r.bulk + 2
	}
	if need > r.lim.MaxQueryBuffer {
		r.err = ErrQueryBufferFull
		return r.err
	}
	if err := r.readErr; err != nil {
		// The underlying reader failed along with its last data, which
		// did not complete a command.
		r.readErr = nil
		return err
	}
	if need > len(r.buf) {
		size := min(max(need, 2*len(r.buf), initialBufSize), r.lim.MaxQueryBuffer)
		buf := make([]byte, size)
		copy(buf, r.buf[:r.w])
		r.rebase(buf, 0)
		r.buf = buf
	}
	for range maxEmptyReads {
		n, err := r.rd.Read(r.buf[r.w:])
		if n < 0 || n > len(r.buf)-r.w {
			return errors.New("resp: invalid count from Read")
		}
		r.w += n
		if n > 0 {
			r.readErr = err
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// rebase points the arguments parsed so far, which are slices of r.buf, at
// the same bytes moved d bytes earlier in buf.
func (r *Reader) rebase(buf []byte, d int) {
	if r.kind != kindMultibulk {
		return
	}
	c := cap(r.buf)
	for i, a := range r.args {
		off := c - cap(a) - d
		r.args[i] = buf[off : off+len(a)]
	}
}

// parseLen parses a length as Redis's string2ll does: an optional '-' and
// decimal digits without leading zeros, at most 20 bytes, within int64.
func parseLen(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	if b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > 1<<63-1 {
		return 0, false
	}
	return int64(v), true
}
