package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// fleetBird is the router's BIRD in TestFleetBGP: an eBGP session per load
// balancer, graceful restart on, and the kernel protocol merging the load
// balancers' routes into one ECMP route of the namespace's kernel table.
// docs/l4lb-howto-bgp.md has the same configuration.
const fleetBird = `router id 198.18.0.1;
protocol device { }
protocol kernel {
	merge paths on;
	ipv4 { export where proto ~ "lb*"; };
}
template bgp lbs {
	local 198.18.0.1 as 65000;
	connect retry time 1;
	error wait time 1, 10;
	graceful restart on;
	ipv4 { import where net.len = 32; export none; };
}
protocol bgp lb0 from lbs { neighbor 198.18.0.3 as 65001; }
protocol bgp lb1 from lbs { neighbor 198.18.0.4 as 65001; }
protocol bgp lb2 from lbs { neighbor 198.18.0.5 as 65001; }
`

const (
	fleetHold       = 3 * time.Second // -bgp-hold
	fleetBGPDrain   = 2 * time.Second // -bgp-drain
	fleetHealthPort = 8080
)

// bgpArgs are load balancer i's flags in TestFleetBGP: its health check
// on fleetHealthPort, its BGP session to the router.
func bgpArgs(i int) []string {
	return []string{"-health", "tcp", "-health-port", fmt.Sprint(fleetHealthPort), "-health-interval", "200ms",
		"-health-timeout", "150ms", "-health-rise", "1", "-health-fall", "2",
		"-bgp-asn", "65001", "-bgp-router-id", lbAddr(i), "-bgp-peer", "198.18.0.1,65000",
		"-bgp-hold", fleetHold.String(), "-bgp-restart-time", "30s", "-bgp-drain", fleetBGPDrain.String()}
}

// nexthops returns the load balancers the router's kernel route to the
// VIP goes through, by index, in order; none without a route.
func (f *fleet) nexthops() []int {
	f.t.Helper()
	out := f.run("ip", "-n", f.rt, "route", "show", fleetVIP.Addr().String()+"/32")
	var lbs []int
	fields := strings.Fields(out)
	for k := 0; k+1 < len(fields); k++ {
		if fields[k] != "via" {
			continue
		}
		for i := range fleetLBs {
			if fields[k+1] == lbAddr(i) {
				lbs = append(lbs, i)
			}
		}
	}
	slices.Sort(lbs)
	return lbs
}

