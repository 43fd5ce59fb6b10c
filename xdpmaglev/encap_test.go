package xdpmaglev

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
	"golang.org/x/sys/unix"
)

// A fixture network: one namespace with a veth pair, eth0 holding the load
// balancer's addresses, routes to the backends' subnets through a gateway
// whose neighbour entry is static (so bpf_fib_lookup's answer is known),
// MTU 1400 on eth0, forwarding on. Packets never leave it: the
// program runs through BPF_PROG_TEST_RUN with eth0 as its ingress.
type fixtureNet struct {
	ns      string
	ifindex int
	mac     net.HardwareAddr // eth0's
}

var (
	gwMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xfe}
	lbSrc4 = netip.MustParseAddr("198.18.1.1")
	lbSrc6 = netip.MustParseAddr("2001:db8:1::1")
)

const fixtureMTU = 1400

func newFixtureNet(t testing.TB) *fixtureNet {
	n := newTestNet(t, "fx")
	ns := n.addNS("fx")
	xdptest.IP(n.t, "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	xdptest.IP(n.t, "-n", ns, "link", "set", "eth1", "up")
	xdptest.IP(n.t, "-n", ns, "addr", "add", "198.18.1.1/24", "dev", "eth0")
	xdptest.IP(n.t, "-n", ns, "addr", "add", "2001:db8:1::1/64", "dev", "eth0", "nodad")
	xdptest.IP(n.t, "-n", ns, "link", "set", "eth0", "up")
	xdptest.IP(n.t, "-n", ns, "neigh", "replace", "198.18.1.254", "lladdr", gwMAC.String(), "dev", "eth0", "nud", "permanent")
	xdptest.IP(n.t, "-n", ns, "neigh", "replace", "2001:db8:1::fe", "lladdr", gwMAC.String(), "dev", "eth0", "nud", "permanent")
	// The MTU bpf_fib_lookup checks is the egress device's (or a locked
	// route MTU): an unlocked route MTU is not used for forwarding.
	xdptest.IP(n.t, "-n", ns, "link", "set", "eth0", "mtu", fmt.Sprint(fixtureMTU))
	xdptest.IP(n.t, "-n", ns, "route", "add", "198.18.64.0/18", "via", "198.18.1.254")
	xdptest.IP(n.t, "-n", ns, "-6", "route", "add", "2001:db8:40::/48", "via", "2001:db8:1::fe")
	// A gateway that has no neighbour entry.
	xdptest.IP(n.t, "-n", ns, "route", "add", "198.18.128.0/18", "via", "198.18.1.253")
	xdptest.IP(n.t, "-n", ns, "-6", "route", "add", "2001:db8:80::/48", "via", "2001:db8:1::fd")
	xdptest.Sysctl(n.t, ns, "net.ipv4.conf.all.forwarding", "1")
	xdptest.Sysctl(n.t, ns, "net.ipv6.conf.all.forwarding", "1")
	ifc := xdptest.Interface(t, ns, "eth0")
	return &fixtureNet{ns: ns, ifindex: ifc.Index, mac: ifc.HardwareAddr}
}

// run runs prog once on in with eth0 as the ingress interface, on CPU 0
// (the flood guard's state is per CPU).
func (f *fixtureNet) run(t testing.TB, prog *ebpf.Program, in []byte) (uint32, []byte) {
	t.Helper()
	type result struct {
		v   uint32
		out []byte
	}
	r, err := xdptest.In(f.ns, func() (result, error) {
		runtime.LockOSThread() // its CPU affinity changes: the thread ends with the goroutine
		var set unix.CPUSet
		set.Set(0)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return result{}, err
		}
		opts := &ebpf.RunOptions{
			Data:    in,
			DataOut: make([]byte, len(in)+256),
			Context: xdpMD{DataEnd: uint32(len(in)), IngressIfindex: uint32(f.ifindex)},
			Repeat:  1,
		}
		v, err := prog.Run(opts)
		return result{v, opts.DataOut}, err
	})
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	return r.v, r.out
}

