package pool_test

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/admin"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/pool"
	"github.com/maglevlb/maglev/xdpmaglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// services are one pool, as the admin API takes the running services.
type services struct {
	lb *xdpmaglev.LB
	p  *pool.Pool
}

func (s services) Pools() []*pool.Pool             { return []*pool.Pool{s.p} }
func (s services) Mode() xdpmaglev.AttachMode      { return s.lb.Mode() }
func (s services) Stats() (xdpmaglev.Stats, error) { return s.lb.Stats() }

// TestPoolAnswersDuringNeighbourWait: while the pool puts a backend whose
// MAC address nobody answers for into the data plane (SetService
// waits for ARP, seconds), the admin API's backends page answers, and it
// answers before that wait ends: the pool's state lock is not held across
// it.
func TestPoolAnswersDuringNeighbourWait(t *testing.T) {
	xdptest.Need(t)
	ns := xdptest.VethNS(t, "l4lbp")
	lb, err := xdptest.In(ns, func() (*xdpmaglev.LB, error) { return xdpmaglev.Load("v0", xdpmaglev.Options{}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	svc := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}
	p := pool.New(lb, config.Service{Name: "default", Svc: svc, Timeout: time.Second}, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(p.Close)
	mux := http.NewServeMux()
	admin.Register(mux, services{lb, p}, nil, nil)
	applyMu := pool.ApplyMu(p)

	done := make(chan error, 1)
	go func() {
		// 198.18.0.50 is on v0's segment, and nothing holds it.
		done <- p.SetMembers(map[netip.Addr]pool.Member{
			netip.MustParseAddr("198.18.0.11"): {Weight: 1, HW: net.HardwareAddr{2, 0, 0, 0, 0, 0x11}},
			netip.MustParseAddr("198.18.0.50"): {Weight: 1},
		})
	}()
	// Once the apply holds applyMu it is in, or about to be in, the wait.
	for applyMu.TryLock() {
		applyMu.Unlock()
		select {
		case err := <-done:
			t.Fatalf("setMembers returned %v before the test saw it apply", err)
		default:
		}
		runtime.Gosched()
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/maglev/backends", nil))
	if applyMu.TryLock() {
		applyMu.Unlock()
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
