package xdpmaglev

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// secondHeader is the GUE variant 0 header of second chance naming the
// second hop a, one hop left (bpf/headers.h).
func secondHeader(a netip.Addr, hops byte) []byte {
	if a.Is4() {
		b := []byte{2, 4, 0, 0, 'M', 'G', 1, hops}
		return append(b, a.AsSlice()...)
	}
	b := []byte{5, 41, 0, 0, 'M', 'G', 1, hops}
	return append(b, a.AsSlice()...)
}

// TestSecondChanceFixtures: a GUE service with second chance, IPv4 and
// IPv6, stateless and with conntrack, goes from three backends to four;
// each packet of a flow whose slot moved leaves as GUE variant 0 naming
// the slot's previous owner (the frame built independently here), the
// others as variant 1, as before; a flow's entry keeps its second hop for
// its later packets, even past the window. Once the window is over, new
// flows carry none. A table of another size than the first (251, then
// 65,537) takes the first's owners as second hops the same way. Second
// chance is refused for other modes, and stateless services count their
// packets.
func TestSecondChanceFixtures(t *testing.T) {
	packetsOnly(t)
	f := newFixtureNet(t)
	lb := fixtureLB(t, f, Options{FloodRate: -1})
	const window = 1500 * time.Millisecond
	for _, c := range []struct {
		v6 bool
		ct ConntrackMode
		m  int // the first table's size; the second's is the default
	}{
		{false, ConntrackOn, 0}, {false, ConntrackOff, 0}, {true, ConntrackOn, 0}, {true, ConntrackOff, 0},
		{false, ConntrackOn, 251}, {true, ConntrackOff, 251},
	} {
		v6, ct := c.v6, c.ct
		t.Run(fmt.Sprintf("v6=%v/conntrack=%v/m=%d", v6, ct, c.m), func(t *testing.T) {
			svc := Service{VIP: vip(v6, 80), Proto: TCP}
			opts := ServiceOptions{Forward: ForwardGUE, Source: source(v6), SecondChance: window, Conntrack: ct}
			first := opts
			first.M = c.m
			if err := lb.SetService(svc, encapBackends(3, v6), first); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lb.DeleteService(svc) }()
			old := lb.Table(svc)
			if err := lb.SetService(svc, encapBackends(4, v6), opts); err != nil {
				t.Fatal(err)
			}
			now := lb.Table(svc)
			changed := time.Now()
			before := counters(t, lb)
			moved, n := 0, 200
			want := func(port uint16, second bool) (in, out []byte, moved bool) {
				c := client(v6, port)
				in = packet(c, svc.VIP, 6, []byte("data"))
				h := FlowHash(lb.opts.Seed, c, svc.VIP, 6)
				to, was := netip.MustParseAddr(now.LookupHash(h)), netip.MustParseAddr(old.LookupHash(h))
				inner := in[14:]
				if second && to != was {
					inner = append(secondHeader(was, 1), inner...)
				}
				return in, encapsulated(ForwardGUE, f.mac, source(v6), to, inner, h), to != was
			}
			for port := range uint16(n) {
				in, out, m := want(2000+port, true)
				if m {
					moved++
				}
				for i := range 2 { // a new flow, then (with conntrack) an entry's
					v, got := f.run(t, lb.objs.XdpMaglev, in)
					if v != xdpTX || !bytes.Equal(got, out) {
						t.Fatalf("port %d, packet %d: verdict %d\n got % x\nwant % x", 2000+port, i, v, got, out)
					}
				}
			}
			if moved == 0 || moved == n {
				t.Fatalf("%d of %d flows on moved slots: the test shows nothing", moved, n)
			}
			if time.Since(changed) > window {
				t.Fatalf("the flows took %v, more than the window", time.Since(changed))
			}
			d := delta(before, counters(t, lb))
			if d["second_hop"] != uint64(2*moved) || (ct == ConntrackOff) != (d["stateless"] == uint64(2*n)) || (ct == ConntrackOff) != (d["conntrack_miss"] == 0) {
				t.Errorf("%d flows moved, counters moved %v", moved, d)
			}

			// Past the window: a new flow carries no second hop; one
			// with an entry keeps its own.
			time.Sleep(time.Until(changed.Add(window + 200*time.Millisecond)))
			for port := range uint16(n) {
				in, out, _ := want(3000+port, false)
				if v, got := f.run(t, lb.objs.XdpMaglev, in); v != xdpTX || !bytes.Equal(got, out) {
					t.Fatalf("port %d after the window: verdict %d\n got % x\nwant % x", 3000+port, v, got, out)
				}
				in, out, _ = want(2000+port, ct == ConntrackOn)
				if v, got := f.run(t, lb.objs.XdpMaglev, in); v != xdpTX || !bytes.Equal(got, out) {
					t.Fatalf("port %d after the window: verdict %d\n got % x\nwant % x", 2000+port, v, got, out)
				}
			}
		})
	}
	svc := Service{VIP: vip(false, 81), Proto: TCP}
	for _, o := range []ServiceOptions{
		{Forward: ForwardIPIP, Source: source(false), SecondChance: time.Minute},
		{SecondChance: time.Minute},
		{Forward: ForwardGUE, Source: source(false), SecondChance: -1},
		{Forward: ForwardGUE, Source: source(false), Conntrack: 7},
	} {
		if err := lb.SetService(svc, encapBackends(2, false), o); !errors.Is(err, ErrService) {
			t.Errorf("%+v: %v, want ErrService", o, err)
		}
	}
}

