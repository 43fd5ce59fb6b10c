package k8stest_test

// l4lb in front of a cluster, on real packets: the nodes are network
// namespaces (the VIPs on lo, a TCP server on port 80 that stands in for
// kube-proxy's delivery and answers with the node's name, and
// kube-proxy's /healthz on the Local Service's healthCheckNodePort);
// two l4lb processes, XDP on their eth0, announce the VIPs to BIRD in the
// router's namespace, whose kernel merges their routes into one ECMP
// route; a client namespace connects through the router. The Node
// objects, the Services and their EndpointSlices are the real API
// server's (k8stest), written by the test as kubelet and the endpoint
// controller would.

import (
	"bufio"
	"bytes"
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
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/k8smaglev/k8stest"
	"github.com/maglevlb/maglev/xdpmaglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// The lab's addresses, all in 198.18.0.0/15:
//
//	client 198.18.201.2 ── r-cl 198.18.201.1  router  br0 198.18.200.1
//	br0: load balancers 198.18.200.3, .4 (l4lb, XDP on their eth0)
//	     nodes 198.18.200.11.. (the VIPs on lo), default via the router
//	     the API server's namespace (this test binary's): 198.18.200.250,
//	     the API server at 198.18.0.1 on its lo
//
// The router runs BIRD: a BGP session with each load balancer, and its
// kernel protocol merging their routes into one ECMP route
// (fib_multipath_hash_policy=1: the 5-tuple is hashed). Nodes answer the
// client directly, through the router.
const (
	e2eSeed    = 0x48
	e2eLBs     = 2
	e2eNodes   = 4
	e2eRouter  = "198.18.200.1"
	e2eAPISide = "198.18.200.250"
	e2eAdmin   = 9180
	e2eHold    = 3 * time.Second
	e2eHCPort  = 30148 // the Local Service's healthCheckNodePort
)

var (
	e2ePool   = netip.MustParsePrefix("198.19.200.0/28")
	e2eClient = netip.MustParseAddr("198.18.201.2")
	// e2eFileVIP is the VIP of the service in l4lb's file, beside the
	// controller's.
	e2eFileVIP = netip.MustParseAddrPort("198.19.201.1:80")
)

func e2eLBAddr(i int) string       { return fmt.Sprintf("198.18.200.%d", 3+i) }
func e2eNodeAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 200, byte(11 + i)}) }

// e2eBird is the router's BIRD: graceful restart off, so that a load
// balancer killed (its session closed by the kernel) leaves the route at
// once, and the kernel protocol exporting the merged route.
func e2eBird() string {
	var b strings.Builder
	fmt.Fprintf(&b, `router id %s;
protocol device { }
protocol kernel {
	merge paths on;
	ipv4 { export where proto ~ "lb*"; };
}
template bgp lbs {
	local %s as 65000;
	connect retry time 1;
	error wait time 1, 10;
	ipv4 { import where net ~ [ %s+, %s/32 ]; export none; };
}
`, e2eRouter, e2eRouter, e2ePool, e2eFileVIP.Addr())
	for i := range e2eLBs {
		fmt.Fprintf(&b, "protocol bgp lb%d from lbs { neighbor %s as 65001; }\n", i, e2eLBAddr(i))
	}
	return b.String()
}

// e2eLab is the test's network and its processes.
type e2eLab struct {
	t      *testing.T // the (sub)test its methods fail; the lab goes with the test that built it
	router string     // namespace, BIRD's
	client string     // namespace
	lbs    []string   // namespaces
	nodes  []*e2eNode
	bin    string // the built l4lb
	sock   string // BIRD's control socket
	procs  []*e2eProc
	pass   *ebpf.Program
}

// An e2eNode is a node's namespace and what runs in it.
type e2eNode struct {
	name string // the Node object's name, and what its server answers
	ns   string
	ip   netip.Addr
	// local is the number of ready endpoints of the Local Service on the
	// node, which its /healthz reports, as kube-proxy's does.
	local atomic.Int32
}

// e2eRace reports whether the test binary was built with -race: the lab
// runs l4lb built without it, which the plain run covers.
func e2eRace() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// newE2ELab builds the lab: the router with BIRD, the client, the load
// balancers' namespaces (no l4lb yet), the nodes with their servers, and
// the link from the load balancers' segment to the API server.
func newE2ELab(t *testing.T) *e2eLab {
	t.Helper()
	if e2eRace() {
		t.Skip("runs l4lb built without -race: the plain run covers it")
	}
	xdptest.Need(t, "ethtool", "unshare")
	for _, bin := range []string{"bird", "birdc"} {
		if _, err := exec.LookPath(bin); err != nil {
			xdptest.Skip(t, bin+" is missing: install Debian's bird2")
		}
	}
	l := &e2eLab{t: t}
	l.bin = buildL4LB(t) // l4lb_test.go's, once per test binary
	var err error
	l.pass, err = ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}}) // XDP_PASS
	if err != nil {
		t.Fatalf("loading an XDP_PASS program: %v", err)
	}
	t.Cleanup(func() { _ = l.pass.Close() })

	l.router = xdptest.NewNS(t, "k4rt")
	xdptest.IP(t, "-n", l.router, "link", "add", "br0", "type", "bridge")
	xdptest.IP(t, "-n", l.router, "addr", "add", e2eRouter+"/24", "dev", "br0")
	xdptest.IP(t, "-n", l.router, "link", "set", "br0", "up")
	for _, kv := range [][2]string{
		{"net.ipv4.ip_forward", "1"},
		{"net.ipv4.fib_multipath_hash_policy", "1"},
		{"net.ipv4.conf.all.rp_filter", "0"},
		{"net.ipv4.conf.default.rp_filter", "0"},
	} {
		xdptest.Sysctl(t, l.router, kv[0], kv[1])
	}
	l.client = xdptest.NewNS(t, "k4cl")
	l.link(l.client, "r-cl", e2eClient.String()+"/24", false)
	xdptest.IP(t, "-n", l.router, "addr", "add", "198.18.201.1/24", "dev", "r-cl")
	xdptest.IP(t, "-n", l.client, "route", "add", "default", "via", "198.18.201.1")
	xdptest.Sysctl(t, l.client, "net.ipv4.ip_local_port_range", "10000 60999")

	// The API server's namespace, this process's, on the segment.
	e2eRun(t, "ip", "link", "add", "k4api", "type", "veth", "peer", "name", "r-api", "netns", l.router)
	e2eRun(t, "ip", "addr", "add", e2eAPISide+"/24", "dev", "k4api")
	e2eRun(t, "ip", "link", "set", "k4api", "up")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", "k4api").Run() }) // gone with the router's namespace too
	xdptest.IP(t, "-n", l.router, "link", "set", "r-api", "master", "br0", "up")

	for i := range e2eLBs {
		ns := xdptest.NewNS(t, fmt.Sprintf("k4lb%d", i))
		dev := fmt.Sprintf("r-lb%d", i)
		l.link(ns, dev, e2eLBAddr(i)+"/24", true)
		xdptest.AttachXDP(t, l.router, dev, l.pass) // veth's XDP_TX needs a program on the peer
		xdptest.IP(t, "-n", ns, "route", "add", k8stest.APIServerIP+"/32", "via", e2eAPISide)
		xdptest.Sysctl(t, ns, "net.ipv4.conf.all.forwarding", "1") // bpf_fib_lookup's, for gue and ipip
		l.lbs = append(l.lbs, ns)
	}
	l.procs = make([]*e2eProc, e2eLBs)
	for i := range e2eNodes {
		l.nodes = append(l.nodes, l.node(i))
	}
	l.sock = startE2EBird(t, l.router, e2eBird())
	return l
}

