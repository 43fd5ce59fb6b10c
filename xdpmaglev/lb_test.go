package xdpmaglev

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
)

// wantForward checks that in leaves by XDP_TX, unchanged but for its
// destination MAC, which is want's, and its source MAC, the LB's.
func wantForward(t testing.TB, lb *LB, in []byte, want net.HardwareAddr) {
	t.Helper()
	v, out := run(t, lb, in)
	if v != xdpTX {
		t.Fatalf("verdict %d, want XDP_TX (%d)", v, xdpTX)
	}
	if len(out) != len(in) || !bytes.Equal(out[12:], in[12:]) {
		t.Fatalf("forwarded packet changed beyond its MACs:\n in %x\nout %x", in, out)
	}
	if !bytes.Equal(out[0:6], want) || !bytes.Equal(out[6:12], lb.opts.SourceMAC) {
		t.Fatalf("forwarded to %v from %v, want to %v from %v", net.HardwareAddr(out[0:6]), net.HardwareAddr(out[6:12]), want, lb.opts.SourceMAC)
	}
}

// predict returns the MAC of the backend FlowHash and the service's table
// name for a new flow.
func predict(t testing.TB, lb *LB, svc Service, bs []Backend, client netip.AddrPort) net.HardwareAddr {
	t.Helper()
	name := lb.Table(svc).LookupHash(FlowHash(lb.opts.Seed, client, svc.VIP, uint8(svc.Proto)))
	for _, b := range bs {
		if b.Addr.String() == name {
			return b.HW
		}
	}
	t.Fatalf("the table names %q, not a backend", name)
	return nil
}

func client(v6 bool, port uint16) netip.AddrPort {
	if v6 {
		return netip.AddrPortFrom(netip.MustParseAddr("2001:db8:c::2"), port)
	}
	return netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), port)
}

func vip(v6 bool, port uint16) netip.AddrPort {
	if v6 {
		return netip.AddrPortFrom(netip.MustParseAddr("2001:db8:ffff::1"), port)
	}
	return netip.AddrPortFrom(netip.MustParseAddr("198.19.255.1"), port)
}

// TestForward sends new flows to a service, IPv4 and IPv6, TCP and UDP:
// each leaves by XDP_TX to the backend the Go side predicts, and the
// counters say so.
func TestForward(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, proto := range []Proto{TCP, UDP} {
			t.Run(fmt.Sprintf("v6=%v/%v", v6, proto), func(t *testing.T) {
				lb := newLB(t, Options{Seed: 7})
				svc := Service{VIP: vip(v6, 80), Proto: proto}
				bs := testBackends(1, 5, v6)
				if err := lb.SetService(svc, bs, ServiceOptions{}); err != nil {
					t.Fatal(err)
				}
				seen := map[string]int{}
				const n = 500
				var bytesSent uint64
				for p := range uint16(n) {
					in := packet(client(v6, 10000+p), svc.VIP, uint8(proto), []byte("hello"))
					want := predict(t, lb, svc, bs, client(v6, 10000+p))
					wantForward(t, lb, in, want)
					seen[want.String()]++
					bytesSent += uint64(len(in))
				}
				if len(seen) != len(bs) {
					t.Errorf("%d flows reached %d of %d backends", n, len(seen), len(bs))
				}
				st, err := lb.Stats()
				if err != nil {
					t.Fatal(err)
				}
				if st.Forwarded != n || st.Conntrack.Misses != n || st.Conntrack.Inserts != n || st.Conntrack.Hits != 0 {
					t.Errorf("counters %+v, want %d forwarded, missed and inserted", st, n)
				}
				if len(st.Services) != 1 || st.Services[0].Packets != n || st.Services[0].Bytes != bytesSent {
					t.Fatalf("service counters %+v, want %d packets, %d bytes", st.Services, n, bytesSent)
				}
				var sum uint64
				for _, b := range st.Services[0].Backends {
					i := slices.IndexFunc(bs, func(x Backend) bool { return x.Addr == b.Addr })
					if uint64(seen[bs[i].HW.String()]) != b.Packets {
						t.Errorf("backend %v: %d packets counted, %d sent", b.Addr, b.Packets, seen[bs[i].HW.String()])
					}
					sum += b.Packets
				}
				if sum != n {
					t.Errorf("backends counted %d packets, want %d", sum, n)
				}
				// The same flows again: conntrack hits, same backends.
				for p := range uint16(n) {
					wantForward(t, lb, packet(client(v6, 10000+p), svc.VIP, uint8(proto), nil), predict(t, lb, svc, bs, client(v6, 10000+p)))
				}
				if c := counters(t, lb); c["conntrack_hit"] != n || c["conntrack_insert"] != n {
					t.Errorf("after the same flows again: %v, want %d hits and still %d inserts", c, n, n)
				}
			})
		}
	}
}

