package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/nstest"
	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/etcdmaglev/etcdtest"
	"github.com/maglevlb/maglev/xdpmaglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

// The fleet's addresses, all in 198.18.0.0/15:
//
//	client 198.18.1.2 ── eth1 198.18.1.1  router  eth0 198.18.0.1 ── bridge
//	bridge: load balancers 198.18.0.3, .4, .5 (l4lb, XDP on eth0)
//	        backends 198.18.0.11.. (the VIP on lo), default route via the router
//
// The router's route to the VIP has one nexthop per load balancer in the
// route (ECMP, fib_multipath_hash_policy=1: the 5-tuple is hashed).
// Backends answer the client directly, through the router.
var (
	fleetVIP    = netip.MustParseAddrPort("198.19.0.1:80")
	fleetClient = netip.MustParseAddr("198.18.1.2")
)

const (
	fleetSeed   = 0x5eed
	fleetLBs    = 3
	fleetBEs    = 6 // 4 registered at the start, 2 that join later
	fleetTTL    = 10 * time.Second
	fleetDrainT = 6 * time.Second
)

func lbAddr(i int) string { return fmt.Sprintf("198.18.0.%d", 3+i) }
func beAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, 0, byte(11 + i)})
}

// fleet is the test's network, etcd and processes.
type fleet struct {
	t       *testing.T
	suffix  string
	sw, rt  string // namespaces: the bridge's, the router's
	client  string
	lbs     []string // namespaces
	bes     []string
	bin     string
	etcd    *etcdtest.Server
	cli     *clientv3.Client
	prefix  string
	procs   []*lbProc // by load balancer; nil when not running
	regs    map[int]*etcdmaglev.Registration
	weights map[int]uint32 // the registered backends' weights
	pass    *ebpf.Program
}

// lbProc is a running l4lb.
type lbProc struct {
	cmd   *exec.Cmd
	lines chan nstest.Record
	done  chan error // Wait's error, once
	ended bool       // done was received: err is Wait's
	err   error
}

// exited reports whether the process has exited, without waiting.
func (p *lbProc) exited() bool {
	if !p.ended {
		select {
		case p.err = <-p.done:
			p.ended = true
		default:
		}
	}
	return p.ended
}

// wait waits up to d for the process to exit, and reports whether it did.
func (p *lbProc) wait(d time.Duration) bool {
	if !p.ended {
		select {
		case p.err = <-p.done:
			p.ended = true
		case <-time.After(d):
		}
	}
	return p.ended
}

