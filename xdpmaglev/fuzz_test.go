package xdpmaglev

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"
)

// refParse is the data plane's parse (bpf/parse.h) written plainly, for
// FuzzProgram: the flow of a packet the program would look up (for an ICMP
// error about a flow from a VIP, that flow, and icmp set), or the counter
// of the reason it is not forwarded; and, once its IP header was read
// whole, its IP destination and protocol, which decide whether a packet
// that is not forwarded is to a VIP.
func refParse(b []byte) (src, dst netip.AddrPort, proto uint8, icmp bool, reason string, ipDst netip.Addr, ipProto uint8) {
	src, dst, proto, icmp, reason = refParse0(b, &ipDst, &ipProto)
	return
}

func refParse0(b []byte, ipDst *netip.Addr, ipProto *uint8) (src, dst netip.AddrPort, proto uint8, icmp bool, reason string) {
	if len(b) < 14 {
		return src, dst, 0, false, "pass_truncated"
	}
	l3 := b[14:]
	var l4 []byte
	var ipLen int
	switch binary.BigEndian.Uint16(b[12:]) {
	case 0x0800:
		if len(l3) < 20 {
			return src, dst, 0, false, "pass_truncated"
		}
		if l3[0]>>4 != 4 || l3[0]&0xf < 5 {
			return src, dst, 0, false, "pass_malformed"
		}
		*ipDst, *ipProto = netip.AddrFrom4([4]byte(l3[16:20])), l3[9]
		proto = l3[9]
		if proto != 6 && proto != 17 && proto != 1 {
			return src, dst, 0, false, "pass_not_tcp_udp"
		}
		if binary.BigEndian.Uint16(l3[6:])&0x3fff != 0 {
			return src, dst, 0, false, "pass_fragment"
		}
		if l3[0]&0xf != 5 {
			return src, dst, 0, false, "pass_ip_options"
		}
		src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(l3[12:16])), 0)
		dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(l3[16:20])), 0)
		l4 = l3[20:]
		ipLen = int(binary.BigEndian.Uint16(l3[2:]))
		if proto == 1 {
			if len(l4) < 8 {
				return src, dst, 0, false, "pass_truncated"
			}
			if l4[0] != 3 {
				return src, dst, 0, false, "pass_not_tcp_udp"
			}
			q := l4[8:]
			if len(q) < 28 {
				return src, dst, 0, false, "pass_truncated"
			}
			if q[0] != 0x45 {
				return src, dst, 0, false, "pass_malformed"
			}
			if q[9] != 6 && q[9] != 17 {
				return src, dst, 0, false, "pass_not_tcp_udp"
			}
			if !bytes.Equal(q[12:16], l3[16:20]) {
				return src, dst, 0, false, "pass_not_tcp_udp"
			}
			src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(q[16:20])), binary.BigEndian.Uint16(q[22:]))
			dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(q[12:16])), binary.BigEndian.Uint16(q[20:]))
			proto, icmp = q[9], true
		}
	case 0x86dd:
		if len(l3) < 40 {
			return src, dst, 0, false, "pass_truncated"
		}
		if l3[0]>>4 != 6 {
			return src, dst, 0, false, "pass_malformed"
		}
		*ipDst, *ipProto = netip.AddrFrom16([16]byte(l3[24:40])), l3[6]
		proto = l3[6]
		src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(l3[8:24])), 0)
		dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(l3[24:40])), 0)
		l4 = l3[40:]
		ipLen = 40 + int(binary.BigEndian.Uint16(l3[4:]))
		switch {
		case proto == 6 || proto == 17:
		case proto == 58:
			if len(l4) < 8 {
				return src, dst, 0, false, "pass_truncated"
			}
			if l4[0] != 1 && l4[0] != 2 {
				return src, dst, 0, false, "pass_not_tcp_udp"
			}
			q := l4[8:]
			if len(q) < 48 {
				return src, dst, 0, false, "pass_truncated"
			}
			if q[0]>>4 != 6 {
				return src, dst, 0, false, "pass_malformed"
			}
			if q[6] != 6 && q[6] != 17 {
				return src, dst, 0, false, "pass_not_tcp_udp"
			}
			if !bytes.Equal(q[8:24], l3[24:40]) {
				return src, dst, 0, false, "pass_not_tcp_udp"
			}
			src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(q[24:40])), binary.BigEndian.Uint16(q[42:]))
			dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(q[8:24])), binary.BigEndian.Uint16(q[40:]))
			proto, icmp = q[6], true
		case proto == 44:
			return src, dst, 0, false, "pass_fragment"
		case slices.Contains([]uint8{0, 43, 51, 60, 135, 139, 140, 253, 254}, proto):
			return src, dst, 0, false, "pass_ipv6_ext"
		default:
			return src, dst, 0, false, "pass_not_tcp_udp"
		}
	case 0x8100, 0x88a8:
		return src, dst, 0, false, "pass_vlan"
	default:
		return src, dst, 0, false, "pass_not_ip"
	}
	if !icmp {
		if (proto == 6 && len(l4) < 20) || (proto == 17 && len(l4) < 8) {
			return src, dst, 0, false, "pass_truncated"
		}
		if proto == 6 && l4[12]>>4 < 5 {
			return src, dst, 0, false, "pass_malformed"
		}
		src = netip.AddrPortFrom(src.Addr(), binary.BigEndian.Uint16(l4[0:]))
		dst = netip.AddrPortFrom(dst.Addr(), binary.BigEndian.Uint16(l4[2:]))
	}
	hdr := 20
	if binary.BigEndian.Uint16(b[12:]) == 0x86dd {
		hdr = 40
	}
	if ipLen > len(l3) || ipLen < hdr+8 {
		return src, dst, 0, false, "pass_malformed"
	}
	return src, dst, proto, icmp, ""
}

