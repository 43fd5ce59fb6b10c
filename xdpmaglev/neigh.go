//go:build linux

package xdpmaglev

import (
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

// resolveWait bounds how long resolve and prime wait, in all, for the
// kernel to resolve the addresses it did not know: on a segment a host
// answers ARP or neighbour discovery within a millisecond, and one that
// does not answer is out of service until the refresh finds it resolved,
// so no update waits long for one (docs/xdp.md, "Unresolved backends").
const resolveWait = 250 * time.Millisecond

// resolve returns the hardware addresses of addrs that the neighbour
// table has, by address. With wait, it asks the kernel to resolve the
// others (as "ip neigh replace ... use" does: an ARP request or a
// neighbour solicitation, all at once) and waits up to resolveWait in all
// for the answers; without, it asks and returns at once.
func (n *neighbours) resolve(wait bool, addrs ...netip.Addr) (map[netip.Addr]net.HardwareAddr, error) {
	deadline := time.Now().Add(resolveWait)
	asked := false
	for {
		known, err := n.all()
		if err != nil {
			return nil, fmt.Errorf("xdpmaglev: reading the neighbour table: %w", err)
		}
		var missing []netip.Addr
		for _, a := range addrs {
			if known[a] == nil {
				missing = append(missing, a)
			}
		}
		if len(missing) == 0 || (asked && (!wait || time.Now().After(deadline))) {
			return known, nil
		}
		if !asked {
			asked = true
			for _, a := range missing {
				family := netlink.FAMILY_V4
				if a.Is6() {
					family = netlink.FAMILY_V6
				}
				_ = n.h.NeighSet(&netlink.Neigh{ // best effort: an address not asked for stays unresolved, and the refresh asks again
					LinkIndex: n.ifindex,
					Family:    family,
					IP:        net.IP(a.AsSlice()),
					State:     netlink.NUD_INCOMPLETE,
					Flags:     netlink.NTF_USE,
				})
			}
			if !wait {
				continue // one more read: an answer may be there already
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// prime asks the kernel to resolve the next hop toward each of addrs (the
// gateway of its route, or the address on a connected route), and waits
// up to resolveWait in all for them, so that the program's bpf_fib_lookup
// finds a neighbour entry for the first packets. It is best effort: a next
// hop still unresolved is the program's no_neighbor count, and a missing
// route its no_route count.
func (n *neighbours) prime(addrs ...netip.Addr) {
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
		if len(hops) > 0 {
			time.Sleep(20 * time.Millisecond)
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
