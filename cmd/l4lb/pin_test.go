package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/xdpmaglev"
)

// TestDetachNothing: l4lb -detach where nothing is pinned says so.
func TestDetachNothing(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-detach", "-iface", "eth0", "-pin-dir", dir}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := "l4lb: nothing pinned in " + filepath.Join(dir, "eth0") + "\n"; out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
}

func TestLoadError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{xdpmaglev.ErrLayout, "l4lb -rebuild replaces them"},
		{xdpmaglev.ErrPinned, "l4lb -rebuild replaces them"},
		{xdpmaglev.ErrInUse, "is another l4lb running on eth0?"},
	} {
		err := loadError(c.err, "eth0")
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want it wrapped, saying %q", c.err, err, c.want)
		}
	}
	if err := loadError(xdpmaglev.ErrAttach, "eth0"); err != xdpmaglev.ErrAttach {
		t.Errorf("ErrAttach: %v, want it as it is", err)
	}
}