// link joins ns to the router by a veth pair, eth0 in ns with addr, dev
// in the router's namespace, on br0 if bridged; transmit checksum offload
// off at both ends (a packet that XDP forwards loses the note that its
// checksum is still to be filled in).
func (l *e2eLab) link(ns, dev, addr string, bridged bool) {
	t := l.t
	xdptest.IP(t, "-n", l.router, "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns)
	xdptest.IP(t, "-n", ns, "addr", "add", addr, "dev", "eth0")
	if bridged {
		xdptest.IP(t, "-n", l.router, "link", "set", dev, "master", "br0")
	}
	xdptest.IP(t, "-n", l.router, "link", "set", dev, "up")
	xdptest.IP(t, "-n", ns, "link", "set", "eth0", "up")
	for _, at := range [][2]string{{ns, "eth0"}, {l.router, dev}} {
		e2eRun(t, "ip", "netns", "exec", at[0], "ethtool", "-K", at[1], "tx", "off")
	}
}

// node builds node i's namespace: on the segment, the pool's prefix and
// the file's VIP on lo (every VIP is local, as on a node where kube-proxy
// delivers VIP traffic), no ARP answer for them, its default route via
// the router; a TCP server on port 80 that sends the node's name and
// echoes, and /healthz on the Local Service's healthCheckNodePort.
func (l *e2eLab) node(i int) *e2eNode {
	t := l.t
	n := &e2eNode{name: fmt.Sprintf("k4node%d-%d", i, os.Getpid()), ip: e2eNodeAddr(i)}
	n.ns = xdptest.NewNS(t, fmt.Sprintf("k4n%d", i))
	dev := fmt.Sprintf("r-n%d", i)
	l.link(n.ns, dev, n.ip.String()+"/24", true)
	xdptest.AttachXDP(t, l.router, dev, l.pass) // for l4lb decap's XDP on eth0
	xdptest.IP(t, "-n", n.ns, "addr", "add", e2ePool.String(), "dev", "lo")
	xdptest.IP(t, "-n", n.ns, "addr", "add", e2eFileVIP.Addr().String()+"/32", "dev", "lo")
	xdptest.IP(t, "-n", n.ns, "route", "add", "default", "via", e2eRouter)
	for _, dev := range []string{"all", "eth0"} {
		xdptest.Sysctl(t, n.ns, "net.ipv4.conf."+dev+".arp_ignore", "1")
		xdptest.Sysctl(t, n.ns, "net.ipv4.conf."+dev+".arp_announce", "2")
		xdptest.Sysctl(t, n.ns, "net.ipv4.conf."+dev+".rp_filter", "0") // decapsulated packets come from the client
	}
	e2eServe(t, n.ns, n.name, ":80")
	hc, err := xdptest.In(n.ns, func() (net.Listener, error) { return net.Listen("tcp4", fmt.Sprintf(":%d", e2eHCPort)) })
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// kube-proxy's answer: 200 with local endpoints, 503 without.
		local := n.local.Load()
		w.Header().Set("Content-Type", "application/json")
		if local == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = fmt.Fprintf(w, `{"localEndpoints":%d}`, local)
	})}
	go srv.Serve(hc) //nolint:errcheck // ends with Close
	t.Cleanup(func() { _ = srv.Close() })
	return n
}

func e2eRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// e2eServe runs a node's server on addr in namespace ns until the end of
// the test: it sends name and a newline, then echoes.
func e2eServe(t *testing.T, ns, name, addr string) {
	xdptest.Serve(t, ns, "tcp4", addr, 2*time.Minute, xdptest.NameEcho(name))
}