// TestPassUnchanged: what is not addressed to a service passes to the
// kernel unchanged, counted by its reason; what is addressed to a VIP and
// not forwarded (another port or protocol, ICMP) is dropped, counted by
// its reason, since the kernel would route it back where it came from.
func TestPassUnchanged(t *testing.T) {
	lb := newLB(t, Options{})
	for _, v6 := range []bool{false, true} {
		if err := lb.SetService(Service{VIP: vip(v6, 80), Proto: TCP}, testBackends(1, 3, v6), ServiceOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	arp := append(append(append([]byte{}, lbMAC...), clientMAC...), 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	vlan := packet(client(false, 1), vip(false, 80), 6, nil)
	vlan = slices.Insert(vlan, 12, 0x81, 0x00, 0x00, 0x05)
	qinq := slices.Insert(slices.Clone(vlan), 12, 0x88, 0xa8, 0x00, 0x07)
	cases := []struct {
		name, reason string
		in           []byte
	}{
		{"other address", "pass_no_service", packet(client(false, 1), netip.MustParseAddrPort("198.19.255.2:80"), 6, nil)},
		{"other port", "drop_vip_no_service", packet(client(false, 1), vip(false, 81), 6, nil)},
		{"other protocol", "drop_vip_no_service", packet(client(false, 1), vip(false, 80), 17, nil)},
		{"other IPv6 port", "drop_vip_no_service", packet(client(true, 1), vip(true, 443), 6, nil)},
		{"reply from a backend", "pass_no_service", packet(vip(false, 80), client(false, 1), 6, nil)},
		{"other IPv6 address", "pass_no_service", packet(client(true, 1), netip.MustParseAddrPort("[2001:db8:ffff::2]:80"), 6, nil)},
		{"ICMP to the LB", "pass_not_tcp_udp", packet(client(false, 1), netip.MustParseAddrPort("198.19.255.2:0"), 1, []byte("ping"))},
		{"ICMPv6 to the LB", "pass_not_tcp_udp", packet(client(true, 1), netip.MustParseAddrPort("[2001:db8:ffff::2]:0"), 58, []byte("ping"))},
		{"ICMP to a VIP", "drop_vip_icmp", packet(client(false, 1), vip(false, 80), 1, []byte("ping"))},
		{"ICMPv6 to a VIP", "drop_vip_icmp", packet(client(true, 1), vip(true, 80), 58, []byte("ping"))},
		{"GRE to a VIP", "drop_vip_other", packet(client(false, 1), vip(false, 80), 47, []byte("gre"))},
		{"ARP", "pass_not_ip", arp},
		{"VLAN-tagged", "pass_vlan", vlan},
		{"802.1ad-tagged", "pass_vlan", qinq},
	}
	for _, c := range cases {
		before := counters(t, lb)
		v, out := run(t, lb, c.in)
		want := uint32(xdpPass)
		if strings.HasPrefix(c.reason, "drop_") {
			want = xdpDrop
		}
		if v != want || !bytes.Equal(out, c.in) {
			t.Errorf("%s: verdict %d, changed %v; want %d, unchanged", c.name, v, !bytes.Equal(out, c.in), want)
		}
		if d := delta(before, counters(t, lb)); len(d) != 1 || d[c.reason] != 1 {
			t.Errorf("%s: counters moved %v, want %s by 1", c.name, d, c.reason)
		}
	}
	// A VIP no service has any more is no VIP: its packets pass.
	for _, v6 := range []bool{false, true} {
		if err := lb.DeleteService(Service{VIP: vip(v6, 80), Proto: TCP}); err != nil {
			t.Fatal(err)
		}
		in := packet(client(v6, 1), vip(v6, 80), 6, nil)
		if v, _ := run(t, lb, in); v != xdpPass {
			t.Errorf("IPv6 %v: a packet to a deleted service's VIP: verdict %d, want XDP_PASS", v6, v)
		}
	}
}

// TestCutAtEveryOffset cuts a service's packet at every byte offset: an
// Ethernet or IP header cut short passes, counted as truncated; from the
// whole IP header on, the packet, to a VIP and not forwarded, is dropped
// (vip_other); the whole packet is forwarded. The kernel refuses to run
// an XDP program on fewer than 14 bytes (an Ethernet header).
func TestCutAtEveryOffset(t *testing.T) {
	lb := newLB(t, Options{})
	for _, v6 := range []bool{false, true} {
		for _, proto := range []Proto{TCP, UDP} {
			svc := Service{VIP: vip(v6, 80), Proto: proto}
			bs := testBackends(1, 3, v6)
			if err := lb.SetService(svc, bs, ServiceOptions{}); err != nil {
				t.Fatal(err)
			}
			full := packet(client(v6, 5), svc.VIP, uint8(proto), []byte("payload"))
			l3 := 14 + 20
			if v6 {
				l3 = 14 + 40
			}
			for n := range len(full) + 1 {
				in := full[:n]
				if n < 14 {
					if _, _, err := lb.objs.XdpMaglev.Test(in); err == nil {
						t.Errorf("%v cut at %d: the kernel ran the program", svc, n)
					}
					continue
				}
				before := counters(t, lb)
				if n < len(full) {
					// Cut short: a header (truncated), or the packet the
					// IP header's length says (malformed).
					want, reason := uint32(xdpPass), "pass_truncated"
					if n >= l3 {
						want, reason = xdpDrop, "drop_vip_other"
					}
					v, out := run(t, lb, in)
					if v != want || !bytes.Equal(out, in) {
						t.Errorf("%v cut at %d: verdict %d, want %d unchanged", svc, n, v, want)
					}
					if d := delta(before, counters(t, lb)); d[reason] != 1 || len(d) != 1 {
						t.Errorf("%v cut at %d: counters moved %v, want %s by 1", svc, n, d, reason)
					}
					continue
				}
				wantForward(t, lb, in, predict(t, lb, svc, bs, client(v6, 5)))
			}
			if err := lb.DeleteService(svc); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestUnsupportedHeaders: IPv4 options and fragments, IPv6 extension
// headers and fragments, impossible versions and header lengths pass
// unchanged with their counted reasons; to a service's VIP, those whose IP
// header is whole are dropped, counted as vip_fragment or vip_other.
func TestUnsupportedHeaders(t *testing.T) {
	lb := newLB(t, Options{})
	for _, v6 := range []bool{false, true} {
		for _, proto := range []Proto{TCP, UDP} {
			if err := lb.SetService(Service{VIP: vip(v6, 80), Proto: proto}, testBackends(1, 3, v6), ServiceOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	v4 := func(f func(b []byte) []byte) []byte {
		return f(packet(client(false, 9), vip(false, 80), 6, []byte("data")))
	}
	v6 := func(f func(b []byte) []byte) []byte {
		return f(packet(client(true, 9), vip(true, 80), 17, []byte("data")))
	}
	ext := func(next byte) func(b []byte) []byte {
		return func(b []byte) []byte {
			b[14+6] = next
			return slices.Insert(b, 14+40, 17, 0, 0, 0, 0, 0, 0, 0) // an 8-byte header, then UDP
		}
	}
	cases := []struct {
		name, reason string
		in           []byte
	}{
		{"IPv4 options", "pass_ip_options", v4(func(b []byte) []byte {
			b[14] = 0x46
			return slices.Insert(b, 14+20, 1, 1, 1, 0) // NOPs and an end of options
		})},
		{"IPv4 first fragment", "pass_fragment", v4(func(b []byte) []byte { b[14+6] = 0x20; return b })},
		{"IPv4 later fragment", "pass_fragment", v4(func(b []byte) []byte { b[14+7] = 0x10; return b })},
		{"IPv4 version 5", "pass_malformed", v4(func(b []byte) []byte { b[14] = 0x55; return b })},
		{"IPv4 header length 4", "pass_malformed", v4(func(b []byte) []byte { b[14] = 0x44; return b })},
		{"IPv6 version 4", "pass_malformed", v6(func(b []byte) []byte { b[14] = 0x40; return b })},
		{"IPv6 hop-by-hop", "pass_ipv6_ext", v6(ext(0))},
		{"IPv6 routing", "pass_ipv6_ext", v6(ext(43))},
		{"IPv6 destination options", "pass_ipv6_ext", v6(ext(60))},
		{"IPv6 fragment", "pass_fragment", v6(ext(44))},
	}
	for _, c := range cases {
		for _, toVIP := range []bool{false, true} {
			in, want, reason := slices.Clone(c.in), uint32(xdpPass), c.reason
			switch {
			case !toVIP: // the same packet to an address that is no VIP
				if in[12] == 0x08 {
					copy(in[14+16:], netip.MustParseAddr("198.19.255.2").AsSlice())
				} else {
					copy(in[14+24:], netip.MustParseAddr("2001:db8:ffff::2").AsSlice())
				}
			case reason == "pass_fragment":
				want, reason = xdpDrop, "drop_vip_fragment"
			case reason != "pass_malformed": // a malformed version or length: no destination read
				want, reason = xdpDrop, "drop_vip_other"
			}
			before := counters(t, lb)
			v, out := run(t, lb, in)
			if v != want || !bytes.Equal(out, in) {
				t.Errorf("%s (to a VIP: %v): verdict %d, want %d unchanged", c.name, toVIP, v, want)
			}
			if d := delta(before, counters(t, lb)); len(d) != 1 || d[reason] != 1 {
				t.Errorf("%s (to a VIP: %v): counters moved %v, want %s by 1", c.name, toVIP, d, reason)
			}
		}
	}
}

// TestConntrackAcrossTableChange: flows keep their backend across table
// changes while it stays in the service (weight 0 included); a removed
// backend's flows are hashed again by the new table; new flows follow the
// new table.
func TestConntrackAcrossTableChange(t *testing.T) {
	lb := newLB(t, Options{})
	svc := Service{VIP: vip(false, 443), Proto: TCP}
	bs := testBackends(1, 4, false)
	if err := lb.SetService(svc, bs, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	first := make([]net.HardwareAddr, n)
	for p := range n {
		c := client(false, uint16(20000+p))
		first[p] = predict(t, lb, svc, bs, c)
		wantForward(t, lb, packet(c, svc.VIP, 6, nil), first[p])
	}

	// Add two backends and drain one: every flow stays where it was.
	next := append(testBackends(1, 6, false)[:0:0], testBackends(1, 6, false)...)
	next[1].Weight = 0
	if err := lb.SetService(svc, next, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for p := range n {
		c := client(false, uint16(20000+p))
		if !bytes.Equal(predict(t, lb, svc, next, c), first[p]) {
			moved++
		}
		wantForward(t, lb, packet(c, svc.VIP, 6, nil), first[p])
	}
	if moved < n/4 {
		t.Fatalf("only %d of %d flows would move by the new table: the test shows nothing", moved, n)
	}
	// New flows follow the new table, which gives the drained backend none.
	for p := range n {
		c := client(false, uint16(40000+p))
		want := predict(t, lb, svc, next, c)
		if bytes.Equal(want, next[1].HW) {
			t.Fatal("the table sends a new flow to a drained backend")
		}
		wantForward(t, lb, packet(c, svc.VIP, 6, nil), want)
	}

	// Remove backend 1 (drained) and 2: their flows are hashed again, the
	// others stay.
	final := []Backend{next[0], next[3], next[4], next[5]}
	if err := lb.SetService(svc, final, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	before := counters(t, lb)
	rehashed := 0
	for p := range n {
		c := client(false, uint16(20000+p))
		want := first[p]
		if bytes.Equal(want, next[1].HW) || bytes.Equal(want, next[2].HW) {
			want = predict(t, lb, svc, final, c)
			rehashed++
		}
		wantForward(t, lb, packet(c, svc.VIP, 6, nil), want)
	}
	d := delta(before, counters(t, lb))
	if d["conntrack_stale"] != uint64(rehashed) || d["conntrack_hit"] != uint64(n-rehashed) || rehashed == 0 {
		t.Errorf("counters moved %v; want %d stale entries and %d hits", d, rehashed, n-rehashed)
	}
}

// TestAtomicUpdate swaps a service between two tables of disjoint
// backends while goroutines send new flows through the program: every
// packet goes to the backend one of the two tables names, none is dropped.
func TestAtomicUpdate(t *testing.T) {
	lb := newLB(t, Options{ConntrackSize: 1 << 16})
	svc := Service{VIP: vip(false, 80), Proto: UDP}
	a, b := testBackends(1, 3, false), testBackends(10, 3, false)
	ta, err := maglev.NewWeighted(names(a), maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := maglev.NewWeighted(names(b), maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	mac := map[string]net.HardwareAddr{}
	for _, x := range append(slices.Clone(a), b...) {
		mac[x.Addr.String()] = x.HW
	}
	if err := lb.SetService(svc, a, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var sent atomic.Uint64
	errs := make(chan error, 2)
	for g := range 2 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				c := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(g), byte(i >> 16)}), uint16(i))
				v, out, err := lb.objs.XdpMaglev.Test(packet(c, svc.VIP, 17, nil))
				if err != nil {
					errs <- err
					return
				}
				h := FlowHash(0, c, svc.VIP, 17)
				got := net.HardwareAddr(out[:6]).String()
				if v != xdpTX || (got != mac[ta.LookupHash(h)].String() && got != mac[tb.LookupHash(h)].String()) {
					errs <- fmt.Errorf("flow %v: verdict %d to %s; tables say %s or %s", c, v, got, mac[ta.LookupHash(h)], mac[tb.LookupHash(h)])
					return
				}
				sent.Add(1)
			}
		})
	}
	const swaps = 40
	for i := range swaps {
		next := a
		if i%2 == 0 {
			next = b
		}
		if err := lb.SetService(svc, next, ServiceOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if sent.Load() < 1000 {
		t.Errorf("only %d packets during %d swaps", sent.Load(), swaps)
	}
	if c := counters(t, lb); c["drop_no_backend"] != 0 {
		t.Errorf("%d packets dropped for want of a backend", c["drop_no_backend"])
	}
}

func names(bs []Backend) []maglev.Backend {
	out := make([]maglev.Backend, len(bs))
	for i, b := range bs {
		out[i] = maglev.Backend{Name: b.Addr.String(), Weight: b.Weight}
	}
	return out
}

// TestEmptyAndDeleted: a service without backends drops its packets,
// counted; a deleted service's packets pass.
func TestEmptyAndDeleted(t *testing.T) {
	lb := newLB(t, Options{})
	svc := Service{VIP: vip(true, 53), Proto: UDP}
	if err := lb.SetService(svc, nil, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	in := packet(client(true, 1), svc.VIP, 17, nil)
	if v, _ := run(t, lb, in); v != xdpDrop {
		t.Errorf("empty service: verdict %d, want XDP_DROP", v)
	}
	if err := lb.SetService(svc, []Backend{{Addr: netip.MustParseAddr("2001:db8::5"), Weight: 0, HW: backendMAC(5)}}, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, _ := run(t, lb, in); v != xdpDrop {
		t.Errorf("all backends drained: verdict %d, want XDP_DROP", v)
	}
	if c := counters(t, lb); c["drop_no_backend"] != 2 {
		t.Errorf("drop_no_backend %d, want 2", c["drop_no_backend"])
	}
	if err := lb.DeleteService(svc); err != nil {
		t.Fatal(err)
	}
	if v, out := run(t, lb, in); v != xdpPass || !bytes.Equal(in, out) {
		t.Errorf("deleted service: verdict %d, want XDP_PASS unchanged", v)
	}
	wantErr(t, lb.DeleteService(svc), ErrNoService)
	if lb.Table(svc) != nil || len(lb.Services()) != 0 {
		t.Error("a deleted service still has a table")
	}
}

// TestErrors: bad input is an error that errors.Is matches, and changes
// nothing.
func TestErrors(t *testing.T) {
	lb := newLB(t, Options{MaxServices: 2, MaxBackends: 4})
	ok := Service{VIP: vip(false, 80), Proto: TCP}
	hw := backendMAC(1)
	be := func(a string) Backend { return Backend{Addr: netip.MustParseAddr(a), Weight: 1, HW: hw} }
	for _, c := range []struct {
		svc    Service
		bs     []Backend
		target error
	}{
		{Service{Proto: TCP}, nil, ErrService},
		{Service{VIP: vip(false, 0), Proto: TCP}, nil, ErrService},
		{Service{VIP: vip(false, 80), Proto: 1}, nil, ErrService},
		{Service{VIP: netip.MustParseAddrPort("[fe80::1%eth0]:80"), Proto: TCP}, nil, ErrService},
		{ok, []Backend{{Weight: 1, HW: hw}}, ErrBackend},
		{ok, []Backend{be("198.18.1.1"), be("198.18.1.1")}, ErrBackend},
		{ok, []Backend{be("198.18.1.1"), be("::ffff:198.18.1.1")}, ErrBackend},
		{ok, []Backend{{Addr: netip.MustParseAddr("198.18.1.1"), HW: hw[:4]}}, ErrBackend},
		{ok, []Backend{{Addr: netip.MustParseAddr("198.18.1.1"), Weight: 1}}, ErrNoNeighbor},
		{ok, []Backend{be("198.18.1.1"), be("198.18.1.2"), be("198.18.1.3"), be("198.18.1.4"), be("198.18.1.5")}, ErrFull},
	} {
		wantErr(t, lb.SetService(c.svc, c.bs, ServiceOptions{}), c.target)
	}
	if len(lb.Services()) != 0 {
		t.Fatalf("failed SetService calls left services %v", lb.Services())
	}
	for i := range 2 {
		if err := lb.SetService(Service{VIP: vip(false, uint16(80+i)), Proto: TCP}, []Backend{be("198.18.1.1")}, ServiceOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wantErr(t, lb.SetService(Service{VIP: vip(false, 82), Proto: TCP}, nil, ServiceOptions{}), ErrFull)
	small := newLB(t, Options{M: 7})
	err := small.SetService(ok, []Backend{be("198.18.1.1"), be("198.18.1.2"), be("198.18.1.3"), be("198.18.1.4"), be("198.18.1.5"), be("198.18.1.6"), be("198.18.1.7"), be("198.18.1.8")}, ServiceOptions{})
	wantErr(t, err, maglev.ErrTooManyBackends)
	for _, o := range []Options{{M: 8}, {ConntrackSize: -1}, {MaxBackends: 1 << 30}, {Mode: AttachNone}, {SourceMAC: hw[:3]}} {
		_, err := Load("", o)
		wantErr(t, err, ErrOptions)
	}
	_, err = Load("no-such-interface0", Options{})
	wantErr(t, err, ErrInterface)
	if err := lb.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, lb.SetService(ok, nil, ServiceOptions{}), ErrClosed)
	wantErr(t, lb.DeleteService(ok), ErrClosed)
	if _, err := lb.Stats(); err == nil {
		t.Error("Stats after Close: no error")
	}
}

// TestBackendIDsReused: backend ids freed by one update serve the next
// (an update holds the leaving backends' ids until the new table is in:
// 6 ids for 3 backends replaced by 3 others), and a conntrack entry naming
// a freed id never reaches its new owner.
func TestBackendIDsReused(t *testing.T) {
	lb := newLB(t, Options{MaxBackends: 6})
	svc := Service{VIP: vip(false, 80), Proto: TCP}
	for round := range 5 {
		bs := testBackends(1+3*round, 3, false)
		if err := lb.SetService(svc, bs, ServiceOptions{}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for p := range 100 {
			c := client(false, uint16(p)) // the same flows every round
			wantForward(t, lb, packet(c, svc.VIP, 6, nil), predict(t, lb, svc, bs, c))
		}
	}
}

func TestAttachModeString(t *testing.T) {
	for m, want := range map[AttachMode]string{AttachAuto: "auto", AttachNative: "native", AttachGeneric: "generic", AttachNone: "none", 9: "AttachMode(9)"} {
		if m.String() != want {
			t.Errorf("%d: %q, want %q", int(m), m.String(), want)
		}
	}
	if s := (Service{VIP: vip(true, 53), Proto: UDP}).String(); s != "udp/[2001:db8:ffff::1]:53" {
		t.Errorf("Service.String: %q", s)
	}
}

// TestServiceSizes runs services of different table sizes side by side,
// and changes one's size: new flows go where each service's own table of
// its own size names (the program reads the size from the table), and
// the flows connection tracking holds stay where they were.
func TestServiceSizes(t *testing.T) {
	lb := newLB(t, Options{Seed: 3, M: 251})
	small := Service{VIP: vip(false, 80), Proto: TCP}
	large := Service{VIP: vip(false, 443), Proto: TCP}
	bs := testBackends(1, 7, false)
	if err := lb.SetService(small, bs, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := lb.SetService(large, bs, ServiceOptions{M: 65537}); err != nil {
		t.Fatal(err)
	}
	if got := lb.Table(small).Size(); got != 251 {
		t.Fatalf("the small service's table has %d slots, want Options.M, 251", got)
	}
	if got := lb.Table(large).Size(); got != 65537 {
		t.Fatalf("the large service's table has %d slots, want ServiceOptions.M, 65537", got)
	}
	// A program that used one size for both would send many of the large
	// service's flows where a table of 251 slots names.
	other, err := maglev.NewWeighted(names(bs), 251, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 600
	differ := 0
	first := make([]net.HardwareAddr, n)
	for p := range uint16(n) {
		c := client(false, 30000+p)
		h := FlowHash(3, c, large.VIP, 6)
		if other.LookupHash(h) != lb.Table(large).LookupHash(h) {
			differ++
		}
		wantForward(t, lb, packet(c, small.VIP, 6, nil), predict(t, lb, small, bs, c))
		first[p] = predict(t, lb, large, bs, c)
		wantForward(t, lb, packet(c, large.VIP, 6, nil), first[p])
	}
	if differ < n/2 {
		t.Fatalf("a table of 251 slots agrees with the large one on %d of %d flows: the test shows nothing", n-differ, n)
	}

	// The large service shrinks: its tracked flows stay, new ones follow
	// the new table.
	if err := lb.SetService(large, bs, ServiceOptions{M: 1021}); err != nil {
		t.Fatal(err)
	}
	if got := lb.Table(large).Size(); got != 1021 {
		t.Fatalf("after the change, %d slots, want 1021", got)
	}
	for p := range uint16(n) {
		wantForward(t, lb, packet(client(false, 30000+p), large.VIP, 6, nil), first[p])
	}
	for p := range uint16(n) {
		c := client(false, 50000+p)
		wantForward(t, lb, packet(c, large.VIP, 6, nil), predict(t, lb, large, bs, c))
	}
	wantErr(t, lb.SetService(small, bs, ServiceOptions{M: 1000}), ErrService)
}

// TestSetServices sets many services in one call: each forwards as its
// own table says; a second call updates them with connection tracking
// kept; a call with one bad update, or more services than fit, makes
// none of its changes.
func TestSetServices(t *testing.T) {
	lb := newLB(t, Options{Seed: 5, MaxServices: 4})
	var us []Update
	for i := range 3 {
		us = append(us, Update{Service: Service{VIP: vip(false, uint16(80+i)), Proto: TCP}, Backends: testBackends(1+4*i, 4, false), Options: ServiceOptions{M: []int{251, 257, 263}[i]}})
	}
	if err := lb.SetServices(us); err != nil {
		t.Fatal(err)
	}
	const n = 200
	first := map[Service][]net.HardwareAddr{}
	for _, u := range us {
		if got := lb.Table(u.Service).Size(); got != u.Options.M {
			t.Fatalf("%v: %d slots, want %d", u.Service, got, u.Options.M)
		}
		for p := range uint16(n) {
			c := client(false, 20000+p)
			want := predict(t, lb, u.Service, u.Backends, c)
			wantForward(t, lb, packet(c, u.Service.VIP, 6, nil), want)
			first[u.Service] = append(first[u.Service], want)
		}
	}
	// Each service gains backends: tracked flows stay, new ones follow the
	// new tables.
	for i := range us {
		us[i].Backends = testBackends(1+4*i, 6, false)
	}
	if err := lb.SetServices(us); err != nil {
		t.Fatal(err)
	}
	for _, u := range us {
		if lb.Table(u.Service).NumBackends() != 6 {
			t.Fatalf("%v: %d backends after the update", u.Service, lb.Table(u.Service).NumBackends())
		}
		for p := range uint16(n) {
			wantForward(t, lb, packet(client(false, 20000+p), u.Service.VIP, 6, nil), first[u.Service][p])
			c := client(false, 40000+p)
			wantForward(t, lb, packet(c, u.Service.VIP, 6, nil), predict(t, lb, u.Service, u.Backends, c))
		}
	}
	// None of a bad call's changes are made.
	extra := Update{Service: Service{VIP: vip(false, 90), Proto: TCP}, Backends: testBackends(40, 2, false)}
	bad := Update{Service: Service{VIP: vip(false, 91), Proto: TCP}, Backends: testBackends(50, 2, false), Options: ServiceOptions{M: 1000}}
	wantErr(t, lb.SetServices([]Update{extra, bad}), ErrService)
	wantErr(t, lb.SetServices([]Update{extra, extra}), ErrService)
	full := []Update{extra, {Service: Service{VIP: vip(false, 92), Proto: TCP}, Backends: testBackends(60, 2, false)}}
	wantErr(t, lb.SetServices(full), ErrFull)
	if got := len(lb.Services()); got != 3 {
		t.Fatalf("%d services after the failed calls, want 3", got)
	}
	// The failed calls gave their ids back: the one free service id
	// still takes a service.
	if err := lb.SetServices([]Update{extra}); err != nil {
		t.Fatal(err)
	}
	c := client(false, 1234)
	wantForward(t, lb, packet(c, extra.Service.VIP, 6, nil), predict(t, lb, extra.Service, extra.Backends, c))
}
