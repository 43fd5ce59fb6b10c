package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// routedNet is the network of the tests of l4lb behind a router, its
// addresses in 198.18.0.0/15:
//
//	client  198.18.1.2/24, its default route via the router
//	router  198.18.1.1/24 to the client, 198.18.0.1/24 on a bridge
//	        (br0) to the load balancers and the backends; forwarding
//
// Its namespaces are named TAGNAME-PID, and go at the end of the test;
// each veth has checksum offload off on both ends (a packet that XDP
// encapsulates loses the note that its checksum is still to be filled
// in).
type routedNet struct {
	t              *testing.T // the (sub)test the methods fail
	top            *testing.T // the test: what outlives a subtest is cleaned up with it
	tag, suffix    string
	router, client string        // namespaces
	pass           *ebpf.Program // XDP_PASS, for the bridge's ports (attachPass)
}

// newRoutedNet builds the router, its bridge and the client.
func newRoutedNet(t *testing.T, tag string) *routedNet {
	need(t)
	if _, err := exec.LookPath("ethtool"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("ethtool is missing: install it (apt-get install ethtool)")
		}
		t.Skip("ethtool is missing: install it (apt-get install ethtool)")
	}
	n := &routedNet{t: t, top: t, tag: tag, suffix: fmt.Sprint(os.Getpid())}
	n.router = n.addNS("rt")
	n.sysctl(n.router, "net.ipv4.ip_forward", "1")
	ip(t, "-n", n.router, "link", "add", "br0", "type", "bridge")
	ip(t, "-n", n.router, "addr", "add", "198.18.0.1/24", "dev", "br0")
	ip(t, "-n", n.router, "link", "set", "br0", "up")
	n.client = n.addNS("cl")
	n.link(n.client, "r-cl", "198.18.1.2/24", false)
	ip(t, "-n", n.router, "addr", "add", "198.18.1.1/24", "dev", "r-cl")
	ip(t, "-n", n.client, "route", "add", "default", "via", "198.18.1.1")
	var err error
	n.pass, err = ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}}) // XDP_PASS
	if err != nil {
		t.Fatalf("loading an XDP_PASS program: %v", err)
	}
	t.Cleanup(func() { _ = n.pass.Close() })
	return n
}

func (n *routedNet) addNS(name string) string {
	ns := fmt.Sprintf("%s%s-%s", n.tag, name, n.suffix)
	ip(n.t, "netns", "add", ns)
	n.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() }) // best effort
	ip(n.t, "-n", ns, "link", "set", "lo", "up")
	return ns
}

// link joins ns to the router by a veth pair, eth0 in ns with addr, dev
// in the router's namespace, enslaved to br0 if bridged.
func (n *routedNet) link(ns, dev, addr string, bridged bool) {
	ip(n.t, "-n", n.router, "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns)
	ip(n.t, "-n", ns, "addr", "add", addr, "dev", "eth0")
	if bridged {
		ip(n.t, "-n", n.router, "link", "set", dev, "master", "br0")
	}
	ip(n.t, "-n", n.router, "link", "set", dev, "up")
	ip(n.t, "-n", ns, "link", "set", "eth0", "up")
	for _, at := range [][2]string{{ns, "eth0"}, {n.router, dev}} {
		if out, err := exec.Command("ip", "netns", "exec", at[0], "ethtool", "-K", at[1], "tx", "off").CombinedOutput(); err != nil {
			n.t.Fatalf("ethtool: %v: %s", err, out)
		}
	}
}

func (n *routedNet) sysctl(ns, key, value string) {
	n.t.Helper()
	if out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-qw", key+"="+value).CombinedOutput(); err != nil {
		n.t.Fatalf("sysctl %s: %v: %s", key, err, out)
	}
}

// attachPass attaches the XDP_PASS program to the router's port dev:
// XDP_TX on a veth (l4lb's, a decapsulator's second hop) needs a program
// on its peer.
func (n *routedNet) attachPass(dev string) { attachXDP(n.t, n.router, dev, n.pass) }

// attachXDP attaches prog to dev in namespace ns, natively, until the end
// of the test.
func attachXDP(t *testing.T, ns, dev string, prog *ebpf.Program) {
	t.Helper()
	l, err := inNS(ns, func() (link.Link, error) {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return nil, err
		}
		return link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index, Flags: link.XDPDriverMode})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
}
