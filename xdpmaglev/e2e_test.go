package xdpmaglev

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// e2e is the end-to-end topology: a client, the load balancer and
// backends on one bridge. The client reaches the VIP through the load
// balancer (a route via its address); each backend holds the VIP on lo,
// with arp_ignore 1 and arp_announce 2, and runs a TCP server that
// answers its own address, then echoes lines. Replies go from the
// backends straight to the client.
type e2e struct {
	*testNet
	client   string
	lbNS     string
	backends []string // namespaces
	addrs    []netip.Addr
	vip      netip.AddrPort
	lb       *LB
}

const e2eSeed = 0x5eed

func newE2E(t *testing.T, nBackends int) *e2e { return newE2EOpts(t, nBackends, Options{}) }

// newE2EOpts is newE2E with the load balancer loaded with opts, its seed,
// attach mode and (if 0) conntrack size set, and the flood guard off
// unless opts.FloodRate says otherwise (the tests make a thousand
// connections in a moment, more than the default guard writes entries for
// at this conntrack size).
func newE2EOpts(t *testing.T, nBackends int, opts Options) *e2e {
	n := newTestNet(t, "xm")
	e := &e2e{testNet: n, vip: netip.MustParseAddrPort("198.19.0.1:80")}
	e.client = n.addNS("cl")
	n.join(e.client, "p-cl", "198.18.0.2/24")
	xdptest.IP(n.t, "-n", e.client, "route", "add", e.vip.Addr().String()+"/32", "via", "198.18.0.3")
	n.exec(e.client, "ethtool", "-K", "eth0", "tx", "off")

	e.lbNS = n.addNS("lb")
	n.join(e.lbNS, "p-lb", "198.18.0.3/24")
	n.exec(e.lbNS, "ethtool", "-K", "eth0", "tx", "off")

	for i := range nBackends {
		ns := n.addNS(fmt.Sprintf("be%d", i))
		addr := netip.AddrFrom4([4]byte{198, 18, 0, byte(11 + i)})
		n.join(ns, fmt.Sprintf("p-be%d", i), addr.String()+"/24")
		xdptest.IP(n.t, "-n", ns, "addr", "add", e.vip.Addr().String()+"/32", "dev", "lo")
		for _, dev := range []string{"all", "eth0"} {
			xdptest.Sysctl(n.t, ns, "net.ipv4.conf."+dev+".arp_ignore", "1")
			xdptest.Sysctl(n.t, ns, "net.ipv4.conf."+dev+".arp_announce", "2")
		}
		e.backends = append(e.backends, ns)
		e.addrs = append(e.addrs, addr)
		e.serve(t, ns, addr.String())
	}

	opts.Seed, opts.Mode = e2eSeed, AttachNative
	if opts.ConntrackSize == 0 {
		opts.ConntrackSize = 1 << 14
	}
	if opts.FloodRate == 0 {
		opts.FloodRate = -1
	}
	lb, err := xdptest.In(e.lbNS, func() (*LB, error) { return Load("eth0", opts) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lb.Close(); err != nil {
			t.Error(err)
		}
	})
	if lb.Mode() != AttachNative {
		t.Fatalf("attached %v, want native", lb.Mode())
	}
	e.lb = lb
	peerPass(t, lb, n.sw, "p-lb")
	return e
}

// serve starts the backend's server in namespace ns, stopped at the end
// of the test.
func (e *e2e) serve(t *testing.T, ns, name string) {
	serveTCP(t, ns, "tcp4", ":80", func(c net.Conn) {
		if _, err := io.WriteString(c, name+"\n"); err != nil {
			return
		}
		_, _ = io.Copy(c, c) // echo until the client closes
	})
}

// serveTCP runs handle for each connection to a listener on network and
// addr in namespace ns, each connection bounded to 30 s; all stopped at
// the end of the test.
func serveTCP(t *testing.T, ns, network, addr string, handle func(net.Conn)) {
	xdptest.Serve(t, ns, network, addr, 30*time.Second, handle)
}

// conn is a client connection through the load balancer.
type conn struct {
	net.Conn
	r       *bufio.Reader
	backend string // the name it answered
}

// dial connects from the client's port to the VIP and reads the
// backend's name.
func (e *e2e) dial(port int) (*conn, error) {
	c, err := xdptest.In(e.client, func() (net.Conn, error) {
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(198, 18, 0, 2), Port: port}}
		return d.Dial("tcp4", e.vip.String())
	})
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // a bound, not a check
	r := bufio.NewReader(c)
	name, err := r.ReadString('\n')
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("port %d: reading the backend's name: %w", port, err)
	}
	return &conn{Conn: c, r: r, backend: strings.TrimSpace(name)}, nil
}

// echo sends a line and reads it back.
func (c *conn) echo(line string) error {
	_ = c.SetDeadline(time.Now().Add(3 * time.Second)) // a bound, not a check
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return err
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return fmt.Errorf("echo %q, want %q", got, line)
	}
	return nil
}

