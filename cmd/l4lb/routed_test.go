package main

import (
	"os/exec"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
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
	tag            string
	router, client string        // namespaces
	pass           *ebpf.Program // XDP_PASS, for the bridge's ports (attachPass)
}

// newRoutedNet builds the router, its bridge and the client.
func newRoutedNet(t *testing.T, tag string) *routedNet {
	xdptest.Need(t, "ethtool")
	n := &routedNet{t: t, top: t, tag: tag}
	n.router = xdptest.NewNS(n.t, n.tag+"rt")
	xdptest.Sysctl(n.t, n.router, "net.ipv4.ip_forward", "1")
	xdptest.IP(t, "-n", n.router, "link", "add", "br0", "type", "bridge")
	xdptest.IP(t, "-n", n.router, "addr", "add", "198.18.0.1/24", "dev", "br0")
	xdptest.IP(t, "-n", n.router, "link", "set", "br0", "up")
	n.client = xdptest.NewNS(n.t, n.tag+"cl")
	n.link(n.client, "r-cl", "198.18.1.2/24", false)
	xdptest.IP(t, "-n", n.router, "addr", "add", "198.18.1.1/24", "dev", "r-cl")
	xdptest.IP(t, "-n", n.client, "route", "add", "default", "via", "198.18.1.1")
	var err error
	n.pass, err = ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}}) // XDP_PASS
	if err != nil {
		t.Fatalf("loading an XDP_PASS program: %v", err)
	}
	t.Cleanup(func() { _ = n.pass.Close() })
	return n
}

// link joins ns to the router by a veth pair, eth0 in ns with addr, dev
// in the router's namespace, enslaved to br0 if bridged.
func (n *routedNet) link(ns, dev, addr string, bridged bool) {
	xdptest.IP(n.t, "-n", n.router, "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns)
	xdptest.IP(n.t, "-n", ns, "addr", "add", addr, "dev", "eth0")
	if bridged {
		xdptest.IP(n.t, "-n", n.router, "link", "set", dev, "master", "br0")
	}
	xdptest.IP(n.t, "-n", n.router, "link", "set", dev, "up")
	xdptest.IP(n.t, "-n", ns, "link", "set", "eth0", "up")
	for _, at := range [][2]string{{ns, "eth0"}, {n.router, dev}} {
		if out, err := exec.Command("ip", "netns", "exec", at[0], "ethtool", "-K", at[1], "tx", "off").CombinedOutput(); err != nil {
			n.t.Fatalf("ethtool: %v: %s", err, out)
		}
	}
}

// attachPass attaches the XDP_PASS program to the router's port dev:
// XDP_TX on a veth (l4lb's, a decapsulator's second hop) needs a program
// on its peer.
func (n *routedNet) attachPass(dev string) { xdptest.AttachXDP(n.t, n.router, dev, n.pass) }
