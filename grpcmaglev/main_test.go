package grpcmaglev_test

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/grpclog"
)

// TestMain sends grpc's info logs to rebuildLog, so that tests can check
// the policy's rebuild lines, and its errors to stderr, as grpc's default
// logger does.
func TestMain(m *testing.M) {
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(rebuildLog, io.Discard, os.Stderr))
	os.Exit(m.Run())
}

// rebuildLog keeps the policy's "table rebuilt" log lines.
var rebuildLog = &logLines{}

type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	for _, line := range strings.Split(string(bytes.TrimRight(p, "\n")), "\n") {
		if strings.Contains(line, "table rebuilt") {
			l.mu.Lock()
			l.lines = append(l.lines, line)
			l.mu.Unlock()
		}
	}
	return len(p), nil
}

// contains reports whether a kept line contains s.
func (l *logLines) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}