// settled returns the load balancer's counters once the last packets of
// the connections closed (FINs, ACKs) have gone through: two reads 50 ms
// apart that agree, within 2 s.
func (e *e2e) settled(t *testing.T) Stats {
	t.Helper()
	prev, err := e.lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		time.Sleep(50 * time.Millisecond)
		st, err := e.lb.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.Forwarded == prev.Forwarded && st.Services[0].Packets == st.Forwarded {
			return st
		}
		prev = st
	}
	t.Fatalf("the counters did not settle in 2 s: %+v", prev)
	return prev
}

func (e *e2e) svc() Service { return Service{VIP: e.vip, Proto: TCP} }

func (e *e2e) predict(port int) string {
	c := netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), uint16(port))
	return e.lb.Table(e.svc()).LookupHash(FlowHash(e2eSeed, c, e.vip, 6))
}

// set makes the service's backends those of e.addrs at idx, with their
// MACs from the load balancer's neighbour table.
func (e *e2e) set(t *testing.T, idx ...int) {
	t.Helper()
	var bs []Backend
	for _, i := range idx {
		bs = append(bs, Backend{Addr: e.addrs[i], Weight: 1})
	}
	if err := e.lb.SetService(e.svc(), bs, ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
}

// connectAll makes one connection from each port, workers at a time, and
// checks each reached the predicted backend; it returns how many reached
// each backend.
func (e *e2e) connectAll(t *testing.T, ports []int, keep bool) (map[string]int, []*conn) {
	t.Helper()
	var mu sync.Mutex
	per := map[string]int{}
	conns := make([]*conn, len(ports))
	var errs []error
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				c, err := e.dial(ports[i])
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case c.backend != e.predict(ports[i]):
					errs = append(errs, fmt.Errorf("port %d reached %s, the table says %s", ports[i], c.backend, e.predict(ports[i])))
				default:
					per[c.backend]++
				}
				mu.Unlock()
				if c != nil {
					if keep {
						conns[i] = c
					} else {
						_ = c.Close()
					}
				}
			}
		})
	}
	for i := range ports {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d connections failed; first: %v", len(errs), len(ports), errors.Join(errs[:min(len(errs), 5)]...))
	}
	return per, conns
}

func portRange(from, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = from + i
	}
	return p
}

// TestEndToEnd: 1,000 real TCP connections through the program attached
// natively on a veth each reach the backend the Go side predicts; no reply
// crosses the load balancer; with 50 long-lived connections open, a backend
// is added and another removed: the connections to the remaining
// backends keep working, new connections follow the new table.
func TestEndToEnd(t *testing.T) {
	e := newE2E(t, 4)
	e.set(t, 0, 1, 2)

	per, _ := e.connectAll(t, portRange(20000, 1000), false)
	if len(per) != 3 {
		t.Errorf("1,000 connections reached %v, want all 3 backends", per)
	}
	st := e.settled(t)
	// A connection is at least 4 packets from the client (SYN, ACK, FIN,
	// ACK), none of them a reply; replies would be TCP packets to no
	// service.
	if st.Passed["no_service"] != 0 {
		t.Errorf("the load balancer saw %d TCP packets to no service: replies crossed it", st.Passed["no_service"])
	}
	if st.Forwarded < 4000 || st.Services[0].Packets != st.Forwarded || st.Conntrack.Inserts < 1000 {
		t.Errorf("counters %+v: want at least 4,000 packets forwarded, 1,000 flows tracked", st)
	}
	for _, b := range st.Services[0].Backends {
		if b.Packets < uint64(4*per[b.Addr.String()]) {
			t.Errorf("backend %v: %d packets counted for %d connections", b.Addr, b.Packets, per[b.Addr.String()])
		}
	}

	// 50 long-lived connections, then backend 3 added and backend 1 removed.
	ports := portRange(30000, 50)
	_, conns := e.connectAll(t, ports, true)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	e.set(t, 0, 2, 3)
	moved, kept, lost := 0, 0, 0
	for i, c := range conns {
		err := c.echo("still there")
		if c.backend == e.addrs[1].String() {
			if err == nil {
				t.Errorf("port %d: its backend left, yet it still echoes", ports[i])
			}
			lost++
			continue
		}
		if err != nil {
			t.Errorf("port %d to %s, which stayed: %v", ports[i], c.backend, err)
		}
		kept++
		if e.predict(ports[i]) != c.backend {
			moved++ // conntrack kept it where the new table would not
		}
	}
	if moved == 0 || lost == 0 {
		t.Errorf("of 50 connections, %d lost their backend and %d stayed where the new table would not send them: the change shows nothing", lost, moved)
	}
	t.Logf("50 open connections: %d kept (%d against the new table, by conntrack), %d on the removed backend", kept, moved, lost)
	per, _ = e.connectAll(t, portRange(31000, 300), false)
	if per[e.addrs[1].String()] != 0 || per[e.addrs[3].String()] == 0 {
		t.Errorf("new connections reached %v: want none on the removed backend, some on the new one", per)
	}
}
