package xdpmaglev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestRestartUnderTraffic: UDP flows from a client through the load
// balancer, attached natively on a veth with its maps pinned, while it is
// released and loaded again five times, each new LB adopting the maps
// and replacing the program on the pinned link. Every packet sent reaches
// a backend (none met no program: the kernel of the load balancer's
// namespace, which has no route to the VIP, would have dropped it), every
// flow stays on one backend, and the counters count every packet across
// the six LBs. Then Detach removes what the last one left, and a pinned
// LB's Close detaches and removes its pins.
func TestRestartUnderTraffic(t *testing.T) {
	n := newTestNet(t, "xp")
	dir := bpffs(t)
	vipAddr := netip.MustParseAddrPort("198.19.0.1:9000")
	cl := n.addNS("cl")
	n.join(cl, "p-cl", "198.18.0.2/24")
	xdptest.IP(n.t, "-n", cl, "route", "add", vipAddr.Addr().String()+"/32", "via", "198.18.0.3")
	n.exec(cl, "ethtool", "-K", "eth0", "tx", "off")
	lbNS := n.addNS("lb")
	n.join(lbNS, "p-lb", "198.18.0.3/24")
	var bs []Backend
	var mu sync.Mutex
	got := map[uint16]map[string]int{} // packets by source port, by backend
	var received atomic.Int64
	for i := range 2 {
		ns := n.addNS(fmt.Sprintf("be%d", i))
		addr := netip.AddrFrom4([4]byte{198, 18, 0, byte(11 + i)})
		n.join(ns, fmt.Sprintf("p-be%d", i), addr.String()+"/24")
		xdptest.IP(n.t, "-n", ns, "addr", "add", vipAddr.Addr().String()+"/32", "dev", "lo")
		for _, dev := range []string{"all", "eth0"} {
			xdptest.Sysctl(n.t, ns, "net.ipv4.conf."+dev+".arp_ignore", "1")
			xdptest.Sysctl(n.t, ns, "net.ipv4.conf."+dev+".arp_announce", "2")
		}
		bs = append(bs, Backend{Addr: addr, Weight: 1})
		pc, err := xdptest.In(ns, func() (net.PacketConn, error) { return net.ListenPacket("udp4", ":9000") })
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		t.Cleanup(func() { _ = pc.Close(); wg.Wait() })
		wg.Go(func() {
			buf := make([]byte, 64)
			for {
				_, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				port := uint16(from.(*net.UDPAddr).Port)
				mu.Lock()
				if got[port] == nil {
					got[port] = map[string]int{}
				}
				got[port][addr.String()]++
				mu.Unlock()
				received.Add(1)
			}
		})
	}

	svc := Service{VIP: vipAddr, Proto: UDP}
	opts := Options{PinPath: dir, Seed: 5, M: 1021, ConntrackSize: 1 << 12, MaxServices: 2, MaxBackends: 8, Mode: AttachNative}
	start := func() *LB {
		t.Helper()
		t0 := time.Now()
		lb, err := xdptest.In(lbNS, func() (*LB, error) { return Load("eth0", opts) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lb.Close() }) // nothing after Release or Close
		loaded := time.Since(t0)
		if err := lb.SetService(svc, bs, ServiceOptions{}); err != nil {
			t.Fatal(err)
		}
		if lb.Mode() != AttachNative {
			t.Fatalf("attached %v, want native", lb.Mode())
		}
		t.Logf("Load %v (adopted %v), SetService %v", loaded.Round(time.Millisecond), lb.Adopted(), (time.Since(t0) - loaded).Round(time.Millisecond))
		return lb
	}
	lb := start()
	peerPass(t, lb, n.sw, "p-lb")
	info, err := lb.link.Info()
	if err != nil {
		t.Fatal(err)
	}

	// 8 flows, a packet each every 2 ms or so.
	stop := make(chan struct{})
	var sent atomic.Int64
	sendErr := make(chan error, 1)
	go func() {
		_, err := xdptest.In(cl, func() (struct{}, error) {
			var conns []*net.UDPConn
			defer func() {
				for _, c := range conns {
					_ = c.Close()
				}
			}()
			for i := range 8 {
				c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(198, 18, 0, 2), Port: 31000 + i}, net.UDPAddrFromAddrPort(vipAddr))
				if err != nil {
					return struct{}{}, err
				}
				conns = append(conns, c)
			}
			var b [8]byte
			for seq := uint64(0); ; seq++ {
				select {
				case <-stop:
					return struct{}{}, nil
				default:
				}
				binary.BigEndian.PutUint64(b[:], seq)
				if _, err := conns[seq%8].Write(b[:]); err != nil {
					return struct{}{}, err
				}
				sent.Add(1)
				if seq%8 == 7 {
					time.Sleep(2 * time.Millisecond)
				}
			}
		})
		sendErr <- err
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 3 s (sent %d, received %d)", what, sent.Load(), received.Load())
			}
		}
	}
	waitFor("the first packets", func() bool { return received.Load() > 100 })
	for range 5 {
		time.Sleep(100 * time.Millisecond)
		if err := lb.Release(); err != nil {
			t.Fatal(err)
		}
		lb = start()
		if !lb.Adopted() {
			t.Fatal("the pinned maps were not adopted")
		}
		now, err := lb.link.Info()
		if err != nil {
			t.Fatal(err)
		}
		if now.ID != info.ID || now.Program == info.Program {
			t.Fatalf("link %d with program %d after the restart, link %d with program %d before: want the link's program replaced", now.ID, now.Program, info.ID, info.Program)
		}
		info = now
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	waitFor("every packet at a backend", func() bool { return received.Load() == sent.Load() })
	st, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Services[0].Packets != uint64(sent.Load()) || st.Forwarded != uint64(sent.Load()) {
		t.Fatalf("the counters say %d packets forwarded, %d for the service, and %d were sent", st.Forwarded, st.Services[0].Packets, sent.Load())
	}
	mu.Lock()
	for port, per := range got {
		if len(per) != 1 {
			t.Errorf("flow from port %d reached %v: more than one backend", port, per)
		}
	}
	flows := len(got)
	mu.Unlock()
	if flows != 8 {
		t.Fatalf("%d flows reached the backends, want 8", flows)
	}
	t.Logf("5 restarts under %d packets of 8 flows: every one reached its flow's one backend, and the counters count all %d", sent.Load(), st.Services[0].Packets)

	// What the last LB left, Detach removes: the program leaves eth0.
	if err := lb.Release(); err != nil {
		t.Fatal(err)
	}
	removed, err := Detach(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, filepath.Join(dir, linkPin)) || !slices.Contains(removed, filepath.Join(dir, "conntrack4")) {
		t.Fatalf("Detach removed %v: no link or no conntrack", removed)
	}
	attached := func() AttachMode {
		t.Helper()
		m, err := xdptest.In(lbNS, func() (AttachMode, error) {
			ifc, err := net.InterfaceByName("eth0")
			if err != nil {
				return AttachNone, err
			}
			return xdpMode(ifc.Index)
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := attached(); m != AttachNone {
		t.Fatalf("after Detach, eth0 has a program attached %v", m)
	}

	// A pinned LB's Close detaches, and removes the pins.
	lb = start()
	if lb.Adopted() {
		t.Fatal("adopted after Detach")
	}
	if m := attached(); m != AttachNative {
		t.Fatalf("eth0's program: %v, want native", m)
	}
	if err := lb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Close, PinPath: %v", err)
	}
	if m := attached(); m != AttachNone {
		t.Fatalf("after Close, eth0 has a program attached %v", m)
	}
}
