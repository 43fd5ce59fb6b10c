package xdpmaglev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// MaxDecapVIPs is the most VIPs a decapsulator holds (DecapOptions.VIPs).
const MaxDecapVIPs = 256

// DecapOptions configure AttachDecap.
type DecapOptions struct {
	// VIPs are the addresses whose packets are decapsulated: the VIPs of
	// the services this host is a backend of, held on its lo (or
	// delivered by a rule, as kube-proxy's). Required; at most
	// MaxDecapVIPs.
	VIPs []netip.Addr
	// Hosts are the outer destinations accepted: the interface's
	// addresses if empty.
	Hosts []netip.Addr
	// Sources are the outer source addresses trusted: the load
	// balancers' (their ServiceOptions.Source, with its SourceBits),
	// and, with second chance, the other backends'. An IPIP or GUE packet
	// to a host and a VIP from any other source is dropped and counted
	// (DecapStats.Untrusted): whoever could send one would choose the
	// inner source the backend answers. Required; 0.0.0.0/0 and ::/0
	// trust every source, and must be given explicitly.
	Sources []netip.Prefix
	// GUEPort is the UDP port of GUE packets: DefaultGUEPort if 0.
	GUEPort uint16
	// Mode is the attach mode; AttachAuto if zero.
	Mode AttachMode
}

// A Decap is the decapsulator attached to a backend's interface: an XDP
// program that strips the outer header of IPIP and GUE packets addressed
// to one of the host's addresses that carry a packet to one of the VIPs,
// from a trusted source (DecapOptions.Sources), and passes the inner
// packet to the kernel, which delivers it to the VIP
// on lo; the backend answers the client directly. Other packets pass
// unchanged. It needs no kernel module. Its methods are safe for
// concurrent use by multiple goroutines.
type Decap struct {
	objs decapObjects
	link link.Link
	mode AttachMode

	mu  sync.Mutex // guards drv
	drv *driver    // reads the driver's XDP counters; nil without an interface, or once closed
}

// DecapStats are the decapsulator's counters, summed over CPUs.
type DecapStats struct {
	// Decapsulated counts the packets whose outer header was stripped.
	Decapsulated uint64 `json:"decapsulated"`
	// Passed counts the packets passed unchanged: not IPIP or GUE, or not
	// to one of the hosts and a VIP.
	Passed uint64 `json:"passed"`
	// Malformed counts the encapsulated packets to a host whose inner
	// header was cut short or impossible, passed unchanged.
	Malformed uint64 `json:"malformed"`
	// Untrusted counts the encapsulated packets to a host and a VIP from
	// an outer source not in DecapOptions.Sources, dropped.
	Untrusted uint64 `json:"untrusted"`
	// SecondHop counts the packets that named a second hop (second
	// chance) and belonged to no connection of this host: passed on to
	// the second hop. SecondLocal counts those that named one and were
	// decapsulated here (a SYN, a packet of a connection here, not TCP),
	// and SecondNoRoute those that named one this host has no route to
	// (or forwards nothing: net.ipv4.conf.all.forwarding), decapsulated
	// here.
	SecondHop     uint64 `json:"second_hop"`
	SecondLocal   uint64 `json:"second_local"`
	SecondNoRoute uint64 `json:"second_no_route"`
}

// AttachDecap loads the decapsulator and attaches it to the interface
// named iface. It needs CAP_BPF and CAP_NET_ADMIN, and works in the network
// namespace of the calling thread. Bad options return an error wrapping
// ErrOptions or ErrInterface; Close detaches it.
func AttachDecap(iface string, opts DecapOptions) (*Decap, error) {
	if opts.Mode < AttachAuto || opts.Mode > AttachGeneric {
		return nil, fmt.Errorf("%w: Mode %v", ErrOptions, opts.Mode)
	}
	ifc, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrInterface, iface, err)
	}
	if len(opts.Hosts) == 0 {
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrInterface, iface, err)
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					opts.Hosts = append(opts.Hosts, ip.Unmap())
				}
			}
		}
		if len(opts.Hosts) == 0 {
			return nil, fmt.Errorf("%w %q: no address to decapsulate packets to: give DecapOptions.Hosts", ErrInterface, iface)
		}
	}
	d, err := newDecap(opts)
	if err != nil {
		return nil, err
	}
	try := func(flags link.XDPAttachFlags) (link.Link, error) {
		return link.AttachXDP(link.XDPOptions{Program: d.objs.XdpDecap, Interface: ifc.Index, Flags: flags})
	}
	if d.drv, err = newDriver(ifc.Name); err != nil {
		_ = d.objs.Close()
		return nil, err
	}
	if opts.Mode == AttachAuto || opts.Mode == AttachNative {
		if d.link, err = try(link.XDPDriverMode); err == nil {
			d.mode = AttachNative
			return d, nil
		}
		if opts.Mode == AttachNative {
			_ = d.Close()
			return nil, fmt.Errorf("%w: natively to %s: %w", ErrAttach, iface, err)
		}
	}
	if d.link, err = try(link.XDPGenericMode); err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("%w: generically to %s: %w", ErrAttach, iface, err)
	}
	d.mode = AttachGeneric
	return d, nil
}

