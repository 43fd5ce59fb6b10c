package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/admin"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/pool"
	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/etcdmaglev/etcdtest"
	"github.com/maglevlb/maglev/xdpmaglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

// The handoff test's network: a routedNet (client, router, bridge) with
//
//	l4lb    198.18.0.3 and 198.18.0.4 (XDP on eth0), one-armed: GUE
//	        back out of eth0 to the backends on the bridge; the router
//	        routes the VIP to one of them at a time
//	backends 198.18.0.11 to .14: the VIP on lo, l4lb decap on eth0
//	        trusting 198.18.0.0/24 (the load balancers, and the other
//	        backends' second hops), forwarding on; TCP servers on VIP:80
//	        and VIP:81 that send their name, then echo
//
// Two services on the VIP, both GUE with second chance (10 minutes):
// stateless on port 80, tracked (conntrack) on port 81.
type handoffNet struct {
	*routedNet
	lbs, backends []string // namespaces
	bin, dir      string
	procs         [2]*process // by load balancer; nil when not running
	etcd          *etcdtest.Server
	cli           *clientv3.Client
	regs          []*etcdmaglev.Registration
}

var handoffVIPs = [2]netip.AddrPort{fleetVIP, netip.MustParseAddrPort("198.19.0.1:81")}

const (
	handoffLBs        = 2
	handoffBEs        = 4
	handoffConns      = 50 // per service
	handoffDecapAdmin = "127.0.0.1:9192"
	handoffAdmin      = "127.0.0.1:9180"
)

func newHandoffNet(t *testing.T) *handoffNet {
	n := &handoffNet{routedNet: newRoutedNet(t, "h"), dir: t.TempDir()}
	n.bin = build(t)
	for i := range handoffLBs {
		ns := xdptest.NewNS(n.t, fmt.Sprintf("%slb%d", n.tag, i))
		dev := fmt.Sprintf("r-lb%d", i)
		n.link(ns, dev, lbAddr(i)+"/24", true)
		xdptest.IP(t, "-n", ns, "route", "add", "default", "via", "198.18.0.1")
		xdptest.Sysctl(n.t, ns, "net.ipv4.conf.all.forwarding", "1") // bpf_fib_lookup's encapsulation
		n.attachPass(dev)
		n.lbs = append(n.lbs, ns)
	}
	n.route(0)
	for i := range handoffBEs {
		ns := xdptest.NewNS(n.t, fmt.Sprintf("%sbe%d", n.tag, i))
		dev := fmt.Sprintf("r-be%d", i)
		n.link(ns, dev, beAddr(i).String()+"/24", true)
		xdptest.IP(t, "-n", ns, "route", "add", "default", "via", "198.18.0.1")
		xdptest.IP(t, "-n", ns, "addr", "add", fleetVIP.Addr().String()+"/32", "dev", "lo")
		for _, d := range []string{"all", "eth0"} {
			xdptest.Sysctl(n.t, ns, "net.ipv4.conf."+d+".arp_ignore", "1")
			xdptest.Sysctl(n.t, ns, "net.ipv4.conf."+d+".arp_announce", "2")
			xdptest.Sysctl(n.t, ns, "net.ipv4.conf."+d+".rp_filter", "0")
		}
		xdptest.Sysctl(n.t, ns, "net.ipv4.ip_forward", "1") // a second hop is routed on
		n.attachPass(dev)
		d := start(t, ns, n.bin, "decap", "-iface", "eth0", "-vip", fleetVIP.Addr().String(), "-decap-sources", "198.18.0.0/24", "-admin", handoffDecapAdmin)
		d.await("decapsulating IPIP and GUE")
		for _, v := range handoffVIPs {
			serveAt(t, ns, beAddr(i).String(), fmt.Sprintf(":%d", v.Port()))
		}
		n.backends = append(n.backends, ns)
	}
	return n
}

// route routes the VIP to load balancer i.
func (n *handoffNet) route(i int) {
	xdptest.IP(n.t, "-n", n.router, "route", "replace", fleetVIP.Addr().String()+"/32", "via", lbAddr(i))
}

