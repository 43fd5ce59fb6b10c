package main

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestStopTime runs the built l4lb with a static backend given without a
// MAC that answers no ARP (every update of its service waits for the
// neighbour table, 250 ms in all), with and without a health check, and
// times SIGTERM to exit, sent while the first update waits, once l4lb
// runs, and 200 ms into the wait of a reload that adds such a backend.
// The median of three stops must be under a second: a stop takes tens of
// milliseconds, and the wait at most 250 ms (before, it was 2 s a backend,
// and SIGTERM took 2.0 s at start and 1.8 s in the reload); the bound
// leaves room for a loaded two-core machine.
func TestStopTime(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	ns := xdptest.VethNS(t, "l4lbs")
	base := []string{"run", "-iface", "v0", "-vip", "198.19.0.1:80", "-backend", "198.18.0.11", "-m", "251", "-admin", "127.0.0.1:9188", "-pin-dir", ""}
	health := []string{"-health", "tcp", "-health-interval", "1s", "-health-timeout", "500ms"}
	for _, c := range []struct {
		name string
		args []string
		at   string // SIGTERM once l4lb logs this
	}{
		{"static/starting", base, "service started"},
		{"static/running", base, "admin listening"},
		{"health/starting", append(slices.Clone(base), health...), "health check"},
		{"health/running", append(slices.Clone(base), health...), "admin listening"},
	} {
		var took []time.Duration
		for range 3 {
			p := start(t, ns, bin, c.args...)
			p.await(c.at)
			t0 := time.Now()
			rest := p.stop()
			took = append(took, time.Since(t0))
			if len(rest) == 0 || !rest[len(rest)-1].Is("detached", "iface", "v0") {
				t.Errorf("%s: last records %+v", c.name, rest)
			}
		}
		slices.Sort(took)
		if took[1] >= time.Second {
			t.Errorf("%s: SIGTERM to exit took %v (median %v), want under 1s", c.name, took, took[1])
		}
	}

	// SIGTERM 200 ms after a SIGHUP whose file adds such a backend: the
	// update of the reload waits for it.
	path := filepath.Join(t.TempDir(), "l4lb.yaml")
	write := func(backends string) {
		t.Helper()
		file := "iface: v0\nm: 251\nadmin: 127.0.0.1:9188\npin-dir: \"\"\nservices:\n  - name: web\n    vip: 198.19.0.1:80\n    backends: [" + backends + "]\n"
		if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var took []time.Duration
	for range 3 {
		write("198.18.0.11=02:00:00:00:00:11")
		p := start(t, ns, bin, "run", "-config", path)
		p.await("admin listening")
		write("198.18.0.11=02:00:00:00:00:11, 198.18.0.12")
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		t0 := time.Now()
		rest := p.stop()
		took = append(took, time.Since(t0))
		if has(rest, "service change not applied, the pool tries again") {
			t.Errorf("reloading: the update failed: %+v", rest)
		}
	}
	slices.Sort(took)
	if took[1] >= time.Second {
		t.Errorf("reloading: SIGTERM to exit took %v (median %v), want under 1s", took, took[1])
	}
}
