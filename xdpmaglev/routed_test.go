package xdpmaglev

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// routed is the topology of a load balancer that encapsulates: a client
// and the load balancer each on a link of their own to a router, and
// backends in two subnets behind the router (a bridge each in the
// router's namespace). The router sends the VIPs to the load balancer,
// which encapsulates each packet to a backend and sends it back to the
// router (one-armed); each backend runs the decapsulator with the VIPs on
// lo and answers the client straight through the router. IPv4 and IPv6,
// all from 198.18.0.0/15 and 2001:db8::/32, joined to nothing else.
type routed struct {
	*testNet
	client, router, lbNS string
	backends             []string // namespaces
	decaps               []*Decap // of the backends, in their order
	addrs4, addrs6       []netip.Addr
	vip4, vip6           netip.Addr
	lb                   *LB
}

var (
	routedClient4 = netip.MustParseAddr("198.18.1.2")
	routedClient6 = netip.MustParseAddr("2001:db8:1::2")
)

// link joins namespace ns to the router by a veth pair: eth0 in ns with
// addrs, dev in the router's namespace with raddrs (or enslaved to bridge
// br if raddrs is nil). Checksum offload is off on both ends: a packet
// handled by XDP on a veth loses the note that its checksum is still to
// be filled in.
func (r *routed) link(ns, dev, br string, addrs, raddrs []string) {
	xdptest.IP(r.t, "-n", r.router, "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns)
	for _, a := range addrs {
		xdptest.IP(r.t, "-n", ns, "addr", "add", a, "dev", "eth0", "nodad")
	}
	for _, a := range raddrs {
		xdptest.IP(r.t, "-n", r.router, "addr", "add", a, "dev", dev, "nodad")
	}
	if br != "" {
		xdptest.IP(r.t, "-n", r.router, "link", "set", dev, "master", br)
	}
	xdptest.IP(r.t, "-n", r.router, "link", "set", dev, "up")
	xdptest.IP(r.t, "-n", ns, "link", "set", "eth0", "up")
	r.exec(ns, "ethtool", "-K", "eth0", "tx", "off")
	r.exec(r.router, "ethtool", "-K", dev, "tx", "off")
}

func addrs(a ...string) []string { return a }

func newRouted(t *testing.T) *routed {
	return newRoutedOpts(t, Options{ConntrackSize: 1 << 14, FloodRate: -1})
}

// newRoutedOpts builds the topology with the load balancer loaded with
// opts (Seed and Mode set here).
func newRoutedOpts(t *testing.T, opts Options) *routed {
	n := newTestNet(t, "xr")
	r := &routed{testNet: n, vip4: netip.MustParseAddr("198.19.0.1"), vip6: netip.MustParseAddr("2001:db8:ffff::1")}
	r.router = n.addNS("rt")
	xdptest.Sysctl(n.t, r.router, "net.ipv4.ip_forward", "1")
	xdptest.Sysctl(n.t, r.router, "net.ipv6.conf.all.forwarding", "1")

	r.client = n.addNS("cl")
	r.link(r.client, "r-cl", "", addrs("198.18.1.2/24", "2001:db8:1::2/64"), addrs("198.18.1.1/24", "2001:db8:1::1/64"))
	xdptest.IP(n.t, "-n", r.client, "route", "add", "default", "via", "198.18.1.1")
	xdptest.IP(n.t, "-n", r.client, "-6", "route", "add", "default", "via", "2001:db8:1::1")

	r.lbNS = n.addNS("lb")
	r.link(r.lbNS, "r-lb", "", addrs("198.18.2.2/24", "2001:db8:2::2/64"), addrs("198.18.2.1/24", "2001:db8:2::1/64"))
	xdptest.IP(n.t, "-n", r.lbNS, "route", "add", "default", "via", "198.18.2.1")
	xdptest.IP(n.t, "-n", r.lbNS, "-6", "route", "add", "default", "via", "2001:db8:2::1")
	xdptest.Sysctl(n.t, r.lbNS, "net.ipv4.conf.all.forwarding", "1")
	xdptest.Sysctl(n.t, r.lbNS, "net.ipv6.conf.all.forwarding", "1")
	xdptest.IP(n.t, "-n", r.router, "route", "add", r.vip4.String()+"/32", "via", "198.18.2.2")
	xdptest.IP(n.t, "-n", r.router, "-6", "route", "add", r.vip6.String()+"/128", "via", "2001:db8:2::2")

	// Two backend subnets, two backends each.
	for s, sub := range []int{3, 4} {
		br := fmt.Sprintf("br%d", sub)
		xdptest.IP(n.t, "-n", r.router, "link", "add", br, "type", "bridge")
		xdptest.IP(n.t, "-n", r.router, "addr", "add", fmt.Sprintf("198.18.%d.1/24", sub), "dev", br)
		xdptest.IP(n.t, "-n", r.router, "addr", "add", fmt.Sprintf("2001:db8:%d::1/64", sub), "dev", br, "nodad")
		xdptest.IP(n.t, "-n", r.router, "link", "set", br, "up")
		for j := range 2 {
			i := 2*s + j
			ns := n.addNS(fmt.Sprintf("be%d", i))
			a4 := netip.MustParseAddr(fmt.Sprintf("198.18.%d.%d", sub, 10+j))
			a6 := netip.MustParseAddr(fmt.Sprintf("2001:db8:%d::%d", sub, 10+j))
			r.link(ns, fmt.Sprintf("r-be%d", i), br, addrs(a4.String()+"/24", a6.String()+"/64"), nil)
			xdptest.IP(n.t, "-n", ns, "route", "add", "default", "via", fmt.Sprintf("198.18.%d.1", sub))
			xdptest.IP(n.t, "-n", ns, "-6", "route", "add", "default", "via", fmt.Sprintf("2001:db8:%d::1", sub))
			xdptest.IP(n.t, "-n", ns, "addr", "add", r.vip4.String()+"/32", "dev", "lo")
			xdptest.IP(n.t, "-n", ns, "addr", "add", r.vip6.String()+"/128", "dev", "lo")
			for _, dev := range []string{"all", "eth0"} {
				xdptest.Sysctl(n.t, ns, "net.ipv4.conf."+dev+".rp_filter", "0")
			}
			// Second chance: a backend passes packets on to another,
			// which its kernel must allow (bpf_fib_lookup), and XDP_TX on
			// its veth needs a program on the peer.
			xdptest.Sysctl(n.t, ns, "net.ipv4.conf.all.forwarding", "1")
			xdptest.Sysctl(n.t, ns, "net.ipv6.conf.all.forwarding", "1")
			d, err := xdptest.In(ns, func() (*Decap, error) {
				return AttachDecap("eth0", DecapOptions{VIPs: []netip.Addr{r.vip4, r.vip6}, Sources: routedSources, Mode: AttachNative})
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			r.decaps = append(r.decaps, d)
			r.backends = append(r.backends, ns)
			r.addrs4 = append(r.addrs4, a4)
			r.addrs6 = append(r.addrs6, a6)
			for _, network := range []string{"tcp4", "tcp6"} {
				name := a4.String()
				if network == "tcp6" {
					name = a6.String()
				}
				for port := 80; port < 84; port++ {
					serveTCP(t, ns, network, fmt.Sprint(":", port), func(c net.Conn) {
						if _, err := io.WriteString(c, name+"\n"); err != nil {
							return
						}
						_, _ = io.Copy(c, c)
					})
				}
			}
		}
	}

	lb, err := xdptest.In(r.lbNS, func() (*LB, error) {
		opts.Seed, opts.Mode = e2eSeed, AttachNative
		return Load("eth0", opts)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	r.lb = lb
	peerPass(t, lb, r.router, "r-lb")
	for i := range r.backends {
		peerPass(t, lb, r.router, fmt.Sprintf("r-be%d", i))
	}
	return r
}

// routedSources are the outer sources the routed backends' decapsulators
// trust: the load balancers' (eth0's addresses: lb's, and lb2's of
// addLB2) and, for second chance, the backends' subnets.
var routedSources = []netip.Prefix{
	netip.MustParsePrefix("198.18.2.2/32"), netip.MustParsePrefix("2001:db8:2::2/128"),
	netip.MustParsePrefix("198.18.5.2/32"), netip.MustParsePrefix("2001:db8:5::2/128"),
	netip.MustParsePrefix("198.18.3.0/24"), netip.MustParsePrefix("2001:db8:3::/64"),
	netip.MustParsePrefix("198.18.4.0/24"), netip.MustParsePrefix("2001:db8:4::/64"),
}

// addLB2 adds a second load balancer, on a link of its own to the router
// (198.18.5.2, 2001:db8:5::2; forwarding on, and the router's end with a
// program for XDP_TX), loaded with opts as the first was; the router's
// routes to the VIPs stay the first's until the test moves them.
func (r *routed) addLB2(t *testing.T, opts Options) *LB {
	ns := r.addNS("lb2")
	r.link(ns, "r-lb2", "", addrs("198.18.5.2/24", "2001:db8:5::2/64"), addrs("198.18.5.1/24", "2001:db8:5::1/64"))
	xdptest.IP(r.t, "-n", ns, "route", "add", "default", "via", "198.18.5.1")
	xdptest.IP(r.t, "-n", ns, "-6", "route", "add", "default", "via", "2001:db8:5::1")
	xdptest.Sysctl(r.t, ns, "net.ipv4.conf.all.forwarding", "1")
	xdptest.Sysctl(r.t, ns, "net.ipv6.conf.all.forwarding", "1")
	lb, err := xdptest.In(ns, func() (*LB, error) {
		opts.Seed, opts.Mode = e2eSeed, AttachNative
		return Load("eth0", opts)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	peerPass(t, lb, r.router, "r-lb2")
	return lb
}

func (r *routed) vip(v6 bool, port uint16) netip.AddrPort {
	if v6 {
		return netip.AddrPortFrom(r.vip6, port)
	}
	return netip.AddrPortFrom(r.vip4, port)
}

func (r *routed) set(t *testing.T, svc Service, mode Forward) {
	t.Helper()
	as := r.addrs4
	if svc.VIP.Addr().Is6() {
		as = r.addrs6
	}
	var bs []Backend
	for _, a := range as {
		bs = append(bs, Backend{Addr: a, Weight: 1})
	}
	// No Source: the interface's address of the VIP's family.
	if err := r.lb.SetService(svc, bs, ServiceOptions{Forward: mode}); err != nil {
		t.Fatal(err)
	}
}

// dial connects from the client's port to vip and reads the backend's name.
func (r *routed) dial(vip netip.AddrPort, port int) (*conn, error) {
	src := routedClient4
	if vip.Addr().Is6() {
		src = routedClient6
	}
	c, err := xdptest.In(r.client, func() (net.Conn, error) {
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, uint16(port)))}
		return d.Dial("tcp", vip.String())
	})
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // a bound, not a check
	br := bufio.NewReader(c)
	name, err := br.ReadString('\n')
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("port %d: reading the backend's name: %w", port, err)
	}
	return &conn{Conn: c, r: br, backend: strings.TrimSpace(name)}, nil
}

func (r *routed) predict(vip netip.AddrPort, port int) string {
	src := routedClient4
	if vip.Addr().Is6() {
		src = routedClient6
	}
	return r.lb.Table(Service{VIP: vip, Proto: TCP}).LookupHash(FlowHash(e2eSeed, netip.AddrPortFrom(src, uint16(port)), vip, 6))
}

// TestRoutedEndToEnd: for IPIP and GUE, IPv4 and IPv6, 1,000 TCP
// connections from the client each reach, through the router and the
// encapsulating load balancer, the backend in another subnet that FlowHash
// and the table predict; the backends' decapsulators count them; no reply
// crosses the load balancer.
func TestRoutedEndToEnd(t *testing.T) {
	packetsOnly(t)
	r := newRouted(t)
	port := 20000
	vport := uint16(80) // a service each, kept to the end: a deleted one would count its late FINs as no_service
	for _, mode := range []Forward{ForwardIPIP, ForwardGUE} {
		for _, v6 := range []bool{false, true} {
			svc := Service{VIP: r.vip(v6, vport), Proto: TCP}
			vport++
			r.set(t, svc, mode)
			per := map[string]int{}
			var mu sync.Mutex
			var errs []error
			var wg sync.WaitGroup
			work := make(chan int)
			for range 8 {
				wg.Go(func() {
					for p := range work {
						c, err := r.dial(svc.VIP, p)
						mu.Lock()
						switch {
						case err != nil:
							errs = append(errs, err)
						case c.backend != r.predict(svc.VIP, p):
							errs = append(errs, fmt.Errorf("port %d reached %s, the table says %s", p, c.backend, r.predict(svc.VIP, p)))
						default:
							per[c.backend]++
						}
						mu.Unlock()
						if c != nil {
							_ = c.Close()
						}
					}
				})
			}
			for range 1000 {
				work <- port
				port++
			}
			close(work)
			wg.Wait()
			if len(errs) > 0 {
				t.Fatalf("%v v6=%v: %d of 1,000 connections failed; first: %v", mode, v6, len(errs), errors.Join(errs[:min(len(errs), 5)]...))
			}
			if len(per) != 4 {
				t.Errorf("%v v6=%v: 1,000 connections reached %v, want all 4 backends", mode, v6, per)
			}
		}
	}
	st, err := r.lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// Replies would be TCP packets to no service.
	if st.Passed["no_service"] != 0 {
		t.Errorf("the load balancer saw %d TCP packets to no service: replies crossed it", st.Passed["no_service"])
	}
	if st.Forwarded < 4*4000 {
		t.Errorf("forwarded %d packets for 4,000 connections", st.Forwarded)
	}
	for k, v := range st.Dropped {
		if v != 0 {
			t.Errorf("dropped %d: %s", v, k)
		}
	}
}

// TestNextHopRefresh: the load balancer's kernel forgets its next hop
// (the router) in both families; its own traffic would never resolve it
// again, as the program's packets bypass it. The refresh asks for it: the
// entries come back within a few seconds, and new connections through
// IPIP services of both families reach the table's backend.
func TestNextHopRefresh(t *testing.T) {
	r := newRouted(t)
	svcs := []Service{{VIP: r.vip(false, 80), Proto: TCP}, {VIP: r.vip(true, 80), Proto: TCP}}
	for _, svc := range svcs {
		r.set(t, svc, ForwardIPIP)
	}
	hops := []string{"198.18.2.1", "2001:db8:2::1"}
	port := 21000
	check := func(when string) {
		t.Helper()
		for _, svc := range svcs {
			for range 10 {
				c, err := r.dial(svc.VIP, port)
				if err != nil {
					t.Fatalf("%s: %v: %v", when, svc, err)
				}
				if want := r.predict(svc.VIP, port); c.backend != want {
					t.Errorf("%s: port %d reached %s, the table says %s", when, port, c.backend, want)
				}
				_ = c.Close()
				port++
			}
		}
	}
	check("before")
	xdptest.IP(r.t, "-n", r.lbNS, "neigh", "flush", "dev", "eth0")
	xdptest.IP(r.t, "-n", r.lbNS, "-6", "neigh", "flush", "dev", "eth0")
	deadline := time.Now().Add(5 * time.Second)
	for _, hop := range hops {
		for {
			out, _ := exec.Command("ip", "-n", r.lbNS, "neigh", "show", hop, "dev", "eth0").Output()
			if f := strings.Fields(string(out)); len(f) > 0 && slices.Contains(f, "lladdr") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the next hop %s was not resolved again within 5 s of a flush: %q", hop, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	check("after the flush")
}

// TestRoutedPathMTU: with MTU 1500 on every link, a 10 MB upload through
// an encapsulating service completes: the client learns the smaller path
// MTU from the load balancer's ICMP. Then, with the router's link to the
// client at 1400, a 2 MB download completes: the router's ICMP about the
// backend's too-large replies, sent toward the VIP, reaches the flow's
// backend through the load balancer, and the backend's route cache holds
// the MTU.
func TestRoutedPathMTU(t *testing.T) {
	packetsOnly(t)
	r := newRouted(t)
	for i, ns := range r.backends {
		serveTCP(t, ns, "tcp", ":91", func(c net.Conn) { // upload: count the bytes
			n, _ := io.Copy(io.Discard, c)
			_, _ = io.WriteString(c, strconv.FormatInt(n, 10)+"\n")
		})
		serveTCP(t, ns, "tcp", ":92", func(c net.Conn) { // download: 2 MB
			_, _ = c.Write(make([]byte, 2<<20))
		})
		_ = i
	}
	for _, mode := range []Forward{ForwardIPIP, ForwardGUE} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/v6=%v", mode, v6), func(t *testing.T) {
				up, down := Service{VIP: r.vip(v6, 91), Proto: TCP}, Service{VIP: r.vip(v6, 92), Proto: TCP}
				r.set(t, up, mode)
				r.set(t, down, mode)
				defer func() { _ = r.lb.DeleteService(up); _ = r.lb.DeleteService(down) }()
				before, err := r.lb.Stats()
				if err != nil {
					t.Fatal(err)
				}
				// The upload.
				n, err := xdptest.In(r.client, func() (string, error) {
					c, err := net.DialTimeout("tcp", up.VIP.String(), 3*time.Second)
					if err != nil {
						return "", err
					}
					defer func() { _ = c.Close() }()
					_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // a bound, not a check
					if _, err := c.Write(make([]byte, 10<<20)); err != nil {
						return "", err
					}
					if err := c.(*net.TCPConn).CloseWrite(); err != nil {
						return "", err
					}
					b, err := io.ReadAll(c)
					return strings.TrimSpace(string(b)), err
				})
				if err != nil || n != strconv.Itoa(10<<20) {
					t.Fatalf("upload: the backend read %q bytes, %v", n, err)
				}
				after, err := r.lb.Stats()
				if err != nil {
					t.Fatal(err)
				}
				if after.ICMP.TooBig == before.ICMP.TooBig {
					t.Errorf("the upload went through without an ICMP too big from the load balancer")
				}

				// The download, through a router link of MTU 1400.
				xdptest.IP(r.t, "-n", r.router, "link", "set", "r-cl", "mtu", "1400")
				defer xdptest.IP(r.t, "-n", r.router, "link", "set", "r-cl", "mtu", "1500")
				got, err := xdptest.In(r.client, func() (int64, error) {
					c, err := net.DialTimeout("tcp", down.VIP.String(), 3*time.Second)
					if err != nil {
						return 0, err
					}
					defer func() { _ = c.Close() }()
					_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // a bound, not a check
					return io.Copy(io.Discard, c)
				})
				if err != nil || got != 2<<20 {
					t.Fatalf("download: %d bytes, %v", got, err)
				}
				final, err := r.lb.Stats()
				if err != nil {
					t.Fatal(err)
				}
				if final.ICMP.Forwarded == after.ICMP.Forwarded {
					t.Errorf("the router's ICMP reached no backend through the load balancer")
				}
				// The backend that served the download has the MTU in its
				// route cache for the client.
				client := routedClient4
				if v6 {
					client = routedClient6
				}
				found := false
				for _, ns := range r.backends {
					out, _ := exec.Command("ip", "-n", ns, "route", "get", client.String(), "from", down.VIP.Addr().String()).CombinedOutput()
					if strings.Contains(string(out), "mtu 1400") {
						found = true
					}
				}
				if !found {
					t.Errorf("no backend's route cache shows mtu 1400 toward %v", client)
				}
				// Flush the cached MTUs, for the next mode.
				for _, ns := range r.backends {
					_ = exec.Command("ip", "-n", ns, "route", "flush", "cache").Run()
					_ = exec.Command("ip", "-n", ns, "-6", "route", "flush", "cache").Run()
				}
				_ = exec.Command("ip", "-n", r.client, "route", "flush", "cache").Run()
				_ = exec.Command("ip", "-n", r.client, "-6", "route", "flush", "cache").Run()
			})
		}
	}
}
