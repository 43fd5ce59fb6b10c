package main

import (
	"reflect"
	"testing"

	"github.com/maglevlb/maglev/internal/doccheck"
)

// TestDebugSample checks that every /debug/maglev sample in
// docs/lbproxy.md decodes into debugState with unknown fields disallowed,
// and that every field of debugState (its backends' included) appears in
// it, so that the page shows the whole document.
func TestDebugSample(t *testing.T) {
	blocks := doccheck.JSONBlocks(t, "../../docs/lbproxy.md")
	if len(blocks) != 2 {
		t.Fatalf("docs/lbproxy.md has %d JSON samples, want 2", len(blocks))
	}
	for _, sample := range blocks {
		doccheck.CheckSample(t, reflect.TypeFor[debugState](), sample)
	}
}
