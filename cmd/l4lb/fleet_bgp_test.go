package main

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fleetBird is the router's BIRD in TestFleetBGP: an eBGP session per load
// balancer, graceful restart on, and the kernel protocol merging the load
// balancers' routes into one ECMP route of the namespace's kernel table.
// docs/l4lb.md has the same configuration.
const fleetBird = `router id 198.18.0.1;
protocol device { }
protocol kernel {
	merge paths on;
	ipv4 { export where proto ~ "lb*"; };
}
template bgp lbs {
	local 198.18.0.1 as 65000;
	connect retry time 1;
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
// docs/l4lb.md for the figures.
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
	t.Logf("1. the router's kernel route had the three nexthops %v after the last l4lb's first table; 300 connections at their predicted backends %v, tracked per load balancer %v",
		joined.Round(time.Millisecond), per, spread)

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