// handoffLB is how a load balancer of a case runs.
type handoffLB struct {
	state  bool   // with a state file
	listen bool   // serving its handoffs on :9181
	peer   string // the peer it asks at start; "": none
	etcd   string // the prefix its services' backends come from; "": the file's
}

// configure writes load balancer i's configuration file with the first
// n backends, and returns its path.
func (n *handoffNet) configure(i, backends int, c handoffLB) string {
	var b strings.Builder
	fmt.Fprintf(&b, "iface: eth0\nmode: native\nseed: %d\nadmin: %s\npin-dir: \"\"\nforward: gue\nsecond-chance-window: 10m\n", fleetSeed, handoffAdmin)
	if c.state {
		fmt.Fprintf(&b, "state-file: %s\n", filepath.Join(n.dir, fmt.Sprintf("lb%d.state", i)))
	}
	if c.listen {
		fmt.Fprintf(&b, "handoff-listen: %s:9181\n", lbAddr(i))
	}
	if c.peer != "" {
		fmt.Fprintf(&b, "handoff-peers: [%s]\n", c.peer)
	}
	if c.etcd != "" {
		b.WriteString("etcd: http://127.0.0.1:2379\n")
	}
	b.WriteString("services:\n")
	for k, v := range handoffVIPs {
		fmt.Fprintf(&b, "  - name: %s\n    vip: %v\n    conntrack: %v\n", []string{"stateless", "tracked"}[k], v, k == 1)
		if c.etcd != "" {
			fmt.Fprintf(&b, "    etcd-prefix: %s\n", c.etcd)
		} else {
			b.WriteString("    backends:\n")
			for j := range backends {
				fmt.Fprintf(&b, "      - %v\n", beAddr(j))
			}
		}
	}
	path := filepath.Join(n.dir, fmt.Sprintf("lb%d.yaml", i))
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		n.t.Fatal(err)
	}
	return path
}

// startLB starts load balancer i with the configuration file path, and
// waits for both services' tables.
func (n *handoffNet) startLB(i int, path string) *process {
	p := start(n.t, n.lbs[i], n.bin, "run", "-config", path)
	p.await("backends applied")
	p.await("backends applied")
	n.procs[i] = p
	return p
}

// stopLBs stops the load balancers running.
func (n *handoffNet) stopLBs() {
	for i, p := range n.procs {
		if p != nil {
			p.stop()
			n.procs[i] = nil
		}
	}
}