func (f *fleet) run(name string, args ...string) string {
	f.t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		f.t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (f *fleet) ip(ns string, args ...string) { f.run("ip", append([]string{"-n", ns}, args...)...) }

func (f *fleet) nsexec(ns string, args ...string) {
	f.run("ip", append([]string{"netns", "exec", ns}, args...)...)
}

// join connects ns to the bridge: eth0 in ns, with addr/24, port in the
// bridge's namespace.
func (f *fleet) join(ns, port, addr string) {
	f.ip(f.sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
	f.ip(f.sw, "link", "set", port, "master", "br0", "up")
	f.ip(ns, "addr", "add", addr+"/24", "dev", "eth0")
	f.ip(ns, "link", "set", "eth0", "up")
}

func newFleet(t *testing.T) *fleet {
	xdptest.Need(t, "ethtool")
	f := &fleet{t: t, suffix: fmt.Sprint(os.Getpid()), regs: map[int]*etcdmaglev.Registration{}, weights: map[int]uint32{}}
	f.bin = build(t) // skips under -race, as build says

	// An XDP_PASS program for the bridge's side of each load balancer's
	// veth: veth's XDP_TX needs a program on the peer.
	var err error
	f.pass, err = ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}}) // XDP_PASS
	if err != nil {
		t.Fatalf("loading an XDP_PASS program: %v", err)
	}
	t.Cleanup(func() { _ = f.pass.Close() })

	f.sw = xdptest.NewNS(f.t, "flsw")
	f.ip(f.sw, "link", "add", "br0", "type", "bridge")
	f.ip(f.sw, "link", "set", "br0", "up")

	f.rt = xdptest.NewNS(f.t, "flrt")
	f.join(f.rt, "p-rt", "198.18.0.1")
	f.client = xdptest.NewNS(f.t, "flcl")
	f.ip(f.rt, "link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", f.client)
	f.ip(f.rt, "addr", "add", "198.18.1.1/24", "dev", "eth1")
	f.ip(f.rt, "link", "set", "eth1", "up")
	f.ip(f.client, "addr", "add", fleetClient.String()+"/24", "dev", "eth0")
	f.ip(f.client, "link", "set", "eth0", "up")
	f.ip(f.client, "route", "add", "default", "via", "198.18.1.1")
	for _, kv := range [][2]string{
		{"net.ipv4.ip_forward", "1"},
		{"net.ipv4.fib_multipath_hash_policy", "1"},
		{"net.ipv4.conf.all.rp_filter", "0"},
		{"net.ipv4.conf.default.rp_filter", "0"},
		{"net.ipv4.conf.eth0.rp_filter", "0"},
		{"net.ipv4.conf.eth1.rp_filter", "0"},
	} {
		xdptest.Sysctl(f.t, f.rt, kv[0], kv[1])
	}
	// The load generator's connections: ports reused soon after TIME_WAIT.
	xdptest.Sysctl(f.t, f.client, "net.ipv4.ip_local_port_range", "10000 60999")
	xdptest.Sysctl(f.t, f.client, "net.ipv4.tcp_tw_reuse", "1")
	// Forwarded packets must carry whole checksums: no transmit offload
	// on the veths that send them.
	f.nsexec(f.client, "ethtool", "-K", "eth0", "tx", "off")
	f.nsexec(f.rt, "ethtool", "-K", "eth0", "tx", "off")
	f.nsexec(f.rt, "ethtool", "-K", "eth1", "tx", "off")

	for i := range fleetLBs {
		ns := xdptest.NewNS(f.t, fmt.Sprintf("fllb%d", i))
		f.join(ns, fmt.Sprintf("p-lb%d", i), lbAddr(i))
		f.nsexec(ns, "ethtool", "-K", "eth0", "tx", "off")
		f.lbs = append(f.lbs, ns)
		xdptest.AttachXDP(t, f.sw, fmt.Sprintf("p-lb%d", i), f.pass)
	}
	for i := range fleetBEs {
		ns := xdptest.NewNS(f.t, fmt.Sprintf("flbe%d", i))
		f.join(ns, fmt.Sprintf("p-be%d", i), beAddr(i).String())
		f.ip(ns, "addr", "add", fleetVIP.Addr().String()+"/32", "dev", "lo")
		f.ip(ns, "route", "add", "default", "via", "198.18.0.1")
		for _, dev := range []string{"all", "eth0"} {
			xdptest.Sysctl(f.t, ns, "net.ipv4.conf."+dev+".arp_ignore", "1")
			xdptest.Sysctl(f.t, ns, "net.ipv4.conf."+dev+".arp_announce", "2")
		}
		f.bes = append(f.bes, ns)
		serve(t, ns, beAddr(i).String())
	}

	f.etcd = etcdtest.Start(t)
	f.cli = f.etcd.Client(t)
	f.prefix = "services/l4lb-" + f.suffix
	for _, ns := range f.lbs {
		f.forwardEtcd(ns)
	}
	f.procs = make([]*lbProc, fleetLBs)
	return f
}

// forwardEtcd makes etcd, which listens on the test's loopback, reachable
// at 127.0.0.1:2379 in namespace ns: a TCP forwarder, as a network
// between the load balancers and etcd would be. While etcd is stopped,
// connections to it are refused, as they would be.
func (f *fleet) forwardEtcd(ns string) {
	forwardEtcd(f.t, ns, f.etcd)
}

