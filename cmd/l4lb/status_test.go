package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev"
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