// startE2EBird runs BIRD in namespace ns with conf until the end of the
// test and returns its control socket, once it answers (within 10 s).
func startE2EBird(t *testing.T, ns, conf string) string {
	t.Helper()
	dir := t.TempDir()
	sock, cf := filepath.Join(dir, "bird.ctl"), filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startE2EProc(t, "bird", "ip", "netns", "exec", ns, "bird", "-f", "-c", cf, "-s", sock)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := e2eBirdc(sock, "show status"); err == nil {
			return sock
		}
		if p.exited() {
			t.Fatalf("bird exited: %s", p.out.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("bird not answering on %s in 10 s", sock)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// e2eBirdc runs a command of birdc on BIRD's socket, within 5 s.
func e2eBirdc(sock, command string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "birdc", append([]string{"-s", sock}, strings.Fields(command)...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("birdc %s: %v: %s", command, err, out)
	}
	return string(out), nil
}

// birdPaths returns the load balancers (by index) BIRD has a route to vip
// from, in order; none without a route.
func (l *e2eLab) birdPaths(vip netip.Addr) []int {
	out, err := e2eBirdc(l.sock, "show route "+vip.String()+"/32")
	if err != nil && !strings.Contains(err.Error(), "Network not found") {
		l.t.Fatal(err)
	}
	var lbs []int
	fields := strings.Fields(out)
	for k := 0; k+1 < len(fields); k++ {
		if fields[k] != "via" {
			continue
		}
		for i := range e2eLBs {
			if fields[k+1] == e2eLBAddr(i) {
				lbs = append(lbs, i)
			}
		}
	}
	slices.Sort(lbs)
	return lbs
}

// kernelPaths returns the load balancers (by index) the router's kernel
// route to vip goes through.
func (l *e2eLab) kernelPaths(vip netip.Addr) []int {
	out := e2eRun(l.t, "ip", "-n", l.router, "route", "show", vip.String()+"/32")
	var lbs []int
	fields := strings.Fields(out)
	for k := 0; k+1 < len(fields); k++ {
		for i := range e2eLBs {
			if fields[k] == "via" && fields[k+1] == e2eLBAddr(i) {
				lbs = append(lbs, i)
			}
		}
	}
	slices.Sort(lbs)
	return lbs
}

// awaitPaths polls until BIRD's route to vip and the router's kernel
// route both go through the load balancers want (none: no route), and
// returns how long that took; after bound it fails the test.
func (l *e2eLab) awaitPaths(vip netip.Addr, want []int, bound time.Duration, what string) time.Duration {
	l.t.Helper()
	start := time.Now()
	for {
		b, k := l.birdPaths(vip), l.kernelPaths(vip)
		if slices.Equal(b, want) && slices.Equal(k, want) {
			return time.Since(start)
		}
		if time.Since(start) > bound {
			out, _ := e2eBirdc(l.sock, "show route all "+vip.String()+"/32")
			l.t.Fatalf("%s: after %v BIRD's route to %v is from load balancers %v, the kernel's through %v; want %v:\n%s",
				what, bound, vip, b, k, want, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An e2eProc is a process the lab started: BIRD or an l4lb.
type e2eProc struct {
	cmd  *exec.Cmd
	out  *e2eBuffer
	done chan struct{} // closed when it has exited
	err  error         // Wait's, once done is closed
}

func (p *e2eProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// e2eBuffer holds a process's output, safe for the process's writes and
// the test's reads.
type e2eBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *e2eBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *e2eBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startE2EProc starts the command args until the end of the test, killed
// if the test binary dies; its output is logged, under what, if the test
// failed.
func startE2EProc(t *testing.T, what string, args ...string) *e2eProc {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	p := &e2eProc{cmd: cmd, out: &e2eBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			out := p.out.String()
			if len(out) > 20000 {
				out = "...\n" + out[len(out)-20000:]
			}
			t.Logf("%s's output:\n%s", what, out)
		}
	})
	return p
}

// startLB starts l4lb in load balancer i's namespace, with the
// configuration file conf, in a UTS namespace of its own whose host name
// is lbI (the identity leader election sees), and waits until its admin
// API answers.
func (l *e2eLab) startLB(i int, conf string) {
	t := l.t
	t.Helper()
	f := filepath.Join(t.TempDir(), fmt.Sprintf("l4lb%d.yaml", i))
	if err := os.WriteFile(f, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startE2EProc(t, fmt.Sprintf("l4lb %d", i), "ip", "netns", "exec", l.lbs[i], "unshare", "--uts", "--",
		"sh", "-c", `hostname "$0" && exec "$@"`, fmt.Sprintf("lb%d", i), l.bin, "run", "-config", f)
	l.procs[i] = p
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st e2eStatus
		if err := l.admin(i, "/debug/maglev", &st); err == nil {
			return
		}
		if p.exited() {
			t.Fatalf("l4lb %d exited: %v: %s", i, p.err, p.out.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("l4lb %d: no admin API in 30 s: %s", i, p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill kills load balancer i (SIGKILL: a load balancer lost) and waits
// for it to exit.
func (l *e2eLab) kill(i int) {
	p := l.procs[i]
	_ = p.cmd.Process.Kill()
	<-p.done
	l.procs[i] = nil
}

// lbConfig is load balancer i's configuration file's top level: its
// interface, the admin API on its address, nothing pinned (each l4lb's
// data plane goes with it), BGP to the router, and then extra.
func lbConfig(i int, extra string) string {
	return fmt.Sprintf(`iface: eth0
mode: native
seed: %d
admin: %s:%d
pin-dir: ""
bgp-asn: 65001
bgp-router-id: %s
bgp-peer: ["%s,65000"]
bgp-hold: %v
bgp-restart-time: 0s
bgp-drain: 0s
`, e2eSeed, e2eLBAddr(i), e2eAdmin, e2eLBAddr(i), e2eRouter, e2eHold) + extra
}

// e2eStatus is what the test reads of l4lb's /debug/maglev.
type e2eStatus struct {
	Services []struct {
		Name    string `json:"name"`
		Service string `json:"service"`
	} `json:"services"`
	Stats struct {
		Conntrack struct {
			Inserts uint64 `json:"inserts"`
		} `json:"conntrack"`
	} `json:"stats"`
}

// e2eBackends is what the test reads of l4lb's /debug/maglev/backends.
type e2eBackends struct {
	Name     string `json:"name"`
	Service  string `json:"service"`
	Digest   string `json:"digest"`
	Backends []struct {
		Addr   string `json:"addr"`
		Weight uint32 `json:"weight"`
		State  string `json:"state"`
	} `json:"backends"`
}

var e2eHTTP = &http.Client{Timeout: 2 * time.Second}

// admin GETs path from load balancer i's admin API into v.
func (l *e2eLab) admin(i int, path string, v any) error {
	resp, err := e2eHTTP.Get(fmt.Sprintf("http://%s:%d%s", e2eLBAddr(i), e2eAdmin, path))
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, bytes.TrimSpace(body))
	}
	return json.Unmarshal(body, v)
}

// inserts returns each running load balancer's connection tracking
// inserts: the flows it has seen begin (or arrive without an entry).
func (l *e2eLab) inserts() []uint64 {
	l.t.Helper()
	out := make([]uint64, e2eLBs)
	for i, p := range l.procs {
		if p == nil {
			continue
		}
		var st e2eStatus
		if err := l.admin(i, "/debug/maglev", &st); err != nil {
			l.t.Fatal(err)
		}
		out[i] = st.Stats.Conntrack.Inserts
	}
	return out
}

// digest returns load balancer i's table digest for service name, or the
// error's text.
func (l *e2eLab) digest(i int, name string) string {
	var st e2eBackends
	if err := l.admin(i, "/debug/maglev/backends?service="+name, &st); err != nil {
		return "error: " + err.Error()
	}
	return st.Digest
}

// nodeTable is the table of nodes (by index, weight 1 each): what l4lb
// computes for a service whose backends they are.
func (l *e2eLab) nodeTable(nodes ...int) *maglev.Table {
	l.t.Helper()
	var names []string
	for _, i := range nodes {
		names = append(names, l.nodes[i].ip.String())
	}
	tab, err := maglev.New(names, maglev.DefaultSize, nil)
	if err != nil {
		l.t.Fatal(err)
	}
	return tab
}

// nodeTableDown returns the table of the nodes all (by index) Without
// the nodes down: the table l4lb holds when those are out of service (a
// node NotReady, or without a ready endpoint of a Local Service).
func (l *e2eLab) nodeTableDown(all []int, down ...int) *maglev.Table {
	l.t.Helper()
	var names []string
	for _, i := range down {
		names = append(names, l.nodes[i].ip.String())
	}
	tab, err := l.nodeTable(all...).Without(names...)
	if err != nil {
		l.t.Fatal(err)
	}
	return tab
}

// converge waits until every running load balancer's table for service
// name is want, failing the test after bound; it returns how long that
// took.
func (l *e2eLab) converge(name string, want *maglev.Table, bound time.Duration, what string) time.Duration {
	l.t.Helper()
	d := want.Digest()
	hexd := hex.EncodeToString(d[:])
	start := time.Now()
	for {
		var got []string
		agree := true
		for i, p := range l.procs {
			if p == nil {
				continue
			}
			g := l.digest(i, name)
			got = append(got, g)
			agree = agree && g == hexd
		}
		if agree {
			return time.Since(start)
		}
		if time.Since(start) > bound {
			var st e2eBackends
			err := l.admin(slices.IndexFunc(l.procs, func(p *e2eProc) bool { return p != nil }), "/debug/maglev/backends?service="+name, &st)
			l.t.Fatalf("%s: after %v the load balancers' digests of %s are %v, want %s (the table of %v); the first's backends: %+v %v",
				what, bound, name, got, hexd, want.Backends(), st.Backends, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nodeOf returns the node name answers for, by the IP the table names.
func (l *e2eLab) nodeOf(ip string) string {
	for _, n := range l.nodes {
		if n.ip.String() == ip {
			return n.name
		}
	}
	return "no node at " + ip
}

// e2eConn is a client connection to a VIP, with the node that answered.
type e2eConn struct {
	net.Conn
	r    *bufio.Reader
	port int
	node string
}

// e2eDial connects from the client's port to vip, on the calling thread,
// which is in the client's namespace, and reads the node's name.
func e2eDial(port int, vip netip.AddrPort) (*e2eConn, error) {
	d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: e2eClient.AsSlice(), Port: port}}
	c, err := d.Dial("tcp4", vip.String())
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(3 * time.Second)) // a bound, not a check
	r := bufio.NewReader(c)
	name, err := r.ReadString('\n')
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("reading the node's name: %w", err)
	}
	return &e2eConn{Conn: c, r: r, port: port, node: strings.TrimSpace(name)}, nil
}

// reset closes c with a RST: no TIME_WAIT at the client, so that a later
// step may connect from the same port (a RST ends the flow at the load
// balancer too, and a SYN on its tuple is a new flow, placed by the
// table).
func (c *e2eConn) reset() {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// echo sends line and checks that it comes back whole within d.
func (c *e2eConn) echo(line string, d time.Duration) error {
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

// predict returns the node (its name) that tab and xdpmaglev.FlowHash
// send a new TCP connection from the client's port to vip to.
func (l *e2eLab) predict(tab *maglev.Table, vip netip.AddrPort, port int) string {
	return l.nodeOf(tab.LookupHash(xdpmaglev.FlowHash(e2eSeed, netip.AddrPortFrom(e2eClient, uint16(port)), vip, 6)))
}

// connect makes one connection to vip from each of ports (8 at a time),
// fails the test unless each reaches the node tab predicts (trying no
// more once 5 have failed), and returns
// how many reached each node, and the connections if keep (else they are
// closed).
func (l *e2eLab) connect(tab *maglev.Table, vip netip.AddrPort, ports []int, keep bool, what string) (map[string]int, []*e2eConn) {
	l.t.Helper()
	var mu sync.Mutex
	var conns []*e2eConn
	var errs []error
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, err := xdptest.In(l.client, func() (struct{}, error) {
				for port := range work {
					mu.Lock()
					failing := len(errs) >= 5
					mu.Unlock()
					if failing { // the test fails: no need to wait for each dial's timeout
						continue
					}
					c, err := e2eDial(port, vip)
					want := l.predict(tab, vip, port)
					mu.Lock()
					switch {
					case err != nil:
						errs = append(errs, fmt.Errorf("port %d: %w", port, err))
					case c.node != want:
						errs = append(errs, fmt.Errorf("port %d reached %s, the table says %s", port, c.node, want))
						c.reset()
					default:
						conns = append(conns, c)
					}
					mu.Unlock()
				}
				return struct{}{}, nil
			})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				for range work { // the others' share
				}
			}
		})
	}
	for _, p := range ports {
		work <- p
	}
	close(work)
	wg.Wait()
	per := map[string]int{}
	for _, c := range conns {
		per[c.node]++
		if !keep {
			c.reset()
		}
	}
	if len(errs) > 0 {
		for _, c := range conns {
			c.reset()
		}
		l.t.Fatalf("%s: %d connections to %v missed their node (of %d, the rest left untried after 5); first: %v", what, len(errs), vip, len(ports), errors.Join(errs[:min(5, len(errs))]...))
	}
	if !keep {
		conns = nil
	}
	return per, conns
}

func e2ePorts(from, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = from + i
	}
	return p
}

// e2ePumps keep data flowing on long-lived connections: each sends a
// line every 50 ms and checks that it comes back whole within 5 s (a
// route change may wait for a retransmission).
type e2ePumps struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	errs  map[int]error // by port
	lines atomic.Int64
	conns []*e2eConn
}

func startE2EPumps(conns []*e2eConn) *e2ePumps {
	p := &e2ePumps{stop: make(chan struct{}), errs: map[int]error{}, conns: conns}
	for _, c := range conns {
		p.wg.Go(func() {
			defer func() { _ = c.Close() }()
			for seq := 0; ; seq++ {
				select {
				case <-p.stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if err := c.echo(fmt.Sprintf("%d %d", c.port, seq), 5*time.Second); err != nil {
					p.mu.Lock()
					p.errs[c.port] = fmt.Errorf("line %d: %w", seq, err)
					p.mu.Unlock()
					return
				}
				p.lines.Add(1)
			}
		})
	}
	return p
}

// failed returns how many connections failed, and the first error.
func (p *e2ePumps) failed() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for port, err := range p.errs {
		return len(p.errs), fmt.Errorf("port %d: %w", port, err)
	}
	return 0, nil
}

func (p *e2ePumps) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

// The cluster's side of the lab: the user "lb" (l4lb's kubeconfig) given
// the controller's rights, Node objects for the nodes (Ready, InternalIP),
// Services of type LoadBalancer of the test's own class, EndpointSlices
// with nodeName, as kubelet and the endpoint controller would write them.

// e2eClass is the test's spec.loadBalancerClass: no other test's l4lb
// serves its Services, nor its l4lb theirs.
func e2eClass() string { return fmt.Sprintf("e2e.maglevlb.io/l4lb-%d", os.Getpid()) }

// grantController gives the user "lb" what l4lb's controller needs, and
// nothing more: Services (read), their status (write), EndpointSlices and
// Nodes (read), Events (write), and the Lease in namespace ns. The
// cluster-wide grant is removed at the end of the test.
func grantController(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	ctx := t.Context()
	name := fmt.Sprintf("k4-l4lb-%d", os.Getpid())
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"update", "patch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "lb"}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
	})
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "l4lb-lease"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "l4lb-lease"}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createNodes creates the lab's Node objects, Ready with their
// InternalIP, deleted at the end of the test. It fails the test if
// another Ready Node is there (another test's, not deleted): l4lb would
// send to it.
func (l *e2eLab) createNodes(cs kubernetes.Interface) {
	t := l.t
	t.Helper()
	ctx := t.Context()
	have, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range have.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				t.Fatalf("Node %s, Ready, is in the cluster (another test's, not deleted): l4lb would send to it", n.Name)
			}
		}
	}
	for _, n := range l.nodes {
		if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = cs.CoreV1().Nodes().Delete(ctx, n.name, metav1.DeleteOptions{})
		})
		l.setNode(cs, n, true, false)
	}
}