// forwardEtcd makes etcd reachable at 127.0.0.1:2379 in namespace ns (see
// fleet.forwardEtcd), until the end of the test.
func forwardEtcd(t *testing.T, ns string, etcd *etcdtest.Server) {
	ln, err := xdptest.In(ns, func() (net.Listener, error) { return net.Listen("tcp4", "127.0.0.1:2379") })
	if err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(etcd.Endpoint(), "http://")
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			open[c] = true
		} else {
			delete(open, c)
		}
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				up, err := net.DialTimeout("tcp", target, time.Second)
				if err != nil {
					return
				}
				defer func() { _ = up.Close() }()
				track(c, true)
				track(up, true)
				defer track(c, false)
				defer track(up, false)
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done // either side gone: close both
			})
		}
	})
}

// serve runs backend name's TCP server on port 80 in namespace ns: it
// sends its name, then echoes. It stops at the end of the test, or when
// stop is called (its listener and connections closed), once.
func serve(t *testing.T, ns, name string) (stop func()) { return serveAt(t, ns, name, ":80") }

// serveAt is serve on addr.
func serveAt(t *testing.T, ns, name, addr string) (stop func()) {
	return xdptest.Serve(t, ns, "tcp4", addr, 3*time.Minute, xdptest.NameEcho(name))
}

// startLB starts l4lb in load balancer i's namespace, with the fleet's
// flags and extra, and waits for its first table.
func (f *fleet) startLB(i int, extra ...string) {
	f.t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", f.lbs[i], f.bin, "run", "-iface", "eth0", "-vip", fleetVIP.String(),
		"-etcd", "http://127.0.0.1:2379", "-etcd-prefix", f.prefix, "-seed", fmt.Sprint(fleetSeed),
		"-mode", "native", "-admin", "127.0.0.1:9180", "-drain-timeout", fleetDrainT.String()}, extra...)...)
	stderr, err := cmd.StderrPipe() // its log records
	if err != nil {
		f.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	p := &lbProc{cmd: cmd, lines: make(chan nstest.Record, 1024), done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	f.t.Cleanup(func() { _ = cmd.Process.Kill() }) // gone already, normally
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			select {
			case p.lines <- record(s.Text()):
			default: // nobody reads them any more
			}
		}
	}()
	f.procs[i] = p
	for {
		select {
		case r := <-p.lines:
			if r.Msg == "backends applied" && r.Attrs["digest"] != "" {
				return
			}
		case p.err = <-p.done:
			p.ended = true
			f.t.Fatalf("l4lb %d exited: %v", i, p.err)
		case <-time.After(30 * time.Second):
			f.t.Fatalf("l4lb %d: no table in 30 s", i)
		}
	}
}

func (f *fleet) stopLB(i int) {
	if p := f.procs[i]; p != nil {
		_ = p.cmd.Process.Kill() // SIGKILL: a load balancer lost
		if p.wait(time.Minute); p.err == nil {
			f.t.Errorf("load balancer %d exited cleanly after SIGKILL", i)
		}
		f.procs[i] = nil
	}
}

// route sets the router's route to the VIP: one nexthop per load balancer
// in lbs.
func (f *fleet) route(lbs ...int) {
	args := []string{"route", "replace", fleetVIP.Addr().String() + "/32"}
	for _, i := range lbs {
		args = append(args, "nexthop", "via", lbAddr(i), "dev", "eth0")
	}
	f.ip(f.rt, args...)
}

func (f *fleet) register(i int, weight uint32) {
	f.t.Helper()
	ep := endpoints.Endpoint{Addr: netip.AddrPortFrom(beAddr(i), 80).String()}
	if r := f.regs[i]; r != nil { // a new weight, under the registration's lease, as an operator's put would
		ep.Metadata = map[string]any{"weight": weight}
		em, err := endpoints.NewManager(f.cli, f.prefix)
		if err != nil {
			f.t.Fatal(err)
		}
		if err := em.AddEndpoint(context.Background(), r.Key(), ep, clientv3.WithLease(r.Lease())); err != nil {
			f.t.Fatal(err)
		}
	} else {
		r, err := etcdmaglev.Register(context.Background(), f.cli, f.prefix, ep, etcdmaglev.RegisterOptions{TTL: fleetTTL})
		if err != nil {
			f.t.Fatal(err)
		}
		f.regs[i] = r
		f.t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = r.Deregister(ctx) // etcd may be down, when a test failed
		})
	}
	f.weights[i] = weight
}

