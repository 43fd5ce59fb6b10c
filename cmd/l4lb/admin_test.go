package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestMetricsEndpoint runs the built l4lb on a veth in a namespace of its
// own, sends 5 TCP SYNs to the VIP and 3 to another port of it into the
// veth's peer as raw frames, and GETs /metrics from the admin listener:
// the Prometheus text has xdpmaglev's counters with those counts, per
// backend and by reason (the 3 dropped by the loop guard), l4lb_build_info, a target_info naming l4lb and
// its version, and the Go runtime's and the process's metrics.
func TestMetricsEndpoint(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	ns := xdptest.VethNS(t, "l4lbm")
	p := start(t, ns, bin, "run", "-iface", "v0", "-vip", "198.19.0.1:80",
		"-backend", "198.18.0.11=02:00:00:00:00:11", "-m", "251", "-admin", "127.0.0.1:9181")
	t.Cleanup(func() { p.stop() })
	p.await("admin listening")

	v0 := xdptest.Interface(t, ns, "v0")
	var frames [][]byte
	for i := range 8 {
		port := uint16(80)
		if i >= 5 {
			port = 81 // no service
		}
		frames = append(frames, synFrame(v0.HardwareAddr, uint16(40000+i), port))
	}
	xdptest.Send(t, ns, "v1", frames...)

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
		b, err := xdptest.In(ns, func() ([]byte, error) {
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
	// The program's own: its build, its resource (target_info), the Go
	// runtime's and the process's metrics.
	build := regexp.MustCompile(`(?m)^l4lb_build_info\{(.+,)?goversion="` + regexp.QuoteMeta(runtime.Version()) + `",(.+,)?version="devel"\} 1$`)
	if !build.MatchString(body) {
		t.Errorf("/metrics has no l4lb_build_info of value 1 labelled with this Go version and version devel")
	}
	target := regexp.MustCompile(`(?m)^target_info\{.*service_name="l4lb",service_version="[^"]+".*\} 1$`)
	if !target.MatchString(body) || strings.Contains(body, "unknown_service") {
		t.Errorf("/metrics: target_info does not name the service l4lb and its version")
	}
	for _, w := range []string{"\ngo_goroutines ", "\ngo_gc_duration_seconds{", "\ngo_memstats_heap_alloc_bytes ", "\nprocess_cpu_seconds_total ", "\nprocess_resident_memory_bytes ", "\nprocess_open_fds "} {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics has no series %s", strings.TrimSpace(w))
		}
	}
	// The 3 frames to port 81 of the VIP, which no service takes, are
	// dropped as vip_no_service (the data plane's loop guard: docs/xdp-reference.md);
	// other frames the kernel sends on v1 (IPv6 neighbour discovery) may
	// add to other reasons.
	var noService string
	for l := range strings.Lines(body) {
		if strings.HasPrefix(l, `maglev_xdp_dropped_total{maglev_reason="vip_no_service"`) {
			noService = strings.TrimSpace(l[strings.LastIndexByte(l, ' ')+1:])
		}
	}
	if noService != "3" {
		t.Errorf("vip_no_service drops %q, want 3\n%s", noService, body)
	}
}

// synFrame is an Ethernet frame to dst from 02:00:00:00:00:02 carrying a
// TCP SYN from 198.18.0.2:sport to 198.19.0.1:dport: 54 bytes.
func synFrame(dst net.HardwareAddr, sport, dport uint16) []byte {
	return xdptest.Ethernet(dst, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02},
		xdptest.Packet(xdptest.ProtoTCP, netip.AddrFrom4([4]byte{198, 18, 0, 2}), netip.AddrFrom4([4]byte{198, 19, 0, 1}),
			xdptest.TCP(sport, dport, xdptest.FlagSYN, nil)))
}

