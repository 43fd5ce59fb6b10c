package httpmaglev_test

import (
	"bytes"
	"errors"
	"sync"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// lockedBuffer is a bytes.Buffer for a logger shared by goroutines.
type lockedBuffer struct {
	mu  sync.Mutex // protects buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
