package grpctest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/membership"
)

const settle = 15 * time.Second // a change reaching a Watcher or a gRPC client

// waitFor polls cond until it holds, and fails the test if it does not
// within d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// names returns the backends' names, space-separated.
func names(bs []membership.Endpoint) string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = b.Name
	}
	return strings.Join(s, " ")
}