// handoffTable is the table of the first n backends.
func handoffTable(t *testing.T, n int) *maglev.Table {
	var bs []maglev.Backend
	for i := range n {
		bs = append(bs, maglev.Backend{Name: beAddr(i).String(), Weight: 1})
	}
	tbl, err := maglev.NewWeighted(bs, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// handoffTo is the backend table tbl sends a new flow from the client's
// port to vip to.
func handoffTo(tbl *maglev.Table, port int, vip netip.AddrPort) string {
	return tbl.LookupHash(xdpmaglev.FlowHash(fleetSeed, netip.AddrPortFrom(fleetClient, uint16(port)), vip, 6))
}

// connect makes one connection to vip from each port, 8 at a time, and
// checks that each reaches the backend tbl says.
func (n *handoffNet) connect(tbl *maglev.Table, vip netip.AddrPort, ports []int) []*fconn {
	n.t.Helper()
	conns, errs := dialEach(n.client, vip, ports, func(port int) string { return handoffTo(tbl, port, vip) })
	if len(errs) > 0 {
		for _, c := range conns {
			_ = c.Close()
		}
		n.t.Fatalf("%d of %d connections to %v failed; first: %v", len(errs), len(ports), vip, errors.Join(errs[:min(3, len(errs))]...))
	}
	return conns
}

// secondHops returns the packets the backends' decapsulators passed on to
// a second hop, in all.
func (n *handoffNet) secondHops() uint64 {
	n.t.Helper()
	var sum uint64
	for _, ns := range n.backends {
		body, err := requestAt(ns, handoffDecapAdmin, "GET", "/debug/maglev")
		if err != nil {
			n.t.Fatal(err)
		}
		var st admin.DecapStatus
		if err := json.Unmarshal(body, &st); err != nil {
			n.t.Fatal(err)
		}
		sum += st.Stats.SecondHop
	}
	return sum
}

// handoffOf returns, for each service, where load balancer i's second
// hops came from and until when it has them.
func (n *handoffNet) handoffOf(i int) map[string][2]string {
	n.t.Helper()
	body, err := requestAt(n.lbs[i], handoffAdmin, "GET", "/debug/maglev/services")
	if err != nil {
		n.t.Fatal(err)
	}
	var sts []pool.Status
	if err := json.Unmarshal(body, &sts); err != nil {
		n.t.Fatal(err)
	}
	out := map[string][2]string{}
	for _, s := range sts {
		out[s.Name] = [2]string{s.Handoff, s.SecondHopsUntil}
	}
	return out
}

// register registers backend i under prefix in etcd.
func (n *handoffNet) register(prefix string, i int) {
	n.t.Helper()
	if n.etcd == nil {
		n.etcd = etcdtest.Start(n.top)
		n.cli = n.etcd.Client(n.top)
		for _, ns := range n.lbs {
			forwardEtcd(n.top, ns, n.etcd)
		}
	}
	ep := endpoints.Endpoint{Addr: netip.AddrPortFrom(beAddr(i), 80).String()}
	r, err := etcdmaglev.Register(context.Background(), n.cli, prefix, ep, etcdmaglev.RegisterOptions{TTL: time.Minute})
	if err != nil {
		n.t.Fatal(err)
	}
	n.regs = append(n.regs, r)
}

// deregisterAll ends every registration.
func (n *handoffNet) deregisterAll() {
	for _, r := range n.regs {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = r.Deregister(ctx) // the next case uses another prefix
		cancel()
	}
	n.regs = nil
}

// A handoffCase is a change the load balancer that takes the traffic
// after it did not see: the first load balancer goes from three backends
// to four, and then either restarts (restart) or the second starts with
// the four and takes every flow.
type handoffCase struct {
	name    string
	restart bool
	crash   bool // the restart's l4lb is killed (SIGKILL), not stopped
	first   handoffLB
	second  handoffLB // with restart, the first's after it
	covered bool      // no connection breaks; else exactly those on moved slots
	from    string    // where the second hops come from, when covered
	logs    []string  // a record the load balancer that takes the traffic logs (its message and attributes), if not nil
}

// TestHandoff: second chance for a load balancer that did not see the
// change. Fifty long-lived connections a service (stateless, and with
// connection tracking), a fourth backend joins the first load balancer,
// and a second later: l4lb restarts without pins, or a second load
// balancer starts with the four backends and the route sends it every
// flow. With a state file (the restart) or by asking the first load
// balancer (the second), no connection breaks, the second hops counted at
// the backends, and the status says whence; without them, and with the
// peer not answering (a case the handoff cannot cover), exactly the
// connections on the slots that moved break. The second load balancer fed
// by etcd, the same.
func TestHandoff(t *testing.T) {
	n := newHandoffNet(t)
	t3, t4 := handoffTable(t, 3), handoffTable(t, 4)
	peer := lbAddr(0) + ":9181"
	cases := []handoffCase{
		{name: "restart without pins, no state file", restart: true},
		{name: "restart without pins, state file", restart: true, first: handoffLB{state: true}, second: handoffLB{state: true}, covered: true, from: "state file"},
		{name: "crash, state file", restart: true, crash: true, first: handoffLB{state: true}, second: handoffLB{state: true}, covered: true, from: "state file"},
		{name: "a second load balancer, its peer not answering", second: handoffLB{peer: peer}, logs: []string{"handoff: a peer did not answer", "peer", peer}},
		{name: "a second load balancer, asking its peer", first: handoffLB{listen: true}, second: handoffLB{peer: peer}, covered: true, from: "peer " + peer},
		{name: "etcd, a second load balancer, asking its peer", first: handoffLB{listen: true, etcd: "etcd"}, second: handoffLB{peer: peer, etcd: "etcd"}, covered: true, from: "peer " + peer},
	}
	for k, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n.t = t
			defer func() { n.t = n.top }()
			defer n.route(0)
			defer n.stopLBs()
			defer n.deregisterAll()
			etcd := c.first.etcd
			if etcd != "" {
				etcd = fmt.Sprintf("services/handoff-%d-%d", os.Getpid(), k)
				c.first.etcd, c.second.etcd = etcd, etcd
				for i := range 3 {
					n.register(etcd, i)
				}
			}
			first := n.startLB(0, n.configure(0, 3, c.first))

			// Fifty connections a service, from ports of this case's own.
			var conns []*fconn
			moved := map[int]bool{}
			for s, vip := range handoffVIPs {
				ports := portRange(20000+1000*k+500*s, handoffConns)
				conns = append(conns, n.connect(t3, vip, ports)...)
				for _, p := range ports {
					moved[p] = handoffTo(t3, p, vip) != handoffTo(t4, p, vip)
				}
			}
			pumps := startPumpsEvery(conns, 100*time.Millisecond, 3*time.Second)
			defer pumps.close()

			// The fourth backend joins the first load balancer.
			if etcd != "" {
				n.register(etcd, 3)
			} else {
				n.configure(0, 4, c.first)
				if _, err := requestAt(n.lbs[0], handoffAdmin, "POST", "/reload"); err != nil {
					t.Fatal(err)
				}
			}
			first.await("backends applied", "live", "4")
			first.await("backends applied", "live", "4")
			time.Sleep(time.Second)
			if broken, err := pumps.failed(); len(broken) > 0 {
				t.Fatalf("%d connections broke on the load balancer that saw the change: %v", len(broken), err)
			}
			hops := n.secondHops()

			// The load balancer that did not see it takes the traffic.
			taker := 1
			var p *process
			if c.restart {
				taker = 0
				if c.crash {
					_ = n.procs[0].cmd.Process.Kill()
					<-n.procs[0].exited
					n.procs[0] = nil
				}
				n.stopLBs()
				p = n.startLB(0, n.configure(0, 4, c.second))
			} else {
				p = n.startLB(1, n.configure(1, 4, c.second))
				n.route(1)
			}
			time.Sleep(1500 * time.Millisecond)
			broken, _ := pumps.failed()
			var want []int
			if !c.covered {
				for _, cn := range conns {
					if moved[cn.port] {
						want = append(want, cn.port)
					}
				}
			}
			got := slices.Sorted(func(yield func(int) bool) {
				for p := range broken {
					if !yield(p) {
						return
					}
				}
			})
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("broken %v\nwant %v (the connections on moved slots, of %d)", got, want, len(conns))
			}
			// Each service's connections on moved slots, and broken.
			var counts []string
			for sv, vip := range handoffVIPs {
				nmoved, nbroken := 0, 0
				for _, cn := range conns {
					if (cn.port-20000-1000*k)/500 != sv {
						continue
					}
					if moved[cn.port] {
						nmoved++
					}
					if broken[cn.port] != nil {
						nbroken++
					}
				}
				if nmoved < 5 || nmoved > handoffConns/2 {
					t.Errorf("%v: %d of %d connections on moved slots: the test shows little", vip, nmoved, handoffConns)
				}
				counts = append(counts, fmt.Sprintf("%s: %d of %d on moved slots, %d broken", []string{"stateless", "tracked"}[sv], nmoved, handoffConns, nbroken))
			}
			t.Log(strings.Join(counts, "; "))
			status := n.handoffOf(taker)
			for _, name := range []string{"stateless", "tracked"} {
				if st := status[name]; st[0] != c.from || (c.covered && st[1] == "") {
					t.Errorf("service %s: second hops from %q until %q, want from %q", name, st[0], st[1], c.from)
				}
			}
			if d := n.secondHops() - hops; c.covered && d == 0 {
				t.Error("no packet passed on to its second hop at the backends")
			}
			if c.logs != nil {
				n.stopLBs()
				if !has(p.logged(), c.logs[0], c.logs[1:]...) {
					t.Errorf("the load balancer did not log %q:\n%s", c.logs, p.stderr.String())
				}
			}
		})
	}
}
