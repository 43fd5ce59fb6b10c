package xdpmaglev

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// runOnce runs prog on in once a call of BPF_PROG_TEST_RUN, b.N calls,
// in the fixture's namespace, and reports the kernel's time per packet
// (ns/packet); every verdict must be want. It is for the paths a repeat
// cannot take (BPF_PROG_TEST_RUN's repeats run on one buffer, which the
// program changes): a call's time is the program's and the kernel's
// reading of its clock, which the floor case, xdp_pass run the same way,
// measures.
func runOnce(b *testing.B, f *fixtureNet, prog *ebpf.Program, in []byte, want uint32) {
	total, err := xdptest.In(f.ns, func() (time.Duration, error) {
		var total time.Duration
		for range b.N {
			v, d, err := prog.Benchmark(in, 1, nil)
			if err != nil || v != want {
				return 0, fmt.Errorf("verdict %d, want %d: %v", v, want, err)
			}
			total += d
		}
		return total, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/packet")
}

// BenchmarkDecap measures the decapsulator per packet, one packet a call
// (runOnce), in the encapsulation fixtures' namespace (the second hop's
// route): IPIP and GUE packets to this host and a VIP from a trusted
// source, decapsulated; a packet that is not encapsulated, passed; a GUE
// packet naming a second hop, of no connection here, passed on there
// (XDP_REDIRECT: the kernel runs the program as received on lo); floor
// is xdp_pass. Each case checks by the counters that its packets took
// the path it names.
func BenchmarkDecap(b *testing.B) {
	f := newFixtureNet(b)
	hostv4, hostv6 := netip.MustParseAddr("198.18.64.10"), netip.MustParseAddr("2001:db8:40::10")
	trusted := []netip.Prefix{netip.PrefixFrom(source(false), 24), netip.PrefixFrom(source(true), 64)}
	d, err := xdptest.In(f.ns, func() (*Decap, error) {
		return newDecap(DecapOptions{VIPs: []netip.Addr{vip(false, 0).Addr(), vip(true, 0).Addr()}, Hosts: []netip.Addr{hostv4, hostv6}, Sources: trusted})
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	host := func(v6 bool) netip.Addr {
		if v6 {
			return hostv6
		}
		return hostv4
	}
	frame := func(mode Forward, v6 bool, second []byte) []byte {
		inner := packet(client(v6, 4000), vip(v6, 80), 6, make([]byte, 64))[14:]
		return encapsulated(mode, lbMAC, source(v6), host(v6), append(second, inner...), 0x123456789abcdef)
	}
	const xdpRedirect = 4
	for _, c := range []struct {
		name  string
		in    []byte
		floor bool
		want  uint32
		count func(DecapStats) uint64
	}{
		{"floor", frame(ForwardIPIP, false, nil), true, xdpPass, nil},
		{"ipip", frame(ForwardIPIP, false, nil), false, xdpPass, func(s DecapStats) uint64 { return s.Decapsulated }},
		{"ipip6", frame(ForwardIPIP, true, nil), false, xdpPass, func(s DecapStats) uint64 { return s.Decapsulated }},
		{"gue", frame(ForwardGUE, false, nil), false, xdpPass, func(s DecapStats) uint64 { return s.Decapsulated }},
		{"gue6", frame(ForwardGUE, true, nil), false, xdpPass, func(s DecapStats) uint64 { return s.Decapsulated }},
		{"passed", packet(client(false, 4000), vip(false, 80), 6, make([]byte, 64)), false, xdpPass, func(s DecapStats) uint64 { return s.Passed }},
		{"second_hop", frame(ForwardGUE, false, secondHeader(netip.MustParseAddr("198.18.64.11"), 1)), false, xdpRedirect, func(s DecapStats) uint64 { return s.SecondHop }},
	} {
		b.Run(c.name, func(b *testing.B) {
			prog := d.objs.XdpDecap
			if c.floor {
				prog = passProg(b)
			}
			before, err := d.Stats()
			if err != nil {
				b.Fatal(err)
			}
			runOnce(b, f, prog, c.in, c.want)
			after, err := d.Stats()
			if err != nil {
				b.Fatal(err)
			}
			if c.count != nil && c.count(after)-c.count(before) < uint64(b.N) {
				b.Fatalf("of %d packets, %d counted: %+v", b.N, c.count(after)-c.count(before), after)
			}
		})
	}
}

// BenchmarkTooBig measures the load balancer's answer to a client's
// packet with DF that does not fit the route's MTU once encapsulated:
// ICMP fragmentation needed (IPv4) or packet too big (IPv6), sent back
// (XDP_TX), one packet a call (runOnce: the answer is not the packet, and
// is shorter), the flow's conntrack entry found; floor is xdp_pass. Each
// case checks by the counters that its packets were answered.
func BenchmarkTooBig(b *testing.B) {
	f := newFixtureNet(b)
	lb := fixtureLB(b, f, Options{FloodRate: -1})
	for _, c := range []struct {
		name  string
		mode  Forward
		v6    bool
		floor bool
	}{
		{"floor", ForwardIPIP, false, true},
		{"ipip", ForwardIPIP, false, false},
		{"ipip6", ForwardIPIP, true, false},
		{"gue", ForwardGUE, false, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			svc := Service{VIP: vip(c.v6, 80), Proto: TCP}
			if err := lb.SetService(svc, encapBackends(3, c.v6), ServiceOptions{Forward: c.mode, Source: source(c.v6)}); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = lb.DeleteService(svc) }()
			ipLen := 20
			if c.v6 {
				ipLen = 40
			}
			// One byte more than fits.
			l3 := fixtureMTU - c.mode.overhead(map[bool]int{false: 4, true: 6}[c.v6]) + 1
			in := packet(client(c.v6, 5000), svc.VIP, 6, make([]byte, l3-ipLen-20))
			if !c.v6 {
				in[14+6] = 0x40 // DF
				binary.BigEndian.PutUint16(in[14+10:], 0)
				binary.BigEndian.PutUint16(in[14+10:], xdptest.Checksum(in[14:34]))
			}
			prog, want := lb.objs.XdpMaglev, uint32(xdpTX)
			if c.floor {
				prog, want = passProg(b), xdpPass
			}
			before, err := lb.Stats()
			if err != nil {
				b.Fatal(err)
			}
			runOnce(b, f, prog, in, want)
			after, err := lb.Stats()
			if err != nil {
				b.Fatal(err)
			}
			if got := after.ICMP.TooBig - before.ICMP.TooBig; !c.floor && got < uint64(b.N) {
				b.Fatalf("of %d packets, %d answered", b.N, got)
			}
		})
	}
}