// setNode writes node n's status (Ready or not, its InternalIP) and its
// label node.kubernetes.io/exclude-from-external-load-balancers.
func (l *e2eLab) setNode(cs kubernetes.Interface, n *e2eNode, ready, excluded bool) {
	t := l.t
	t.Helper()
	ctx := t.Context()
	api := cs.CoreV1().Nodes()
	node, err := api.Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, was := node.Labels[e2eExclude]
	if was != excluded {
		if excluded {
			node.Labels = map[string]string{e2eExclude: ""}
		} else {
			delete(node.Labels, e2eExclude)
		}
		if node, err = api.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	now := metav1.Now()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, LastHeartbeatTime: now, LastTransitionTime: now, Reason: "Test"}}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.ip.String()}, {Type: corev1.NodeHostName, Address: n.name}}
	if _, err := api.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

const e2eExclude = "node.kubernetes.io/exclude-from-external-load-balancers"

// createLB creates Service name of type LoadBalancer, of the test's
// class, with the port http (80, TCP), externalTrafficPolicy Local
// (healthCheckNodePort e2eHCPort) if local, and the annotations; no
// selector: the test writes its EndpointSlices.
func createLB(t *testing.T, cs kubernetes.Interface, ns, name string, local bool, annotations map[string]string) {
	t.Helper()
	class := e2eClass()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass:     &class,
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
		},
	}
	if local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		svc.Spec.HealthCheckNodePort = e2eHCPort
	}
	if _, err := cs.CoreV1().Services(ns).Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// awaitVIP polls Service name until its status has an address, and
