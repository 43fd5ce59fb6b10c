package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMetricsEndpoint runs the built l4lb on a veth in a namespace of its
// own, sends 5 TCP SYNs to the VIP and 3 to another port into the veth's
// peer as raw frames, and GETs /metrics from the admin listener: the
// Prometheus text has xdpmaglev's counters with those counts, per
// backend and by reason.
func TestMetricsEndpoint(t *testing.T) {
	need(t)
	bin := build(t)
	ns := vethNS(t, "l4lbm")
	p := start(t, ns, bin, "-iface", "v0", "-vip", "198.19.0.1:80",
		"-backend", "198.18.0.11=02:00:00:00:00:11", "-m", "251", "-admin", "127.0.0.1:9181")
	t.Cleanup(func() { p.stop() })
	p.await("admin on")

	v0, err := inNS(ns, func() (*net.Interface, error) { return net.InterfaceByName("v0") })
	if err != nil {
		t.Fatal(err)
	}
	_, err = inNS(ns, func() (struct{}, error) {
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
		for i := range 8 {
			port := uint16(80)
			if i >= 5 {
				port = 81 // no service
			}
			if err := unix.Sendto(fd, synFrame(v0.HardwareAddr, uint16(40000+i), port), 0, to); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	want := []string{
		`maglev_xdp_packets_total{maglev_backend="198.18.0.11",maglev_service="tcp/198.19.0.1:80",otel_scope_name="github.com/maglevlb/maglev/xdpmaglev",otel_scope_schema_url="",otel_scope_version=""} 5`,
		`maglev_xdp_bytes_total{maglev_backend="198.18.0.11",maglev_service="tcp/198.19.0.1:80",otel_scope_name="github.com/maglevlb/maglev/xdpmaglev",otel_scope_schema_url="",otel_scope_version=""} 270`,
		`maglev_xdp_conntrack_lookups_total{maglev_outcome="miss",otel_scope_name="github.com/maglevlb/maglev/xdpmaglev",otel_scope_schema_url="",otel_scope_version=""} 5`,
		`maglev_xdp_conntrack_inserts_total{otel_scope_name="github.com/maglevlb/maglev/xdpmaglev",otel_scope_schema_url="",otel_scope_version=""} 5`,
		`maglev_xdp_dropped_total{maglev_reason="no_backend",otel_scope_name="github.com/maglevlb/maglev/xdpmaglev",otel_scope_schema_url="",otel_scope_version=""} 0`,
		`# TYPE maglev_xdp_passed_total counter`,
	}
	var body string
	// The frames are counted once the program has run on them: a few
	// scrapes, 100 ms apart, for at most 5 s.
	for range 50 {
		b, err := inNS(ns, func() ([]byte, error) {
			c, err := net.DialTimeout("tcp", "127.0.0.1:9181", 5*time.Second)
			if err != nil {
				return nil, err
			}
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // a bound, not a check
			if _, err := io.WriteString(c, "GET /metrics HTTP/1.0\r\nHost: l4lb\r\n\r\n"); err != nil {
				return nil, err
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return nil, err
			}
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
				return nil, fmt.Errorf("status %s, content type %q", resp.Status, resp.Header.Get("Content-Type"))
			}
			return io.ReadAll(resp.Body)
		})
		if err != nil {
			t.Fatal(err)
		}
		body = string(b)
		if strings.Contains(body, want[0]) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics has no line %s", w)
		}
	}
	// The 3 frames to port 81 pass as no_service; other frames the kernel
	// sends on v1 (IPv6 neighbour discovery) may add to other reasons.
	var noService string
	for l := range strings.Lines(body) {
		if strings.HasPrefix(l, `maglev_xdp_passed_total{maglev_reason="no_service"`) {
			noService = strings.TrimSpace(l[strings.LastIndexByte(l, ' ')+1:])
		}
	}
	if noService != "3" {
		t.Errorf("no_service passes %q, want 3\n%s", noService, body)
	}
}

// synFrame is an Ethernet frame to dst carrying a TCP SYN from
// 198.18.0.2:sport to 198.19.0.1:dport: 54 bytes.
func synFrame(dst net.HardwareAddr, sport, dport uint16) []byte {
	b := append([]byte{}, dst...)
	b = append(b, 0x02, 0, 0, 0, 0, 0x02, 0x08, 0x00)
	ip := []byte{0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0, 198, 18, 0, 2, 198, 19, 0, 1}
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	tcp[12], tcp[13] = 5<<4, 0x02
	return append(append(b, ip...), tcp...)
}