func (f *fleet) deregister(i int) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.regs[i].Deregister(ctx); err != nil {
		f.t.Fatal(err)
	}
	delete(f.regs, i)
	delete(f.weights, i)
}

// table is the table the registered backends make, as the test computes it.
func (f *fleet) table() *maglev.Table {
	var bs []maglev.Backend
	for i, w := range f.weights {
		bs = append(bs, maglev.Backend{Name: beAddr(i).String(), Weight: w})
	}
	t, err := maglev.NewWeighted(bs, maglev.DefaultSize, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	return t
}

func predict(t *maglev.Table, port int) string {
	return t.LookupHash(xdpmaglev.FlowHash(fleetSeed, netip.AddrPortFrom(fleetClient, uint16(port)), fleetVIP, 6))
}

// get fetches path from load balancer i's admin listener, in its namespace.
func (f *fleet) get(i int, path string, v any) error {
	body, err := xdptest.In(f.lbs[i], func() ([]byte, error) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:9180", 2*time.Second)
		if err != nil {
			return nil, err
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second)) // a bound, not a check
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.0\r\nHost: l4lb\r\n\r\n"); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s: %s", path, resp.Status)
		}
		return io.ReadAll(resp.Body)
	})
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

func (f *fleet) digest(i int) string {
	var st backendsStatus
	if err := f.get(i, "/debug/maglev/backends", &st); err != nil {
		return "error: " + err.Error()
	}
	return st.Digest
}

// converge waits until every running load balancer's digest is want's, and
// returns how long that took.
func (f *fleet) converge(want *maglev.Table, bound time.Duration) time.Duration {
	f.t.Helper()
	d := want.Digest()
	hexd := hex.EncodeToString(d[:])
	start := time.Now()
	for {
		agree := true
		var got []string
		for i, p := range f.procs {
			if p == nil {
				continue
			}
			g := f.digest(i)
			got = append(got, g)
			agree = agree && g == hexd
		}
		if agree {
			return time.Since(start)
		}
		if time.Since(start) > bound {
			f.t.Fatalf("after %v the load balancers' digests are %v, want %s", bound, got, hexd)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type lbStats struct {
	Stats struct {
		Forwarded uint64 `json:"forwarded"`
		Conntrack struct {
			Inserts uint64 `json:"inserts"`
		} `json:"conntrack"`
	} `json:"stats"`
}

// inserts returns each running load balancer's conntrack inserts.
func (f *fleet) inserts() []uint64 {
	f.t.Helper()
	out := make([]uint64, len(f.procs))
	for i, p := range f.procs {
		if p == nil {
			continue
		}
		var st lbStats
		if err := f.get(i, "/debug/maglev", &st); err != nil {
			f.t.Fatal(err)
		}
		out[i] = st.Stats.Conntrack.Inserts
	}
	return out
}

// fconn is a client connection to the VIP.
type fconn struct {
	net.Conn
	r       *bufio.Reader
	port    int
	backend string
}

// dialFrom connects from the client's port (0: any) to the VIP, on the
// calling thread, which must be in the client's namespace.
func dialFrom(port int) (*fconn, error) { return dialFromTo(port, fleetVIP) }

// dialFromTo is dialFrom to vip.
func dialFromTo(port int, vip netip.AddrPort) (*fconn, error) {
	d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: fleetClient.AsSlice(), Port: port}}
	c, err := d.Dial("tcp4", vip.String())
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(3 * time.Second)) // a bound, not a check
	r := bufio.NewReader(c)
	name, err := r.ReadString('\n')
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("reading the backend's name: %w", err)
	}
	if port == 0 {
		port = c.LocalAddr().(*net.TCPAddr).Port
	}
	return &fconn{Conn: c, r: r, port: port, backend: strings.TrimSpace(name)}, nil
}

