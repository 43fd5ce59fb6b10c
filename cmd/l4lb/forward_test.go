package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

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
	const warning = "l4lb: -forward gue: net.ipv4.conf.v0.forwarding is 0: the kernel's route lookup refuses, and tcp/198.19.0.1:80's packets are dropped (forwarding_off); sysctl -w net.ipv4.conf.all.forwarding=1"
	if l := p.next(); l != warning {
		t.Fatalf("first line %q, want the warning %q", l, warning)
	}
	if l, want := p.next(), "l4lb: tcp/198.19.0.1:80 attached to v0 (native) by gue, 1 backends"; l != want {
		t.Fatalf("first line %q, want %q", l, want)
	}
	if l := p.next(); !strings.HasPrefix(l, "l4lb: 1 backends live, 0 draining, table digest ") {
		t.Fatalf("second line %q", l)
	}
	if l := p.next(); !strings.Contains(l, "/debug/maglev") {
		t.Fatalf("third line %q", l)
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

	if rest := p.stop(); len(rest) == 0 || rest[len(rest)-1] != "l4lb: detached from v0" {
		t.Errorf("last lines %q", rest)
	}
	var warns []string
	for _, l := range p.logged() {
		if !strings.HasPrefix(l, "INFO ") {
			warns = append(warns, l)
		}
	}
	if len(warns) != 1 || warns[0] != "WARN "+warning {
		t.Errorf("records above INFO %q, want the one warning %q", warns, warning)
	}
}
