package xdpmaglev

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
	"golang.org/x/sys/unix"
)

// TestSYNRules: which TCP SYNs leave a flow's conntrack entry for the
// table. 400 flows of each family are established on four backends; then
// backend 0 drains (weight 0) and a fifth joins, which moves about a
// fifth of the slots. A SYN on the tuple of a flow whose backend drains
// goes to the table's backend, and the flow's next packets follow it there
// (the entry was replaced), while a packet without SYN of such a flow
// stays on the draining backend. A SYN, or a SYN with ACK, on the tuple of
// a live flow whose backend is in service follows the entry, even where
// the table now names another backend: a spoofed SYN that quotes the tuple
// cannot move the flow. After the client's FIN or RST, a SYN on the tuple
// goes to the table. The counters say so.
func TestSYNRules(t *testing.T) {
	lb := newLB(t, Options{})
	for _, v6 := range []bool{false, true} {
		svc := Service{VIP: vip(v6, 443), Proto: TCP}
		bs := testBackends(1, 4, v6)
		if err := lb.SetService(svc, bs, ServiceOptions{}); err != nil {
			t.Fatal(err)
		}
		const n = 400
		first := make([]net.HardwareAddr, n)
		for p := range n {
			c := client(v6, uint16(20000+p))
			first[p] = predict(t, lb, svc, bs, c)
			wantForward(t, lb, packet(c, svc.VIP, 6, nil), first[p])
		}
		next := testBackends(1, 5, v6)
		next[0].Weight = 0
		if err := lb.SetService(svc, next, ServiceOptions{}); err != nil {
			t.Fatal(err)
		}
		before := counters(t, lb)
		drained, moved, closed := 0, 0, 0
		for p := range n {
			c := client(v6, uint16(20000+p))
			ack := packet(c, svc.VIP, 6, nil)
			syn := tcpFlags(ack, xdptest.FlagSYN)
			was, now := first[p], predict(t, lb, svc, next, c)
			if bytes.Equal(was, next[0].HW) {
				drained++
				if p%2 == 0 {
					wantForward(t, lb, ack, was) // its flow drains on the backend
				}
				wantForward(t, lb, syn, now) // a new connection
				wantForward(t, lb, ack, now) // and its next packets
				continue
			}
			if !bytes.Equal(now, was) {
				moved++
			}
			wantForward(t, lb, syn, was)                                            // a retransmitted, or spoofed, SYN
			wantForward(t, lb, tcpFlags(ack, xdptest.FlagSYN|xdptest.FlagACK), was) // not a new connection
			end := byte(xdptest.FlagFIN | xdptest.FlagACK)
			if p%2 == 1 {
				end = xdptest.FlagRST
			}
			wantForward(t, lb, tcpFlags(ack, end), was)
			closed++
			wantForward(t, lb, syn, now)
			wantForward(t, lb, ack, now)
		}
		if drained == 0 || moved == 0 {
			t.Fatalf("IPv6 %v: %d flows on the drained backend, %d live flows on moved slots: the test shows nothing", v6, drained, moved)
		}
		d := delta(before, counters(t, lb))
		if d["conntrack_reopen"] != uint64(drained+closed) || d["conntrack_closed"] != uint64(closed) || d["conntrack_stale"] != 0 {
			t.Errorf("IPv6 %v: counters moved %v; want %d reopened, %d closed, no stale", v6, d, drained+closed, closed)
		}
		if err := lb.DeleteService(svc); err != nil {
			t.Fatal(err)
		}
	}
}

// inject writes frames on the router's link to the load balancer, as
// packets the router forwards there (AF_PACKET, its MACs written in).
func (r *routed) inject(t *testing.T, frames [][]byte) { r.injectOn(t, "r-lb", r.lbNS, frames) }

// injectOn writes frames on the router's port dev, to the eth0 of
// namespace ns at its other end, the router's MAC as their source.
func (r *routed) injectOn(t *testing.T, dev, ns string, frames [][]byte) {
	t.Helper()
	dst := xdptest.Interface(t, ns, "eth0").HardwareAddr
	src := xdptest.Interface(t, r.router, dev).HardwareAddr
	out := make([][]byte, len(frames))
	for i, f := range frames {
		out[i] = slices.Clone(f)
		copy(out[i][0:6], dst)
		copy(out[i][6:12], src)
	}
	xdptest.Send(t, r.router, dev, out...)
}

