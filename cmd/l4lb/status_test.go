package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/xdpmaglev"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"golang.org/x/sys/unix"
)

// logBuffer collects log records for a test, safe for the goroutines
// that log.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// await waits up to 10 s for the log to have s, and returns the log.
func (l *logBuffer) await(t *testing.T, s string) string {
	t.Helper()
	for range 200 {
		if out := l.String(); strings.Contains(out, s) {
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the log has no %q in 10 s:\n%s", s, l.String())
	return ""
}

// TestUnresolvedStatus: a backend given without a MAC that nobody answers
// ARP for is out of service, and says so: its update returns within the
// data plane's wait (250 ms for all of them: it was 2 s each), its state
// is unresolved (not live) in the admin API and in the metric
// maglev.l4lb.backend.state, and the status line counts it unresolved, at
// level WARN, naming it. Once the neighbour table has its MAC, the data
// plane takes it back, and the pool says so in a status line, live.
func TestUnresolvedStatus(t *testing.T) {
	need(t)
	ns := vethNS(t, "l4lbu")
	var log logBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	var b *balancer
	var mu sync.Mutex
	lb, err := inNS(ns, func() (*xdpmaglev.LB, error) {
		return xdpmaglev.Load("v0", xdpmaglev.Options{Changed: func(s xdpmaglev.Service) {
			mu.Lock()
			defer mu.Unlock()
			b.resolved(s)
		}})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	svc := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}
	p := newPool(lb, svc, xdpmaglev.ServiceOptions{}, time.Second, nil, logger)
	t.Cleanup(p.close)
	mu.Lock()
	if b, err = newBalancer(context.Background(), lb, mp, nil, logger); err != nil {
		t.Fatal(err)
	}
	b.running[svc] = &running{cfg: config.Service{Name: "default", Svc: svc}, pool: p}
	mu.Unlock()

	// Three addresses on v0's segment that nothing holds.
	members := map[netip.Addr]member{netip.MustParseAddr("198.18.0.11"): {weight: 1, hw: net.HardwareAddr{2, 0, 0, 0, 0, 0x11}}}
	for _, last := range []byte{50, 51, 52} {
		members[netip.AddrFrom4([4]byte{198, 18, 0, last})] = member{weight: 1}
	}
	start := time.Now()
	if err := p.setMembers(members); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the update with 3 unresolvable backends took %v", took)
	}
	out := log.await(t, "1 backends live, 0 draining, 3 unresolved, table digest ")
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "no MAC for 198.18.0.50, 198.18.0.51, 198.18.0.52") {
		t.Errorf("status line:\n%s", out)
	}
	state := func() map[string]string {
		t.Helper()
		got := map[string]string{}
		for _, be := range p.status().Backends {
			got[be.Addr] = be.State
		}
		return got
	}
	if got := state(); got["198.18.0.11"] != "live" || got["198.18.0.50"] != "unresolved" {
		t.Errorf("states %v", got)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	gauge := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "maglev.l4lb.backend.state" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
				be, _ := dp.Attributes.Value(attribute.Key("maglev.backend"))
				st, _ := dp.Attributes.Value(attribute.Key("maglev.state"))
				gauge[be.AsString()] = fmt.Sprintf("%s=%d", st.AsString(), dp.Value)
			}
		}
	}
	if gauge["198.18.0.11"] != "live=1" || gauge["198.18.0.50"] != "unresolved=1" || len(gauge) != 4 {
		t.Errorf("maglev.l4lb.backend.state: %v", gauge)
	}

	// The neighbour table learns one: the data plane takes it back.
	ip(t, "-n", ns, "neigh", "replace", "198.18.0.50", "lladdr", "02:00:00:00:00:50", "dev", "v0", "nud", "permanent")
	log.await(t, "2 backends live, 0 draining, 2 unresolved, table digest ")
	log.await(t, "(the neighbour table answered)")
	if got := state(); got["198.18.0.50"] != "live" {
		t.Errorf("states once resolved: %v", got)
	}
}

// TestDriverWarning: frames the program sends by XDP_TX on a veth whose
// peer has no XDP program are lost in the driver, which counts them; the
// load balancer logs a warning the first time that count rises, naming
// it, and not again.
func TestDriverWarning(t *testing.T) {
	need(t)
	ns := vethNS(t, "l4lbw")
	lb, err := inNS(ns, func() (*xdpmaglev.LB, error) { return xdpmaglev.Load("v0", xdpmaglev.Options{FloodRate: -1}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	svc := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}
	if err := lb.SetService(svc, []xdpmaglev.Backend{{Addr: netip.MustParseAddr("198.18.0.11"), Weight: 1, HW: net.HardwareAddr{2, 0, 0, 0, 0, 0x11}}}); err != nil {
		t.Fatal(err)
	}
	var log logBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		watchDriver(ctx, lb, "v0", 50*time.Millisecond, slog.New(slog.NewTextHandler(&log, nil)))
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })
	send := func() {
		t.Helper()
		_, err := inNS(ns, func() (struct{}, error) {
			v0, err := net.InterfaceByName("v0")
			if err != nil {
				return struct{}{}, err
			}
			v1, err := net.InterfaceByName("v1")
			if err != nil {
				return struct{}{}, err
			}
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
			if err != nil {
				return struct{}{}, err
			}
			defer func() { _ = unix.Close(fd) }()
			to := &unix.SockaddrLinklayer{Ifindex: v1.Index, Halen: 6}
			copy(to.Addr[:], v0.HardwareAddr)
			for i := range 10 {
				tcp := make([]byte, 20)
				tcp[0], tcp[1], tcp[2], tcp[3], tcp[12], tcp[13] = 0x9c, byte(i), 0, 80, 5<<4, 0x10
				f := ethIPv4(v0.HardwareAddr, ipv4(6, [4]byte{198, 18, 0, 2}, [4]byte{198, 19, 0, 1}, tcp))
				if err := unix.Sendto(fd, f, 0, to); err != nil {
					return struct{}{}, err
				}
			}
			return struct{}{}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the watch's first read
	send()
	out := log.await(t, "the driver of v0 counts XDP errors: rx_xdp_tx_errors rose by 10 to 10")
	if !strings.Contains(out, "level=WARN") {
		t.Errorf("not a warning: %s", out)
	}
	send()
	time.Sleep(300 * time.Millisecond)
	if n := strings.Count(log.String(), "counts XDP errors"); n != 1 {
		t.Errorf("%d warnings after two rises, want 1:\n%s", n, log.String())
	}
}
