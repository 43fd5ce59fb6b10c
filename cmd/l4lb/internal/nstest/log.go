// Package nstest holds LogBuffer, the log of a test's records that the
// test waits on. It is for tests only; the namespaces and frames l4lb's
// tests need are xdpmaglev/xdptest's.
package nstest

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// LogBuffer collects log records for a test, safe for the goroutines
// that log: a slog handler's writer.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Await waits up to 10 s for the log to have s, and returns the log; the
// test fails if it does not.
func (l *LogBuffer) Await(t testing.TB, s string) string {
	t.Helper()
	for range 200 {
		if out := l.String(); strings.Contains(out, s) {
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the log has no %q in 10 s:\n%s", s, l.String())
	return ""
}
