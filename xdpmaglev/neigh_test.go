package xdpmaglev

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestUnresolvedBackend: an L2 backend that does not answer ARP does not
// take the service down, nor hold the update up: SetService returns within
// the resolve wait (250 ms for all the backends it asks for, where it once
// took 2 s each), the backend is out of service (Unresolved, reported,
// weight 0, only its slots moved to the others, as maglev.Table.Without
// computes) and every connection reaches one of the others; once it
// answers, the refresh brings it back into the full table, calls
// Options.Changed, and connections reach it.
func TestUnresolvedBackend(t *testing.T) {
	changed := make(chan Service, 4)
	e := newE2EOpts(t, 4, Options{Changed: func(s Service) { changed <- s }})
	xdptest.IP(e.t, "-n", e.backends[3], "link", "set", "eth0", "down")
	start := time.Now()
	e.set(t, 0, 1, 2, 3)
	if took := time.Since(start); took > time.Second {
		t.Errorf("SetService with an unresolvable backend took %v", took)
	}
	if got := e.lb.Unresolved(e.svc()); !slices.Equal(got, e.addrs[3:]) {
		t.Errorf("Unresolved %v, want %v", got, e.addrs[3:])
	}
	st, err := e.lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var unresolved []string
	for _, b := range st.Services[0].Backends {
		if b.Unresolved {
			unresolved = append(unresolved, b.Addr.String())
		}
	}
	if !slices.Equal(unresolved, []string{e.addrs[3].String()}) {
		t.Fatalf("unresolved %v, want [%v]", unresolved, e.addrs[3])
	}
	table := e.lb.Table(e.svc())
	full := e.lb.services[e.svc()].full
	want, err := full.Without(e.addrs[3].String())
	if err != nil {
		t.Fatal(err)
	}
	if table.Diff(want) != 0 {
		t.Errorf("the table in use differs from the full table without the unresolved backend in %d slots", table.Diff(want))
	}
	per, _ := e.connectAll(t, portRange(21000, 300), false)
	if per[e.addrs[3].String()] != 0 || len(per) != 3 {
		t.Errorf("300 connections reached %v: want the three resolved backends only", per)
	}

	// The backend answers again: within a few refresh rounds it is back.
	xdptest.IP(e.t, "-n", e.backends[3], "link", "set", "eth0", "up")
	deadline := time.Now().Add(10 * time.Second)
	for e.lb.Table(e.svc()).Diff(full) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the backend was not back in the table 10 s after it could answer ARP")
		}
		time.Sleep(100 * time.Millisecond)
	}
	per, _ = e.connectAll(t, portRange(22000, 300), false)
	if per[e.addrs[3].String()] == 0 {
		t.Errorf("300 connections reached %v: none the backend back in service", per)
	}
	select {
	case s := <-changed:
		if s != e.svc() {
			t.Errorf("Changed(%v), want %v", s, e.svc())
		}
	default:
		t.Error("Options.Changed was not called when the backend resolved")
	}
	if got := e.lb.Unresolved(e.svc()); got != nil {
		t.Errorf("Unresolved %v once resolved", got)
	}
}

// TestNeighbourChange: a backend that comes back with a new MAC gets
// frames at the new one once the kernel's neighbour table has it, with no
// SetService call.
func TestNeighbourChange(t *testing.T) {
	e := newE2E(t, 3)
	e.set(t, 0, 1, 2)
	if _, conns := e.connectAll(t, portRange(23000, 60), false); conns == nil {
		t.Fatal("no connections")
	}
	mac := net.HardwareAddr{0x02, 0x42, 0, 0, 0, 0x77}
	xdptest.IP(e.t, "-n", e.backends[1], "link", "set", "eth0", "address", mac.String())
	// The kernel learns it (as a gratuitous ARP or a new resolution would
	// teach it).
	xdptest.IP(e.t, "-n", e.lbNS, "neigh", "replace", e.addrs[1].String(), "lladdr", mac.String(), "dev", "eth0", "nud", "reachable")
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.lb.mu.Lock()
		hw := e.lb.services[e.svc()].backends[e.addrs[1]].hw
		e.lb.mu.Unlock()
		if slices.Equal(hw, mac) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend 1's MAC in the data plane is %v 10 s after the change, want %v", hw, mac)
		}
		time.Sleep(100 * time.Millisecond)
	}
	per, _ := e.connectAll(t, portRange(24000, 300), false)
	if per[e.addrs[1].String()] == 0 {
		t.Errorf("300 connections reached %v: none the backend with the new MAC", per)
	}
}