func (c *fconn) echo(line string) error { return c.echoWithin(line, 3*time.Second) }

// echoWithin sends line and checks that it comes back whole within d.
func (c *fconn) echoWithin(line string, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d)) // a bound, not a check
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

// connect makes one connection from each port (8 at a time), checks that
// each reaches the backend want predicts, and returns how many reached each
// backend, and the connections if keep.
func (f *fleet) connect(want *maglev.Table, ports []int, keep bool) (map[string]int, []*fconn) {
	f.t.Helper()
	conns, errs := dialEach(f.client, fleetVIP, ports, func(port int) string { return predict(want, port) })
	if len(errs) > 0 {
		f.t.Fatalf("%d of %d connections failed; first: %v", len(errs), len(ports), errors.Join(errs[:min(5, len(errs))]...))
	}
	per := map[string]int{}
	for _, c := range conns {
		per[c.backend]++
		if !keep {
			_ = c.Close()
		}
	}
	if !keep {
		conns = nil
	}
	return per, conns
}

// dialEach connects from the client's namespace ns to vip from each port,
// 8 at a time, and returns the connections that reached the backend want
// says, and an error for each other (those that reached another backend
// closed).
func dialEach(ns string, vip netip.AddrPort, ports []int, want func(port int) string) ([]*fconn, []error) {
	var mu sync.Mutex
	var conns []*fconn
	var errs []error
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, _ = xdptest.In(ns, func() (struct{}, error) {
				for port := range work {
					c, err := dialFromTo(port, vip)
					mu.Lock()
					switch {
					case err != nil:
						errs = append(errs, fmt.Errorf("port %d: %w", port, err))
					case c.backend != want(port):
						errs = append(errs, fmt.Errorf("port %d reached %s, the table says %s", port, c.backend, want(port)))
						_ = c.Close()
					default:
						conns = append(conns, c)
					}
					mu.Unlock()
				}
				return struct{}{}, nil
			})
		})
	}
	for _, p := range ports {
		work <- p
	}
	close(work)
	wg.Wait()
	return conns, errs
}

// pumps keep data flowing on long-lived connections: each sends a
// numbered line every 20 ms and checks that it comes back whole, within 3
// s (startPumps) or the pumps' timeout.
type pumps struct {
	timeout time.Duration
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    map[int]error // by port
	bytes   atomic.Int64  // echoed and checked
	lines   atomic.Int64
	conns   []*fconn
}

func startPumps(conns []*fconn) *pumps { return startPumpsWithin(conns, 3*time.Second) }

// startPumpsWithin is startPumps with a line's timeout of d.
func startPumpsWithin(conns []*fconn, d time.Duration) *pumps {
	return startPumpsEvery(conns, 20*time.Millisecond, d)
}

// startPumpsEvery is startPumps with a line every interval, each line's
// timeout d.
func startPumpsEvery(conns []*fconn, interval, d time.Duration) *pumps {
	p := &pumps{timeout: d, stop: make(chan struct{}), errs: map[int]error{}, conns: conns}
	pad := strings.Repeat("x", 64)
	for _, c := range conns {
		p.wg.Go(func() {
			defer func() { _ = c.Close() }()
			for seq := 0; ; seq++ {
				select {
				case <-p.stop:
					return
				case <-time.After(interval):
				}
				line := fmt.Sprintf("%d %d %s", c.port, seq, pad)
				if err := c.echoWithin(line, p.timeout); err != nil {
					p.mu.Lock()
					p.errs[c.port] = fmt.Errorf("line %d: %w", seq, err)
					p.mu.Unlock()
					return
				}
				p.lines.Add(1)
				p.bytes.Add(int64(len(line) + 1))
			}
		})
	}
	return p
}