// vips are the VIPs of the tests' services (vip below).
var vips = []netip.Addr{vip(false, 0).Addr(), vip(true, 0).Addr()}

func toVIP(a netip.Addr) bool { return slices.Contains(vips, a) }

// vipReason is the counter of a packet to a VIP that the program does not
// forward for reason (a pass_ counter), of IP protocol proto: it is
// dropped (bpf/vip.h).
func vipReason(reason string, proto uint8) string {
	switch {
	case reason == "pass_no_service":
		return "drop_vip_no_service"
	case reason == "pass_fragment":
		return "drop_vip_fragment"
	case proto == 1 || proto == 58:
		return "drop_vip_icmp"
	}
	return "drop_vip_other"
}

// FuzzProgram sends random frames through the program: it never fails
// (no XDP_ABORTED, no error), passes a frame unchanged or forwards it with
// only its MACs rewritten, to the backend the Go side predicts, or drops a
// packet to a VIP that it does not forward, and counts the verdict the
// plain parser above expects.
func FuzzProgram(f *testing.F) {
	lb := newLB(f, Options{Seed: 99})
	bs4, bs6 := testBackends(1, 4, false), testBackends(1, 4, true)
	svcs := map[Service][]Backend{}
	for _, v6 := range []bool{false, true} {
		for _, proto := range []Proto{TCP, UDP} {
			bs := bs4
			if v6 {
				bs = bs6
			}
			svc := Service{VIP: vip(v6, 80), Proto: proto}
			if err := lb.SetService(svc, bs, ServiceOptions{}); err != nil {
				f.Fatal(err)
			}
			svcs[svc] = bs
		}
	}
	// Seeds: a packet of each service, and the tricky cases of the
	// tests above.
	for svc := range svcs {
		v6 := svc.VIP.Addr().Is6()
		f.Add(packet(client(v6, 1234), svc.VIP, uint8(svc.Proto), []byte("payload")))
	}
	f.Add(packet(client(false, 1), netip.MustParseAddrPort("198.19.255.2:80"), 6, nil)) // no service
	f.Add(packet(client(false, 1), vip(false, 80), 1, nil))                             // ICMP
	f.Add(icmpAbout(Service{VIP: vip(false, 80), Proto: TCP}, client(false, 7), false)) // ICMP errors about a flow
	f.Add(icmpAbout(Service{VIP: vip(true, 80), Proto: UDP}, client(true, 7), true))
	doff := packet(client(false, 9), vip(false, 80), 6, nil)
	doff[14+20+12] = 4 << 4
	f.Add(doff)                                                                  // a TCP data offset below 5
	f.Add(packet(client(false, 9), vip(false, 80), 17, []byte("cut"))[:14+20+8]) // IP length beyond the frame
	f.Add(packet(client(true, 1), vip(true, 80), 44, make([]byte, 16)))          // IPv6 fragment
	f.Add(packet(client(true, 1), vip(true, 80), 0, make([]byte, 16)))           // hop-by-hop
	opts := packet(client(false, 9), vip(false, 80), 6, nil)
	opts[14] = 0x46
	f.Add(slices.Insert(opts, 34, 1, 1, 1, 0)) // IPv4 options
	f.Add(packet(client(false, 9), vip(false, 80), 17, nil)[:40])
	f.Add(make([]byte, 14))

	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 1514 {
			in = in[:1514]
		}
		before := counters(t, lb)
		v, out, err := lb.objs.XdpMaglev.Test(in)
		if len(in) < 14 {
			if err == nil {
				t.Fatalf("the kernel ran the program on %d bytes", len(in))
			}
			return
		}
		if err != nil {
			t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
		}
		d := delta(before, counters(t, lb))
		src, dst, proto, icmp, reason, ipDst, ipProto := refParse(in)
		svc := Service{VIP: dst, Proto: Proto(proto)}
		bs, ok := svcs[svc]
		if reason == "" && !ok {
			reason = "pass_no_service"
			if icmp {
				reason = "pass_not_tcp_udp"
			}
		}
		if reason != "" {
			verdict := uint32(xdpPass)
			if toVIP(ipDst) {
				verdict, reason = xdpDrop, vipReason(reason, ipProto)
			}
			if v != verdict || !bytes.Equal(in, out) {
				t.Fatalf("%x: verdict %d, want %d unchanged (%s)", in, v, verdict, reason)
			}
			if len(d) != 1 || d[reason] != 1 {
				t.Fatalf("%x: counters moved %v, want %s by 1", in, d, reason)
			}
			return
		}
		name := lb.Table(svc).LookupHash(FlowHash(99, src, dst, proto))
		want := bs[slices.IndexFunc(bs, func(b Backend) bool { return b.Addr.String() == name })].HW
		if v != xdpTX || len(out) != len(in) || !bytes.Equal(out[12:], in[12:]) ||
			!bytes.Equal(out[:6], want) || !bytes.Equal(out[6:12], lbMAC) {
			t.Fatalf("%x: verdict %d, out %x; want XDP_TX to %v", in, v, out, net.HardwareAddr(want))
		}
		if d["tx"] != 1 || d["conntrack_hit"]+d["conntrack_miss"] != 1 || (d["icmp_forwarded"] == 1) != icmp {
			t.Fatalf("%x: counters moved %v, want tx and a conntrack hit or miss", in, d)
		}
	})
}
