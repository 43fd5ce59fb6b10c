package xdpmaglev

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netns"
)

// A testNet is a set of network namespaces joined by veth pairs to a
// bridge in a namespace of its own, addressed from 198.18.0.0/15 (the
// benchmarking range) and joined to nothing else. Every name carries the
// test process's id, so runs do not collide; everything is removed at the
// end of the test, on failure too.
type testNet struct {
	t      testing.TB
	suffix string
	sw     string // the bridge's namespace
}

// needNet skips (fails under CI=true) without root, BPF, ip or ethtool.
func needNet(t testing.TB) {
	t.Helper()
	needBPF(t)
	for _, tool := range []string{"ip", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			msg := fmt.Sprintf("%s is missing: install iproute2 and ethtool (apt-get install iproute2 ethtool)", tool)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

func newTestNet(t testing.TB, tag string) *testNet {
	needNet(t)
	sweepStale(tag)
	n := &testNet{t: t, suffix: fmt.Sprintf("%s%d", tag, os.Getpid())}
	n.sw = n.addNS("sw")
	// With br_netfilter loaded, a bridge hands IPv4 to iptables, which
	// drops malformed packets before they reach a program: off here.
	for _, f := range []string{"bridge-nf-call-iptables", "bridge-nf-call-ip6tables", "bridge-nf-call-arptables"} {
		// Best effort: without br_netfilter the setting does not exist.
		_ = exec.Command("ip", "netns", "exec", n.sw, "sh", "-c", "echo 0 > /proc/sys/net/bridge/"+f+" 2>/dev/null").Run()
	}
	n.ip(n.sw, "link", "add", "br0", "type", "bridge")
	n.ip(n.sw, "link", "set", "br0", "up")
	return n
}

// sweepStale deletes the namespaces a test net of this tag left behind
// when its process was killed before its cleanups ran (a test binary that
// times out panics without running them): NAME-TAGPID, with no process
// PID running.
func sweepStale(tag string) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		_, rest, ok := strings.Cut(f[0], "-"+tag)
		pid, err := strconv.Atoi(rest)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // its test is running
		}
		_ = exec.Command("ip", "netns", "del", f[0]).Run() // best effort
	}
}

// addNS creates namespace name-suffix, with lo up.
func (n *testNet) addNS(name string) string {
	ns := name + "-" + n.suffix
	n.run("ip", "netns", "add", ns)
	n.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() }) // best effort
	n.ip(ns, "link", "set", "lo", "up")
	// No duplicate address detection: while an interface's link-local
	// address is tentative, the kernel sends no neighbour solicitation
	// it is asked for (it has no source address), and a next hop the
	// load balancer primes resolves a second later.
	for _, dev := range []string{"all", "default"} {
		n.sysctl(ns, "net.ipv6.conf."+dev+".accept_dad", "0")
	}
	return ns
}

// join connects namespace ns to the bridge by a veth pair: eth0 in ns,
// with address addr (a /24 or /64), and port in the bridge's namespace.
func (n *testNet) join(ns, port string, addrs ...string) {
	n.ip(n.sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
	n.ip(n.sw, "link", "set", port, "master", "br0", "up")
	for _, a := range addrs {
		args := []string{"addr", "add", a, "dev", "eth0"}
		if strings.Contains(a, ":") {
			args = append(args, "nodad")
		}
		n.ip(ns, args...)
	}
	n.ip(ns, "link", "set", "eth0", "up")
}

func (n *testNet) ip(ns string, args ...string) {
	n.run("ip", append([]string{"-n", ns}, args...)...)
}

func (n *testNet) exec(ns string, args ...string) {
	n.run("ip", append([]string{"netns", "exec", ns}, args...)...)
}

func (n *testNet) sysctl(ns, key, value string) {
	n.exec(ns, "sh", "-c", fmt.Sprintf("echo %s > /proc/sys/%s", value, strings.ReplaceAll(key, ".", "/")))
}

func (n *testNet) run(name string, args ...string) {
	n.t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		n.t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// in runs fn on a thread of its own in namespace ns. Sockets and links
// created there stay in ns; the thread is discarded after fn.
func in[T any](ns string, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	c := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		var r result
		h, err := netns.GetFromName(ns)
		if err != nil {
			r.err = err
		} else {
			defer func() { _ = h.Close() }()
			if r.err = netns.Set(h); r.err == nil {
				r.v, r.err = fn()
			}
		}
		c <- r
	}()
	r := <-c
	return r.v, r.err
}

// peerPass attaches the program that passes every packet to dev, in
// namespace ns, for the test: XDP_TX on a veth needs an XDP program on its
// peer.
func peerPass(t testing.TB, lb *LB, ns, dev string) {
	t.Helper()
	pass, err := in(ns, func() (link.Link, error) {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return nil, err
		}
		return link.AttachXDP(link.XDPOptions{Program: passProg(t), Interface: ifc.Index, Flags: link.XDPDriverMode})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pass.Close() })
}
