package xdpmaglev

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// TestUnresolvedBackend: an L2 backend that does not answer ARP does not
// take the service down: SetService succeeds after the resolve wait, the
// backend is out of service (reported, weight 0, only its slots moved to
// the others, as maglev.Table.Without computes) and every connection
// reaches one of the others; once it answers, the refresh brings it back
// into the full table, and connections reach it.
func TestUnresolvedBackend(t *testing.T) {
	e := newE2E(t, 4)
	e.ip(e.backends[3], "link", "set", "eth0", "down")
	e.set(t, 0, 1, 2, 3)
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
	e.ip(e.backends[3], "link", "set", "eth0", "up")
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
	e.ip(e.backends[1], "link", "set", "eth0", "address", mac.String())
	// The kernel learns it (as a gratuitous ARP or a new resolution would
	// teach it).
	e.ip(e.lbNS, "neigh", "replace", e.addrs[1].String(), "lladdr", mac.String(), "dev", "eth0", "nud", "reachable")
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

// TestContextEndsNeighbourWait: an L2 backend that does not answer ARP
// holds SetServiceOptions for up to 2 s; once Options.Context is done, it
// returns the context's error at once, and the service is not set.
func TestContextEndsNeighbourWait(t *testing.T) {
	n := newTestNet(t, "xc")
	lbNS := n.addNS("lb")
	n.join(lbNS, "p-lb", "198.18.0.3/24")
	ctx, cancel := context.WithCancel(context.Background())
	lb, err := in(lbNS, func() (*LB, error) { return Load("eth0", Options{M: 251, Context: ctx}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	svc := Service{VIP: netip.MustParseAddrPort("198.19.0.1:80"), Proto: TCP}
	errc := make(chan error, 1)
	go func() { errc <- lb.SetService(svc, []Backend{{Addr: netip.MustParseAddr("198.18.0.99"), Weight: 1}}) }()
	time.Sleep(200 * time.Millisecond) // into the wait
	cancel()
	t0 := time.Now()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("SetService: %v, want context.Canceled", err)
		}
		if d := time.Since(t0); d > 500*time.Millisecond {
			t.Errorf("SetService returned %v after the context was done", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SetService still waiting 5 s after the context was done")
	}
	if lb.Table(svc) != nil {
		t.Error("the service was set")
	}
}
