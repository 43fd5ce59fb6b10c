package xdpmaglev

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// A testNet is a set of network namespaces joined by veth pairs to a
// bridge in a namespace of its own, addressed from 198.18.0.0/15 (the
// benchmarking range) and joined to nothing else. Every name carries the
// test process's id, so runs do not collide; everything is removed at the
// end of the test, on failure too (xdptest.NewNS).
type testNet struct {
	t   testing.TB
	tag string // in every namespace's name: NAME-TAG-PID
	sw  string // the bridge's namespace
}

// needNet skips (fails under CI=true) without root, BPF, ip or ethtool.
func needNet(t testing.TB) {
	t.Helper()
	xdptest.Need(t, "ethtool")
	needBPF(t)
}

func newTestNet(t testing.TB, tag string) *testNet {
	needNet(t)
	n := &testNet{t: t, tag: tag}
	n.sw = n.addNS("sw")
	// With br_netfilter loaded, a bridge hands IPv4 to iptables, which
	// drops malformed packets before they reach a program: off here.
	for _, f := range []string{"bridge-nf-call-iptables", "bridge-nf-call-ip6tables", "bridge-nf-call-arptables"} {
		// Best effort: without br_netfilter the setting does not exist.
		_ = exec.Command("ip", "netns", "exec", n.sw, "sh", "-c", "echo 0 > /proc/sys/net/bridge/"+f+" 2>/dev/null").Run()
	}
	xdptest.IP(t, "-n", n.sw, "link", "add", "br0", "type", "bridge")
	xdptest.IP(t, "-n", n.sw, "link", "set", "br0", "up")
	return n
}

// addNS creates namespace name-tag-PID (xdptest.NewNS), with lo up and
// no duplicate address detection.
func (n *testNet) addNS(name string) string {
	ns := xdptest.NewNS(n.t, name+"-"+n.tag)
	// No duplicate address detection: while an interface's link-local
	// address is tentative, the kernel sends no neighbour solicitation
	// it is asked for (it has no source address), and a next hop the
	// load balancer primes resolves a second later.
	for _, dev := range []string{"all", "default"} {
		xdptest.Sysctl(n.t, ns, "net.ipv6.conf."+dev+".accept_dad", "0")
	}
	return ns
}

// join connects namespace ns to the bridge by a veth pair: eth0 in ns,
// with address addr (a /24 or /64), and port in the bridge's namespace.
func (n *testNet) join(ns, port string, addrs ...string) {
	xdptest.Veth(n.t, n.sw, port, ns, "eth0")
	xdptest.IP(n.t, "-n", n.sw, "link", "set", port, "master", "br0")
	for _, a := range addrs {
		args := []string{"-n", ns, "addr", "add", a, "dev", "eth0"}
		if strings.Contains(a, ":") {
			args = append(args, "nodad")
		}
		xdptest.IP(n.t, args...)
	}
}

// exec runs args (a command and its arguments) in namespace ns.
func (n *testNet) exec(ns string, args ...string) {
	n.t.Helper()
	args = append([]string{"netns", "exec", ns}, args...)
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		n.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// peerPass attaches the program that passes every packet to dev, in
// namespace ns, for the test: XDP_TX on a veth needs an XDP program on its
// peer.
func peerPass(t testing.TB, lb *LB, ns, dev string) {
	t.Helper()
	xdptest.AttachXDP(t, ns, dev, passProg(t))
}