// failed returns the ports whose connection failed, and the first error,
// leaving out connections to the backends in except.
func (p *pumps) failed(except ...string) (map[int]error, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	skip := map[int]bool{}
	for _, c := range p.conns {
		for _, e := range except {
			skip[c.port] = skip[c.port] || c.backend == e
		}
	}
	out := map[int]error{}
	var first error
	for port, err := range p.errs {
		if skip[port] {
			continue
		}
		out[port] = err
		if first == nil {
			first = fmt.Errorf("port %d: %w", port, err)
		}
	}
	return out, first
}

func (p *pumps) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

func portRange(from, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = from + i
	}
	return p
}

// portsTo returns n ports from from on whose new flows table t sends to
// backend.
func portsTo(t *maglev.Table, backend string, from, n int) []int {
	var out []int
	for p := from; len(out) < n && p < 65536; p++ {
		if predict(t, p) == backend {
			out = append(out, p)
		}
	}
	return out
}

// TestFleet: three l4lb processes behind a Linux router's ECMP route,
// their backends from a real etcd, on real packets through XDP. See
// docs/testing-l4lb.md for the figures.
func TestFleet(t *testing.T) {
	f := newFleet(t)
	for i := range 4 {
		f.register(i, 1)
	}
	for i := range fleetLBs {
		f.startLB(i)
	}
	f.route(0, 1, 2)

	// 1. One table everywhere; 1,000 connections at the predicted backends.
	tbl := f.table()
	t.Logf("1. every load balancer's digest agreed %v after the last start", f.converge(tbl, 10*time.Second))
	before := f.inserts()
	per, _ := f.connect(tbl, portRange(20000, 1000), false)
	after := f.inserts()
	var spread []uint64
	for i := range after {
		spread = append(spread, after[i]-before[i])
		if after[i] == before[i] {
			t.Errorf("load balancer %d tracked none of the 1,000 connections: ECMP did not spread them (%v)", i, spread)
		}
	}
	if len(per) != 4 {
		t.Errorf("1,000 connections reached %v, want all 4 backends", per)
	}
	t.Logf("1. 1,000 connections: each at its predicted backend %v; flows tracked per load balancer %v", per, spread)

	// 2. 100 long-lived connections; a load balancer leaves, then dies.
	_, conns := f.connect(tbl, portRange(30000, 100), true)
	pp := startPumps(conns)
	defer pp.close()
	time.Sleep(500 * time.Millisecond)
	before = f.inserts()
	f.route(0, 1)
	time.Sleep(time.Second)
	f.stopLB(2)
	time.Sleep(time.Second)
	after = f.inserts()
	moved := (after[0] - before[0]) + (after[1] - before[1])
	if failed, first := pp.failed(); len(failed) > 0 {
		t.Fatalf("2. load balancer 2 left: %d of 100 connections failed; %v", len(failed), first)
	}
	if moved == 0 {
		t.Errorf("2. no connection moved to load balancers 0 and 1 when 2 left the route")
	}
	t.Logf("2. load balancer 2 left the route and was killed: %d connections moved to 0 and 1 (flows they tracked anew), 100 of 100 kept working; %d lines, %d bytes echoed whole so far",
		moved, pp.lines.Load(), pp.bytes.Load())

	// 3. A load balancer (re)joins mid-flight.
	f.startLB(2)
	f.converge(tbl, 10*time.Second)
	before = f.inserts()
	f.route(0, 1, 2)
	time.Sleep(1500 * time.Millisecond)
	after = f.inserts()
	if failed, first := pp.failed(); len(failed) > 0 {
		t.Fatalf("3. load balancer 2 joined: %d of 100 connections failed; %v", len(failed), first)
	}
	if after[2] == 0 {
		t.Errorf("3. no connection moved to the new load balancer 2")
	}
	t.Logf("3. load balancer 2 started and joined the route: %d connections moved to it, 100 of 100 kept working", after[2]-before[2])

	// 4. A backend registers: new connections reach it within 1 s; then it
	// deregisters: none after 1 s.
	start := time.Now()
	f.register(4, 1)
	tbl = f.table()
	newBE := beAddr(4).String()
	var first time.Duration
	_, _ = xdptest.In(f.client, func() (struct{}, error) {
		for _, port := range portsTo(tbl, newBE, 40000, 2000) {
			c, err := dialFrom(port)
			if err != nil {
				continue // counted below, by the checks that follow
			}
			_ = c.Close()
			if c.backend == newBE {
				first = time.Since(start)
				break
			}
			if time.Since(start) > 10*time.Second {
				break
			}
		}
		return struct{}{}, nil
	})
	if first == 0 || first > 5*time.Second {
		t.Fatalf("4. a registered backend got no new connection in %v", time.Since(start))
	}
	conv := f.converge(tbl, 5*time.Second)
	per, _ = f.connect(tbl, portRange(42000, 300), false)
	if per[newBE] == 0 {
		t.Errorf("4. 300 new connections after it registered reached %v, none the new backend", per)
	}
	t.Logf("4. registered: first new connection at it %v after Register returned (all digests equal within %v more); 300 new connections %v", first, conv, per)
	start = time.Now()
	f.deregister(4)
	tbl = f.table()
	conv = f.converge(tbl, 5*time.Second)
	per, _ = f.connect(tbl, portRange(43000, 300), false)
	if per[newBE] != 0 {
		t.Errorf("4. %d new connections reached a deregistered backend", per[newBE])
	}
	if failed, first := pp.failed(); len(failed) > 0 {
		t.Fatalf("4. %d of 100 long-lived connections failed; %v", len(failed), first)
	}
	t.Logf("4. deregistered: every digest without it %v after Deregister returned; 300 new connections %v, none to it; 100 of 100 long-lived connections untouched", conv, per)

	// 5. A backend drains (weight 0 in its etcd Metadata): its connections
	// stay, it gets no new one; after the drain timeout they are gone.
	drainee := beAddr(1).String()
	onIt := 0
	for _, c := range pp.conns {
		if c.backend == drainee {
			onIt++
		}
	}
	drainStart := time.Now()
	f.register(1, 0)
	tbl = f.table()
	conv = f.converge(tbl, 5*time.Second)
	per, _ = f.connect(tbl, portRange(44000, 300), false)
	if per[drainee] != 0 {
		t.Errorf("5. %d new connections reached the draining backend", per[drainee])
	}
	time.Sleep(time.Second)
	if failed, first := pp.failed(); len(failed) > 0 {
		t.Fatalf("5. %d of 100 connections failed while %s drained; %v", len(failed), drainee, first)
	}
	if onIt == 0 {
		t.Errorf("5. no long-lived connection was on %s: the drain shows nothing", drainee)
	}
	t.Logf("5. %s draining: every digest without it %v after the put; 300 new connections %v, none to it; its %d long-lived connections kept working",
		drainee, conv, per, onIt)

	// 6. etcd stopped: routing goes on by the last set; restarted, a new
	// registration is followed.
	f.etcd.Stop()
	stopped := time.Now()
	per, _ = f.connect(tbl, portRange(45000, 300), false)
	for i := range f.procs {
		if d := f.digest(i); d != hex.EncodeToString(ptr(tbl.Digest())[:]) {
			t.Errorf("6. load balancer %d's digest changed while etcd was down: %s", i, d)
		}
	}
	// The draining backend's connections end with the drain timeout,
	// which may pass now: see below.
	if failed, first := pp.failed(drainee); len(failed) > 0 {
		t.Fatalf("6. with etcd down, %d long-lived connections failed; %v", len(failed), first)
	}
	time.Sleep(time.Until(stopped.Add(3 * time.Second)))
	f.etcd.Restart()
	down := time.Since(stopped)
	start = time.Now()
	f.register(5, 1)
	regd := time.Since(start)
	tbl = f.table()
	conv = f.converge(tbl, 15*time.Second)
	t.Logf("6. etcd down %v: 300 new connections at their backends by the last set %v, no digest changed; after the restart Register took %v, every digest followed %v later",
		down.Round(time.Millisecond), per, regd, conv)

	// 5, continued. Once the drain timeout passes, the draining backend
	// leaves the service: what is left of its connections is hashed again,
	// and reset by the backend that receives it; the others stay.
	time.Sleep(time.Until(drainStart.Add(fleetDrainT + 2*time.Second)))
	failed, _ := pp.failed()
	for _, c := range pp.conns {
		_, gone := failed[c.port]
		if gone != (c.backend == drainee) {
			t.Errorf("5. %v after the drain began, the connection from port %d to %s failed: %v", time.Since(drainStart).Round(time.Millisecond), c.port, c.backend, gone)
		}
	}
	pp.close()
	t.Logf("5. after the drain timeout (%v): the %d connections to %s were reset, the other %d kept working; %d lines (%d bytes) echoed whole over the 100 connections in all",
		fleetDrainT, len(failed), drainee, len(pp.conns)-len(failed), pp.lines.Load(), pp.bytes.Load())

	// 7. Under load.
	loadUnder(t, f)
}