// TestSpoofedSYN: 50 long-lived connections through the VIP; a fourth
// backend joins, which moves some of their slots; then a SYN that quotes
// each one's tuple, as an attacker who guesses it would send, reaches the
// load balancer. Every connection keeps working: a SYN on a live flow
// whose backend is in service follows the flow's entry (Katran's rule, a
// SYN always ignores conntrack, would send the moved ones to their new
// slot's backend, which resets them).
func TestSpoofedSYN(t *testing.T) {
	r := newRouted(t)
	svc := Service{VIP: r.vip(false, 80), Proto: TCP}
	bs := []Backend{{Addr: r.addrs4[0], Weight: 1}, {Addr: r.addrs4[1], Weight: 1}, {Addr: r.addrs4[2], Weight: 1}}
	if err := r.lb.SetService(svc, bs, ServiceOptions{Forward: ForwardGUE}); err != nil {
		t.Fatal(err)
	}
	const n = 50
	var conns []*conn
	for p := range n {
		cn, err := r.dial(svc.VIP, 43000+p)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cn.Close() }()
		conns = append(conns, cn)
	}
	before := map[int]string{}
	for p := range n {
		before[p] = r.predict(svc.VIP, 43000+p)
	}
	if err := r.lb.SetService(svc, append(bs, Backend{Addr: r.addrs4[3], Weight: 1}), ServiceOptions{Forward: ForwardGUE}); err != nil {
		t.Fatal(err)
	}
	moved := 0
	var frames [][]byte
	for p := range n {
		if r.predict(svc.VIP, 43000+p) != before[p] {
			moved++
		}
		syn := tcpFlags(packet(netip.AddrPortFrom(routedClient4, uint16(43000+p)), svc.VIP, 6, nil), xdptest.FlagSYN)
		frames = append(frames, syn)
	}
	if moved == 0 {
		t.Fatal("no connection's slot moved: the test shows nothing")
	}
	st0, err := r.lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	r.inject(t, frames)
	for p, cn := range conns {
		if err := cn.echo("after"); err != nil {
			t.Errorf("connection from port %d (on %s, its slot moved: %v) broke after a spoofed SYN: %v", 43000+p, cn.backend, r.predict(svc.VIP, 43000+p) != before[p], err)
		}
	}
	st1, err := r.lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if d := st1.Conntrack.Reopened - st0.Conntrack.Reopened; d != 0 {
		t.Errorf("%d spoofed SYNs moved a flow", d)
	}
	t.Logf("%d connections, %d on moved slots: every one survived %d spoofed SYNs", n, moved, n)
}

// TestDrainReusedPorts: 60 connections from fixed client ports, then
// closed (a NATed client population reuses its ports all day), and 20
// more kept open; the backend most of them reached drains. Reconnects
// from the same ports reach only the backends in service, none the
// drained one, while the open connections on the drained backend go on.
func TestDrainReusedPorts(t *testing.T) {
	packetsOnly(t)
	r := newRouted(t)
	svc := Service{VIP: r.vip(false, 80), Proto: TCP}
	var bs []Backend
	for _, a := range r.addrs4 {
		bs = append(bs, Backend{Addr: a, Weight: 1})
	}
	if err := r.lb.SetService(svc, bs, ServiceOptions{Forward: ForwardGUE}); err != nil {
		t.Fatal(err)
	}
	const n, open = 60, 20
	on := map[string]int{}
	for p := range n {
		cn, err := r.dialReuse(svc.VIP, 44000+p)
		if err != nil {
			t.Fatal(err)
		}
		on[cn.backend]++
		if p%2 == 0 {
			_ = cn.Close() // FIN
		} else {
			_ = cn.Conn.(*net.TCPConn).SetLinger(0) // RST: no TIME_WAIT, the port at once free
			_ = cn.Close()
		}
	}
	var kept []*conn
	for p := range open {
		cn, err := r.dial(svc.VIP, 45000+p)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cn.Close() }()
		kept = append(kept, cn)
	}
	drained := r.addrs4[0].String()
	if on[drained] == 0 {
		t.Fatalf("no connection reached %s: %v", drained, on)
	}
	bs[0].Weight = 0
	if err := r.lb.SetService(svc, bs, ServiceOptions{Forward: ForwardGUE}); err != nil {
		t.Fatal(err)
	}
	// The ports closed by FIN are in TIME_WAIT at the client: reused after
	// a second, with timestamps (tcp_tw_reuse).
	xdptest.Sysctl(r.t, r.client, "net.ipv4.tcp_tw_reuse", "1")
	time.Sleep(1100 * time.Millisecond)
	again := map[string]int{}
	for p := range n {
		cn, err := r.dialReuse(svc.VIP, 44000+p)
		if err != nil {
			t.Fatal(err)
		}
		again[cn.backend]++
		_ = cn.Conn.(*net.TCPConn).SetLinger(0)
		_ = cn.Close()
	}
	if again[drained] != 0 {
		t.Errorf("%d of %d reconnects from reused ports reached the drained backend %s (%v)", again[drained], n, drained, again)
	}
	onDrained := 0
	for _, cn := range kept {
		if cn.backend == drained {
			onDrained++
		}
		if err := cn.echo("draining"); err != nil {
			t.Errorf("an open connection on %s broke: %v", cn.backend, err)
		}
	}
	t.Logf("before the drain %v; reconnects from the same ports %v; %d open connections on the drained backend kept", on, again, onDrained)
}

