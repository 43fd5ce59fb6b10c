package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/nstest"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// needBird skips the test (fails it under CI=true) without bird and
// birdc.
func needBird(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"bird", "birdc"} {
		if _, err := exec.LookPath(bin); err != nil {
			xdptest.Skip(t, bin+" is missing: install Debian's bird2")
		}
	}
}

// A router is BIRD running in a namespace of its own, controlled by its
// socket.
type router struct {
	t    *testing.T
	sock string
}

// daemon runs a router daemon, bin with args, in the foreground in
// namespace ns until the end of the test, and returns its output so far
// and a channel closed when it exits. If the test failed, the output is
// logged, and the file log too if not "".
func daemon(t *testing.T, ns, log, bin string, args ...string) (*strings.Builder, chan struct{}) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			var logged []byte
			if log != "" {
				logged, _ = os.ReadFile(log)
			}
			t.Logf("%s's output:\n%s%s", filepath.Base(bin), out.String(), logged)
		}
	})
	return out, exited
}

// startBird runs BIRD in namespace ns with conf, its control socket in
// the test's temporary directory, until the end of the test; it returns
// once BIRD answers on the socket (within 10 s).
func startBird(t *testing.T, ns, conf string) *router {
	t.Helper()
	dir := t.TempDir()
	r := &router{t: t, sock: filepath.Join(dir, "bird.ctl")}
	cf := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, exited := daemon(t, ns, "", "bird", "-f", "-c", cf, "-s", r.sock)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := r.birdc("show status"); err == nil {
			return r
		}
		select {
		case <-exited:
			t.Fatalf("bird exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("bird not answering on %s in 10 s", r.sock)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// birdc runs a command of birdc on the router's socket, within 5 s.
func (r *router) birdc(command string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "birdc", append([]string{"-s", r.sock}, strings.Fields(command)...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("birdc %s: %v: %s", command, err, out)
	}
	return string(out), nil
}

// route returns the router's route to prefix as `show route` prints it,
// or "" if it has none.
func (r *router) route(prefix string) string {
	r.t.Helper()
	out, err := r.birdc("show route " + prefix)
	if err != nil && strings.Contains(err.Error(), "Network not found") {
		return "" // birdc's exit status is 1 then
	}
	if err != nil {
		r.t.Fatal(err)
	}
	if !strings.Contains(out, prefix) {
		return ""
	}
	return out
}

// awaitRoute polls the router until it has a route to prefix (present)
// or none, failing the test after 15 s; it returns the route.
func (r *router) awaitRoute(prefix string, present bool, what string) string {
	r.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := r.route(prefix)
		if (got != "") == present {
			return got
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: the router's route to %s, after 15 s: %q, want present %v", what, prefix, got, present)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// established reports whether the router's BGP session lb is up.
func (r *router) established() bool { return r.establishedAs("lb") }

// lbStatus returns l4lb's /debug/maglev in namespace ns.
func lbStatus(t *testing.T, ns string) status {
	t.Helper()
	body, err := request(ns, "GET", "/debug/maglev")
	if err != nil {
		t.Fatal(err)
	}
	var st status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if st.BGP == nil {
		t.Fatalf("no bgp in /debug/maglev: %s", body)
	}
	return st
}

// routerNS creates the namespaces of healthNS (the load balancer's, with
// v0 at 198.18.0.3/24, and the backends', with n addresses from
// 198.18.0.11) and a router's, tag-r-PID, joined to the load balancer's
// by a veth pair: r0, 198.18.1.3/24, in the load balancer's, r1,
// 198.18.1.1/24, in the router's. It returns the three names and the
// backends' addresses; everything is removed at the end of the test.
func routerNS(t *testing.T, tag string, n int) (lbNS, beNS, rNS string, addrs []netip.Addr) {
	t.Helper()
	lbNS, beNS, addrs = healthNS(t, tag, n)
	rNS = xdptest.NewNS(t, tag+"r")
	xdptest.IP(t, "-n", lbNS, "link", "add", "r0", "type", "veth", "peer", "name", "r1")
	xdptest.IP(t, "-n", lbNS, "link", "set", "r1", "netns", rNS)
	xdptest.IP(t, "-n", lbNS, "addr", "add", "198.18.1.3/24", "dev", "r0")
	xdptest.IP(t, "-n", rNS, "addr", "add", "198.18.1.1/24", "dev", "r1")
	xdptest.IP(t, "-n", lbNS, "link", "set", "r0", "up")
	xdptest.IP(t, "-n", rNS, "link", "set", "r1", "up")
	return lbNS, beNS, rNS, addrs
}

// TestBGP runs l4lb with -health tcp and -bgp-* against BIRD in a router
// namespace: the router learns the VIP's /32 with l4lb's address as the
// next hop; every backend failing its health check (the service failing
// open) withdraws it and one recovering announces it again; every backend
// drained through the admin API withdraws it, one undrained announces it.
// BIRD has graceful restart off, which l4lb reports when the session comes
// up, and so at SIGTERM, with no router to keep its paths, l4lb withdraws
// the route while the session stays up and l4lb still runs, and exits
// after -bgp-drain (as with -bgp-restart-time 0). /debug/maglev and
// /metrics show the session and the route throughout.
func TestBGP(t *testing.T) {
	xdptest.Need(t)
	needBird(t)
	bin := build(t)
	lbNS, beNS, rNS, addrs := routerNS(t, "bgp", 2)
	r := startBird(t, rNS, `router id 198.18.1.1;
protocol device { }
protocol bgp lb {
	local 198.18.1.1 as 65000;
	neighbor 198.18.1.3 as 65001;
	hold time 3;
	connect retry time 1;
	graceful restart off;
	ipv4 { import all; export none; };
}
`)

	const vip, prefix, drain = "198.19.0.1", "198.19.0.1/32", 3 * time.Second
	args := []string{"run", "-iface", "v0", "-vip", vip + ":80", "-m", "251", "-admin", "127.0.0.1:9180",
		"-health", "tcp", "-health-port", "8080", "-health-interval", "200ms", "-health-timeout", "150ms",
		"-health-rise", "1", "-health-fall", "2",
		"-bgp-asn", "65001", "-bgp-router-id", "198.18.1.3", "-bgp-peer", "198.18.1.1,65000", "-bgp-hold", "3s",
		"-bgp-drain", drain.String()}
	ls := make([]net.Listener, len(addrs))
	for i, a := range addrs {
		args = append(args, "-backend", fmt.Sprintf("%v=02:00:00:00:00:%02x", a, 11+i))
		ls[i] = listen(t, beNS, netip.AddrPortFrom(a, 8080))
	}
	p := start(t, lbNS, bin, args...)
	p.await("bgp: speaker started", "asn", "65001", "router_id", "198.18.1.3", "peers", "[198.18.1.1 (AS 65000)]", "hold", "3s", "restart", "2m0s", "drain", "3s")
	p.await("bgp: announcing", "prefix", prefix, "reason", "2 backends in service")
	p.await("bgp: peer established without graceful restart, which the router does not offer: a restart of l4lb withdraws its paths from this router", "peer", "198.18.1.1")

	// Announced, with l4lb's address on the session as the next hop.
	got := r.awaitRoute(prefix, true, "started")
	if !strings.Contains(got, "via 198.18.1.3 on r1") || !strings.Contains(got, "AS65001i") {
		t.Errorf("the router's route: %q, want via 198.18.1.3 on r1, AS path 65001", got)
	}
	st := lbStatus(t, lbNS).BGP
	if len(st.Peers) != 1 || st.Peers[0] != (bgp.PeerStatus{Addr: "198.18.1.1", ASN: 65000, State: "established"}) ||
		len(st.VIPs) != 1 || st.VIPs[0].Prefix != prefix || !st.VIPs[0].Announced || st.ASN != 65001 || st.RouterID != "198.18.1.3" ||
		st.RestartTime != "120s" || st.Leaving != "" {
		t.Errorf("/debug/maglev's bgp: %+v", st)
	}
	body, err := request(lbNS, "GET", "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	wantMetric(t, string(body), `maglev_l4lb_bgp_announced{maglev_vip="198.19.0.1/32"`, 1)
	wantMetric(t, string(body), `maglev_l4lb_bgp_peer_established{maglev_peer="198.18.1.1"`, 1)

	// Every backend fails its health check: the service fails open, and
	// the VIP is withdrawn; one back, it is announced again.
	for _, l := range ls {
		_ = l.Close()
	}
	p.await("failing open: every backend is down by its health check, the last table kept")
	p.await("bgp: withdrew", "prefix", prefix, "reason", "failing open: every backend is down by its health check")
	r.awaitRoute(prefix, false, "all down")
	if !r.established() {
		t.Error("all down: the session went down; the route should be withdrawn by an UPDATE")
	}
	if st := lbStatus(t, lbNS).BGP; st.VIPs[0].Announced || !strings.HasPrefix(st.VIPs[0].Reason, "failing open") {
		t.Errorf("all down: %+v", st.VIPs)
	}
	body, err = request(lbNS, "GET", "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	wantMetric(t, string(body), `maglev_l4lb_bgp_announced{maglev_vip="198.19.0.1/32"`, 0)
	wantMetric(t, string(body), `maglev_l4lb_bgp_updates_total{maglev_action="withdraw",maglev_vip="198.19.0.1/32"`, 1)
	ls[1] = listen(t, beNS, netip.AddrPortFrom(addrs[1], 8080))
	p.await("bgp: announcing", "prefix", prefix, "reason", "1 backend in service")
	got = r.awaitRoute(prefix, true, "one back")
	if !strings.Contains(got, "via 198.18.1.3 on r1") {
		t.Errorf("one back: the router's route: %q", got)
	}
	ls[0] = listen(t, beNS, netip.AddrPortFrom(addrs[0], 8080))
	awaitHealth(t, lbNS, addrs[0], "up", 1, 2)

	// Every backend drained (no backend of weight > 0 in service):
	// withdrawn; one undrained: announced.
	for _, a := range addrs {
		if _, err := request(lbNS, "POST", "/drain?addr="+a.String()); err != nil {
			t.Fatal(err)
		}
	}
	p.await("bgp: withdrew", "prefix", prefix, "reason", "no backend in service (none of weight > 0 up)")
	r.awaitRoute(prefix, false, "all drained")
	if _, err := request(lbNS, "POST", "/undrain?addr="+addrs[0].String()); err != nil {
		t.Fatal(err)
	}
	p.await("bgp: announcing", "prefix", prefix, "reason", "1 backend in service")
	r.awaitRoute(prefix, true, "one undrained")

	// SIGTERM: withdrawn first, the session still up and l4lb running;
	// l4lb exits after the drain.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	term := time.Now()
	r.awaitRoute(prefix, false, "SIGTERM")
	gone := time.Since(term)
	select {
	case <-p.exited:
		t.Fatalf("l4lb exited before the router lost its route (%v after SIGTERM)", gone)
	default:
	}
	if !r.established() {
		t.Errorf("SIGTERM: the session went down with the route; it should have been withdrawn first, by an UPDATE")
	}
	var rest []nstest.Record
	timeout := time.After(drain + 20*time.Second)
	for done := false; !done; {
		select {
		case l, ok := <-p.lines:
			if !ok {
				done = true
				break
			}
			rest = append(rest, l)
		case <-timeout:
			t.Fatalf("l4lb still running %v after SIGTERM; printed %q", drain+20*time.Second, rest)
		}
	}
	<-p.exited
	exit := time.Since(term)
	if p.err != nil {
		t.Fatalf("l4lb exited: %v\n%s", p.err, p.stderr.String())
	}
	// The session may be seen going down once the drain is over, not before.
	for i := 0; i < len(rest); i++ {
		if rest[i].Is("bgp: peer session lost", "peer", "198.18.1.1") && i > 1 && rest[i-1].Is("bgp: draining", "drain", "3s") {
			rest = append(rest[:i], rest[i+1:]...)
			break
		}
	}
	want := [][]string{{"bgp: withdrew", "prefix", prefix, "reason", "l4lb is stopping, and no router keeps its paths (no graceful restart)"},
		{"bgp: draining", "drain", "3s"}, {"bgp: sessions closed"}, {"detached", "iface", "v0"}}
	if !are(rest, want...) {
		t.Errorf("after SIGTERM l4lb logged %+v, want %q", rest, want)
	}
	if exit < drain || gone >= drain {
		t.Errorf("after SIGTERM: the route gone at %v, l4lb exited at %v; want the route gone before the drain of %v ends, and the exit after it", gone, exit, drain)
	}
	t.Logf("after SIGTERM: the router's route gone in %v, l4lb exited in %v", gone, exit)
}

// kernelRoute returns the router namespace's kernel route to prefix, as
// `ip route show` prints it, or "".
func kernelRoute(t *testing.T, ns, prefix string) string {
	t.Helper()
	return strings.TrimSpace(xdptest.IP(t, "-n", ns, "route", "show", prefix))
}

// awaitKernelRoute polls the router namespace's kernel table until it has
// a route to prefix (present) or none, failing the test after 15 s; it
// returns the route.
func awaitKernelRoute(t *testing.T, ns, prefix string, present bool, what string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := kernelRoute(t, ns, prefix)
		if (got != "") == present {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the router's kernel route to %s, after 15 s: %q, want present %v", what, prefix, got, present)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A routeMonitor records the route changes of a namespace's kernel
// table, as `ip monitor route` prints them.
type routeMonitor struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

// monitorRoutes runs `ip monitor route` in namespace ns until the end of
// the test (or stop), and returns once it is seen listening: a blackhole
// route to 198.18.255.0/24 that it adds and removes has been printed.
func monitorRoutes(t *testing.T, ns string) *routeMonitor {
	t.Helper()
	m := &routeMonitor{cmd: exec.Command("ip", "-n", ns, "monitor", "route"), done: make(chan struct{})}
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(m.done)
		s := bufio.NewScanner(out)
		for s.Scan() {
			m.mu.Lock()
			m.lines = append(m.lines, s.Text())
			m.mu.Unlock()
		}
	}()
	t.Cleanup(m.stop)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_ = exec.Command("ip", "-n", ns, "route", "add", "blackhole", "198.18.255.0/24").Run()
		_ = exec.Command("ip", "-n", ns, "route", "del", "blackhole", "198.18.255.0/24").Run()
		time.Sleep(50 * time.Millisecond)
		if slices.ContainsFunc(m.seen(), func(l string) bool { return strings.Contains(l, "198.18.255.0/24") }) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatal("ip monitor route printed nothing in 5 s")
		}
	}
}

// seen returns the lines printed so far.
func (m *routeMonitor) seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.lines)
}

// stop ends the monitor, and waits for it.
func (m *routeMonitor) stop() {
	_ = m.cmd.Process.Kill()
	<-m.done
	_ = m.cmd.Wait()
}

// grActive reports whether BIRD's BGP protocol proto is in graceful
// restart: the neighbor's session ended with no NOTIFICATION and BIRD
// keeps its routes as stale, until the End-of-RIB of a new session (or
// the restart time).
func (r *router) grActive(proto string) bool {
	r.t.Helper()
	out, err := r.birdc("show protocols all " + proto)
	if err != nil {
		r.t.Fatal(err)
	}
	return strings.Contains(out, "Neighbor graceful restart active")
}

// establishedAs reports whether BIRD's BGP protocol proto has its session
// up.
func (r *router) establishedAs(proto string) bool {
	r.t.Helper()
	out, err := r.birdc("show protocols " + proto)
	if err != nil {
		r.t.Fatal(err)
	}
	return strings.Contains(out, "Established")
}

// TestBGPGracefulRestart runs l4lb against BIRD with graceful restart on
// and its kernel protocol exporting to the router namespace's table.
// SIGTERM is a restart: l4lb closes the session with no NOTIFICATION and
// exits at once, withdrawing nothing, and the router keeps the route, in
// BIRD (graceful restart active) and in its kernel table; a new l4lb's
// session announces it again and sends its End-of-RIB, which ends the
// graceful restart, and the kernel's route was never deleted (ip monitor
// route) in between. SIGKILL is the same to the router (the kernel closes
// the session, with no NOTIFICATION). POST /drain-lb then takes the last
// l4lb out of service:
// the route leaves the kernel's table while l4lb still runs, and l4lb
// exits after -bgp-drain, detached.
func TestBGPGracefulRestart(t *testing.T) {
	xdptest.Need(t)
	needBird(t)
	bin := build(t)
	lbNS, _, rNS, addrs := routerNS(t, "bgpgr", 1)
	r := startBird(t, rNS, `router id 198.18.1.1;
protocol device { }
protocol kernel { ipv4 { export all; }; }
protocol bgp lb {
	local 198.18.1.1 as 65000;
	neighbor 198.18.1.3 as 65001;
	hold time 3;
	connect retry time 1;
	graceful restart on;
	ipv4 { import all; export none; };
}
`)
	const prefix, drain = "198.19.0.1/32", 2 * time.Second
	args := []string{"run", "-iface", "v0", "-vip", "198.19.0.1:80", "-m", "251", "-admin", "127.0.0.1:9180",
		"-backend", addrs[0].String() + "=02:00:00:00:00:11",
		"-bgp-asn", "65001", "-bgp-router-id", "198.18.1.3", "-bgp-peer", "198.18.1.1,65000", "-bgp-hold", "3s",
		"-bgp-restart-time", "30s", "-bgp-drain", drain.String()}
	p := start(t, lbNS, bin, args...)
	p.await("bgp: speaker started", "asn", "65001", "router_id", "198.18.1.3", "peers", "[198.18.1.1 (AS 65000)]", "hold", "3s", "restart", "30s", "drain", "2s")
	p.await("bgp: peer established", "peer", "198.18.1.1")
	r.awaitRoute(prefix, true, "started")
	want := "198.19.0.1 via 198.18.1.3 dev r1 proto bird metric 32"
	if got := awaitKernelRoute(t, rNS, prefix, true, "started"); got != want {
		t.Errorf("the router's kernel route: %q, want %q", got, want)
	}
	if st := lbStatus(t, lbNS).BGP; len(st.Peers) != 1 || !st.Peers[0].GracefulRestart || st.RestartTime != "30s" {
		t.Errorf("/debug/maglev's bgp: %+v, want the session with graceful restart, restart time 30s", st)
	}

	// SIGTERM: a restart. Nothing withdrawn; the session closed.
	mon := monitorRoutes(t, rNS)
	term := time.Now()
	rest := p.stop()
	exit := time.Since(term)
	if has(rest, "bgp: withdrew") || has(rest, "bgp: draining") {
		t.Errorf("SIGTERM: l4lb logged %+v; a restart withdraws nothing", rest)
	}
	if !has(rest, "bgp: sessions closed for a restart: the routers keep l4lb's paths for the restart time", "restart", "30s") {
		t.Errorf("SIGTERM: l4lb logged %+v, want the sessions closed for a restart", rest)
	}
	if exit >= drain {
		t.Errorf("SIGTERM: l4lb exited %v after the signal; a restart does not drain (%v)", exit, drain)
	}
	// The router keeps the route, as stale, in BIRD and in its kernel.
	deadline := time.Now().Add(10 * time.Second)
	for !r.grActive("lb") {
		if time.Now().After(deadline) {
			out, _ := r.birdc("show protocols all lb")
			t.Fatalf("SIGTERM: BIRD is not in graceful restart 10 s after l4lb exited:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r.route(prefix) == "" || kernelRoute(t, rNS, prefix) != want {
		t.Fatalf("after the restart's SIGTERM: the router's route %q, kernel route %q; want both kept", r.route(prefix), kernelRoute(t, rNS, prefix))
	}

	// The next l4lb: its session announces the route again, and its
	// End-of-RIB ends BIRD's graceful restart, the route never deleted.
	started := time.Now()
	p = start(t, lbNS, bin, args...)
	p.await("bgp: peer established", "peer", "198.18.1.1")
	up := time.Since(started)
	for r.grActive("lb") {
		if time.Since(started) > 10*time.Second {
			t.Fatal("the new l4lb's session is up, and BIRD still in graceful restart after 10 s: no End-of-RIB")
		}
		time.Sleep(20 * time.Millisecond)
	}
	fresh := time.Since(started)
	if r.route(prefix) == "" || kernelRoute(t, rNS, prefix) != want {
		t.Errorf("after the restart: the router's route %q, kernel route %q; want both", r.route(prefix), kernelRoute(t, rNS, prefix))
	}
	for _, l := range mon.seen() {
		if strings.Contains(l, "198.19.0.1") {
			t.Errorf("during the restart the router's kernel table changed: %q", l)
		}
	}
	t.Logf("restart: l4lb exited %v after SIGTERM; the next one's session was up %v after its start and the route fresh (End-of-RIB) at %v; the kernel route was never deleted",
		exit.Round(time.Millisecond), up.Round(time.Millisecond), fresh.Round(time.Millisecond))

	// SIGKILL is the same to the router: the kernel closes the session
	// with no NOTIFICATION. The route is kept until the next l4lb's
	// End-of-RIB.
	_ = p.cmd.Process.Kill()
	<-p.exited
	deadline = time.Now().Add(10 * time.Second)
	for !r.grActive("lb") {
		if time.Now().After(deadline) {
			t.Fatal("SIGKILL: BIRD is not in graceful restart 10 s after l4lb died")
		}
		time.Sleep(20 * time.Millisecond)
	}
	killed := time.Now()
	p = start(t, lbNS, bin, args...)
	p.await("bgp: peer established", "peer", "198.18.1.1")
	for r.grActive("lb") {
		if time.Since(killed) > 10*time.Second {
			t.Fatal("after SIGKILL: the next l4lb's session is up, and BIRD still in graceful restart: no End-of-RIB")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, l := range mon.seen() {
		if strings.Contains(l, "198.19.0.1") {
			t.Errorf("SIGKILL and a new l4lb: the router's kernel table changed: %q", l)
		}
	}

	// POST /drain-lb: out of service. The route leaves the router's kernel
	// table while l4lb still runs; l4lb exits after the drain, detached.
	post := time.Now()
	body, err := request(lbNS, "POST", "/drain-lb")
	if err != nil {
		t.Fatal(err)
	}
	var st bgp.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if st.Leaving != "l4lb is out of service (POST /drain-lb)" || len(st.VIPs) != 1 || st.VIPs[0].Announced || st.VIPs[0].Reason != st.Leaving {
		t.Errorf("POST /drain-lb answered %s", body)
	}
	awaitKernelRoute(t, rNS, prefix, false, "POST /drain-lb")
	gone := time.Since(post)
	select {
	case <-p.exited:
		t.Fatalf("l4lb exited before the router's kernel lost its route (%v after POST /drain-lb)", gone)
	default:
	}
	if _, err := request(lbNS, "POST", "/drain-lb"); err != nil { // again, while it drains: the same
		t.Errorf("a second POST /drain-lb: %v", err)
	}
	rest = p.rest()
	exit = time.Since(post)
	var lines []nstest.Record
	for _, l := range rest {
		if !l.Is("bgp: peer session lost") { // the session's end may be seen, after the drain
			lines = append(lines, l)
		}
	}
	wantLines := [][]string{{"bgp: withdrew", "prefix", prefix, "reason", "l4lb is out of service (POST /drain-lb)"}, {"bgp: draining", "drain", "2s"},
		{"bgp: sessions closed"}, {"detached", "iface", "v0"}}
	if !are(lines, wantLines...) {
		t.Errorf("after POST /drain-lb l4lb logged %+v, want %q", rest, wantLines)
	}
	if exit < drain || gone >= drain {
		t.Errorf("after POST /drain-lb: the kernel route gone at %v, l4lb exited at %v; want the route gone before the drain of %v ends, and the exit after it", gone, exit, drain)
	}
	if r.grActive("lb") || r.route(prefix) != "" {
		t.Errorf("after the drain BIRD keeps a route or a graceful restart: %q", r.route(prefix))
	}
	t.Logf("POST /drain-lb: the router's kernel route gone %v after the request, l4lb exited %v after it", gone.Round(time.Millisecond), exit.Round(time.Millisecond))
}

// TestBGPIPv6 runs l4lb for an IPv6 VIP against BIRD over an IPv6
// session: the router learns the VIP's /128 (MP-BGP, IPv6 unicast) with
// l4lb's address on the session as the next hop, and installs it in its
// kernel's IPv6 table; a SIGTERM restart keeps it (graceful restart for
// the IPv6 family, BIRD's default "graceful restart aware" its helper),
// the next l4lb's End-of-RIB refreshes it, and POST /drain-lb withdraws it
// before l4lb exits.
func TestBGPIPv6(t *testing.T) {
	xdptest.Need(t)
	needBird(t)
	bin := build(t)
	lbNS, beNS, rNS, _ := routerNS(t, "bgp6", 0)
	xdptest.IP(t, "-n", lbNS, "addr", "add", "2001:db8:1::3/64", "dev", "r0", "nodad")
	xdptest.IP(t, "-n", rNS, "addr", "add", "2001:db8:1::1/64", "dev", "r1", "nodad")
	xdptest.IP(t, "-n", beNS, "addr", "add", "2001:db8::11/64", "dev", "v1", "nodad")
	r := startBird(t, rNS, `router id 198.18.1.1;
protocol device { }
protocol kernel { ipv6 { export all; }; }
protocol bgp lb {
	local 2001:db8:1::1 as 65000;
	neighbor 2001:db8:1::3 as 65001;
	hold time 3;
	connect retry time 1;
	ipv6 { import all; export none; };
}
`)
	const prefix = "2001:db8:ffff::1/128"
	args := []string{"run", "-iface", "v0", "-vip", "[2001:db8:ffff::1]:80", "-m", "251", "-admin", "127.0.0.1:9180",
		"-backend", "2001:db8::11=02:00:00:00:00:11",
		"-bgp-asn", "65001", "-bgp-router-id", "198.18.1.3", "-bgp-peer", "2001:db8:1::1,65000", "-bgp-hold", "3s",
		"-bgp-restart-time", "30s", "-bgp-drain", "1s"}
	p := start(t, lbNS, bin, args...)
	p.await("bgp: speaker started", "asn", "65001", "router_id", "198.18.1.3", "peers", "[2001:db8:1::1 (AS 65000)]", "hold", "3s", "restart", "30s", "drain", "1s")
	p.await("bgp: announcing", "prefix", "2001:db8:ffff::1/128", "reason", "1 backend in service")
	p.await("bgp: peer established", "peer", "2001:db8:1::1")
	got := r.awaitRoute(prefix, true, "started")
	if !strings.Contains(got, "via 2001:db8:1::3 on r1") || !strings.Contains(got, "AS65001i") {
		t.Errorf("the router's route: %q, want via 2001:db8:1::3 on r1, AS path 65001", got)
	}
	kernel := func() string { return strings.TrimSpace(xdptest.IP(t, "-6", "-n", rNS, "route", "show", prefix)) }
	deadline := time.Now().Add(10 * time.Second)
	for kernel() == "" {
		if time.Now().After(deadline) {
			t.Fatal("no kernel route to the VIP in the router's IPv6 table after 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := kernel()
	if !strings.HasPrefix(want, "2001:db8:ffff::1 via 2001:db8:1::3 dev r1 proto bird") {
		t.Errorf("the router's kernel route: %q, want via 2001:db8:1::3 dev r1", want)
	}
	if st := lbStatus(t, lbNS).BGP; len(st.Peers) != 1 || !st.Peers[0].GracefulRestart || len(st.VIPs) != 1 || st.VIPs[0].Prefix != prefix || !st.VIPs[0].Announced {
		t.Errorf("/debug/maglev's bgp: %+v", st)
	}
	t.Logf("the router's kernel route: %s", want)

	// A restart: the route kept, then refreshed, never deleted.
	mon := monitorRoutes(t, rNS)
	p.stop()
	deadline = time.Now().Add(10 * time.Second)
	for !r.grActive("lb") {
		if time.Now().After(deadline) {
			t.Fatal("SIGTERM: BIRD is not in graceful restart 10 s after l4lb exited")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if kernel() != want {
		t.Fatalf("after SIGTERM the kernel route is %q, want %q kept", kernel(), want)
	}
	started := time.Now()
	p = start(t, lbNS, bin, args...)
	p.await("bgp: peer established", "peer", "2001:db8:1::1")
	for r.grActive("lb") {
		if time.Since(started) > 10*time.Second {
			t.Fatal("the new l4lb's session is up, and BIRD still in graceful restart after 10 s: no End-of-RIB")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, l := range mon.seen() {
		if strings.Contains(l, "2001:db8:ffff::1") {
			t.Errorf("during the restart the router's kernel table changed: %q", l)
		}
	}
	if kernel() != want {
		t.Errorf("after the restart the kernel route is %q, want %q", kernel(), want)
	}

	// Out of service: withdrawn while l4lb still runs.
	if _, err := request(lbNS, "POST", "/drain-lb"); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for kernel() != "" {
		if time.Now().After(deadline) {
			t.Fatal("POST /drain-lb: the kernel route to the VIP still there after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-p.exited:
		t.Fatal("l4lb exited before the router's kernel lost its route")
	default:
	}
	if rest := p.rest(); !has(rest, "bgp: withdrew", "prefix", "2001:db8:ffff::1/128", "reason", "l4lb is out of service (POST /drain-lb)") {
		t.Errorf("after POST /drain-lb l4lb logged %+v", rest)
	}
}