// xdpMD is struct xdp_md, BPF_PROG_TEST_RUN's context for XDP.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// encapsulated builds, independently of the program, the frame the
// program should send for the IP packet inner (a frame's bytes after the
// Ethernet header): to the gateway from eth0, inside an outer header from
// src to dst by mode f, with the GUE source port and IPv6 flow label from
// the flow hash h.
func encapsulated(f Forward, srcMAC net.HardwareAddr, src, dst netip.Addr, inner []byte, h uint64) []byte {
	b := append(append([]byte{}, gwMAC...), srcMAC...)
	var l4 []byte
	if f == ForwardGUE {
		l4 = make([]byte, 8)
		binary.BigEndian.PutUint16(l4[0:], uint16(0xc000|h>>50))
		binary.BigEndian.PutUint16(l4[2:], DefaultGUEPort)
		binary.BigEndian.PutUint16(l4[4:], uint16(8+len(inner)))
	}
	if src.Is4() {
		b = append(b, 0x08, 0x00)
		ip := make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)+len(inner)))
		ip[6] = 0x40 // DF
		ip[8] = 64
		ip[9] = 4
		if f == ForwardGUE {
			ip[9] = 17
		}
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], xdptest.Checksum(ip))
		b = append(b, ip...)
	} else {
		b = append(b, 0x86, 0xdd)
		ip := make([]byte, 40)
		binary.BigEndian.PutUint32(ip[0:], 0x60000000|uint32(h)&0xfffff)
		binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)+len(inner)))
		ip[6] = 41
		if f == ForwardGUE {
			ip[6] = 17
		}
		ip[7] = 64
		s, d := src.As16(), dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		b = append(b, ip...)
	}
	return append(append(b, l4...), inner...)
}

// encapBackends returns n backends in the routed subnet of the family.
func encapBackends(n int, v6 bool) []Backend {
	bs := make([]Backend, n)
	for i := range bs {
		a := netip.AddrFrom4([4]byte{198, 18, 64, byte(10 + i)})
		if v6 {
			a = netip.MustParseAddr(fmt.Sprintf("2001:db8:40::%x", 10+i))
		}
		bs[i] = Backend{Addr: a, Weight: 1}
	}
	return bs
}