func ptr[T any](v T) *T { return &v }

// loadUnder runs item 7: short connections from 8 workers for 30 s (5 s
// with -short) while a backend joins, one drains and a load balancer
// leaves.
func loadUnder(t *testing.T, f *fleet) {
	dur := 30 * time.Second
	if testing.Short() {
		dur = 6 * time.Second
	}
	l := f.startLoad(8)
	start := time.Now()
	at := func(frac float64) { time.Sleep(time.Until(start.Add(time.Duration(frac * float64(dur))))) }
	at(0.2)
	f.register(4, 1) // a backend joins
	at(0.4)
	f.register(0, 0) // one drains
	at(0.6)
	f.route(0, 2) // load balancer 1 leaves the route,
	at(0.65)
	f.stopLB(1) // and dies
	at(1)
	ok, fail, kinds := l.stop()
	elapsed := time.Since(start)
	total := ok + fail
	t.Logf("7. %v of load: %d short connections (%.0f/s), %d failed %v", elapsed.Round(time.Millisecond), total, float64(total)/elapsed.Seconds(), fail, kinds)
	if total < 1000 {
		t.Errorf("7. only %d connections in %v", total, elapsed)
	}
	if fail > 0 {
		t.Errorf("7. %d of %d connections failed", fail, total)
	}
}

