package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/xdpmaglev"
)

func TestParsePin(t *testing.T) {
	base := "-iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.11 "
	c, err := parse(strings.Fields(base), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.pin.dir != defaultPinDir || c.pin.explicit || c.pin.rebuild || c.pin.detach {
		t.Fatalf("defaults: %+v", c.pin)
	}
	// The default outside a BPF filesystem: a warning, and no pins.
	var stderr bytes.Buffer
	got := c.pin.path("eth0", newLogger("text", &stderr))
	if inBPFFS(defaultPinDir) {
		if got != filepath.Join(defaultPinDir, "eth0") || stderr.Len() != 0 {
			t.Errorf("the default in a BPF filesystem: %q, warning %q", got, stderr.String())
		}
	} else if got != "" || !strings.Contains(stderr.String(), "is not in a BPF filesystem") {
		t.Errorf("the default outside a BPF filesystem: %q, warning %q", got, stderr.String())
	}
	// One given is used as given (Load refuses it outside a BPF filesystem).
	c, err = parse(append(strings.Fields(base), "-pin-dir", "/run/l4lb/", "-rebuild"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if got := c.pin.path("eth1", newLogger("text", &stderr)); got != "/run/l4lb/eth1" || !c.pin.rebuild || stderr.Len() != 0 {
		t.Errorf("-pin-dir /run/l4lb/ -rebuild: %q, %+v, %q", got, c.pin, stderr.String())
	}
	c, err = parse(append(strings.Fields(base), "-pin-dir", ""), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.pin.path("eth0", newLogger("text", &stderr)); got != "" {
		t.Errorf("-pin-dir \"\": %q", got)
	}
	c, err = parse(strings.Fields("-detach -iface eth0 -pin-dir /run/l4lb"), io.Discard)
	if err != nil || !c.pin.detach || c.iface != "eth0" || c.pin.dir != "/run/l4lb" {
		t.Fatalf("-detach: %+v, %v", c, err)
	}
	for _, bad := range []struct{ args, want string }{
		{"-detach", "-detach needs -iface"},
		{"-detach -iface eth0 -vip 198.19.0.1:80", "-detach takes -iface and -pin-dir only, not -vip"},
		{"-detach -iface eth0 -rebuild -seed 3", "not -rebuild, -seed"},
		{"-detach -iface eth0 -pin-dir=", "-detach needs the -pin-dir l4lb ran with"},
		{base + "-rebuild -pin-dir=", "-rebuild needs a -pin-dir"},
		{"-decap -iface eth0 -vip 198.19.0.1 -pin-dir /run/l4lb", "-pin-dir"},
	} {
		if _, err := parse(strings.Fields(bad.args), io.Discard); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error saying %q", bad.args, err, bad.want)
		}
	}
}

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

// TestConfigPin: pin-dir is a key of the file's top, a setting a reload
// cannot change, and -rebuild goes beside -config.
func TestConfigPin(t *testing.T) {
	file := filepath.Join(t.TempDir(), "l4lb.yaml")
	write := func(pinDir string) {
		t.Helper()
		b := "iface: eth0\npin-dir: " + pinDir + "\nservices:\n  - name: web\n    vip: 198.19.0.1:80\n    backends: [198.18.0.11]\n"
		if err := os.WriteFile(file, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("/run/l4lb")
	g, svcs, err := loadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if g.pin.dir != "/run/l4lb" || !g.pin.explicit || len(svcs) != 1 {
		t.Fatalf("pin-dir from the file: %+v", g.pin)
	}
	write("/run/other")
	g2, _, err := loadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameGlobal(g, g2); err == nil || !strings.Contains(err.Error(), "pin-dir") {
		t.Fatalf("a reload with another pin-dir: %v, want it refused", err)
	}
	c, err := parse([]string{"-config", file, "-rebuild"}, io.Discard)
	if err != nil || !c.pin.rebuild {
		t.Fatalf("-config FILE -rebuild: %v, rebuild %v", err, c.pin.rebuild)
	}
	if _, err := parse([]string{"-config", file, "-rebuild", "-seed", "3"}, io.Discard); err == nil {
		t.Fatal("-config FILE -rebuild -seed 3: no error")
	}
}