// TestDrainNoBackend runs l4lb run -config with two services, web (backends
// .11 and .12, and a drain in the file of .50, no member) and api (.12
// and .13), and drains through the admin API: an address that is no
// backend answers 404 naming it and the services looked in, and stores
// nothing (the address, joining web later, is live); one that is a
// backend of one service drains there alone; one that left web, and is
// draining, may be drained; the file's drain of a non-member stays. Every
// answer is a list: of the one service, or of both for a backend of both.
func TestDrainNoBackend(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	ns := xdptest.VethNS(t, "l4lbd")
	path := filepath.Join(t.TempDir(), "l4lb.yaml")
	write := func(web string) {
		t.Helper()
		file := "iface: v0\nadmin: 127.0.0.1:9187\npin-dir: \"\"\nm: 251\nservices:\n" +
			"  - name: web\n    vip: 198.19.0.1:80\n    backends: [" + web + "]\n    drain: [198.18.0.50]\n" +
			"  - name: api\n    vip: 198.19.0.1:443\n    backends: [198.18.0.12=02:00:00:00:00:12, 198.18.0.13=02:00:00:00:00:13]\n"
		if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("198.18.0.11=02:00:00:00:00:11, 198.18.0.12=02:00:00:00:00:12")
	p := start(t, ns, bin, "run", "-config", path)
	p.await("admin listening")
	req := func(method, path string) ([]byte, error) { return requestAt(ns, "127.0.0.1:9187", method, path) }
	for _, c := range []struct{ path, want string }{
		{"/drain?addr=198.18.0.99", `404 Not Found: l4lb: 198.18.0.99 is no backend of any service (looked in api, web)`},
		{"/drain?addr=198.18.0.99&service=web", `404 Not Found: l4lb: 198.18.0.99 is no backend of service "web"`},
		{"/drain?addr=198.18.0.13&service=web", `404 Not Found: l4lb: 198.18.0.13 is no backend of service "web"`},
		{"/undrain?addr=198.18.0.99", `404 Not Found: l4lb: 198.18.0.99 is no backend of any service (looked in api, web)`},
	} {
		if _, err := req("POST", c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("POST %s: %v, want %q", c.path, err, c.want)
		}
	}
	// A backend of api alone: drained there, web untouched.
	body, err := req("POST", "/drain?addr=198.18.0.13")
	if err != nil {
		t.Fatal(err)
	}
	var drained []backendsStatus
	if err := json.Unmarshal(body, &drained); err != nil || len(drained) != 1 {
		t.Fatalf("POST /drain?addr=198.18.0.13: %v: %s; want a list of one service", err, body)
	}
	if api := drained[0]; api.Name != "api" || len(api.Backends) != 2 || api.Backends[1].State != "draining" || !api.Backends[1].Drained {
		t.Errorf("POST /drain?addr=198.18.0.13: %s", body)
	}
	services := func() map[string]backendsStatus {
		t.Helper()
		body, err := req("GET", "/debug/maglev/services")
		if err != nil {
			t.Fatal(err)
		}
		var all []backendsStatus
		if err := json.Unmarshal(body, &all); err != nil {
			t.Fatal(err)
		}
		out := map[string]backendsStatus{}
		for _, s := range all {
			out[s.Name] = s
		}
		return out
	}
	if web := services()["web"]; len(web.Backends) != 2 || web.Backends[0].State != "live" || web.Backends[1].State != "live" {
		t.Errorf("web after draining api's 198.18.0.13: %+v", web)
	}

	// .11 leaves web, .99 joins it: .11 drains (the data plane holds it),
	// and may be drained; .99 is live, no drain kept for it.
	write("198.18.0.12=02:00:00:00:00:12, 198.18.0.99=02:00:00:00:00:99")
	if _, err := req("POST", "/reload"); err != nil {
		t.Fatal(err)
	}
	if body, err := req("POST", "/drain?addr=198.18.0.11&service=web"); err != nil {
		t.Errorf("POST /drain of a backend draining after it left: %v", err)
	} else if err := json.Unmarshal(body, &drained); err != nil || len(drained) != 1 || drained[0].Name != "web" {
		t.Errorf("POST /drain?addr=198.18.0.11&service=web: %v: %s; want a list of web", err, body)
	}
	// .12, a backend of both: a list of both services.
	if body, err := req("POST", "/drain?addr=198.18.0.12"); err != nil {
		t.Errorf("POST /drain?addr=198.18.0.12: %v", err)
	} else if err := json.Unmarshal(body, &drained); err != nil || len(drained) != 2 || drained[0].Name != "api" || drained[1].Name != "web" {
		t.Errorf("POST /drain?addr=198.18.0.12: %v: %s; want a list of api and web", err, body)
	}
	if _, err := req("POST", "/undrain?addr=198.18.0.12"); err != nil {
		t.Errorf("POST /undrain?addr=198.18.0.12: %v", err)
	}
	web := services()["web"]
	states := map[string]backendStatus{}
	for _, b := range web.Backends {
		states[b.Addr] = b
	}
	if len(web.Backends) != 3 || states["198.18.0.99"].State != "live" || states["198.18.0.99"].Drained ||
		states["198.18.0.11"].State != "draining" || !states["198.18.0.11"].Drained || states["198.18.0.12"].State != "live" {
		t.Errorf("web after the reload: %+v", web)
	}
	p.stop()
}