// A load is short connections to the VIP from the client, one after the
// other on each of its workers: connect, read the backend's name, echo a
// line, close.
type load struct {
	ok, fail atomic.Int64
	mu       sync.Mutex
	failures map[string]int // by error
	first    error          // the first failure
	quit     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
}

// startLoad starts a load of workers until its stop.
func (f *fleet) startLoad(workers int) *load { return startLoad(f.client, workers, 0) }

// startLoad starts a load of workers from namespace ns, each pausing
// between its connections, until its stop.
func startLoad(ns string, workers int, pause time.Duration) *load {
	l := &load{failures: map[string]int{}, quit: make(chan struct{})}
	for w := range workers {
		l.wg.Go(func() {
			_, _ = xdptest.In(ns, func() (struct{}, error) {
				for n := 0; ; n++ {
					select {
					case <-l.quit:
						return struct{}{}, nil
					case <-time.After(pause):
					}
					c, err := dialFrom(0)
					if err == nil {
						err = c.echo(fmt.Sprintf("w%d n%d", w, n))
						_ = c.Close()
					}
					if err != nil {
						l.fail.Add(1)
						l.mu.Lock()
						l.failures[err.Error()]++
						if l.first == nil {
							l.first = err
						}
						l.mu.Unlock()
						continue
					}
					l.ok.Add(1)
				}
			})
		})
	}
	return l
}

// close ends the load, once.
func (l *load) close() {
	l.once.Do(func() { close(l.quit) })
	l.wg.Wait()
}

// stop ends the load and returns how many connections worked, how many
// failed, and the failures' kinds with their counts.
func (l *load) stop() (ok, fail int64, kinds []string) {
	l.close()
	for k, n := range l.failures {
		kinds = append(kinds, fmt.Sprintf("%d× %s", n, k))
	}
	sort.Strings(kinds)
	return l.ok.Load(), l.fail.Load(), kinds
}
