// Package testlog is test support: a log sink that a test reads while the
// code under test writes to it from its own goroutines. Only _test.go
// files import it (internal/lint allows it to no package's non-test
// code).
package testlog

import (
	"bytes"
	"log/slog"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent Write and String: give it
// to a logger as its io.Writer and read what was logged with String. The
// zero Buffer is empty and ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// New returns a text logger that writes records at level and above into a
// new Buffer, and the Buffer.
func New(level slog.Level) (*slog.Logger, *Buffer) {
	b := &Buffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: level})), b
}