// newDecap loads the decapsulator, not attached, for opts with Hosts.
func newDecap(opts DecapOptions) (*Decap, error) {
	if len(opts.VIPs) == 0 {
		return nil, fmt.Errorf("%w: DecapOptions.VIPs is empty", ErrOptions)
	}
	if len(opts.VIPs) > MaxDecapVIPs {
		return nil, fmt.Errorf("%w: DecapOptions.VIPs: %d, at most %d", ErrOptions, len(opts.VIPs), MaxDecapVIPs)
	}
	if len(opts.Hosts) == 0 {
		return nil, fmt.Errorf("%w: DecapOptions.Hosts is empty", ErrOptions)
	}
	if len(opts.Sources) == 0 {
		return nil, fmt.Errorf("%w: DecapOptions.Sources is empty: give the load balancers' source prefixes (0.0.0.0/0 and ::/0 trust every source)", ErrOptions)
	}
	for _, p := range opts.Sources {
		if !p.IsValid() || p.Addr().Zone() != "" {
			return nil, fmt.Errorf("%w: DecapOptions.Sources: invalid prefix %v", ErrOptions, p)
		}
	}
	if opts.GUEPort == 0 {
		opts.GUEPort = DefaultGUEPort
	}
	spec, err := loadDecap()
	if err != nil {
		return nil, fmt.Errorf("xdpmaglev: reading the decapsulator: %w", err)
	}
	if err := spec.Variables["gue_port"].Set(netOrder16(opts.GUEPort)); err != nil {
		return nil, fmt.Errorf("xdpmaglev: setting gue_port: %w", err)
	}
	d := &Decap{mode: AttachNone}
	if err := spec.LoadAndAssign(&d.objs, nil); err != nil {
		return nil, fmt.Errorf("xdpmaglev: loading the decapsulator: %w", err)
	}
	put := func(m *ebpf.Map, what string, as []netip.Addr) error {
		for _, a := range as {
			a = a.Unmap()
			if !a.IsValid() {
				return fmt.Errorf("%w: %s: invalid address", ErrOptions, what)
			}
			k := decapAddr{A: addrWords(a), Family: 4}
			if a.Is6() {
				k.Family = 6
			}
			if err := m.Put(k, uint8(1)); err != nil {
				return fmt.Errorf("xdpmaglev: decapsulator %s %v: %w", what, a, err)
			}
		}
		return nil
	}
	if err := errors.Join(put(d.objs.Hosts, "host", opts.Hosts), put(d.objs.Vips, "VIP", opts.VIPs), d.trust(opts.Sources)); err != nil {
		_ = d.objs.Close()
		return nil, err
	}
	return d, nil
}

// trust puts the prefixes ps into the maps of trusted sources, an IPv4
// one (or an IPv4-mapped IPv6 one, unmapped) in sources4, an IPv6 one in
// sources6.
func (d *Decap) trust(ps []netip.Prefix) error {
	for _, p := range ps {
		p = p.Masked()
		var err error
		if a := p.Addr(); a.Is4() || (a.Is4In6() && p.Bits() >= 96) {
			bits := p.Bits()
			if a.Is4In6() {
				bits -= 96
			}
			err = d.objs.Sources4.Put(decapSrc4{Prefixlen: uint32(bits), Addr: addrWords(a.Unmap())[0]}, uint8(1))
		} else {
			err = d.objs.Sources6.Put(decapSrc6{Prefixlen: uint32(p.Bits()), Addr: addrWords(a)}, uint8(1))
		}
		if err != nil {
			return fmt.Errorf("xdpmaglev: decapsulator source %v: %w", p, err)
		}
	}
	return nil
}

// netOrder16 returns the uint16 whose bytes in memory are v in network
// order, as the program compares a packet's port.
func netOrder16(v uint16) uint16 {
	var p [2]byte
	binary.BigEndian.PutUint16(p[:], v)
	return binary.NativeEndian.Uint16(p[:])
}

// Mode returns how the decapsulator is attached.
func (d *Decap) Mode() AttachMode { return d.mode }

// Stats reads the counters: one system call, the CPUs' counters.
func (d *Decap) Stats() (DecapStats, error) {
	var per []decapDecapCpuCounters
	if err := d.objs.DecapCounters.Lookup(uint32(0), &per); err != nil {
		return DecapStats{}, fmt.Errorf("xdpmaglev: reading the decapsulator's counters: %w", err)
	}
	var st DecapStats
	fields := [...]*uint64{ // by enum decap_counter
		decapDecapCounterD_DECAPSULATED:    &st.Decapsulated,
		decapDecapCounterD_PASSED:          &st.Passed,
		decapDecapCounterD_MALFORMED:       &st.Malformed,
		decapDecapCounterD_UNTRUSTED:       &st.Untrusted,
		decapDecapCounterD_SECOND_HOP:      &st.SecondHop,
		decapDecapCounterD_SECOND_LOCAL:    &st.SecondLocal,
		decapDecapCounterD_SECOND_NO_ROUTE: &st.SecondNoRoute,
	}
	_ = [1]struct{}{}[len(fields)-int(decapDecapCounterD_MAX)] // a counter without a field fails to compile
	for _, c := range per {
		for i, p := range fields {
			*p += c.N[i]
		}
	}
	return st, nil
}

// Driver returns the XDP counters of the interface's driver, as LB.Driver
// does: among them the XDP_TX errors of the second hops the decapsulator
// passes on (on a veth whose peer has no XDP program, the driver drops
// them). It returns ErrClosed after Close.
func (d *Decap) Driver() (map[string]uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.drv == nil {
		return nil, ErrClosed
	}
	return d.drv.stats()
}

// Close detaches the decapsulator and frees its maps. Close is idempotent.
func (d *Decap) Close() error {
	d.mu.Lock()
	if d.drv != nil {
		d.drv.close()
		d.drv = nil
	}
	d.mu.Unlock()
	var errs []error
	if d.link != nil {
		if err := d.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("xdpmaglev: detaching the decapsulator: %w", err))
		}
		d.link = nil
	}
	if err := d.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("xdpmaglev: closing the decapsulator: %w", err))
	}
	return errors.Join(errs...)
}
