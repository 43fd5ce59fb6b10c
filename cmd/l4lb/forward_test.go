package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/nstest"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestForwardCommand builds l4lb and runs it with -forward gue on a veth
// in a namespace of its own whose forwarding is off: it says so at start
// and in its first line, a SYN to the VIP is dropped as forwarding_off
// (so the service is set with the GUE options: -forward l2 would send it);
// with forwarding on and the backend's neighbour entry, the next SYN is
// encapsulated and sent. SIGTERM detaches it.
func TestForwardCommand(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	ns := xdptest.VethNS(t, "l4lbf")
	xdptest.Sysctl(t, ns, "net.ipv4.conf.all.forwarding", "0") // a new namespace's default; set, so that the test does not depend on it

	// -pin-dir "": the test reads l4lb's warnings whole, which would
	// otherwise say whether a BPF filesystem is at the default.
	p := start(t, ns, bin, "run", "-iface", "v0", "-vip", "198.19.0.1:80", "-forward", "gue",
		"-backend", "198.18.0.11", "-m", "251", "-flood-rate", "-1", "-admin", "127.0.0.1:9183", "-pin-dir", "")
	warning := []string{"forwarding is off: the kernel's route lookup refuses, and the service's packets are dropped (forwarding_off)",
		"vip", "tcp/198.19.0.1:80", "forward", "gue", "sysctl", "net.ipv4.conf.v0.forwarding", "fix", "sysctl -w net.ipv4.conf.all.forwarding=1"}
	if l := p.next(); l.Level != "WARN" || !l.Is(warning[0], warning[1:]...) {
		t.Fatalf("first record %+v, want the warning %q", l, warning)
	}
	if l := p.next(); !l.Is("service started", "vip", "tcp/198.19.0.1:80", "iface", "v0", "mode", "native", "forward", "gue", "backends", "1") {
		t.Fatalf("second record %+v", l)
	}
	if l := p.next(); !l.Is("backends applied", "live", "1", "draining", "0") || l.Attrs["digest"] == "" {
		t.Fatalf("third record %+v", l)
	}
	if l := p.next(); !l.Is("admin listening", "url", "http://127.0.0.1:9183/debug/maglev") {
		t.Fatalf("fourth record %+v", l)
	}

	v0 := xdptest.Interface(t, ns, "v0")
	syn := func(sport uint16) {
		t.Helper()
		xdptest.Send(t, ns, "v1", synFrame(v0.HardwareAddr, sport, 80))
	}
	// stats polls /debug/maglev until ok, for at most 5 s.
	stats := func(ok func(status) bool) (status, []byte) {
		t.Helper()
		var st status
		var body []byte
		for range 50 {
			var err error
			if body, err = requestAt(ns, "127.0.0.1:9183", "GET", "/debug/maglev"); err != nil {
				t.Fatal(err)
			}
			st = status{}
			if err := json.Unmarshal(body, &st); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			if ok(st) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		return st, body
	}

	syn(40000)
	st, body := stats(func(st status) bool { return st.Stats.Dropped["forwarding_off"] >= 1 })
	if len(st.Services) != 1 || st.Services[0].Forward != "gue" || st.Stats.Dropped["forwarding_off"] != 1 || st.Stats.Forwarded != 0 {
		t.Errorf("forwarding off: /debug/maglev: %s", body)
	}

	xdptest.Sysctl(t, ns, "net.ipv4.conf.all.forwarding", "1")
	xdptest.IP(t, "-n", ns, "neigh", "replace", "198.18.0.11", "lladdr", "02:00:00:00:00:11", "dev", "v0", "nud", "permanent")
	syn(40001)
	st, body = stats(func(st status) bool { return st.Stats.Forwarded >= 1 })
	// (The service's and backend's packet counts are not checked: they
	// count the dropped SYN too.)
	if st.Stats.Forwarded != 1 || st.Stats.Dropped["forwarding_off"] != 1 || st.Stats.Dropped["no_neighbor"] != 0 || len(st.Stats.Services) != 1 {
		t.Errorf("forwarding on: /debug/maglev: %s", body)
	}

	if rest := p.stop(); len(rest) == 0 || !rest[len(rest)-1].Is("detached", "iface", "v0") {
		t.Errorf("last records %+v", rest)
	}
	var warns []nstest.Record
	for _, l := range p.logged() {
		if l.Level != "INFO" {
			warns = append(warns, l)
		}
	}
	if !are(warns, warning) {
		t.Errorf("records above INFO %+v, want the one warning %q", warns, warning)
	}
}