// returns it (port 80) and how long that took; it fails the test after
// bound, or if the address is not the pool's or its ipMode not VIP.
func awaitVIP(t *testing.T, cs kubernetes.Interface, ns, name string, bound time.Duration) (netip.AddrPort, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		svc, err := cs.CoreV1().Services(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if in := svc.Status.LoadBalancer.Ingress; len(in) > 0 {
			d := time.Since(start)
			a, err := netip.ParseAddr(in[0].IP)
			if err != nil || !e2ePool.Contains(a) || len(in) != 1 {
				t.Fatalf("Service %s's status: %+v, want one address of %v", name, in, e2ePool)
			}
			if in[0].IPMode == nil || *in[0].IPMode != corev1.LoadBalancerIPModeVIP {
				t.Errorf("Service %s's status: ipMode %v, want VIP", name, in[0].IPMode)
			}
			return netip.AddrPortFrom(a, 80), d
		}
		if time.Since(start) > bound {
			t.Fatalf("Service %s: no address in its status after %v", name, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// statusIPs returns the addresses in the status of each Service of ns.
func statusIPs(t *testing.T, cs kubernetes.Interface, ns string) map[string]string {
	t.Helper()
	list, err := cs.CoreV1().Services(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range list.Items {
		var ips []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			ips = append(ips, in.IP)
		}
		out[s.Name] = strings.Join(ips, ",")
	}
	return out
}

// putNodeSlice creates or replaces Service svc's EndpointSlice with one
// ready endpoint (a pod's address, 10.244.I.10) on each of nodes, and
// sets each node's count of local endpoints, which its /healthz reports.
func (l *e2eLab) putNodeSlice(cs kubernetes.Interface, ns, svc string, nodes ...int) {
	t := l.t
	t.Helper()
	name, port, proto, ready := svc+"-1", int32(8080), corev1.ProtocolTCP, true
	pname := "http"
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}
	local := make([]int32, len(l.nodes))
	for _, i := range nodes {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.244.%d.10", i)},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &l.nodes[i].name,
		})
		local[i]++
	}
	for i, n := range l.nodes { // kube-proxy's /healthz: up where an endpoint is
		if local[i] > 0 {
			n.local.Store(local[i])
		}
	}
	api := cs.DiscoveryV1().EndpointSlices(ns)
	old, err := api.Get(t.Context(), name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(t.Context(), s, metav1.CreateOptions{})
	case err == nil:
		s.ResourceVersion = old.ResourceVersion
		_, err = api.Update(t.Context(), s, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range l.nodes { // and down where none is left
		if local[i] == 0 {
			n.local.Store(0)
		}
	}
}

// slotMoves counts the slots whose owner changed between two tables of
// a service: those of the node gone, those taken by the node come from
// the nodes that stay, and the others, which move between nodes that
// stay (a few: Maglev's rebuild is nearly, not exactly, minimal).
type slotMoves struct{ gone, come, others int }

func moved(before, after *maglev.Table, gone, come string) slotMoves {
	var m slotMoves
	for h := range uint64(before.Size()) {
		b, a := before.LookupHash(h), after.LookupHash(h)
		switch {
		case b == a:
		case b == gone:
			m.gone++
		case a == come:
			m.come++
		default:
			m.others++
		}
	}
	return m
}

// e2eController is the file's part for the controller: the cluster
// through kubeconfig, the pool, the test's class and the Lease in
// namespace ns; forward l2 (the nodes are on the load balancers'
// segment); a backend that leaves drains for 1 s; Local's health check
// every 200 ms. The file has a service of its own too, whose backends are
// the nodes.
func (l *e2eLab) e2eController(kubeconfig, ns string) string {
	var nodes []string
	for _, n := range l.nodes {
		nodes = append(nodes, n.ip.String())
	}
	return fmt.Sprintf(`kubeconfig: %s
vip-pool: ["%v"]
k8s-lb-class: %s
k8s-lease: %s/l4lb
forward: l2
drain-timeout: 1s
health-interval: 200ms
health-timeout: 150ms
health-rise: 1
health-fall: 2
services:
  - name: file
    vip: %v
    backends: [%s]
`, kubeconfig, e2ePool, e2eClass(), ns, e2eFileVIP, strings.Join(nodes, ", "))
}

// awaitSessions waits until BIRD's session with each load balancer is
// up (within 15 s), and returns how long that took.
func (l *e2eLab) awaitSessions() time.Duration {
	l.t.Helper()
	start := time.Now()
	for {
		out, err := e2eBirdc(l.sock, "show protocols")
		if err != nil {
			l.t.Fatal(err)
		}
		up := 0
		for line := range strings.Lines(out) {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "lb") && strings.Contains(line, "Established") {
				up++
			}
		}
		if up == e2eLBs {
			return time.Since(start)
		}
		if time.Since(start) > 15*time.Second {
			l.t.Fatalf("BIRD's sessions after 15 s:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestL4LBDataPath is l4lb's controller on real packets, with the real
// API server: two load balancers serve the file's service and the
// Services of type LoadBalancer of the test's class, from their status,
// and announce their VIPs to BIRD; connections from the client reach the
// nodes the table and FlowHash predict, with externalTrafficPolicy
// Cluster and Local, as nodes, endpoints and kube-proxy's /healthz
// change, by l2 and by gue through l4lb decap on the nodes; the leader
// killed, the other takes over allocation, no VIP moves and connections
// through the killed one carry on; a Service deleted leaves BIRD's table
// and frees its address. Each step logs its times and counts.
func TestL4LBDataPath(t *testing.T) {
	c := k8stest.Start(t)
	l := newE2ELab(t)
	cs := c.Client(t)
	ns := c.Namespace(t)
	grantController(t, cs, ns)
	l.createNodes(cs)
	kc := c.Kubeconfig(t)
	for i := range e2eLBs {
		l.startLB(i, lbConfig(i, l.e2eController(kc, ns)))
	}
	e := &e2eSteps{lab: l, cs: cs, ns: ns}
	t.Logf("both l4lb started; BIRD's sessions with them up %v later", l.awaitSessions().Round(time.Millisecond))
	for _, step := range []struct {
		name string
		fn   func(t *testing.T)
	}{{"File", e.file}, {"Cluster", e.cluster}, {"Local", e.local}, {"NodesLeave", e.nodesLeave}, {"GUE", e.gue}, {"Fleet", e.fleet}} {
		if !t.Run(step.name, step.fn) {
			return // the next steps start from this one's end
		}
	}
}

// e2eSteps is TestL4LBDataPath's state across its steps.
type e2eSteps struct {
	lab *e2eLab
	cs  kubernetes.Interface
	ns  string
	web netip.AddrPort // the Cluster Service's VIP
	loc netip.AddrPort // the Local Service's
}

func (e *e2eSteps) svcName(svc string) string { return "k8s/" + e.ns + "/" + svc + "/http" }

// file: the service of l4lb's file, beside the controller's, is announced
// by both load balancers, and 300 connections from the client, spread by
// the router's ECMP route over both, reach the nodes the table and
// FlowHash predict.
func (e *e2eSteps) file(t *testing.T) {
	l := e.lab
	l.t = t
	routed := l.awaitPaths(e2eFileVIP.Addr(), []int{0, 1}, 10*time.Second, "started")
	tab := l.nodeTable(0, 1, 2, 3)
	l.converge("file", tab, 5*time.Second, "started")
	before := l.inserts()
	per, _ := l.connect(tab, e2eFileVIP, e2ePorts(19000, 300), false, "file")
	after := l.inserts()
	for i := range after {
		if after[i] == before[i] {
			t.Errorf("load balancer %d tracked none of the 300 connections: ECMP did not spread them", i)
		}
	}
	if len(per) != e2eNodes {
		t.Errorf("300 connections reached %v, want all %d nodes", per, e2eNodes)
	}
	t.Logf("the file's service: routed through both load balancers %v after the sessions were up; 300 connections at their predicted nodes %v, tracked per load balancer %v",
		routed.Round(time.Millisecond), per, []uint64{after[0] - before[0], after[1] - before[1]})
}

// cluster: a Service with externalTrafficPolicy Cluster gets an address,
// both load balancers announce it and program the table of the four
// nodes, and 300 connections reach the nodes it predicts, through both.
func (e *e2eSteps) cluster(t *testing.T) {
	l := e.lab
	l.t = t
	createLB(t, e.cs, e.ns, "web", false, nil)
	created := time.Now()
	var inStatus time.Duration
	e.web, inStatus = awaitVIP(t, e.cs, e.ns, "web", 5*time.Second)
	routed := l.awaitPaths(e.web.Addr(), []int{0, 1}, 10*time.Second, "web created")
	tab := l.nodeTable(0, 1, 2, 3)
	conv := l.converge(e.svcName("web"), tab, 5*time.Second, "web created")
	before := l.inserts()
	per, _ := l.connect(tab, e.web, e2ePorts(20000, 300), false, "web")
	after := l.inserts()
	for i := range after {
		if after[i] == before[i] {
			t.Errorf("load balancer %d tracked none of the 300 connections: ECMP did not spread them", i)
		}
	}
	if len(per) != e2eNodes {
		t.Errorf("300 connections reached %v, want all %d nodes", per, e2eNodes)
	}
	t.Logf("Service web (Cluster) created: %v in its status %v later, BIRD's and the kernel's route through both load balancers %v after that, both tables of the 4 nodes %v after that (%v after the create); 300 connections at their predicted nodes %v, tracked per load balancer %v",
		e.web.Addr(), inStatus.Round(time.Millisecond), routed.Round(time.Millisecond), conv.Round(time.Millisecond),
		time.Since(created).Round(time.Millisecond), per, []uint64{after[0] - before[0], after[1] - before[1]})
}

// local: a Service with externalTrafficPolicy Local sends only to the
// nodes with a ready endpoint (the others are Down in a table of every
// node); an endpoint moving to another node moves exactly the slots of
// the node it left and of the node it reached.
func (e *e2eSteps) local(t *testing.T) {
	l := e.lab
	l.t = t
	l.putNodeSlice(e.cs, e.ns, "loc", 0, 1)
	createLB(t, e.cs, e.ns, "loc", true, nil)
	var inStatus time.Duration
	e.loc, inStatus = awaitVIP(t, e.cs, e.ns, "loc", 5*time.Second)
	routed := l.awaitPaths(e.loc.Addr(), []int{0, 1}, 10*time.Second, "loc created")
	every := []int{0, 1, 2, 3}
	tab := l.nodeTableDown(every, 2, 3)
	l.converge(e.svcName("loc"), tab, 5*time.Second, "loc created")
	ports := e2ePorts(21000, 300)
	per, _ := l.connect(tab, e.loc, ports, false, "loc")
	if len(per) != 2 || per[l.nodes[0].name] == 0 || per[l.nodes[1].name] == 0 {
		t.Errorf("300 connections to the Local Service reached %v, want nodes 0 and 1 only", per)
	}
	t.Logf("Service loc (Local, endpoints on nodes 0 and 1): %v in its status after %v, routed %v after that; 300 connections at their predicted nodes %v",
		e.loc.Addr(), inStatus.Round(time.Millisecond), routed.Round(time.Millisecond), per)

	// The endpoint on node 1 moves to node 2.
	l.putNodeSlice(e.cs, e.ns, "loc", 0, 2)
	after := l.nodeTableDown(every, 1, 3)
	conv := l.converge(e.svcName("loc"), after, 10*time.Second, "endpoint moved")
	gone, come := l.nodes[1].ip.String(), l.nodes[2].ip.String()
	m := moved(tab, after, gone, come)
	if m.others != 0 {
		t.Errorf("the endpoint moved from node 1 to 2: slots moved %+v, want node 1's and node 2's only", m)
	}
	per2, _ := l.connect(after, e.loc, ports, false, "loc, endpoint moved")
	movedConns := 0
	for _, p := range ports {
		was, is := l.predict(tab, e.loc, p), l.predict(after, e.loc, p)
		if was == is {
			continue
		}
		movedConns++
		if was != l.nodes[1].name && is != l.nodes[2].name {
			t.Errorf("port %d moved from %s to %s: neither node 1's flow nor to node 2", p, was, is)
		}
	}
	if per2[l.nodes[1].name] != 0 || per2[l.nodes[3].name] != 0 {
		t.Errorf("after the move 300 connections reached %v, want nodes 0 and 2 only", per2)
	}
	t.Logf("the endpoint moved from node 1 to node 2: both tables followed %v after the EndpointSlice's update; of %d slots, node 1's %d moved, node 2 took %d of node 0's, %d others moved; the same 300 source ports: %d moved, each from node 1 or to node 2, %v",
		conv.Round(time.Millisecond), tab.Size(), m.gone, m.come, m.others, movedConns, per2)
	e.healthz(t, after, l.nodeTableDown(every, 0, 1, 3))
}

// healthz: node 0's kube-proxy answers 503 on the healthCheckNodePort
// (no local endpoint, by its count) while the EndpointSlice still lists
// one there: l4lb's health check takes the node down, and exactly its
// slots move; it answers 200 again, and gets exactly its slots back.
func (e *e2eSteps) healthz(t *testing.T, tab, down *maglev.Table) {
	l := e.lab
	n0 := l.nodes[0]
	n0.local.Store(0)
	conv := l.converge(e.svcName("loc"), down, 5*time.Second, "node 0's /healthz 503")
	if m := moved(tab, down, n0.ip.String(), ""); m.others != 0 || m.come != 0 {
		t.Errorf("node 0 down by its health check: slots moved %+v, want only its own", m)
	}
	per, _ := l.connect(down, e.loc, e2ePorts(21500, 100), false, "node 0 down")
	if per[l.nodes[2].name] != 100 {
		t.Errorf("node 0 down by its health check: 100 connections reached %v, want node 2 only", per)
	}
	n0.local.Store(1)
	back := l.converge(e.svcName("loc"), tab, 5*time.Second, "node 0's /healthz 200 again")
	t.Logf("node 0's /healthz 503 (the EndpointSlice unchanged): both tables without exactly its slots %v later (health checks every 200 ms, fall 2), 100 connections %v; 200 again: its slots back %v later",
		conv.Round(time.Millisecond), per, back.Round(time.Millisecond))
}

// nodesLeave: a node labelled exclude-from-external-load-balancers
// leaves the Cluster Service (a change of its nodes: its slots move, and
// the few others Maglev's rebuild moves); a node NotReady is Down in it,
// and exactly its slots move.
func (e *e2eSteps) nodesLeave(t *testing.T) {
	l := e.lab
	l.t = t
	name := e.svcName("web")
	all := l.nodeTable(0, 1, 2, 3)
	ports := e2ePorts(22000, 300)
	for _, c := range []struct {
		what           string
		node           int
		ready, exclude bool
		tab            *maglev.Table
		others         int // most slots of other nodes that may move
	}{
		{"node 3 labelled " + e2eExclude, 3, true, true, l.nodeTable(0, 1, 2), all.Size() / 100},
		{"node 2 NotReady", 2, false, false, l.nodeTableDown([]int{0, 1, 2, 3}, 2), 0},
	} {
		l.setNode(e.cs, l.nodes[c.node], c.ready, c.exclude)
		tab := c.tab
		conv := l.converge(name, tab, 10*time.Second, c.what)
		m := moved(all, tab, l.nodes[c.node].ip.String(), "")
		if m.others > c.others {
			t.Errorf("%s: slots moved %+v, over %d of %d not the node's", c.what, m, c.others, all.Size())
		}
		per, _ := l.connect(tab, e.web, ports, false, c.what)
		if per[l.nodes[c.node].name] != 0 {
			t.Errorf("%s: 300 connections reached %v", c.what, per)
		}
		t.Logf("%s: both tables without it %v after the Node's update; of %d slots its %d moved, and %d others; 300 connections at their predicted nodes %v",
			c.what, conv.Round(time.Millisecond), all.Size(), m.gone, m.others, per)
		l.setNode(e.cs, l.nodes[c.node], true, false)
		l.converge(name, all, 10*time.Second, c.what+", back")
	}
}

// gue: a Service whose annotation l4lb.maglevlb.io/forward asks for gue,
// over the file's l2: l4lb decap runs on each node (as the DaemonSet of
// deploy/ does), decapsulates, and 300 connections reach the nodes the
// table predicts.
func (e *e2eSteps) gue(t *testing.T) {
	l := e.lab
	l.t = t
	var vips []string
	for a := e2ePool.Addr(); e2ePool.Contains(a); a = a.Next() {
		vips = append(vips, a.String())
	}
	for _, n := range l.nodes {
		admin := n.ip.String() + ":9181"
		p := startE2EProc(t, "l4lb decap on "+n.name, "ip", "netns", "exec", n.ns, l.bin, "decap", "-iface", "eth0",
			"-vip", strings.Join(vips, ","), "-decap-sources", e2eLBAddr(0)+"/32,"+e2eLBAddr(1)+"/32", "-admin", admin)
		deadline := time.Now().Add(10 * time.Second)
		for e2eDecapped(admin) < 0 {
			if p.exited() || time.Now().After(deadline) {
				t.Fatalf("l4lb decap on %s: no admin API: exited %v: %s", n.name, p.exited(), p.out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	createLB(t, e.cs, e.ns, "tun", false, map[string]string{"l4lb.maglevlb.io/forward": "gue"})
	vip, _ := awaitVIP(t, e.cs, e.ns, "tun", 5*time.Second)
	l.awaitPaths(vip.Addr(), []int{0, 1}, 10*time.Second, "tun created")
	tab := l.nodeTable(0, 1, 2, 3)
	l.converge(e.svcName("tun"), tab, 5*time.Second, "tun created")
	for i := range e2eLBs {
		var st struct {
			Services []struct{ Name, Forward string } `json:"services"`
		}
		if err := l.admin(i, "/debug/maglev", &st); err != nil {
			t.Fatal(err)
		}
		for _, s := range st.Services {
			if s.Name == e.svcName("tun") && s.Forward != "gue" {
				t.Errorf("load balancer %d forwards %s by %s, want gue (the Service's annotation)", i, s.Name, s.Forward)
			}
		}
	}
	per, _ := l.connect(tab, vip, e2ePorts(24000, 300), false, "tun")
	var got []uint64
	for i, n := range l.nodes {
		d := e2eDecapped(n.ip.String() + ":9181")
		got = append(got, uint64(max(d, 0)))
		if per[n.name] > 0 && d <= 0 {
			t.Errorf("node %d took %d connections, and its l4lb decap decapsulated %d packets", i, per[n.name], d)
		}
	}
	t.Logf("Service tun, annotated forward gue: 300 connections at their predicted nodes %v, GUE packets decapsulated per node %v", per, got)
}

// e2eDecapped returns the packets the l4lb decap at admin has
// decapsulated, or -1 if it does not answer.
func e2eDecapped(admin string) int64 {
	resp, err := e2eHTTP.Get("http://" + admin + "/debug/maglev")
	if err != nil {
		return -1
	}
	defer func() { _ = resp.Body.Close() }()
	var st struct {
		Stats struct {
			Decapsulated int64 `json:"decapsulated"`
		} `json:"stats"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return -1
	}
	return st.Stats.Decapsulated
}

// holder returns the holder of the controllers' Lease: l4lb's identity,
// its host name (lbI), "_" and a random suffix.
func (e *e2eSteps) holder(t *testing.T) string {
	t.Helper()
	lease, err := e.cs.CoordinationV1().Leases(e.ns).Get(t.Context(), "l4lb", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// fleet: the leader SIGKILLed, the other takes over allocation (a new
// Service gets an address), no VIP in status moves, and long-lived
// connections through both carry on; a Service deleted leaves BIRD's
// table, and its address is free again.
func (e *e2eSteps) fleet(t *testing.T) {
	l := e.lab
	l.t = t
	_, conns := l.connect(l.nodeTable(0, 1, 2, 3), e.web, e2ePorts(23000, 60), true, "long-lived")
	pp := startE2EPumps(conns)
	defer pp.close()
	before := statusIPs(t, e.cs, e.ns)
	holder := e.holder(t)
	leader := -1
	for i := range e2eLBs {
		if strings.HasPrefix(holder, fmt.Sprintf("lb%d_", i)) {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("the Lease's holder %q names neither load balancer (host names lb0 and lb1)", holder)
	}
	other := 1 - leader
	time.Sleep(300 * time.Millisecond)
	ins := l.inserts()
	killed := time.Now()
	l.kill(leader)
	left := l.awaitPaths(e.web.Addr(), []int{other}, 5*time.Second, "leader killed")
	time.Sleep(time.Second)
	survived := l.inserts()[other] - ins[other]
	if n, err := pp.failed(); n > 0 {
		t.Fatalf("the leader killed: %d of %d long-lived connections failed; %v", n, len(conns), err)
	}
	if survived == 0 {
		t.Errorf("no connection moved to load balancer %d when %d was killed", other, leader)
	}

	createLB(t, e.cs, e.ns, "after", false, nil)
	vip, took := awaitVIP(t, e.cs, e.ns, "after", 30*time.Second)
	l.awaitPaths(vip.Addr(), []int{other}, 10*time.Second, "a Service after the leader's death")
	if h := e.holder(t); !strings.HasPrefix(h, fmt.Sprintf("lb%d_", other)) {
		t.Errorf("after the takeover the Lease's holder is %q, want load balancer %d's", h, other)
	}
	now := statusIPs(t, e.cs, e.ns)
	for svc, ip := range before {
		if now[svc] != ip {
			t.Errorf("Service %s's VIP moved from %s to %s when the leader died", svc, ip, now[svc])
		}
	}
	if n, err := pp.failed(); n > 0 {
		t.Fatalf("after the takeover: %d of %d long-lived connections failed; %v", n, len(conns), err)
	}
	lines := pp.lines.Load()
	pp.close()
	t.Logf("leader l4lb %d SIGKILLed: BIRD and the kernel routed through %d only %v later; %d of %d long-lived connections kept working (%d lines echoed), %d flows new to load balancer %d; a new Service got %v %v after its create (%v after the kill); no VIP in status moved %v",
		leader, other, left.Round(time.Millisecond), len(conns), len(conns), lines, survived, other, vip.Addr(), took.Round(time.Millisecond),
		time.Since(killed).Round(time.Millisecond), now)

	// A Service deleted: its route leaves BIRD, its l4lb service goes, its
	// address is free for a Service that asks for it.
	deleted := time.Now()
	if err := e.cs.CoreV1().Services(e.ns).Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	withdrawn := l.awaitPaths(e.web.Addr(), nil, 10*time.Second, "web deleted")
	var st e2eStatus
	if err := l.admin(other, "/debug/maglev", &st); err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Services {
		if s.Name == e.svcName("web") {
			t.Errorf("web deleted: l4lb %d still serves %s (%s)", other, s.Name, s.Service)
		}
	}
	createLB(t, e.cs, e.ns, "reuse", false, map[string]string{"l4lb.maglevlb.io/ip": e.web.Addr().String()})
	got, _ := awaitVIP(t, e.cs, e.ns, "reuse", 5*time.Second)
	if got != e.web {
		t.Errorf("a Service asking for the deleted web's %v got %v", e.web.Addr(), got.Addr())
	}
	t.Logf("Service web deleted: BIRD's and the kernel's route withdrawn %v after the delete; a Service asking for its address got it %v after the delete",
		withdrawn.Round(time.Millisecond), time.Since(deleted).Round(time.Millisecond))
}
