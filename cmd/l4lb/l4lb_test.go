package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestCommand builds l4lb and runs it on a veth in a namespace of its own:
// it prints the attach mode and its table's digest, serves /debug/maglev,
// drains and undrains a backend through POST /drain and /undrain, and
// detaches on SIGTERM.
func TestCommand(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	ns := xdptest.VethNS(t, "l4lb")

	// -pin-dir "": no warning first that a BPF filesystem is not at the
	// default (ip netns exec mounts a sysfs of its own).
	p := start(t, ns, bin, "run", "-iface", "v0", "-vip", "198.19.0.1:80",
		"-backend", "198.18.0.11=02:00:00:00:00:11", "-backend", "198.18.0.12=02:00:00:00:00:12", "-m", "251", "-admin", "127.0.0.1:9180", "-pin-dir", "")
	if l := p.next(); !l.Is("service started", "service", "default", "vip", "tcp/198.19.0.1:80", "iface", "v0", "mode", "native", "forward", "l2", "backends", "2") {
		t.Fatalf("first record %+v", l)
	}
	if l := p.next(); !l.Is("backends applied", "service", "default", "live", "2", "draining", "0", "down", "0", "unresolved", "0") || len(l.Attrs["digest"]) != 64 {
		t.Fatalf("second record %+v", l)
	}
	if l := p.next(); !l.Is("admin listening", "url", "http://127.0.0.1:9180/debug/maglev") {
		t.Fatalf("third record %+v", l)
	}
	if out := xdptest.IP(t, "-n", ns, "link", "show", "v0"); !strings.Contains(out, "xdp") {
		t.Fatalf("no XDP program on v0: %s", out)
	}

	var st status
	body, err := xdptest.In(ns, func() ([]byte, error) {
		// Dialled here, on the namespace's thread: an http.Client dials
		// from goroutines of its own, in the test's namespace.
		c, err := net.DialTimeout("tcp", "127.0.0.1:9180", 5*time.Second)
		if err != nil {
			return nil, err
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // a bound, not a check
		if _, err := io.WriteString(c, "GET /debug/maglev HTTP/1.0\r\nHost: l4lb\r\n\r\n"); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			return nil, fmt.Errorf("status %s, content type %q", resp.Status, resp.Header.Get("Content-Type"))
		}
		return io.ReadAll(resp.Body)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if st.Attach != "native" || len(st.Services) != 1 || st.Services[0].Table.Size != 251 || len(st.Services[0].Table.Backends) != 2 ||
		st.Services[0].Table.Backends[0].Slots+st.Services[0].Table.Backends[1].Slots != 251 || len(st.Stats.Services) != 1 {
		t.Errorf("/debug/maglev: %s", body)
	}

	// Drained through the admin API: weight 0, out of the digest; then
	// back.
	// POST /drain and /undrain answer a list, of the one service here.
	var before backendsStatus
	var drainedList, backList []backendsStatus
	for _, step := range []struct {
		method, path string
		v            any
	}{
		{"GET", "/debug/maglev/backends", &before},
		{"POST", "/drain?addr=198.18.0.12", &drainedList},
		{"POST", "/undrain?addr=198.18.0.12", &backList},
	} {
		body, err := request(ns, step.method, step.path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(body, step.v); err != nil {
			t.Fatalf("%s %s: %v: %s", step.method, step.path, err, body)
		}
	}
	if len(drainedList) != 1 || len(backList) != 1 {
		t.Fatalf("POST /drain, /undrain: %+v, %+v; want a list of one service each", drainedList, backList)
	}
	drained, back := drainedList[0], backList[0]
	if len(drained.Backends) != 2 || drained.Backends[1].State != "draining" || drained.Backends[1].Weight != 0 ||
		!drained.Backends[1].Drained || drained.Backends[0].State != "live" || drained.Digest == before.Digest ||
		back.Digest != before.Digest || back.Backends[1].State != "live" {
		t.Errorf("before %+v\ndrained %+v\nback %+v", before, drained, back)
	}
	// Without -bgp-asn nothing would take the load balancer out of the
	// routers' paths: POST /drain-lb is refused, and l4lb goes on.
	if _, err := request(ns, "POST", "/drain-lb"); err == nil || !strings.Contains(err.Error(), "409 Conflict: l4lb: POST /drain-lb needs -bgp-asn") {
		t.Errorf("POST /drain-lb without BGP: %v, want 409 naming -bgp-asn", err)
	}
	if _, err := request(ns, "POST", "/drain?addr=nonsense"); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("POST /drain?addr=nonsense: %v, want 400", err)
	}

	if rest := p.stop(); len(rest) == 0 || !rest[len(rest)-1].Is("detached", "iface", "v0") {
		t.Errorf("last records %+v", rest)
	}
	if out := xdptest.IP(t, "-n", ns, "link", "show", "v0"); strings.Contains(out, "xdp") {
		t.Errorf("XDP program still on v0 after SIGTERM: %s", out)
	}
}

// request sends an admin request to l4lb in namespace ns and returns the
// body of a 2xx response (200 OK, or 202 Accepted for POST /drain-lb).
func request(ns, method, path string) ([]byte, error) {
	return requestAt(ns, "127.0.0.1:9180", method, path)
}

// requestAt is request to the admin address addr.
func requestAt(ns, addr, method, path string) ([]byte, error) {
	return xdptest.In(ns, func() ([]byte, error) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return nil, err
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // a bound, not a check
		if _, err := fmt.Fprintf(c, "%s %s HTTP/1.0\r\nHost: l4lb\r\nContent-Length: 0\r\n\r\n", method, path); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, body)
		}
		return body, err
	})
}