// TestDriverErrors: on a veth whose peer has no XDP program, every XDP_TX
// fails in the driver, which the program cannot see (it counts the frames
// forwarded); Stats.Driver reports the driver's count of them. Once the
// peer has a program, the frames go through and the count stays.
func TestDriverErrors(t *testing.T) {
	n := newTestNet(t, "xd")
	ns := n.addNS("lb")
	xdptest.Veth(t, ns, "v0", ns, "v1")
	lb, err := xdptest.In(ns, func() (*LB, error) {
		return Load("v0", Options{Mode: AttachNative, ConntrackSize: 1024, FloodRate: -1})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	svc := Service{VIP: vip(false, 80), Proto: TCP}
	if err := lb.SetService(svc, testBackends(1, 2, false), ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	v0 := xdptest.Interface(t, ns, "v0")
	send := func(count int) {
		t.Helper()
		frames := make([][]byte, count)
		for i := range frames {
			frames[i] = packet(client(false, uint16(30000+i)), svc.VIP, 6, nil)
			copy(frames[i][0:6], v0.HardwareAddr)
		}
		xdptest.Send(t, ns, "v1", frames...)
	}
	read := func() Stats {
		t.Helper()
		st, err := lb.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	wait := func(ok func(Stats) bool) Stats {
		t.Helper()
		var st Stats
		for range 50 {
			if st = read(); ok(st) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return st
	}
	st0 := read()
	send(10)
	st1 := wait(func(st Stats) bool { return st.Forwarded-st0.Forwarded >= 10 })
	if st1.Forwarded-st0.Forwarded != 10 || st1.Driver["rx_xdp_tx_errors"]-st0.Driver["rx_xdp_tx_errors"] != 10 {
		t.Errorf("10 frames: %d counted forwarded, the driver %v; want 10 forwarded and 10 rx_xdp_tx_errors", st1.Forwarded-st0.Forwarded, st1.Driver)
	}
	if d, err := lb.Driver(); err != nil || d["rx_xdp_tx_errors"] != st1.Driver["rx_xdp_tx_errors"] {
		t.Errorf("Driver() = %v, %v; Stats().Driver %v", d, err, st1.Driver)
	}
	peerPass(t, lb, ns, "v1")
	send(10)
	st2 := wait(func(st Stats) bool { return st.Forwarded-st1.Forwarded >= 10 })
	if st2.Forwarded-st1.Forwarded != 10 || st2.Driver["rx_xdp_tx_errors"] != st1.Driver["rx_xdp_tx_errors"] || st2.Driver["rx_xdp_tx"]-st1.Driver["rx_xdp_tx"] != 10 {
		t.Errorf("10 frames with a program on the peer: %d forwarded, the driver %v (before %v)", st2.Forwarded-st1.Forwarded, st2.Driver, st1.Driver)
	}
}

// TestDownNotRefreshed: a Down backend given with its MAC is out of the
// data plane, and no change for the refresh: it installs nothing and calls
// no Options.Changed for it, round after round (it did every second).
func TestDownNotRefreshed(t *testing.T) {
	changed := make(chan Service, 4)
	e := newE2EOpts(t, 2, Options{Changed: func(s Service) { changed <- s }})
	bs := []Backend{{Addr: e.addrs[0], Weight: 1}, {Addr: e.addrs[1], Weight: 1, Down: true, HW: net.HardwareAddr{2, 0, 0, 0, 0, 0x99}}}
	if err := e.lb.SetService(e.svc(), bs, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // two refresh rounds
	select {
	case s := <-changed:
		t.Errorf("Changed(%v) for a service whose only change is a Down backend's MAC", s)
	default:
	}
}
