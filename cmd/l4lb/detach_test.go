package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"testing"
)

// TestDetachNothing: l4lb detach where nothing is pinned says so.
func TestDetachNothing(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"detach", "-iface", "eth0", "-pin-dir", dir}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := "l4lb: nothing pinned in " + filepath.Join(dir, "eth0") + "\n"; out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
}
