package resp

import "errors"

// ProtocolError is a request that breaks the protocol. Redis replies to one
// with "-ERR " followed by Msg and closes the connection; a server should do
// the same. A Reader that returned a ProtocolError returns it again on every
// later call.
type ProtocolError struct {
	// Msg is the text that Redis sends after "-ERR " for the same input,
	// such as "Protocol error: invalid bulk length".
	Msg string
}

// Error returns Msg prefixed by the package name.
func (e *ProtocolError) Error() string { return "resp: " + e.Msg }

// The protocol errors whose text does not depend on the input. ReadCommand
// returns these values themselves, so they may be compared with ==, although
// errors.As with a *ProtocolError is the way to recognise them all.
var (
	// ErrInvalidMultibulkLength is a multibulk count that is not a number,
	// or is above Limits.MaxArrayLen.
	ErrInvalidMultibulkLength = &ProtocolError{Msg: "Protocol error: invalid multibulk length"}
	// ErrInvalidBulkLength is a bulk length that is not a number, is
	// negative, or is above Limits.MaxBulkLen.
	ErrInvalidBulkLength = &ProtocolError{Msg: "Protocol error: invalid bulk length"}
	// ErrTooBigInlineRequest is an inline command line longer than
	// Limits.MaxInlineLen.
	ErrTooBigInlineRequest = &ProtocolError{Msg: "Protocol error: too big inline request"}
	// ErrTooBigMbulkCount is a multibulk count line longer than
	// Limits.MaxInlineLen.
	ErrTooBigMbulkCount = &ProtocolError{Msg: "Protocol error: too big mbulk count string"}
	// ErrTooBigBulkCount is a bulk length line longer than
	// Limits.MaxInlineLen.
	ErrTooBigBulkCount = &ProtocolError{Msg: "Protocol error: too big bulk count string"}
	// ErrUnbalancedQuotes is an inline command with an unterminated quoted
	// argument, or a closing quote not followed by a space.
	ErrUnbalancedQuotes = &ProtocolError{Msg: "Protocol error: unbalanced quotes in request"}
)

// expectedDollar returns the error for a multibulk element that starts with
// c instead of '$'. Like Redis, it shows a CR or LF as a space so that the
// text fits on a RESP error line.
func expectedDollar(c byte) *ProtocolError {
	if c == '\r' || c == '\n' {
		c = ' '
	}
	return &ProtocolError{Msg: "Protocol error: expected '$', got '" + string([]byte{c}) + "'"}
}

// ErrQueryBufferFull is returned by ReadCommand for a command whose encoding
// does not fit in Limits.MaxQueryBuffer bytes. It is not a ProtocolError:
// Redis closes the connection of a client over its query buffer limit
// without a reply, and a server should do the same. It is sticky, like a
// ProtocolError.
var ErrQueryBufferFull = errors.New("resp: query buffer limit exceeded")

// ErrUnsupportedProtocol is returned by Writer.SetProtocol for a version
// other than 2 or 3.
var ErrUnsupportedProtocol = errors.New("resp: unsupported protocol version")