// dialReuse is dial with SO_REUSEADDR, so that the port may be dialled
// from again while the client holds the connection's TIME_WAIT (with
// tcp_tw_reuse).
func (r *routed) dialReuse(vip netip.AddrPort, port int) (*conn, error) {
	c, err := xdptest.In(r.client, func() (net.Conn, error) {
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(routedClient4, uint16(port))),
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) })
				return errors.Join(err, serr)
			}}
		return d.Dial("tcp", vip.String())
	})
	if err != nil {
		return nil, fmt.Errorf("port %d: %w", port, err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // a bound, not a check
	br := bufio.NewReader(c)
	name, err := br.ReadString('\n')
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("port %d: reading the backend's name: %w", port, err)
	}
	return &conn{Conn: c, r: br, backend: strings.TrimSpace(name)}, nil
}

// withIPv4Checksum returns the frame with its IPv4 header's checksum
// filled in, as routers check it.
func withIPv4Checksum(f []byte) []byte {
	f = slices.Clone(f)
	if f[12] == 0x08 {
		f[14+10], f[14+11] = 0, 0
		c := xdptest.Checksum(f[14 : 14+20])
		f[14+10], f[14+11] = byte(c>>8), byte(c)
	}
	return f
}

// seen returns how many times the load balancer's program saw packets
// since before: every verdict counted once, but for the verdicts of the
// namespaces' own link traffic (ARP, MLD reports with their hop-by-hop
// header, neighbour discovery), which the kernel sends when it
// pleases and no test packet can turn into.
func seen(before, after map[string]uint64) uint64 {
	n := uint64(0)
	for k, v := range delta(before, after) {
		switch k {
		case "pass_not_ip", "pass_ipv6_ext", "pass_not_tcp_udp":
			continue
		}
		if k == "tx" || strings.HasPrefix(k, "pass_") || strings.HasPrefix(k, "drop_") {
			n += v
		}
	}
	return n
}

// TestNoLoops: packets to a VIP that no service takes (another port or
// protocol, ICMP, fragments), IPv4 and IPv6, sent to the load balancer as
// the router would, are each seen once by it, dropped and counted by
// reason, never routed back: the load balancer's kernel does not hold the
// VIP and forwards, so a passed packet would go back to the router, which
// routes the VIP to the load balancer again, until its TTL ran out. The
// same packet to an address the router sends to the load balancer that is
// no VIP does loop, which shows what the test measures.
func TestNoLoops(t *testing.T) {
	packetsOnly(t)
	r := newRouted(t)
	for _, v6 := range []bool{false, true} {
		r.set(t, Service{VIP: r.vip(v6, 80), Proto: TCP}, ForwardGUE)
	}
	c4, c6 := netip.AddrPortFrom(routedClient4, 5000), netip.AddrPortFrom(routedClient6, 5000)
	frag := func(b []byte, off uint16) []byte { // MF, at the offset in 8-byte units
		b = slices.Clone(b)
		b[14+6], b[14+7] = byte(0x20|off>>8), byte(off)
		return b
	}
	cases := []struct {
		name, reason string
		in           []byte
	}{
		{"UDP to another port", "drop_vip_no_service", packet(c4, r.vip(false, 9999), 17, []byte("query"))},
		{"TCP to another port", "drop_vip_no_service", packet(c4, r.vip(false, 81), 6, nil)},
		{"UDP to the TCP service's port", "drop_vip_no_service", packet(c4, r.vip(false, 80), 17, []byte("query"))},
		{"IPv6 UDP to another port", "drop_vip_no_service", packet(c6, r.vip(true, 9999), 17, []byte("query"))},
		{"ICMP echo", "drop_vip_icmp", packet(c4, r.vip(false, 0), 1, []byte{8, 0, 0, 0, 0, 1, 0, 1})},
		{"ICMPv6 echo", "drop_vip_icmp", packet(c6, r.vip(true, 0), 58, []byte{128, 0, 0, 0, 0, 1, 0, 1})},
		{"first fragment", "drop_vip_fragment", frag(packet(c4, r.vip(false, 80), 17, make([]byte, 64)), 0)},
		{"later fragment", "drop_vip_fragment", frag(packet(c4, r.vip(false, 80), 17, make([]byte, 64)), 9)},
		{"GRE", "drop_vip_other", packet(c4, r.vip(false, 0), 47, make([]byte, 8))},
	}
	for _, c := range cases {
		before := counters(t, r.lb)
		r.inject(t, [][]byte{withIPv4Checksum(c.in)})
		time.Sleep(100 * time.Millisecond) // a looping packet would be seen dozens of times by then
		after := counters(t, r.lb)
		if n := seen(before, after); n != 1 || delta(before, after)[c.reason] != 1 {
			t.Errorf("%s: seen %d times (%v), want once, %s", c.name, n, delta(before, after), c.reason)
		}
	}

	// The control: an address routed to the load balancer that is no VIP.
	xdptest.IP(r.t, "-n", r.router, "route", "add", "198.19.0.99/32", "via", "198.18.2.2")
	before := counters(t, r.lb)
	r.inject(t, [][]byte{withIPv4Checksum(packet(c4, netip.MustParseAddrPort("198.19.0.99:9999"), 17, []byte("query")))})
	time.Sleep(300 * time.Millisecond)
	if n := seen(before, counters(t, r.lb)); n < 20 {
		t.Errorf("a packet to an address that is no VIP was seen %d times: it does not loop, so the test measures nothing", n)
	} else {
		t.Logf("a packet to an address routed to the load balancer that is no VIP was seen %d times (TTL 64)", n)
	}
}

