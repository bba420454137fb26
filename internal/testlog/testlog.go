// Package testlog gives tests a log they can read while the code under
// test writes to it from its own goroutines.
package testlog

import (
	"bytes"
	"log/slog"
	"sync"
)

// Buffer keeps all that is written to it. It is safe for concurrent use,
// so that a test may read it while other goroutines write; the zero value
// is an empty Buffer ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns all that has been written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// New returns a logger that writes the records at level and above, in
// slog's text format, to a new Buffer, and that Buffer.
func New(level slog.Leveler) (*slog.Logger, *Buffer) {
	b := &Buffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: level})), b
}
