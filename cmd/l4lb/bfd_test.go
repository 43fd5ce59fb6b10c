package main

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// bfdBird is the router's BIRD in TestBFD: a BGP session to each load
// balancer, BFD on A's and C's, at l4lb's default interval and multiplier
// (100 ms, 3), graceful restart on, as in production.
const bfdBird = `router id 198.18.1.1;
protocol device { }
protocol bfd {
	interface "eth0" { interval 100 ms; multiplier 3; };
}
template bgp lbs {
	local 198.18.1.1 as 65000;
	hold time 3;
	connect retry time 1;
	error wait time 1, 10;
	graceful restart on;
	ipv4 { import all; export none; };
}
protocol bgp lba from lbs { neighbor 198.18.1.3 as 65001; bfd on; }
protocol bgp lbb from lbs { neighbor 198.18.1.4 as 65001; }
protocol bgp lbc from lbs { neighbor 198.18.1.5 as 65001; bfd on; }
`

// bfdHold is the hold time of TestBFD's sessions (BIRD's and l4lb's).
const bfdHold = 3 * time.Second

// The load balancers of TestBFD, by their address on the switch: A with
// BFD and B without, cut off; C with BFD, killed.
const bfdA, bfdB, bfdC = "198.18.1.3", "198.18.1.4", "198.18.1.5"