// TestDecapSecondHop: the decapsulator, given a GUE variant 0 packet that
// names a second hop, from a trusted source: a TCP packet that is no SYN
// and belongs to no connection here leaves at once for the second hop,
// its outer headers made anew (this host to the second hop, GUE variant
// 1, toward the gateway's MAC: the frame built independently here); a
// SYN, UDP, and a packet with no hops left are decapsulated here; from an
// untrusted source, dropped. The counters say so.
func TestDecapSecondHop(t *testing.T) {
	f := newFixtureNet(t)
	hostv4, hostv6 := netip.MustParseAddr("198.18.64.10"), netip.MustParseAddr("2001:db8:40::10")
	secv4, secv6 := netip.MustParseAddr("198.18.64.11"), netip.MustParseAddr("2001:db8:40::11")
	trusted := []netip.Prefix{netip.PrefixFrom(source(false), 24), netip.PrefixFrom(source(true), 64)}
	d, err := xdptest.In(f.ns, func() (*Decap, error) {
		return newDecap(DecapOptions{VIPs: []netip.Addr{vip(false, 0).Addr(), vip(true, 0).Addr()}, Hosts: []netip.Addr{hostv4, hostv6}, Sources: trusted})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	for _, v6 := range []bool{false, true} {
		host, sec := hostv4, secv4
		if v6 {
			host, sec = hostv6, secv6
		}
		const h = 0x123456789abcdef
		c := client(v6, 4000)
		ack := packet(c, vip(v6, 80), 6, []byte("data"))[14:]
		frame := func(inner []byte, hops byte) []byte {
			return encapsulated(ForwardGUE, lbMAC, source(v6), host, append(secondHeader(sec, hops), inner...), h)
		}
		// Passed on: from this host to the second hop, variant 1.
		in := frame(ack, 1)
		want := encapsulated(ForwardGUE, f.mac, host, sec, ack, h)
		if v, out := f.run(t, d.objs.XdpDecap, in); v != xdpTX || !bytes.Equal(out[:len(want)], want) {
			t.Errorf("v6=%v, no connection here: verdict %d\n got % x\nwant % x", v6, v, out, want)
		}
		// Here: a SYN, UDP, no hops left.
		udp := packet(c, vip(v6, 80), 17, []byte("data"))[14:]
		syn := tcpFlags(packet(c, vip(v6, 80), 6, []byte("data")), xdptest.FlagSYN)[14:]
		for name, inner := range map[string][]byte{"SYN": syn, "UDP": udp} {
			in := frame(inner, 1)
			want := append(append([]byte{}, in[:12]...), append([]byte{0x08, 0x00}, inner...)...)
			if v6 {
				want[12], want[13] = 0x86, 0xdd
			}
			if v, out := f.run(t, d.objs.XdpDecap, in); v != xdpPass || !bytes.Equal(out[:len(want)], want) {
				t.Errorf("v6=%v, %s: verdict %d\n got % x\nwant % x", v6, name, v, out, want)
			}
		}
		if v, _ := f.run(t, d.objs.XdpDecap, frame(ack, 0)); v != xdpPass {
			t.Errorf("v6=%v, no hops left: verdict %d, want it decapsulated here", v6, v)
		}
		untrusted := encapsulated(ForwardGUE, lbMAC, client(v6, 0).Addr(), host, append(secondHeader(sec, 1), ack...), h)
		if v, _ := f.run(t, d.objs.XdpDecap, untrusted); v != xdpDrop {
			t.Errorf("v6=%v, from an untrusted source: verdict %d, want XDP_DROP", v6, v)
		}
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.SecondHop != 2 || st.SecondLocal != 4 || st.Decapsulated != 6 || st.Untrusted != 2 || st.SecondNoRoute != 0 {
		t.Errorf("stats %+v", st)
	}
}
