package xdpmaglev

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestVLAN: the client's IPv4 frames leave it tagged with VLAN 5 (a tc
// program pushes the tag). Where the tag stays in the frame (the bridge's
// port toward the load balancer inserts it, as a NIC with receive VLAN
// offload off leaves it), the program sees it and passes the frame
// (pass_vlan): a tagged frame is not served as if it were on the
// device's untagged segment, and the connection fails. Where the tag
// travels beside the frame (the veth's default, as a NIC with receive
// VLAN offload on strips it), the program sees an untagged frame and
// serves it: the limit docs/xdp.md ("Limits") states.
func TestVLAN(t *testing.T) {
	e := newE2E(t, 2)
	e.set(t, 0, 1)
	push, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.SchedCLS,
		License: "MIT",
		Instructions: asm.Instructions{
			// if (skb->protocol == htons(ETH_P_IP)) bpf_skb_vlan_push(skb, htons(ETH_P_8021Q), 5);
			asm.Mov.Reg(asm.R6, asm.R1),
			asm.LoadMem(asm.R2, asm.R1, 16, asm.Word), // __sk_buff.protocol
			asm.JNE.Imm(asm.R2, htons(0x0800), "out"),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Imm(asm.R2, htons(0x8100)),
			asm.Mov.Imm(asm.R3, 5),
			asm.FnSkbVlanPush.Call(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), // TC_ACT_OK
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = push.Close() })
	l, err := xdptest.In(e.client, func() (link.Link, error) {
		ifc, err := net.InterfaceByName("eth0")
		if err != nil {
			return nil, err
		}
		return link.AttachTCX(link.TCXOptions{Program: push, Interface: ifc.Index, Attach: ebpf.AttachTCXEgress})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	dial := func() error {
		c, err := xdptest.In(e.client, func() (net.Conn, error) {
			d := net.Dialer{Timeout: time.Second}
			return d.Dial("tcp4", e.vip.String())
		})
		if err == nil {
			_ = c.Close()
		}
		return err
	}

	e.exec(e.sw, "ethtool", "-K", "p-lb", "txvlan", "off")
	before := counters(t, e.lb)
	if err := dial(); err == nil {
		t.Error("tag in the frame: a connection through the VIP succeeded")
	}
	d := delta(before, counters(t, e.lb))
	if d["pass_vlan"] == 0 || d["tx"] != 0 || d["conntrack_miss"] != 0 {
		t.Errorf("tag in the frame: counters %v, want pass_vlan and nothing forwarded", d)
	}

	e.exec(e.sw, "ethtool", "-K", "p-lb", "txvlan", "on")
	before = counters(t, e.lb)
	if err := dial(); err != nil {
		t.Errorf("tag beside the frame: %v", err)
	}
	d = delta(before, counters(t, e.lb))
	if d["pass_vlan"] != 0 || d["tx"] == 0 {
		t.Errorf("tag beside the frame: counters %v, want the frames forwarded, none passed as vlan", d)
	}
}

// htons is the immediate operand that compares equal to a 16-bit field
// in network byte order loaded on this machine.
func htons(v uint16) int32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return int32(binary.NativeEndian.Uint16(b[:]))
}
