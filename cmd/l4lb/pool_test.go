package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// TestPlan: what the data plane holds as backends are drained, undrained,
// deregistered and drained by weight, and when each drain ends.
func TestPlan(t *testing.T) {
	a := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}) }
	p := newPool(nil, xdpmaglev.Service{}, xdpmaglev.ServiceOptions{}, 10*time.Second, []netip.Addr{a(4)}, nil)
	t0 := time.Unix(1000, 0)
	show := func(bs []xdpmaglev.Backend) string {
		s := ""
		for _, b := range bs {
			s += fmt.Sprintf("%v=%d ", b.Addr, b.Weight)
		}
		return s
	}
	step := func(now time.Time, want string, wantNext time.Time) {
		t.Helper()
		bs, next := p.plan(now)
		if got := show(bs); got != want || !next.Equal(wantNext) {
			t.Errorf("at +%v: %q, next drain end +%v; want %q, +%v", now.Sub(t0), got, next.Sub(t0), want, wantNext.Sub(t0))
		}
		p.applied = bs
	}
	p.members = map[netip.Addr]member{a(1): {weight: 1}, a(2): {weight: 2}, a(3): {weight: 1}, a(4): {weight: 1}}
	// 198.18.0.4 is drained by the flag from the start.
	step(t0, "198.18.0.1=1 198.18.0.2=2 198.18.0.3=1 198.18.0.4=0 ", t0.Add(10*time.Second))
	// 198.18.0.2 drained through etcd (weight 0); 198.18.0.3 deregistered.
	p.members = map[netip.Addr]member{a(1): {weight: 1}, a(2): {weight: 0}, a(4): {weight: 1}}
	step(t0.Add(4*time.Second), "198.18.0.1=1 198.18.0.2=0 198.18.0.3=0 198.18.0.4=0 ", t0.Add(10*time.Second))
	// 198.18.0.4's drain ends; it stays a member, out of the service.
	step(t0.Add(10*time.Second), "198.18.0.1=1 198.18.0.2=0 198.18.0.3=0 ", t0.Add(14*time.Second))
	// Undrained: live again, and its next drain would start anew.
	delete(p.drained, a(4))
	step(t0.Add(11*time.Second), "198.18.0.1=1 198.18.0.2=0 198.18.0.3=0 198.18.0.4=1 ", t0.Add(14*time.Second))
	step(t0.Add(14*time.Second), "198.18.0.1=1 198.18.0.4=1 ", time.Time{})
	if len(p.since) != 1 { // 198.18.0.2, a member still, drained
		t.Errorf("drain start times kept: %v", p.since)
	}
	// 198.18.0.3 registers again: live at once.
	p.members[a(3)] = member{weight: 1}
	step(t0.Add(15*time.Second), "198.18.0.1=1 198.18.0.3=1 198.18.0.4=1 ", time.Time{})

	// A drain timeout of 0 takes a drained backend out at once.
	p = newPool(nil, xdpmaglev.Service{}, xdpmaglev.ServiceOptions{}, 0, nil, nil)
	p.members = map[netip.Addr]member{a(1): {weight: 1}, a(2): {weight: 1}}
	step(t0, "198.18.0.1=1 198.18.0.2=1 ", time.Time{})
	p.drained[a(2)] = true
	step(t0, "198.18.0.1=1 ", time.Time{})
}

// TestPoolAnswersDuringNeighbourWait: while the pool puts a backend whose
// MAC address nobody answers for into the data plane (SetServiceOptions
// waits for ARP, seconds), the admin API's backends page answers, and it
// answers before that wait ends: the pool's state lock is not held across
// it.
func TestPoolAnswersDuringNeighbourWait(t *testing.T) {
	need(t)
	ns := vethNS(t, "l4lbp")
	lb, err := inNS(ns, func() (*xdpmaglev.LB, error) { return xdpmaglev.Load("v0", xdpmaglev.Options{}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	svc := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}
	p := newPool(lb, svc, xdpmaglev.ServiceOptions{}, time.Second, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(p.close)
	mux := http.NewServeMux()
	b := &balancer{lb: lb, running: map[xdpmaglev.Service]*running{svc: {cfg: config.Service{Name: "default", Svc: svc}, pool: p}}}
	b.register(mux, nil)

	done := make(chan error, 1)
	go func() {
		// 198.18.0.50 is on v0's segment, and nothing holds it.
		done <- p.setMembers(map[netip.Addr]member{
			netip.MustParseAddr("198.18.0.11"): {weight: 1, hw: net.HardwareAddr{2, 0, 0, 0, 0, 0x11}},
			netip.MustParseAddr("198.18.0.50"): {weight: 1},
		})
	}()
	// Once the apply holds applyMu it is in, or about to be in, the wait.
	for p.applyMu.TryLock() {
		p.applyMu.Unlock()
		select {
		case err := <-done:
			t.Fatalf("setMembers returned %v before the test saw it apply", err)
		default:
		}
		runtime.Gosched()
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/maglev/backends", nil))
	if p.applyMu.TryLock() {
		p.applyMu.Unlock()
		t.Fatal("the backends page answered only once the data plane's update had ended")
	}
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "198.18.0.50") {
		t.Fatalf("backends page: %d %s", rec.Code, rec.Body)
	}
	// The backend that does not resolve is out of service: its slots
	// went to the other.
	if err := <-done; err != nil {
		t.Fatalf("setMembers: %v", err)
	}
	if tb := lb.Table(svc); tb == nil || tb.Counts()[tb.Index("198.18.0.11")] != tb.Size() {
		t.Fatalf("table after the wait: %v, want every slot on 198.18.0.11", tb)
	}
}
