package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// healthNS creates the load balancer's namespace of xdptest.VethNS (v0,
// 198.18.0.3/24) and moves v1 into a second namespace, the backends', with
// the addresses 198.18.0.11 and up, n of them; it returns both names and
// the backends' addresses. Both are removed at the end of the test.
func healthNS(t *testing.T, tag string, n int) (string, string, []netip.Addr) {
	t.Helper()
	lbNS := xdptest.VethNS(t, tag)
	beNS := xdptest.NewNS(t, tag+"b")
	xdptest.IP(t, "-n", lbNS, "link", "set", "v1", "netns", beNS)
	var addrs []netip.Addr
	for i := range n {
		a := netip.AddrFrom4([4]byte{198, 18, 0, byte(11 + i)})
		xdptest.IP(t, "-n", beNS, "addr", "add", a.String()+"/24", "dev", "v1")
		addrs = append(addrs, a)
	}
	xdptest.IP(t, "-n", beNS, "link", "set", "v1", "up")
	return lbNS, beNS, addrs
}

// listen opens a TCP listener on addr in namespace ns that accepts and
// closes connections until it is closed (closed at the end of the test in
// any case).
func listen(t *testing.T, ns string, addr netip.AddrPort) net.Listener {
	t.Helper()
	l, err := xdptest.In(ns, func() (net.Listener, error) { return net.Listen("tcp", addr.String()) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return l
}

// backendsOf returns l4lb's /debug/maglev/backends in namespace ns.
func backendsOf(t *testing.T, ns string) backendsStatus {
	t.Helper()
	body, err := request(ns, "GET", "/debug/maglev/backends")
	if err != nil {
		t.Fatal(err)
	}
	var st backendsStatus
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return st
}

// find returns the status of the backend at a.
func find(t *testing.T, st backendsStatus, a netip.Addr) backendStatus {
	t.Helper()
	for _, b := range st.Backends {
		if b.Addr == a.String() {
			return b
		}
	}
	t.Fatalf("backend %v not in %+v", a, st)
	return backendStatus{}
}

// digestHex is t's digest as the admin API gives it.
func digestHex(t *maglev.Table) string {
	d := t.Digest()
	return fmt.Sprintf("%x", d[:])
}

// awaitHealth polls the admin API until the backend at a has health
// want, checking at each poll that its counts agree with rise and fall
// (up: fewer than fall failures in a row; down: fewer than rise passes),
// and returns the counts seen on the way, as "up/1" (up, one failure in a
// row) or "down/1" (down, one pass in a row), in order, without repeats. It fails
// the test after 15 s.
func awaitHealth(t *testing.T, ns string, a netip.Addr, want string, rise, fall int) []string {
	t.Helper()
	var seen []string
	deadline := time.Now().Add(15 * time.Second)
	for {
		b := find(t, backendsOf(t, ns), a)
		n := b.HealthFailed
		if b.Health == "down" {
			n = b.HealthOK
		}
		s := fmt.Sprintf("%s/%d", b.Health, n)
		if len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		switch {
		case b.Health == "up" && b.HealthFailed >= fall:
			t.Fatalf("%v up after %d failures in a row (fall %d): %+v", a, b.HealthFailed, fall, b)
		case b.Health == "down" && b.HealthOK >= rise:
			t.Fatalf("%v down after %d passes in a row (rise %d): %+v", a, b.HealthOK, rise, b)
		}
		if b.Health == want {
			return seen
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v not %s in 15 s: seen %v, now %+v", a, want, seen, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitDigest polls the admin API until the table's digest is want's, and
// returns the status then; it fails the test after 10 s.
func awaitDigest(t *testing.T, ns string, want *maglev.Table, what string) backendsStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := backendsOf(t, ns)
		if st.Digest == digestHex(want) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: digest %s, want %s: %+v", what, st.Digest, digestHex(want), st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// without is base.Without the addresses, failing the test on an error;
// it checks that only their slots moved.
func without(t *testing.T, base *maglev.Table, addrs ...netip.Addr) *maglev.Table {
	t.Helper()
	var names []string
	gone := 0
	for _, a := range addrs {
		names = append(names, a.String())
		gone += base.Counts()[base.Index(a.String())]
	}
	w, err := base.Without(names...)
	if err != nil {
		t.Fatal(err)
	}
	if d := base.Diff(w); d != gone {
		t.Fatalf("base.Without(%v) moved %d slots, want their %d", addrs, d, gone)
	}
	return w
}

// tableSlots returns the slots each backend owns in l4lb's table, from
// /debug/maglev.
func tableSlots(t *testing.T, ns string) map[string]int {
	t.Helper()
	body, err := request(ns, "GET", "/debug/maglev")
	if err != nil {
		t.Fatal(err)
	}
	var st status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	out := map[string]int{}
	for _, b := range st.Services[0].Table.Backends {
		out[b.Addr] = b.Slots
	}
	return out
}

// wantSlots checks that l4lb's table gives each backend the slots of want.
func wantSlots(t *testing.T, ns string, want *maglev.Table) {
	t.Helper()
	got := tableSlots(t, ns)
	for i, name := range want.Backends() {
		if got[name] != want.Counts()[i] {
			t.Errorf("%s owns %d slots in l4lb's table, want %d (%v)", name, got[name], want.Counts()[i], got)
		}
	}
}

// TestHealthTCP runs l4lb with -health tcp against four backends in a
// namespace of their own, real TCP listeners stopped and started: a
// backend whose listener stops goes down after exactly -health-fall
// failed probes, and the table is then the base table Without it, slot
// for slot (only its slots moved); started again, it is up after exactly
// -health-rise passes, and the table is the base table again. With every
// backend down the service keeps its last table (fail open), says so on
// its standard output, in the admin API and in /metrics, and one backend
// back ends it. The metrics count the transitions and the probes.
func TestHealthTCP(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	lbNS, beNS, addrs := healthNS(t, "hct", 4)
	const rise, fall = 2, 3
	args := []string{"run", "-iface", "v0", "-vip", "198.19.0.1:80", "-m", "251", "-admin", "127.0.0.1:9180",
		"-health", "tcp", "-health-port", "8080", "-health-interval", "250ms", "-health-timeout", "200ms",
		"-health-rise", strconv.Itoa(rise), "-health-fall", strconv.Itoa(fall)}
	var names []maglev.Backend
	ls := make([]net.Listener, len(addrs))
	for i, a := range addrs {
		args = append(args, "-backend", fmt.Sprintf("%v=02:00:00:00:00:%02x", a, 11+i))
		names = append(names, maglev.Backend{Name: a.String(), Weight: 1})
		ls[i] = listen(t, beNS, netip.AddrPortFrom(a, 8080))
	}
	base, err := maglev.NewWeighted(names, 251, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, lbNS, bin, args...)
	p.await("health check", "check", "tcp connect on port 8080 every 250ms (timeout 200ms, rise 2, fall 3)")
	p.await("admin listening")
	st := awaitDigest(t, lbNS, base, "all up")
	if st.FailOpen || !strings.HasPrefix(st.Health, "tcp connect") {
		t.Fatalf("all up: %+v", st)
	}
	wantSlots(t, lbNS, base)
	// A new backend is unknown, in service, until its first probe, which
	// decides: each passes it, up.
	for _, a := range addrs {
		awaitHealth(t, lbNS, a, "up", rise, fall)
	}

	// One backend's listener stops: down after fall failures, out of the
	// table by Without.
	_ = ls[1].Close()
	seen := awaitHealth(t, lbNS, addrs[1], "down", rise, fall)
	b := find(t, backendsOf(t, lbNS), addrs[1])
	if !strings.Contains(b.HealthError, "connection refused") || b.HealthFailed < fall {
		t.Errorf("down: %+v", b)
	}
	wantSeen(t, seen, "up/0", "up/1", "up/2", "down/0")
	st = awaitDigest(t, lbNS, without(t, base, addrs[1]), "one down")
	if b := find(t, st, addrs[1]); b.State != "down" || b.Weight != 1 || !b.Member {
		t.Errorf("one down: %+v", b)
	}
	wantSlots(t, lbNS, without(t, base, addrs[1]))
	p.await("health: backend down", "backend", "198.18.0.12", "failed", "3")
	p.await("backends applied", "live", "3", "draining", "0", "down", "1", "digest", digestHex(without(t, base, addrs[1])))

	// Started again: up after rise passes, back where it was.
	ls[1] = listen(t, beNS, netip.AddrPortFrom(addrs[1], 8080))
	seen = awaitHealth(t, lbNS, addrs[1], "up", rise, fall)
	wantSeen(t, seen, "down/0", "down/1", "up/0")
	awaitDigest(t, lbNS, base, "back up")
	wantSlots(t, lbNS, base)
	p.await("health: backend up", "backend", "198.18.0.12", "passed", "2")
	p.await("backends applied", "live", "4", "draining", "0", "down", "0", "digest", digestHex(base))

	// All fail, one after the other: the table follows until the last,
	// which leaves the one before it in place.
	var gone []netip.Addr
	for _, i := range []int{0, 2, 3} {
		_ = ls[i].Close()
		gone = append(gone, addrs[i])
		awaitHealth(t, lbNS, addrs[i], "down", rise, fall)
		awaitDigest(t, lbNS, without(t, base, gone...), fmt.Sprintf("%v down", gone))
	}
	last := without(t, base, gone...)
	_ = ls[1].Close()
	awaitHealth(t, lbNS, addrs[1], "down", rise, fall)
	if r := p.await("failing open: every backend is down by its health check, the last table kept", "vip", "tcp/198.19.0.1:80", "backends", "4"); r.Level != "WARN" {
		t.Errorf("failing open: %+v, want a warning", r)
	}
	st = backendsOf(t, lbNS)
	if !st.FailOpen || st.Digest != digestHex(last) {
		t.Errorf("all down: fail open %v, digest %s, want true and %s", st.FailOpen, st.Digest, digestHex(last))
	}
	for _, a := range addrs {
		if b := find(t, st, a); b.Health != "down" {
			t.Errorf("all down: %+v", b)
		}
	}
	wantSlots(t, lbNS, last)
	body, err := request(lbNS, "GET", "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m := string(body)
	wantMetric(t, m, `maglev_l4lb_health_fail_open{maglev_service="tcp/198.19.0.1:80"`, 1)
	for _, a := range addrs {
		wantMetric(t, m, fmt.Sprintf(`maglev_l4lb_health_up{maglev_backend="%v",maglev_service="tcp/198.19.0.1:80"`, a), 0)
	}
	wantMetric(t, m, `maglev_l4lb_health_transitions_total{maglev_backend="198.18.0.12",maglev_service="tcp/198.19.0.1:80",maglev_state="down"`, 2)
	wantMetric(t, m, `maglev_l4lb_health_transitions_total{maglev_backend="198.18.0.12",maglev_service="tcp/198.19.0.1:80",maglev_state="up"`, 1)
	wantMetric(t, m, `maglev_l4lb_health_transitions_total{maglev_backend="198.18.0.11",maglev_service="tcp/198.19.0.1:80",maglev_state="down"`, 1)
	for _, outcome := range []string{"ok", "fail"} {
		if n := metricValue(t, m, fmt.Sprintf(`maglev_l4lb_health_probe_duration_seconds_count{maglev_outcome="%s",`, outcome)); n < 3 {
			t.Errorf("%s probes counted: %v, want at least 3", outcome, n)
		}
	}

	// One comes back: fail open ends, the table is the base without the
	// other three.
	ls[2] = listen(t, beNS, netip.AddrPortFrom(addrs[2], 8080))
	awaitHealth(t, lbNS, addrs[2], "up", rise, fall)
	p.await("failing open no more", "vip", "tcp/198.19.0.1:80", "up", "1")
	st = awaitDigest(t, lbNS, without(t, base, addrs[0], addrs[1], addrs[3]), "one back")
	if st.FailOpen {
		t.Errorf("one back: still failing open: %+v", st)
	}
	p.stop()
}

// wantSeen checks that the counts awaitHealth saw are want, in order,
// allowing the polls to have missed none but the first.
func wantSeen(t *testing.T, seen []string, want ...string) {
	t.Helper()
	if len(seen) > 0 && seen[0] != want[0] && len(seen) == len(want)-1 {
		seen = append([]string{want[0]}, seen...)
	}
	if strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Errorf("health counts seen %v, want %v", seen, want)
	}
}

// metricValue returns the value of the series of Prometheus text m whose
// line starts with prefix, failing the test if there is none.
func metricValue(t *testing.T, m, prefix string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(prefix) + `[^}]*} (\S+)$`)
	sub := re.FindStringSubmatch(m)
	if sub == nil {
		t.Fatalf("no series %s... in /metrics:\n%s", prefix, m)
	}
	v, err := strconv.ParseFloat(sub[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// wantMetric checks the value of a series of m.
func wantMetric(t *testing.T, m, prefix string, want float64) {
	t.Helper()
	if v := metricValue(t, m, prefix); v != want {
		t.Errorf("%s...}: %v, want %v", prefix, v, want)
	}
}

// TestHealthHTTP runs l4lb with -health http against three real HTTP
// servers: one that answers 503 goes down with that error, and the table
// is the base Without it; answering 200 again, it comes back to the base
// table; a server stopped fails by its connection, and started again
// comes back.
func TestHealthHTTP(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	lbNS, beNS, addrs := healthNS(t, "hch", 3)
	args := []string{"run", "-iface", "v0", "-vip", "198.19.0.1:8080", "-m", "251", "-admin", "127.0.0.1:9180",
		"-health", "http", "-health-path", "/ready?from=l4lb", "-health-interval", "200ms", "-health-timeout", "150ms",
		"-health-rise", "1", "-health-fall", "2"}
	var names []maglev.Backend
	codes := make([]atomic.Int32, len(addrs))
	paths := make([]atomic.Value, len(addrs))
	servers := make([]*http.Server, len(addrs))
	serveAt := func(i int) {
		l := listenHTTP(t, beNS, netip.AddrPortFrom(addrs[i], 8080))
		servers[i] = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			paths[i].Store(r.URL.String())
			w.WriteHeader(int(codes[i].Load()))
		})}
		go func() { _ = servers[i].Serve(l) }()
		t.Cleanup(func() { _ = servers[i].Close() })
	}
	for i, a := range addrs {
		args = append(args, "-backend", fmt.Sprintf("%v=02:00:00:00:00:%02x", a, 11+i))
		names = append(names, maglev.Backend{Name: a.String(), Weight: 1})
		codes[i].Store(200)
		serveAt(i)
	}
	base, err := maglev.NewWeighted(names, 251, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, lbNS, bin, args...)
	p.await("health check", "check", "http GET /ready?from=l4lb = 200 on the service's port every 200ms (timeout 150ms, rise 1, fall 2)")
	p.await("admin listening")
	awaitDigest(t, lbNS, base, "all up")

	codes[0].Store(503)
	awaitHealth(t, lbNS, addrs[0], "down", 1, 2)
	st := awaitDigest(t, lbNS, without(t, base, addrs[0]), "503")
	if b := find(t, st, addrs[0]); b.HealthError != "GET http://198.18.0.11:8080/ready?from=l4lb: status 503, want 200" || b.State != "down" {
		t.Errorf("503: %+v", b)
	}
	if got, _ := paths[0].Load().(string); got != "/ready?from=l4lb" {
		t.Errorf("the probe asked for %q", got)
	}
	codes[0].Store(200)
	awaitHealth(t, lbNS, addrs[0], "up", 1, 2)
	awaitDigest(t, lbNS, base, "200 again")

	_ = servers[2].Close()
	awaitHealth(t, lbNS, addrs[2], "down", 1, 2)
	st = awaitDigest(t, lbNS, without(t, base, addrs[2]), "stopped")
	if b := find(t, st, addrs[2]); !strings.Contains(b.HealthError, "connection refused") {
		t.Errorf("stopped: %+v", b)
	}
	serveAt(2)
	awaitHealth(t, lbNS, addrs[2], "up", 1, 2)
	awaitDigest(t, lbNS, base, "started again")
	wantSlots(t, lbNS, base)
	p.stop()
}

// listenHTTP is a TCP listener on addr in namespace ns, for an HTTP server.
func listenHTTP(t *testing.T, ns string, addr netip.AddrPort) net.Listener {
	t.Helper()
	l, err := xdptest.In(ns, func() (net.Listener, error) { return net.Listen("tcp", addr.String()) })
	if err != nil {
		t.Fatal(err)
	}
	return l
}
