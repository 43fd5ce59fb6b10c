package dataplane

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/nstest"
	"github.com/maglevlb/maglev/xdpmaglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestDecapDriverWarning: l4lb decap passes the packets that name a
// second hop on to it by XDP_TX; on a veth whose peer has no XDP program
// the driver drops them and counts them (rx_xdp_tx_errors). l4lb decap
// warns of it once, as l4lb run does, its metric maglev.xdp.driver has
// the count, and its last record counts the packets passed on.
func TestDecapDriverWarning(t *testing.T) {
	xdptest.Need(t)
	ns := xdptest.VethNS(t, "l4dcw")
	if out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-w", "net.ipv4.conf.all.forwarding=1", "net.ipv4.conf.v0.forwarding=1").CombinedOutput(); err != nil {
		t.Fatalf("sysctl: %v: %s", err, out)
	}
	second := [4]byte{198, 18, 0, 12}
	xdptest.IP(t, "-n", ns, "neigh", "replace", "198.18.0.12", "lladdr", "02:00:00:00:00:12", "dev", "v0", "nud", "permanent")
	every := decapDriverEvery
	decapDriverEvery = 50 * time.Millisecond
	t.Cleanup(func() { decapDriverEvery = every })

	var log nstest.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	c := config.Decap{Iface: "v0", Admin: "127.0.0.1:9187", Opts: xdpmaglev.DecapOptions{
		VIPs: []netip.Addr{netip.MustParseAddr("198.18.255.1")}, Sources: []netip.Prefix{netip.MustParsePrefix("198.18.0.2/32")}}}
	go func() {
		_, err := xdptest.In(ns, func() (struct{}, error) {
			return struct{}{}, RunDecap(ctx, c, slog.New(slog.NewJSONHandler(&log, nil)))
		})
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("l4lb decap: %v", err)
		}
	})
	log.AwaitRecord(t, "admin listening")

	// A TCP ACK to the VIP, in GUE variant 0 naming the second hop, one
	// hop left: no connection here has it, so it is passed on.
	v0 := xdptest.Interface(t, ns, "v0").HardwareAddr
	inner := xdptest.Packet(xdptest.ProtoTCP, netip.AddrFrom4([4]byte{198, 18, 0, 2}), netip.AddrFrom4([4]byte{198, 18, 255, 1}),
		xdptest.TCP(40000, 80, xdptest.FlagACK, nil))
	gue := append([]byte{2, 4, 0, 0, 'M', 'G', 1, 1}, second[:]...) // the second chance option (xdpmaglev's bpf/headers.h)
	frame := xdptest.Ethernet(v0, net.HardwareAddr{2, 0, 0, 0, 0, 2},
		xdptest.Packet(xdptest.ProtoUDP, netip.AddrFrom4([4]byte{198, 18, 0, 2}), netip.AddrFrom4([4]byte{198, 18, 0, 3}),
			xdptest.UDP(40000, xdpmaglev.DefaultGUEPort, append(gue, inner...))))
	frames := make([][]byte, 10)
	for i := range frames {
		frames[i] = frame
	}
	time.Sleep(100 * time.Millisecond) // the watch's first read
	xdptest.Send(t, ns, "v1", frames...)
	r := log.AwaitRecord(t, driverWarning, "iface", "v0", "counter", "rx_xdp_tx_errors")
	if r.Level != "WARN" {
		t.Errorf("not a warning: %+v", r)
	}
	body, err := xdptest.In(ns, func() (string, error) {
		// Dialled on this thread, in ns: an http.Client dials from a
		// goroutine of its own, on another thread.
		conn, err := net.Dial("tcp", c.Admin)
		if err != nil {
			return "", err
		}
		defer func() { _ = conn.Close() }()
		if _, err := io.WriteString(conn, "GET /metrics HTTP/1.0\r\n\r\n"); err != nil {
			return "", err
		}
		b, err := io.ReadAll(conn)
		return string(b), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body, `maglev_xdp_driver_total{maglev_stat="rx_xdp_tx_errors"`) {
		t.Errorf("/metrics has no maglev.xdp.driver of rx_xdp_tx_errors:\n%s", body)
	}
	xdptest.Send(t, ns, "v1", frames...)
	time.Sleep(300 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil // for the cleanup
	log.AwaitRecord(t, "decapsulator counters", "second_hop", "20")
	n := 0
	for _, r := range log.Records() {
		if r.Msg == driverWarning {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d warnings after two rises, want 1:\n%s", n, log.String())
	}
}