func fixtureLB(t testing.TB, f *fixtureNet, opts Options) *LB {
	t.Helper()
	needBPF(t)
	if opts.ConntrackSize == 0 {
		opts.ConntrackSize = 1 << 12
	}
	opts.SourceMAC = lbMAC
	lb, err := xdptest.In(f.ns, func() (*LB, error) { return Load("", opts) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	return lb
}

func source(v6 bool) netip.Addr {
	if v6 {
		return lbSrc6
	}
	return lbSrc4
}

// TestEncapFixtures: for IPIP and GUE, IPv4 and IPv6, TCP and UDP, a new
// flow and the same flow again leave as exactly the frame built
// independently here (outer header, checksum, GUE port, the gateway's MAC
// from bpf_fib_lookup), to the backend FlowHash and the table predict;
// the decapsulator turns it back into the client's packet.
func TestEncapFixtures(t *testing.T) {
	f := newFixtureNet(t)
	lb := fixtureLB(t, f, Options{})
	for _, mode := range []Forward{ForwardIPIP, ForwardGUE} {
		for _, v6 := range []bool{false, true} {
			for _, proto := range []Proto{TCP, UDP} {
				t.Run(fmt.Sprintf("%v/v6=%v/%v", mode, v6, proto), func(t *testing.T) {
					svc := Service{VIP: vip(v6, 80), Proto: proto}
					bs := encapBackends(5, v6)
					if err := lb.SetService(svc, bs, ServiceOptions{Forward: mode, Source: source(v6)}); err != nil {
						t.Fatal(err)
					}
					defer func() { _ = lb.DeleteService(svc) }()
					for port := uint16(1000); port < 1010; port++ {
						c := client(v6, port)
						in := packet(c, svc.VIP, uint8(proto), []byte("hello, backend"))
						h := FlowHash(lb.opts.Seed, c, svc.VIP, uint8(proto))
						be := netip.MustParseAddr(lb.Table(svc).LookupHash(h))
						want := encapsulated(mode, f.mac, source(v6), be, in[14:], h)
						for range 2 { // a new flow, then a conntrack hit
							v, out := f.run(t, lb.objs.XdpMaglev, in)
							if v != xdpTX || !bytes.Equal(out, want) {
								t.Fatalf("port %d: verdict %d\n got % x\nwant % x", port, v, out, want)
							}
						}
					}
				})
			}
		}
	}
}

// TestEncapSourceBits: with SourceBits 8, the outer source of each flow
// is Source with its lowest 8 bits from the flow hash (bits 20 to 27),
// the rest of the packet as without them; 64 flows use many sources.
// SourceBits above MaxSourceBits, or a Source with those bits set, are
// refused.
func TestEncapSourceBits(t *testing.T) {
	f := newFixtureNet(t)
	lb := fixtureLB(t, f, Options{})
	for _, mode := range []Forward{ForwardIPIP, ForwardGUE} {
		for _, v6 := range []bool{false, true} {
			prefix := netip.MustParseAddr("198.18.200.0")
			if v6 {
				prefix = netip.MustParseAddr("2001:db8:c8::")
			}
			svc := Service{VIP: vip(v6, 80), Proto: TCP}
			if err := lb.SetService(svc, encapBackends(5, v6), ServiceOptions{Forward: mode, Source: prefix, SourceBits: 8}); err != nil {
				t.Fatal(err)
			}
			sources := map[netip.Addr]bool{}
			for port := uint16(2000); port < 2064; port++ {
				c := client(v6, port)
				in := packet(c, svc.VIP, 6, []byte("hello"))
				h := FlowHash(lb.opts.Seed, c, svc.VIP, 6)
				b := prefix.AsSlice()
				b[len(b)-1] = byte(h >> 20)
				src, _ := netip.AddrFromSlice(b)
				be := netip.MustParseAddr(lb.Table(svc).LookupHash(h))
				want := encapsulated(mode, f.mac, src, be, in[14:], h)
				if v, out := f.run(t, lb.objs.XdpMaglev, in); v != xdpTX || !bytes.Equal(out, want) {
					t.Fatalf("%v v6=%v port %d: verdict %d\n got % x\nwant % x", mode, v6, port, v, out, want)
				}
				sources[src] = true
			}
			if len(sources) < 40 {
				t.Errorf("%v v6=%v: 64 flows used %d outer sources", mode, v6, len(sources))
			}
			if err := lb.DeleteService(svc); err != nil {
				t.Fatal(err)
			}
		}
	}
	svc := Service{VIP: vip(false, 80), Proto: TCP}
	for _, o := range []ServiceOptions{
		{Forward: ForwardIPIP, Source: netip.MustParseAddr("198.18.200.0"), SourceBits: MaxSourceBits + 1},
		{Forward: ForwardIPIP, Source: netip.MustParseAddr("198.18.200.1"), SourceBits: 8},
	} {
		wantErr(t, lb.SetService(svc, encapBackends(2, false), o), ErrService)
	}
}

// TestDecapFixtures: the decapsulator strips IPIP and GUE headers to a
// host and a VIP from a trusted source, leaving the client's packet; the
// same from another source is dropped; everything else passes unchanged,
// counted.
func TestDecapFixtures(t *testing.T) {
	f := newFixtureNet(t)
	hostv4, hostv6 := netip.MustParseAddr("198.18.64.10"), netip.MustParseAddr("2001:db8:40::10")
	trusted := []netip.Prefix{netip.PrefixFrom(source(false), 24), netip.PrefixFrom(source(true), 64)}
	d, err := xdptest.In(f.ns, func() (*Decap, error) {
		return newDecap(DecapOptions{VIPs: []netip.Addr{vip(false, 0).Addr(), vip(true, 0).Addr()}, Hosts: []netip.Addr{hostv4, hostv6}, Sources: trusted})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	for _, mode := range []Forward{ForwardIPIP, ForwardGUE} {
		for _, v6 := range []bool{false, true} {
			host := hostv4
			if v6 {
				host = hostv6
			}
			c := client(v6, 4000)
			inner := packet(c, vip(v6, 80), 6, []byte("data"))
			in := encapsulated(mode, lbMAC, source(v6), host, inner[14:], 0x1234)
			v, out := f.run(t, d.objs.XdpDecap, in)
			want := append(append([]byte{}, in[:12]...), inner[12:]...)
			if v != xdpPass || !bytes.Equal(out[:len(want)], want) || len(out) < len(want) {
				t.Errorf("%v v6=%v: verdict %d\n got % x\nwant % x", mode, v6, v, out, want)
			}
			// To another VIP, or to another host: passed unchanged.
			other := encapsulated(mode, lbMAC, source(v6), client(v6, 0).Addr(), inner[14:], 0x1234)
			if v, out := f.run(t, d.objs.XdpDecap, other); v != xdpPass || !bytes.Equal(out[:len(other)], other) {
				t.Errorf("%v v6=%v to another host: verdict %d, changed", mode, v6, v)
			}
			// Cut inside the inner header: malformed, unchanged.
			cut := in[:len(in)-len(inner)+14+10]
			if v, out := f.run(t, d.objs.XdpDecap, cut); v != xdpPass || !bytes.Equal(out[:len(cut)], cut) {
				t.Errorf("%v v6=%v cut: verdict %d, changed", mode, v6, v)
			}
			// From a source outside the trusted prefixes (a client, say,
			// bypassing the load balancer): dropped.
			spoofed := encapsulated(mode, lbMAC, client(v6, 0).Addr(), host, inner[14:], 0x1234)
			if v, _ := f.run(t, d.objs.XdpDecap, spoofed); v != xdpDrop {
				t.Errorf("%v v6=%v from an untrusted source: verdict %d, want XDP_DROP", mode, v6, v)
			}
		}
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st != (DecapStats{Decapsulated: 4, Passed: 4, Malformed: 4, Untrusted: 4}) {
		t.Errorf("stats %+v, want 4 each", st)
	}
	for _, bad := range [][]netip.Prefix{nil, {{}}} {
		if _, err := newDecap(DecapOptions{VIPs: []netip.Addr{vip(false, 0).Addr()}, Hosts: []netip.Addr{hostv4}, Sources: bad}); !errors.Is(err, ErrOptions) {
			t.Errorf("Sources %v: %v, want ErrOptions", bad, err)
		}
	}
	many := make([]netip.Addr, MaxDecapVIPs+1)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
	}
	for _, n := range []int{MaxDecapVIPs, MaxDecapVIPs + 1} {
		d, err := newDecap(DecapOptions{VIPs: many[:n], Hosts: []netip.Addr{hostv4}, Sources: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}})
		if n > MaxDecapVIPs && !errors.Is(err, ErrOptions) || n <= MaxDecapVIPs && err != nil {
			t.Errorf("%d VIPs: %v, want ErrOptions only past %d", n, err, MaxDecapVIPs)
		}
		if err == nil {
			_ = d.Close()
		}
	}
}

// TestTooBig: a client's packet with DF that would exceed the route's MTU
// once encapsulated is answered with ICMP fragmentation needed (IPv4) or
// packet too big (IPv6) naming the MTU minus the overhead, from the VIP,
// quoting the packet's IP header and 8 bytes; without DF it is dropped.
// Both counted.
func TestTooBig(t *testing.T) {
	f := newFixtureNet(t)
	lb := fixtureLB(t, f, Options{})
	for _, mode := range []Forward{ForwardIPIP, ForwardGUE} {
		for _, v6 := range []bool{false, true} {
			svc := Service{VIP: vip(v6, 80), Proto: TCP}
			if err := lb.SetService(svc, encapBackends(3, v6), ServiceOptions{Forward: mode, Source: source(v6)}); err != nil {
				t.Fatal(err)
			}
			c := client(v6, 5000)
			ipLen := 20
			if v6 {
				ipLen = 40
			}
			// The largest packet that fits, then one byte more.
			fits := fixtureMTU - mode.overhead(map[bool]int{false: 4, true: 6}[v6])
			mk := func(l3 int) []byte {
				in := packet(c, svc.VIP, 6, make([]byte, l3-ipLen-20))
				if !v6 {
					in[14+6] = 0x40 // DF
					binary.BigEndian.PutUint16(in[14+10:], 0)
					binary.BigEndian.PutUint16(in[14+10:], xdptest.Checksum(in[14:34]))
				}
				return in
			}
			if v, _ := f.run(t, lb.objs.XdpMaglev, mk(fits)); v != xdpTX {
				t.Errorf("%v v6=%v: %d bytes: verdict %d, want XDP_TX", mode, v6, fits, v)
			}
			in := mk(fits + 1)
			before := counters(t, lb)
			v, out := f.run(t, lb.objs.XdpMaglev, in)
			want := tooBig(in, fits, v6)
			if v != xdpTX || !bytes.Equal(out[:len(want)], want) {
				t.Errorf("%v v6=%v: verdict %d\n got % x\nwant % x", mode, v6, v, out[:len(want)], want)
			}
			if d := delta(before, counters(t, lb)); d["icmp_too_big"] != 1 {
				t.Errorf("%v v6=%v: counters moved %v, want icmp_too_big by 1", mode, v6, d)
			}
			// Neither forwarded nor counted to the service or a backend.
			if st, err := lb.Stats(); err != nil || st.Services[0].Packets != 1 {
				t.Errorf("%v v6=%v: the service counted %+v (%v), want only the packet that fit", mode, v6, st.Services, err)
			}
			if !v6 {
				noDF := mk(fits + 1)
				noDF[14+6] = 0
				before := counters(t, lb)
				if v, _ := f.run(t, lb.objs.XdpMaglev, noDF); v != xdpDrop {
					t.Errorf("%v: no DF: verdict %d, want XDP_DROP", mode, v)
				}
				if d := delta(before, counters(t, lb)); d["drop_too_big"] != 1 {
					t.Errorf("%v: no DF: counters moved %v, want drop_too_big by 1", mode, d)
				}
			}
			if err := lb.DeleteService(svc); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// tooBig builds the ICMP error the program answers in with.
func tooBig(in []byte, mtu int, v6 bool) []byte {
	b := append(append([]byte{}, in[6:12]...), in[0:6]...)
	if !v6 {
		b = append(b, 0x08, 0x00)
		ip := make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], 20+8+28)
		ip[8] = 64
		ip[9] = 1
		copy(ip[12:16], in[14+16:14+20])
		copy(ip[16:20], in[14+12:14+16])
		binary.BigEndian.PutUint16(ip[10:], xdptest.Checksum(ip))
		icmp := []byte{3, 4, 0, 0, 0, 0, byte(mtu >> 8), byte(mtu)}
		icmp = append(icmp, in[14:14+28]...)
		binary.BigEndian.PutUint16(icmp[2:], xdptest.Checksum(icmp))
		return append(append(b, ip...), icmp...)
	}
	b = append(b, 0x86, 0xdd)
	ip := make([]byte, 40)
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], 8+48)
	ip[6] = 58
	ip[7] = 64
	copy(ip[8:24], in[14+24:14+40])
	copy(ip[24:40], in[14+8:14+24])
	icmp := []byte{2, 0, 0, 0, byte(mtu >> 24), byte(mtu >> 16), byte(mtu >> 8), byte(mtu)}
	icmp = append(icmp, in[14:14+48]...)
	pseudo := append(append([]byte{}, ip[8:40]...), 0, 0, 0, 8+48, 0, 0, 0, 58)
	binary.BigEndian.PutUint16(icmp[2:], xdptest.Checksum(append(pseudo, icmp...)))
	return append(append(b, ip...), icmp...)
}

// icmpAbout builds an ICMP error from a router to the VIP about a
// backend's reply, VIP:port to client: fragmentation needed (IPv4) or
// packet too big (IPv6).
func icmpAbout(svc Service, c netip.AddrPort, v6 bool) []byte {
	reply := packet(svc.VIP, c, uint8(svc.Proto), nil)[14:]
	if !v6 {
		quote := append(reply[:20:20], reply[20:28]...)
		msg := append([]byte{3, 4, 0, 0, 0, 0, 0x05, 0x00}, quote...)
		binary.BigEndian.PutUint16(msg[2:], xdptest.Checksum(msg))
		b := packet(netip.AddrPortFrom(netip.MustParseAddr("198.18.1.254"), 0), svc.VIP, 1, nil)
		b = append(b[:14+20], msg...)
		binary.BigEndian.PutUint16(b[14+2:], uint16(20+len(msg)))
		return b
	}
	quote := append(reply[:40:40], reply[40:48]...)
	msg := append([]byte{2, 0, 0, 0, 0, 0, 0x05, 0x00}, quote...)
	b := packet(netip.AddrPortFrom(netip.MustParseAddr("2001:db8:1::fe"), 0), svc.VIP, 58, nil)
	b = append(b[:14+40], msg...)
	binary.BigEndian.PutUint16(b[14+4:], uint16(len(msg)))
	return b
}

// TestICMPToFlowBackend: an ICMP error to a VIP about a flow goes to the
// flow's backend: the one conntrack holds, else the table's for the
// reversed quoted 5-tuple; by the service's mode; writing no entry.
func TestICMPToFlowBackend(t *testing.T) {
	f := newFixtureNet(t)
	lb := fixtureLB(t, f, Options{})
	for _, mode := range []Forward{ForwardL2, ForwardIPIP, ForwardGUE} {
		for _, v6 := range []bool{false, true} {
			svc := Service{VIP: vip(v6, 443), Proto: TCP}
			bs := encapBackends(7, v6)
			if mode == ForwardL2 {
				bs = testBackends(1, 7, v6)
			}
			if err := lb.SetService(svc, bs, ServiceOptions{Forward: mode, Source: source(v6)}); err != nil {
				t.Fatal(err)
			}
			for port := uint16(2000); port < 2020; port++ {
				c := client(v6, port)
				in := icmpAbout(svc, c, v6)
				h := FlowHash(lb.opts.Seed, c, svc.VIP, uint8(TCP))
				name := lb.Table(svc).LookupHash(h)
				before := counters(t, lb)
				v, out := f.run(t, lb.objs.XdpMaglev, in)
				var want []byte
				if mode == ForwardL2 {
					var hw net.HardwareAddr
					for _, b := range bs {
						if b.Addr.String() == name {
							hw = b.HW
						}
					}
					want = append(append(append([]byte{}, hw...), lbMAC...), in[12:]...)
				} else {
					want = encapsulated(mode, f.mac, source(v6), netip.MustParseAddr(name), in[14:], h)
				}
				if v != xdpTX || !bytes.Equal(out[:len(want)], want) {
					t.Fatalf("%v v6=%v port %d: verdict %d\n got % x\nwant % x", mode, v6, port, v, out[:len(want)], want)
				}
				if d := delta(before, counters(t, lb)); d["icmp_forwarded"] != 1 || d["conntrack_insert"] != 0 {
					t.Fatalf("%v v6=%v: counters moved %v, want icmp_forwarded by 1 and no insert", mode, v6, d)
				}
			}
			if err := lb.DeleteService(svc); err != nil {
				t.Fatal(err)
			}
		}
	}
	// An ICMP error about a packet from elsewhere than the VIP passes.
	svc := Service{VIP: vip(false, 443), Proto: TCP}
	in := icmpAbout(svc, client(false, 1), false)
	in[14+28+12] ^= 1 // the quoted source is no longer the VIP
	before := counters(t, lb)
	if v, _ := f.run(t, lb.objs.XdpMaglev, in); v != xdpPass {
		t.Errorf("ICMP about another address: verdict %d, want XDP_PASS", v)
	}
	if d := delta(before, counters(t, lb)); d["pass_not_tcp_udp"] != 1 {
		t.Errorf("counters moved %v, want pass_not_tcp_udp by 1", d)
	}
}

// TestEncapNoRoute: backends without a route, or whose next hop has no
// neighbour entry, have their packets dropped and counted; the service's
// other backends are unaffected; forwarding off is named.
func TestEncapNoRoute(t *testing.T) {
	f := newFixtureNet(t)
	lb := fixtureLB(t, f, Options{})
	cases := []struct {
		addr, reason string
	}{
		{"203.0.113.9", "drop_no_route"},
		{"198.18.128.9", "drop_no_neighbor"},
		{"2001:db8:80::9", "drop_no_neighbor"},
	}
	for _, c := range cases {
		a := netip.MustParseAddr(c.addr)
		svc := Service{VIP: vip(a.Is6(), 80), Proto: UDP}
		if err := lb.SetService(svc, []Backend{{Addr: a, Weight: 1}}, ServiceOptions{Forward: ForwardIPIP, Source: source(a.Is6())}); err != nil {
			t.Fatal(err)
		}
		before := counters(t, lb)
		if v, _ := f.run(t, lb.objs.XdpMaglev, packet(client(a.Is6(), 7), svc.VIP, 17, nil)); v != xdpDrop {
			t.Errorf("%s: verdict %d, want XDP_DROP", c.addr, v)
		}
		if d := delta(before, counters(t, lb)); d[c.reason] != 1 || d["tx"] != 0 {
			t.Errorf("%s: counters moved %v, want %s by 1 and no tx", c.addr, d, c.reason)
		}
		if st, err := lb.Stats(); err != nil || st.Services[0].Packets != 0 || st.Services[0].Backends[0].Packets != 0 {
			t.Errorf("%s: a dropped packet counted as forwarded: %+v (%v)", c.addr, st.Services, err)
		}
		if err := lb.DeleteService(svc); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFloodGuard: the guard lets a CPU write its share of FloodRate
// entries a second, after a burst of ten seconds' worth; new flows beyond
// it are routed by the table without an entry (to the backend an entry
// would have named), the entries of established flows stay, and a stale
// entry the guard will not rewrite is deleted, so that the flow's packets
// all follow the table.
func TestFloodGuard(t *testing.T) {
	f := newFixtureNet(t)
	cpus := ebpf.MustPossibleCPU()
	rate := 2 * cpus // 2 entries a second on CPU 0, where f.run runs: one every 500 ms, a burst of 20
	const burst = 20
	lb := fixtureLB(t, f, Options{FloodRate: rate, ConntrackSize: 1024})
	svc := Service{VIP: vip(false, 80), Proto: TCP}
	bs := testBackends(1, 5, false)
	if err := lb.SetService(svc, bs, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	before := counters(t, lb)
	const n = 200
	for i := range n {
		c := client(false, uint16(10000+i))
		in := packet(c, svc.VIP, 6, nil)
		v, out := f.run(t, lb.objs.XdpMaglev, in)
		if want := predict(t, lb, svc, bs, c); v != xdpTX || !bytes.Equal(out[:6], want) {
			t.Fatalf("flow %d: verdict %d to %v, want XDP_TX to %v", i, v, net.HardwareAddr(out[:6]), want)
		}
	}
	d := delta(before, counters(t, lb))
	// The flows ran in well under a second: the burst, and one more
	// entry each 500 ms.
	if d["conntrack_insert"] < burst || d["conntrack_insert"] > burst+2 || d["conntrack_insert"]+d["conntrack_flood"] != n {
		t.Errorf("counters moved %v: want %d to %d inserts and the rest of %d routed without an entry", d, burst, burst+2, n)
	}
	one := func(c netip.AddrPort) map[string]uint64 {
		t.Helper()
		before := counters(t, lb)
		if v, _ := f.run(t, lb.objs.XdpMaglev, packet(c, svc.VIP, 6, nil)); v != xdpTX {
			t.Fatalf("flow from %v: verdict %d", c, v)
		}
		return delta(before, counters(t, lb))
	}
	if d := one(client(false, 20000)); d["conntrack_flood"] != 1 {
		t.Errorf("a new flow right after the flood: %v, want it routed without an entry", d)
	}
	time.Sleep(600 * time.Millisecond) // the credit of one entry
	if d := one(client(false, 20001)); d["conntrack_insert"] != 1 || d["conntrack_flood"] != 0 {
		t.Errorf("a new flow 600 ms after the flood: %v, want an entry", d)
	}
	if d := one(client(false, 20002)); d["conntrack_flood"] != 1 {
		t.Errorf("the next new flow: %v, want it routed without an entry", d)
	}
	// The first flows have entries: established, they hit. One whose
	// backend leaves while the guard has no credit has its entry deleted.
	est := client(false, 10000)
	if d := one(est); d["conntrack_hit"] != 1 {
		t.Errorf("an established flow: %v, want a conntrack hit", d)
	}
	var rest []Backend
	for _, b := range bs {
		if !bytes.Equal(b.HW, predict(t, lb, svc, bs, est)) {
			rest = append(rest, b)
		}
	}
	if err := lb.SetService(svc, rest, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := one(est); d["conntrack_stale"] != 1 || d["conntrack_flood"] != 1 {
		t.Errorf("a flow whose backend left: %v, want a stale entry, not rewritten", d)
	}
	if d := one(est); d["conntrack_stale"] != 0 || d["conntrack_miss"] != 1 {
		t.Errorf("its next packet: %v, want a miss with no stale entry (deleted)", d)
	}
	st, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.FloodSeconds <= 0 {
		t.Errorf("FloodSeconds %v after refusals", st.FloodSeconds)
	}
	if lb.opts.FloodRate != rate {
		t.Errorf("FloodRate %d", lb.opts.FloodRate)
	}
	if _, err := Load("", Options{FloodRate: -2}); !errors.Is(err, ErrOptions) {
		t.Errorf("FloodRate -2: %v, want ErrOptions", err)
	}
	// The default: entries idle for two minutes outlive any flood.
	for size, want := range map[int]int{0: (1 << 18) / 130, 130 * 1000: 1000, 16: 1} {
		o := Options{ConntrackSize: size}
		if err := normalize(&o); err != nil || o.FloodRate != want {
			t.Errorf("ConntrackSize %d: FloodRate %d by default (%v), want %d", size, o.FloodRate, err, want)
		}
	}
}