// bfdNS makes TestBFD's network: a switch (a bridge in a namespace of its
// own) joining the router's eth0, 198.18.1.1/24, and each load balancer's
// eth0, at its address/24; each load balancer's namespace has
// xdptest.VethNS's v0 and v1 too, for l4lb's XDP program. It returns the
// router's namespace and the load balancers', by address.
func bfdNS(t *testing.T, lbs ...string) (string, map[string]string) {
	t.Helper()
	sw := xdptest.NewNS(t, "bfdsw")
	xdptest.IP(t, "-n", sw, "link", "add", "br0", "type", "bridge")
	xdptest.IP(t, "-n", sw, "link", "set", "br0", "up")
	join := func(ns, port, addr string) {
		xdptest.IP(t, "-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
		xdptest.IP(t, "-n", sw, "link", "set", port, "master", "br0", "up")
		xdptest.IP(t, "-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
		xdptest.IP(t, "-n", ns, "link", "set", "eth0", "up")
	}
	rNS := xdptest.NewNS(t, "bfdr")
	join(rNS, "p-r", "198.18.1.1")
	nss := map[string]string{}
	for i, a := range lbs {
		nss[a] = xdptest.VethNS(t, fmt.Sprintf("bfd%d", i))
		join(nss[a], fmt.Sprintf("p-%d", i), a)
	}
	return rNS, nss
}

// nexthopsOf returns which of addrs the router's routes to prefix go
// through, as BIRD's `show route` prints them.
func (r *router) nexthopsOf(prefix string, addrs ...string) map[string]bool {
	r.t.Helper()
	got := r.route(prefix)
	via := map[string]bool{}
	for _, a := range addrs {
		via[a] = strings.Contains(got, "via "+a+" ")
	}
	return via
}

// bfdUp reports whether BIRD's BFD session with addr is Up.
func (r *router) bfdUp(addr string) bool {
	r.t.Helper()
	out, err := r.birdc("show bfd sessions")
	if err != nil {
		r.t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == addr && f[2] == "Up" {
			return true
		}
	}
	return false
}

// bfdArgs are TestBFD's load balancer's arguments: addr its address,
// BFD or not.
func bfdArgs(addr string, bfd bool) []string {
	a := []string{"run", "-iface", "v0", "-vip", "198.19.0.1:80", "-m", "251", "-admin", "127.0.0.1:9180",
		"-backend", "198.18.0.11=02:00:00:00:00:11",
		"-bgp-asn", "65001", "-bgp-router-id", addr, "-bgp-peer", "198.18.1.1,65000", "-bgp-hold", bfdHold.String(),
		"-bgp-restart-time", "30s"}
	if bfd {
		a = append(a, "-bgp-bfd")
	}
	return a
}

// TestBFD: three load balancers announce the same VIP to BIRD: A and C
// with -bgp-bfd and BFD on their sessions at BIRD, B with neither; each
// has a hold time of 3 s and graceful restart. At once, A and B are cut
// off, by their link to the switch set down (ip link set eth0 down in
// their namespaces), and C is killed (SIGKILL). A cut link is a dead load
// balancer as the router sees it behind a switch: its own link stays up,
// and nothing comes from the load balancer any more (a veth straight to
// the router would tell it by its carrier, which BIRD acts on at once).
// A killed l4lb's sessions end with no NOTIFICATION, which is a graceful
// restart to BIRD, which keeps its paths (TestBGPGracefulRestart); with
// BFD, BIRD ends the graceful restart once the BFD session falls silent.
// The router drops A's and C's nexthops in under a second (BFD: 3 x 100
// ms), and keeps B's for more than a second (until the hold time, up to
// 3 s after the last keepalive). Before, BIRD's BFD sessions with A and C
// are Up, and l4lb's /debug/maglev says so.
func TestBFD(t *testing.T) {
	xdptest.Need(t)
	needBird(t)
	bin := build(t)
	rNS, ns := bfdNS(t, bfdA, bfdB, bfdC)
	r := startBird(t, rNS, bfdBird)
	const prefix = "198.19.0.1/32"
	start0 := time.Now()
	p := map[string]*process{}
	for _, a := range []string{bfdA, bfdB, bfdC} {
		p[a] = start(t, ns[a], bin, bfdArgs(a, a != bfdB)...)
	}
	p[bfdA].await("bgp: speaker started", "asn", "65001", "router_id", bfdA, "hold", "3s", "bfd", "100ms x3")
	p[bfdB].await("bgp: speaker started", "asn", "65001", "router_id", bfdB, "hold", "3s", "bfd", "off")

	// Every route at the router, and BFD Up with A and C, at BIRD and at
	// l4lb.
	deadline := time.Now().Add(15 * time.Second)
	for {
		via := r.nexthopsOf(prefix, bfdA, bfdB, bfdC)
		if via[bfdA] && via[bfdB] && via[bfdC] && r.bfdUp(bfdA) && r.bfdUp(bfdC) {
			break
		}
		if time.Now().After(deadline) {
			out, _ := r.birdc("show bfd sessions")
			t.Fatalf("after 15 s: the router's routes via A, B and C %v, want all; BIRD's BFD sessions:\n%s", via, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	up := time.Since(start0)
	for _, a := range []string{bfdA, bfdC} {
		p[a].await("bgp: bfd up", "peer", "198.18.1.1")
		st := lbStatus(t, ns[a]).BGP
		if len(st.Peers) != 1 || st.Peers[0].BFD != "up" || st.Peers[0].BFDReceived == 0 || st.Peers[0].BFDSent == 0 || st.BFD != "100ms x3" ||
			!st.Peers[0].GracefulRestart {
			t.Errorf("%s's /debug/maglev bgp: %+v, want its peer's BFD up, packets both ways, BFD 100ms x3, graceful restart", a, st)
		}
	}
	if st := lbStatus(t, ns[bfdB]).BGP; len(st.Peers) != 1 || st.Peers[0].BFD != "" || st.BFD != "" {
		t.Errorf("B's /debug/maglev bgp: %+v, want no BFD", st)
	}
	if out, err := r.birdc("show bfd sessions"); err != nil || strings.Contains(out, bfdB) {
		t.Errorf("BIRD's BFD sessions: %v\n%s\nwant none with B", err, out)
	}

	gone := bfdCut(t, r, prefix, ns, p[bfdC])
	for a, d := range gone {
		if a != bfdB && d >= time.Second {
			t.Errorf("with BFD the router dropped the nexthop %s %v after it was lost, want under 1s", a, d)
		}
	}
	if d := gone[bfdB]; d <= time.Second || d > bfdHold+time.Second {
		t.Errorf("without BFD the router dropped the nexthop %s %v after it was lost, want after 1s, by the hold time (%v)", bfdB, d, bfdHold)
	}
	for proto, want := range map[string]string{"lba": "BFD session down", "lbb": "Hold timer expired", "lbc": "BFD session down"} {
		if out, err := r.birdc("show protocols all " + proto); err != nil || !strings.Contains(out, want) {
			t.Errorf("BIRD's %s: %v\n%s\nwant %q", proto, err, out, want)
		}
	}
	// A hears nothing from the router either: its own BFD session fails,
	// in 300 ms, and GoBGP resets the BGP session.
	p[bfdA].await("bgp: bfd down", "peer", "198.18.1.1")
	t.Logf("BFD up %v after the load balancers' start; after the cut, the router dropped the nexthop with BFD (100ms x3) in %v, without (hold time %v) in %v; after SIGKILL, with BFD (and graceful restart) in %v",
		up.Round(time.Millisecond), gone[bfdA].Round(time.Millisecond), bfdHold, gone[bfdB].Round(time.Millisecond), gone[bfdC].Round(time.Millisecond))
}

// bfdCut cuts A and B off (their eth0 down) and kills C, at once, then
// polls the router (a birdc run every 10 ms or so) until every nexthop
// is gone; it returns how long after its load balancer's end each went.
func bfdCut(t *testing.T, r *router, prefix string, ns map[string]string, c *process) map[string]time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	end, errs := map[string]time.Time{}, make([]error, 3)
	for i, a := range []string{bfdA, bfdB, bfdC} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mu.Lock()
			end[a] = time.Now()
			mu.Unlock()
			if a == bfdC {
				errs[i] = c.cmd.Process.Kill()
				return
			}
			if out, err := exec.Command("ip", "-n", ns[a], "link", "set", "eth0", "down").CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("ip -n %s link set eth0 down: %v: %s", ns[a], err, out)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	gone := map[string]time.Duration{}
	for len(gone) < 3 {
		via := r.nexthopsOf(prefix, bfdA, bfdB, bfdC)
		for a, at := range end {
			if _, ok := gone[a]; !ok && !via[a] {
				gone[a] = time.Since(at)
			}
		}
		if time.Since(end[bfdA]) > bfdHold+5*time.Second {
			t.Fatalf("%v after the cut the router still has routes via %v", bfdHold+5*time.Second, via)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return gone
}
