//go:build linux

package xdpmaglev

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// neighbours reads the neighbour table (ARP for IPv4, NDP for IPv6) of
// one interface, in the network namespace Load ran in.
type neighbours struct {
	h       *netlink.Handle
	ifindex int
}

func newNeighbours(ifindex int) (*neighbours, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("xdpmaglev: netlink: %w", err)
	}
	return &neighbours{h: h, ifindex: ifindex}, nil
}

func (n *neighbours) close() { n.h.Close() }

// resolveWait bounds how long resolve waits for the kernel to resolve an
// address it did not know.
const resolveWait = 2 * time.Second

// resolve returns addr's hardware address from the neighbour table. If
// the table has no usable entry, it asks the kernel to resolve addr (as
// "ip neigh replace ... use" does: an ARP request or a neighbour
// solicitation) and waits up to resolveWait for the answer, or until ctx
// is done (its error).
func (n *neighbours) resolve(ctx context.Context, addr netip.Addr) (net.HardwareAddr, error) {
	family := netlink.FAMILY_V4
	if addr.Is6() {
		family = netlink.FAMILY_V6
	}
	deadline := time.Now().Add(resolveWait)
	asked := false
	for {
		list, err := n.h.NeighList(n.ifindex, family)
		if err != nil {
			return nil, fmt.Errorf("xdpmaglev: reading the neighbour table: %w", err)
		}
		for _, e := range list {
			ip, ok := netip.AddrFromSlice(e.IP)
			if !ok || ip.Unmap() != addr || len(e.HardwareAddr) != 6 {
				continue
			}
			if e.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) == 0 {
				return e.HardwareAddr, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w for %v after %v: give Backend.HW, or check that it is on the interface's segment", ErrNoNeighbor, addr, resolveWait)
		}
		if !asked {
			asked = true
			err := n.h.NeighSet(&netlink.Neigh{
				LinkIndex: n.ifindex,
				Family:    family,
				IP:        net.IP(addr.AsSlice()),
				State:     netlink.NUD_INCOMPLETE,
				Flags:     netlink.NTF_USE,
			})
			if err != nil {
				return nil, fmt.Errorf("%w for %v: asking the kernel to resolve it: %v", ErrNoNeighbor, addr, err)
			}
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// sleep waits d, or until ctx is done, and returns ctx's error then.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// prime asks the kernel to resolve the next hop toward each of addrs (the
// gateway of its route, or the address on a connected route), and waits
// up to resolveWait for them all, so that the program's bpf_fib_lookup
// finds a neighbour entry for the first packets. It is best effort: a next
// hop still unresolved is the program's no_neighbor count, and a missing
// route its no_route count. It stops waiting when ctx is done.
func (n *neighbours) prime(ctx context.Context, addrs ...netip.Addr) {
	hops := n.ask(addrs...)
	deadline := time.Now().Add(resolveWait)
	for len(hops) > 0 && time.Now().Before(deadline) {
		known, err := n.all()
		if err != nil {
			return
		}
		for _, hop := range hops {
			if known[hop] != nil {
				hops = slices.DeleteFunc(hops, func(h netip.Addr) bool { return h == hop })
			}
		}
		if len(hops) > 0 && sleep(ctx, 20*time.Millisecond) != nil {
			return
		}
	}
}

// ask asks the kernel, without waiting, to resolve the next hops toward
// addrs that its neighbour table lacks, as "ip neigh replace ... use"
// does, and returns those next hops.
func (n *neighbours) ask(addrs ...netip.Addr) []netip.Addr { return n.request(false, addrs) }

// keep is ask for the next hops toward addrs that the kernel lacks or
// holds stale: a stale entry is confirmed by a unicast probe (or, if the
// next hop no longer answers, fails and is asked again next time).
func (n *neighbours) keep(addrs ...netip.Addr) { n.request(true, addrs) }

func (n *neighbours) request(stale bool, addrs []netip.Addr) []netip.Addr {
	known, _ := n.table()
	var asked, seen []netip.Addr
	for _, addr := range addrs {
		routes, err := n.h.RouteGet(net.IP(addr.AsSlice()))
		if err != nil || len(routes) == 0 {
			continue
		}
		hop := addr
		if gw, ok := netip.AddrFromSlice(routes[0].Gw); ok {
			hop = gw.Unmap()
		}
		if slices.Contains(seen, hop) {
			continue
		}
		seen = append(seen, hop)
		if e, ok := known[hop]; ok && (!stale || e.state&netlink.NUD_STALE == 0) {
			continue
		}
		family := netlink.FAMILY_V4
		if hop.Is6() {
			family = netlink.FAMILY_V6
		}
		_ = n.h.NeighSet(&netlink.Neigh{ // best effort, see prime
			LinkIndex: routes[0].LinkIndex,
			Family:    family,
			IP:        net.IP(hop.AsSlice()),
			State:     netlink.NUD_INCOMPLETE,
			Flags:     netlink.NTF_USE,
		})
		asked = append(asked, hop)
	}
	return asked
}

// addr returns the interface's first global unicast address of the
// family, read in the namespace Load ran in.
func (n *neighbours) addr(v4 bool) (netip.Addr, error) {
	family, name := netlink.FAMILY_V6, "IPv6"
	if v4 {
		family, name = netlink.FAMILY_V4, "IPv4"
	}
	l, err := n.h.LinkByIndex(n.ifindex)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("reading the interface: %w", err)
	}
	list, err := n.h.AddrList(l, family)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("reading the addresses of %s: %w", l.Attrs().Name, err)
	}
	for _, a := range list {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap().IsGlobalUnicast() {
			return ip.Unmap(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("interface %s has no global %s address to encapsulate from: give ServiceOptions.Source", l.Attrs().Name, name)
}

// all returns the usable hardware addresses of the interface's neighbour
// table, IPv4 and IPv6, by address.
func (n *neighbours) all() (map[netip.Addr]net.HardwareAddr, error) {
	t, err := n.table()
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Addr]net.HardwareAddr, len(t))
	for a, e := range t {
		out[a] = e.hw
	}
	return out, nil
}

// neighbour is a usable entry of the neighbour table.
type neighbour struct {
	hw    net.HardwareAddr
	state int // netlink.NUD_*
}

// table returns the usable entries of the interface's neighbour table
// (those with a MAC, neither incomplete nor failed), by address.
func (n *neighbours) table() (map[netip.Addr]neighbour, error) {
	list, err := n.h.NeighList(n.ifindex, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Addr]neighbour, len(list))
	for _, e := range list {
		ip, ok := netip.AddrFromSlice(e.IP)
		if !ok || len(e.HardwareAddr) != 6 || e.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) != 0 {
			continue
		}
		out[ip.Unmap()] = neighbour{e.HardwareAddr, e.State}
	}
	return out, nil
}