// TestDecapUntrusted: GUE and IPIP packets sent straight to a backend by a
// client, bypassing the load balancer, carrying a SYN to the VIP from a
// spoofed source, are dropped by the backend's decapsulator (0
// decapsulated, all counted untrusted), while every packet the load
// balancer encapsulated to the backends was decapsulated.
func TestDecapUntrusted(t *testing.T) {
	r := newRouted(t)
	svc := Service{VIP: r.vip(false, 80), Proto: TCP}
	r.set(t, svc, ForwardGUE)
	decap := func() (sum, untrusted uint64) {
		for _, d := range r.decaps {
			st, err := d.Stats()
			if err != nil {
				t.Fatal(err)
			}
			sum += st.Decapsulated
			untrusted += st.Untrusted
		}
		return sum, untrusted
	}
	d0, _ := decap()
	st0, err := r.lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for p := range 20 {
		cn, err := r.dial(svc.VIP, 46000+p)
		if err != nil {
			t.Fatal(err)
		}
		if err := cn.echo("hello"); err != nil {
			t.Fatal(err)
		}
		_ = cn.Close()
	}
	time.Sleep(300 * time.Millisecond) // the last FINs and ACKs
	st1, err := r.lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	d1, u1 := decap()
	if fwd := st1.Forwarded - st0.Forwarded; d1-d0 != fwd || fwd == 0 {
		t.Errorf("the backends decapsulated %d packets of the %d the load balancer sent", d1-d0, fwd)
	}

	// The spoofed ones, from the client to backend 0: GUE to its port,
	// and IPIP (the client's kernel writes the outer header, protocol 4).
	inner := tcpFlags(packet(netip.MustParseAddrPort("198.18.9.9:1234"), svc.VIP, 6, nil), xdptest.FlagSYN)[14:]
	inner = withIPv4Checksum(append(make([]byte, 14), inner...))[14:]
	_, err = xdptest.In(r.client, func() (struct{}, error) {
		for _, dst := range []struct{ network, addr string }{
			{"udp", netip.AddrPortFrom(r.addrs4[0], DefaultGUEPort).String()},
			{"ip4:4", r.addrs4[0].String()},
		} {
			c, err := net.Dial(dst.network, dst.addr)
			if err != nil {
				return struct{}{}, err
			}
			for range 20 {
				if _, err := c.Write(inner); err != nil {
					_ = c.Close()
					return struct{}{}, err
				}
			}
			_ = c.Close()
		}
		return struct{}{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	d2, u2 := decap()
	if d2 != d1 || u2-u1 != 40 {
		t.Errorf("of 20 spoofed GUE and 20 IPIP packets, %d decapsulated and %d dropped as untrusted; want 0 and 40", d2-d1, u2-u1)
	}
}