// awaitNexthops polls the router's kernel route until its nexthops are
// want's, failing the test after bound; it returns how long that took.
func (f *fleet) awaitNexthops(want []int, bound time.Duration, what string) time.Duration {
	f.t.Helper()
	start := time.Now()
	for {
		got := f.nexthops()
		if slices.Equal(got, want) {
			return time.Since(start)
		}
		if time.Since(start) > bound {
			f.t.Fatalf("%s: the router's kernel route to the VIP goes through load balancers %v after %v, want %v:\n%s",
				what, got, bound, want, f.run("ip", "-n", f.rt, "route", "show", fleetVIP.Addr().String()+"/32"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// post sends POST path to load balancer i's admin listener, in its
// namespace, and returns an error unless it answers 2xx.
func (f *fleet) post(i int, path string) error {
	_, err := request(f.lbs[i], "POST", path)
	return err
}

// TestFleetBGP is the fleet on routes learned by BGP: three l4lb processes
// announce the VIP to BIRD in the router namespace, whose kernel protocol
// merges their routes into one route of three nexthops, and each is taken
// out of service, restarted, or lost, on real packets through XDP, the
// backends from a real etcd and checked by l4lb's health check. See
// docs/testing-l4lb.md for the figures.
func TestFleetBGP(t *testing.T) {
	needBird(t)
	f := newFleet(t)
	r := startBird(t, f.rt, fleetBird)
	health := make([]net.Listener, 4)
	for i := range 4 {
		f.register(i, 1)
		health[i] = listen(t, f.bes[i], netip.AddrPortFrom(beAddr(i), fleetHealthPort))
	}
	for i := range fleetLBs {
		f.startLB(i, bgpArgs(i)...)
	}
	tbl := f.table()
	f.converge(tbl, 10*time.Second)

	// 1. Three nexthops, learned by BGP; connections spread over them.
	joined := f.awaitNexthops([]int{0, 1, 2}, 15*time.Second, "1. started")
	if out, err := r.birdc("show route " + fleetVIP.Addr().String() + "/32"); err != nil || strings.Count(out, "via ") != 3 {
		t.Errorf("1. BIRD's routes to the VIP: %v %q, want one from each load balancer", err, out)
	}
	before := f.inserts()
	per, _ := f.connect(tbl, portRange(20000, 300), false)
	after := f.inserts()
	var spread []uint64
	for i := range after {
		spread = append(spread, after[i]-before[i])
		if after[i] == before[i] {
			t.Errorf("1. load balancer %d tracked none of the 300 connections: ECMP did not spread them (%v)", i, spread)
		}
	}
	t.Logf("1. the router's kernel route had the three nexthops %v after the last l4lb's first table; 300 connections at their predicted backends %v, tracked per load balancer %v; the route:\n%s",
		joined.Round(time.Millisecond), per, spread, f.run("ip", "-n", f.rt, "route", "show", fleetVIP.Addr().String()+"/32"))

	// Long-lived connections, through every load balancer, until 5. A
	// line may wait for a retransmission while a route changes: 10 s each.
	_, conns := f.connect(tbl, portRange(30000, 60), true)
	pp := startPumpsWithin(conns, 10*time.Second)
	defer pp.close()
	pumpsOK := func(what string) {
		t.Helper()
		if failed, first := pp.failed(); len(failed) > 0 {
			t.Fatalf("%s: %d of %d long-lived connections failed; %v", what, len(failed), len(conns), first)
		}
	}

	// 2. POST /drain-lb on load balancer 2, under load: the router drops
	// its path while it still runs; it exits after the drain; no
	// connection fails.
	l := f.startLoad(4)
	time.Sleep(300 * time.Millisecond)
	if err := f.post(2, "/drain-lb"); err != nil {
		t.Fatal(err)
	}
	post := time.Now()
	dropped := f.awaitNexthops([]int{0, 1}, 5*time.Second, "2. POST /drain-lb")
	if f.procs[2].exited() {
		t.Fatalf("2. l4lb 2 exited before the router dropped its path (%v after POST /drain-lb)", dropped)
	}
	if !f.procs[2].wait(fleetBGPDrain+10*time.Second) || f.procs[2].err != nil {
		t.Fatalf("2. l4lb 2 after POST /drain-lb: exited %v, %v", f.procs[2].ended, f.procs[2].err)
	}
	exit := time.Since(post)
	f.procs[2] = nil
	time.Sleep(500 * time.Millisecond)
	ok, fail, kinds := l.stop()
	if fail > 0 || ok == 0 {
		t.Errorf("2. under POST /drain-lb: %d connections failed of %d %v", fail, ok+fail, kinds)
	}
	if exit < fleetBGPDrain {
		t.Errorf("2. l4lb 2 exited %v after POST /drain-lb, before its drain of %v", exit, fleetBGPDrain)
	}
	pumpsOK("2. drained")
	t.Logf("2. POST /drain-lb: the router's kernel dropped the path %v after the request, l4lb exited %v after it; %d short connections meanwhile, %d failed; %d of %d long-lived connections kept working",
		dropped.Round(time.Millisecond), exit.Round(time.Millisecond), ok+fail, fail, len(conns), len(conns))

	// 3. It starts again: its path is back.
	start := time.Now()
	f.startLB(2, bgpArgs(2)...)
	back := f.awaitNexthops([]int{0, 1, 2}, 15*time.Second, "3. started again")
	pumpsOK("3. rejoined")
	t.Logf("3. l4lb 2 started again: the router's kernel route had its nexthop %v after its first table (%v after the start)",
		back.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// 4. Load balancer 1 restarted (SIGTERM, start again), under load:
	// graceful restart keeps its path, and the kernel route never changes.
	mon := monitorRoutes(t, f.rt)
	l = f.startLoad(4)
	time.Sleep(300 * time.Millisecond)
	term := time.Now()
	if err := f.procs[1].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !f.procs[1].wait(10*time.Second) || f.procs[1].err != nil {
		t.Fatalf("4. l4lb 1 after SIGTERM: exited %v, %v", f.procs[1].ended, f.procs[1].err)
	}
	gone := time.Since(term)
	if !r.grActive("lb1") {
		t.Errorf("4. BIRD's session lb1 is not in graceful restart after l4lb 1 exited")
	}
	f.startLB(1, bgpArgs(1)...)
	restarted := time.Since(term)
	for r.grActive("lb1") || !r.establishedAs("lb1") {
		if time.Since(term) > 15*time.Second {
			t.Fatal("4. the restarted l4lb 1's session did not end BIRD's graceful restart in 15 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fresh := time.Since(term)
	time.Sleep(500 * time.Millisecond)
	ok, fail, kinds = l.stop()
	if fail > 0 || ok == 0 {
		t.Errorf("4. under the restart: %d connections failed of %d %v", fail, ok+fail, kinds)
	}
	if got := f.nexthops(); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("4. after the restart the route goes through %v", got)
	}
	for _, line := range mon.seen() {
		if strings.Contains(line, fleetVIP.Addr().String()) {
			t.Errorf("4. during the restart the router's kernel route changed: %q", line)
		}
	}
	mon.stop()
	pumpsOK("4. restarted")
	t.Logf("4. l4lb 1 restarted: exited %v after SIGTERM, the next one had its first table at %v and ended BIRD's graceful restart (End-of-RIB) at %v; the kernel route never changed; %d short connections meanwhile, %d failed",
		gone.Round(time.Millisecond), restarted.Round(time.Millisecond), fresh.Round(time.Millisecond), ok+fail, fail)

	// 5. Load balancer 0 lost: its link cut, then SIGKILL, so that no FIN
	// reaches the router (a process's death alone closes its sessions, a
	// restart to the router). The router drops its path when the hold time
	// runs out, and the long-lived connections it carried move to the
	// others, which send them to the same backends.
	before = f.inserts()
	f.ip(f.lbs[0], "link", "set", "eth0", "down")
	f.stopLB(0)
	held := f.awaitNexthops([]int{1, 2}, fleetHold+5*time.Second, "5. lost")
	if held > fleetHold+500*time.Millisecond {
		t.Errorf("5. the router dropped the lost load balancer's path %v after it was lost, more than the hold time (%v)", held, fleetHold)
	}
	time.Sleep(time.Second)
	after = f.inserts()
	moved := (after[1] - before[1]) + (after[2] - before[2])
	pumpsOK("5. lost")
	if moved == 0 {
		t.Errorf("5. no connection moved to load balancers 1 and 2 when 0 was lost")
	}
	pp.close()
	t.Logf("5. load balancer 0 lost (link down, SIGKILL): the router dropped its path %v later (hold time %v); %d connections moved to 1 and 2, %d of %d long-lived connections kept working; %d lines (%d bytes) echoed whole over them in all",
		held.Round(time.Millisecond), fleetHold, moved, len(conns), len(conns), pp.lines.Load(), pp.bytes.Load())

	// 6. Every backend fails its health check: every load balancer
	// withdraws the VIP, and the router has no route; one backend healthy
	// again brings it back, through both.
	for _, h := range health {
		_ = h.Close()
	}
	withdrawn := f.awaitNexthops(nil, 10*time.Second, "6. every backend down")
	health[3] = listen(t, f.bes[3], netip.AddrPortFrom(beAddr(3), fleetHealthPort))
	returned := f.awaitNexthops([]int{1, 2}, 10*time.Second, "6. one backend up")
	only, err := tbl.Without(beAddr(0).String(), beAddr(1).String(), beAddr(2).String())
	if err != nil {
		t.Fatal(err)
	}
	f.converge(only, 5*time.Second)
	per, _ = f.connect(only, portRange(61000, 100), false) // above the client's ephemeral ports, which the loads used
	if per[beAddr(3).String()] != 100 {
		t.Errorf("6. 100 connections with one backend up reached %v", per)
	}
	t.Logf("6. every backend's health check failing: the router had no route %v later; one backend up: the route back through both load balancers %v later, and 100 connections at it",
		withdrawn.Round(time.Millisecond), returned.Round(time.Millisecond))
}

// fleetFRR is the router's FRR configuration (bgpd) in TestFleetFRR:
// docs/l4lb-howto-bgp.md has the same, for 10.0.0.0/24.
const fleetFRR = `router bgp 65000
 bgp router-id 198.18.0.1
 bgp bestpath as-path multipath-relax
 neighbor LB peer-group
 neighbor LB remote-as 65001
 neighbor LB timers 3 9
 neighbor 198.18.0.3 peer-group LB
 neighbor 198.18.0.4 peer-group LB
 neighbor 198.18.0.5 peer-group LB
 address-family ipv4 unicast
  maximum-paths 8
  neighbor LB route-map LB-IN in
  neighbor LB route-map NONE out
 exit-address-family
!
ip prefix-list VIPS seq 5 permit 198.19.0.0/16 ge 32
route-map LB-IN permit 10
 match ip address prefix-list VIPS
route-map NONE deny 10
`

// frrDir is where Debian's frr installs its daemons.
const frrDir = "/usr/lib/frr"

// needFRR skips the test (fails it under CI=true) without FRR's zebra,
// bgpd and vtysh, or its user frr.
func needFRR(t *testing.T) {
	t.Helper()
	why := ""
	for _, bin := range []string{frrDir + "/zebra", frrDir + "/bgpd"} {
		if _, err := os.Stat(bin); err != nil {
			why = bin + " is missing: install Debian's frr"
		}
	}
	if _, err := exec.LookPath("vtysh"); err != nil && why == "" {
		why = "vtysh is missing: install Debian's frr"
	}
	if _, err := user.Lookup("frr"); err != nil && why == "" {
		why = "no user frr, which FRR's daemons run as: install Debian's frr"
	}
	if why != "" {
		xdptest.Skip(t, why)
	}
}

// An frr is FRR's zebra and bgpd running in a namespace, with their
// configuration, sockets and logs in a directory of their own.
type frr struct {
	t   *testing.T
	dir string
}

// startFRR runs zebra and bgpd in namespace ns with bgpd's configuration
// conf until the end of the test, as the user frr (FRR's daemons drop to
// it), and returns once bgpd answers vtysh (within 10 s).
func startFRR(t *testing.T, ns, conf string) *frr {
	t.Helper()
	dir, err := os.MkdirTemp("", "l4lb-frr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	u, err := user.Lookup("frr")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for name, text := range map[string]string{"zebra.conf": "hostname router\n", "bgpd.conf": conf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"", "zebra.conf", "bgpd.conf"} {
		if err := os.Chown(filepath.Join(dir, name), uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &frr{t: t, dir: dir}
	for _, d := range []string{"zebra", "bgpd"} {
		daemon(t, ns, filepath.Join(dir, d+".log"), filepath.Join(frrDir, d), "-f", filepath.Join(dir, d+".conf"),
			"-i", filepath.Join(dir, d+".pid"), "-z", filepath.Join(dir, "zserv.api"), "--vty_socket", dir, "-P", "0",
			"--log", "file:"+filepath.Join(dir, d+".log"))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := r.vtysh("show bgp summary"); err == nil {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("bgpd not answering vtysh on %s in 10 s", dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// vtysh runs a command of vtysh on the daemons' sockets, within 5 s.
func (r *frr) vtysh(command string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "vtysh", "--vty_socket", r.dir, "-c", command).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("vtysh -c %q: %v: %s", command, err, out)
	}
	return string(out), nil
}

// TestFleetFRR is TestFleetBGP's fleet behind FRR 8 (zebra and bgpd, the
// configuration of docs/l4lb-howto-bgp.md) instead of BIRD: three load balancers'
// routes make one route of three nexthops in the router's kernel, and
// connections spread over them; a SIGTERM restart of one keeps the kernel
// route unchanged (FRR is a graceful restart helper by default) and fails
// no connection; POST /drain-lb on another drops its nexthop before it
// exits, and fails no connection.
func TestFleetFRR(t *testing.T) {
	needFRR(t)
	f := newFleet(t)
	r := startFRR(t, f.rt, fleetFRR)
	for i := range 4 {
		f.register(i, 1)
		listen(t, f.bes[i], netip.AddrPortFrom(beAddr(i), fleetHealthPort))
	}
	for i := range fleetLBs {
		f.startLB(i, bgpArgs(i)...)
	}
	tbl := f.table()
	f.converge(tbl, 10*time.Second)
	joined := f.awaitNexthops([]int{0, 1, 2}, 15*time.Second, "started")
	before := f.inserts()
	per, _ := f.connect(tbl, portRange(20000, 300), false)
	after := f.inserts()
	for i := range after {
		if after[i] == before[i] {
			t.Errorf("load balancer %d tracked none of the 300 connections: ECMP did not spread them", i)
		}
	}
	t.Logf("1. the router's kernel route had the three nexthops %v after the last l4lb's first table; 300 connections at their predicted backends %v; the route:\n%s",
		joined.Round(time.Millisecond), per, f.run("ip", "-n", f.rt, "route", "show", fleetVIP.Addr().String()+"/32"))

	// A restart, under load: the kernel route never changes, and FRR's
	// stale path is fresh again once the new l4lb's End-of-RIB is in.
	mon := monitorRoutes(t, f.rt)
	l := f.startLoad(4)
	time.Sleep(300 * time.Millisecond)
	term := time.Now()
	if err := f.procs[1].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !f.procs[1].wait(10*time.Second) || f.procs[1].err != nil {
		t.Fatalf("l4lb 1 after SIGTERM: exited %v, %v", f.procs[1].ended, f.procs[1].err)
	}
	stale := false
	for !stale && time.Since(term) < 5*time.Second {
		out, err := r.vtysh("show ip bgp neighbors 198.18.0.4")
		if err != nil {
			t.Fatal(err)
		}
		stale = strings.Contains(out, "BGP state = Active") || strings.Contains(out, "BGP state = Connect") || strings.Contains(out, "BGP state = Idle")
		time.Sleep(10 * time.Millisecond)
	}
	if !stale {
		t.Fatal("FRR's session with l4lb 1 still up 5 s after it exited")
	}
	if got := f.nexthops(); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("l4lb 1 exited for a restart: the kernel route goes through %v, want its path kept", got)
	}
	f.startLB(1, bgpArgs(1)...)
	for {
		out, err := r.vtysh("show ip bgp neighbors 198.18.0.4")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "BGP state = Established") {
			break
		}
		if time.Since(term) > 15*time.Second {
			t.Fatalf("the restarted l4lb 1's session not up in 15 s:\n%s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	up := time.Since(term)
	time.Sleep(500 * time.Millisecond)
	ok, fail, kinds := l.stop()
	if fail > 0 || ok == 0 {
		t.Errorf("under the restart: %d connections failed of %d %v", fail, ok+fail, kinds)
	}
	if out, err := r.vtysh("show ip bgp"); err != nil || strings.Contains(out, "S>") || strings.Contains(out, "S=") || strings.Count(out, "198.18.0.") < 3 {
		t.Errorf("after the restart FRR's table: %v\n%s", err, out)
	}
	for _, line := range mon.seen() {
		if strings.Contains(line, fleetVIP.Addr().String()) {
			t.Errorf("during the restart the router's kernel route changed: %q", line)
		}
	}
	mon.stop()
	t.Logf("2. l4lb 1 restarted: the next one's session up %v after SIGTERM; the kernel route never changed; %d short connections meanwhile, %d failed",
		up.Round(time.Millisecond), ok+fail, fail)

	// Out of service, under load: the nexthop gone before l4lb exits.
	l = f.startLoad(4)
	time.Sleep(300 * time.Millisecond)
	if err := f.post(2, "/drain-lb"); err != nil {
		t.Fatal(err)
	}
	post := time.Now()
	dropped := f.awaitNexthops([]int{0, 1}, 5*time.Second, "POST /drain-lb")
	if f.procs[2].exited() {
		t.Fatalf("l4lb 2 exited before the router dropped its path (%v after POST /drain-lb)", dropped)
	}
	if !f.procs[2].wait(fleetBGPDrain+10*time.Second) || f.procs[2].err != nil {
		t.Fatalf("l4lb 2 after POST /drain-lb: exited %v, %v", f.procs[2].ended, f.procs[2].err)
	}
	exit := time.Since(post)
	f.procs[2] = nil
	time.Sleep(500 * time.Millisecond)
	ok, fail, kinds = l.stop()
	if fail > 0 || ok == 0 {
		t.Errorf("under POST /drain-lb: %d connections failed of %d %v", fail, ok+fail, kinds)
	}
	t.Logf("3. POST /drain-lb: the router's kernel dropped the path %v after the request, l4lb exited %v after it; %d short connections meanwhile, %d failed",
		dropped.Round(time.Millisecond), exit.Round(time.Millisecond), ok+fail, fail)
}
