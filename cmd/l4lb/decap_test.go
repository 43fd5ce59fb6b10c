package main

import (
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestDecapCommand builds l4lb and runs l4lb decap on a veth in a
// namespace of its own (v0, 198.18.0.3/24; the VIP 198.18.255.1 on lo,
// 198.18.255.2 on no interface): it attaches an XDP program to v0, warns
// about the VIP it cannot deliver to, strips the outer header of an IPIP
// and a GUE packet sent into the veth's peer as raw frames from the
// trusted source (passes one to another address, and drops one from an
// untrusted source), serves its counters at /debug/maglev, and on SIGTERM
// prints them, detaches and exits 0.
func TestDecapCommand(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	ns := xdptest.VethNS(t, "l4lbd")
	xdptest.IP(t, "-n", ns, "addr", "add", "198.18.255.1/32", "dev", "lo")
	xdptest.IP(t, "-n", ns, "addr", "add", "198.18.254.0/28", "dev", "lo") // 198.18.254.5 local too

	p := start(t, ns, bin, "decap", "-iface", "v0", "-vip", "198.18.255.1,198.18.255.2,198.18.254.5", "-decap-sources", "198.18.0.2/32,2001:db8::/64", "-admin", "127.0.0.1:9182")
	const noLocal = "decap: a VIP is no local address: the kernel drops the decapsulated packets unless a rule delivers them (kube-proxy's, for a Service's load-balancer IP)"
	if l := p.next(); l.Level != "WARN" || !l.Is(noLocal, "vip", "198.18.255.2", "fix", "ip addr add 198.18.255.2/32 dev lo") {
		t.Fatalf("first record %+v, want the warning about 198.18.255.2", l)
	}
	started := []string{"gue_port", "6080", "vips", "[198.18.255.1 198.18.255.2 198.18.254.5]", "iface", "v0", "mode", "native",
		"sources", "198.18.0.2/32,2001:db8::/64"}
	p.await("decapsulating IPIP and GUE", started...) // after rp_filter's warning, if any
	if l := p.next(); !l.Is("admin listening", "url", "http://127.0.0.1:9182/debug/maglev") {
		t.Fatalf("second record %+v", l)
	}
	if out := xdptest.IP(t, "-n", ns, "link", "show", "v0"); !strings.Contains(out, "xdp") {
		t.Fatalf("no XDP program on v0: %s", out)
	}

	v0 := xdptest.Interface(t, ns, "v0")
	a := func(last byte) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, last}) }
	vip := func(last byte) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 255, last}) }
	client, host, stranger := a(2), a(3), a(9)
	inner := func(to netip.Addr) []byte {
		return xdptest.Packet(xdptest.ProtoUDP, client, to, xdptest.UDP(40000, 53, []byte("query")))
	}
	eth := func(p []byte) []byte {
		return xdptest.Ethernet(v0.HardwareAddr, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}, p)
	}
	frames := [][]byte{
		eth(xdptest.Packet(xdptest.ProtoIPIP, client, host, inner(vip(1)))),                            // IPIP: decapsulated
		eth(xdptest.Packet(xdptest.ProtoUDP, client, host, xdptest.UDP(40000, 6080, inner(vip(2))))),   // GUE: decapsulated
		eth(xdptest.Packet(xdptest.ProtoIPIP, client, host, inner(vip(9)))),                            // not a VIP: passed
		eth(xdptest.Packet(xdptest.ProtoUDP, stranger, host, xdptest.UDP(40000, 6080, inner(vip(1))))), // untrusted: dropped
	}
	xdptest.Send(t, ns, "v1", frames...)

	// The frames are counted once the program has run on them: a few
	// requests, 100 ms apart, for at most 5 s.
	var st decapStatus
	var body []byte
	for range 50 {
		var err error
		if body, err = requestAt(ns, "127.0.0.1:9182", "GET", "/debug/maglev"); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		if st.Stats.Decapsulated >= 2 && st.Stats.Passed >= 1 && st.Stats.Untrusted >= 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st.Decap != "v0" || st.Attach != "native" || st.GUEPort != 6080 || len(st.VIPs) != 3 || st.VIPs[1] != "198.18.255.2" ||
		len(st.Sources) != 2 || st.Sources[0] != "198.18.0.2/32" ||
		st.Stats.Decapsulated != 2 || st.Stats.Passed < 1 || st.Stats.Malformed != 0 || st.Stats.Untrusted != 1 {
		t.Errorf("/debug/maglev: %s", body)
	}

	rest := p.stop()
	if len(rest) != 2 || !rest[0].Is("decapsulator counters", "decapsulated", "2", "malformed", "0", "untrusted", "1") || rest[0].Attrs["passed"] == "0" ||
		!rest[1].Is("detached", "iface", "v0") {
		t.Errorf("last records %+v", rest)
	}
	if out := xdptest.IP(t, "-n", ns, "link", "show", "v0"); strings.Contains(out, "xdp") {
		t.Errorf("XDP program still on v0 after SIGTERM: %s", out)
	}
	if logged := p.logged(); !has(logged, noLocal, "vip", "198.18.255.2") || has(logged, noLocal, "vip", "198.18.255.1") || has(logged, noLocal, "vip", "198.18.254.5") {
		t.Errorf("records %+v: want a warning about 198.18.255.2, none about the VIPs on lo", logged)
	}
}
