package xdpmaglev

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/maglevlb/maglev"
)

// SetService makes the load balancer send svc's packets to backends in
// the way opts says (the zero ServiceOptions: ForwardL2, to backends on
// the segment), by the Maglev table maglev.NewWeighted builds with the
// backends' addresses as names, M slots and the default hasher: the table
// Table returns. SetServices sets many services at once.
//
// The update is atomic for the service: the new table is written to a new
// map, which then replaces the old one in one step, so every packet is
// routed by the old table or by the new one, never by a mix. Connection
// tracking keeps each flow on the backend its first packet went to while
// that backend stays in the service (with any weight, 0 included); a
// removed backend's flows are hashed again by the new table.
//
// A ForwardL2 backend's MAC, when not given, is the neighbour table's:
// those the table lacks are asked for all at once, and waited for up to
// 250 ms in all, before the LB's lock is taken, so that no ARP stalls
// Stats, metrics or other services. One still unknown is out of service
// (Unresolved), its slots the others' as maglev.Table.Without computes,
// until the refresh, every second, finds it resolved; then it takes them
// back, and Options.Changed is called. The encapsulating modes
// resolve no backend: the program asks the kernel's routing and neighbour
// tables for each packet's next hop, and a backend with no route, or a
// next hop that does not answer, has its packets dropped and counted
// (Stats.Dropped no_route, no_neighbor) while the others serve.
// SetService asks the kernel to resolve each backend's next hop,
// and waits up to 250 ms in all for them, without failing. A backend of
// the encapsulating modes must be of the VIP's address family.
//
// A backend with Down set is in the table's base and out of service (see
// Backend.Down); if every backend is Down or of weight 0, the table is
// empty and the service's packets are dropped.
//
// Bad input returns an error wrapping ErrService, ErrBackend,
// ErrNoNeighbor, ErrFull or the maglev package's error, and changes
// nothing. An empty backends list (or all weights 0) is valid: the
// service's packets are then dropped, and counted. SetService costs one
// table build (about a millisecond for 1,000 backends at M = 65,537) and a
// write of 8·M bytes to the kernel.
func (lb *LB) SetService(svc Service, backends []Backend, opts ServiceOptions) error {
	p, err := lb.prepare(svc, backends, opts, true)
	if err != nil {
		return err
	}
	return lb.install(p, nil)
}

// prepared is a service's update, checked, its table built and its
// backends resolved: what install takes.
type prepared struct {
	svc        Service
	request    []Backend // the caller's backends, as given: kept for the refresh
	bs         []Backend // request normalized (checkBackends), with the MACs resolved
	full       *maglev.Table
	opts       ServiceOptions
	unresolved []string
}

// prepare checks an update of svc, builds its table and resolves its
// backends, with no lock held; with wait, it waits up to resolveWait for
// the neighbours the kernel is asked to resolve (see resolve and prime).
func (lb *LB) prepare(svc Service, backends []Backend, opts ServiceOptions, wait bool) (prepared, error) {
	p := prepared{svc: svc, request: backends, opts: opts}
	if err := svc.check(); err != nil {
		return prepared{}, err
	}
	if err := lb.serviceOptions(svc, &p.opts); err != nil {
		return prepared{}, err
	}
	var err error
	if p.bs, err = checkBackends(svc, backends, p.opts); err != nil {
		return prepared{}, err
	}
	if p.opts.QUIC != nil {
		if p.opts.QUIC, err = checkQUIC(svc, p.opts.QUIC, p.bs); err != nil {
			return prepared{}, err
		}
	}
	if p.full, err = fullTable(p.bs, p.opts.M); err != nil {
		return prepared{}, fmt.Errorf("xdpmaglev: service %v: %w", svc, err)
	}
	if p.opts.Forward != ForwardL2 {
		if lb.neigh != nil && wait {
			lb.neigh.prime(upAddrs(p.bs)...)
		}
		return p, nil
	}
	if p.unresolved, err = lb.resolveMACs(svc, p.bs, wait); err != nil {
		return prepared{}, err
	}
	return p, nil
}

// checkBackends checks the backends of svc, forwarded as opts says, and
// returns them normalized: each address unmapped, an encapsulating mode's
// with no hardware address.
func checkBackends(svc Service, backends []Backend, opts ServiceOptions) ([]Backend, error) {
	encap := opts.Forward != ForwardL2
	bs := make([]Backend, len(backends))
	seen := make(map[netip.Addr]bool, len(backends))
	for i, b := range backends {
		b.Addr = b.Addr.Unmap()
		if !b.Addr.IsValid() || b.Addr.Zone() != "" {
			return nil, fmt.Errorf("%w %d: invalid address %v", ErrBackend, i, b.Addr)
		}
		if seen[b.Addr] {
			return nil, fmt.Errorf("%w %v: listed twice", ErrBackend, b.Addr)
		}
		seen[b.Addr] = true
		if len(b.HW) != 0 && len(b.HW) != 6 {
			return nil, fmt.Errorf("%w %v: hardware address %v is not 6 bytes", ErrBackend, b.Addr, b.HW)
		}
		if encap && b.Addr.Is4() != svc.VIP.Addr().Unmap().Is4() {
			return nil, fmt.Errorf("%w %v: %v encapsulates IPv4 in IPv4 and IPv6 in IPv6, and the VIP is %v", ErrBackend, b.Addr, opts.Forward, svc.VIP.Addr())
		}
		if encap {
			b.HW = nil
		}
		bs[i] = b
	}
	return bs, nil
}

// resolveMACs fills in the hardware addresses of svc's ForwardL2 backends
// bs that have none and are not Down: the ones the service has, else the
// neighbour table's, all asked for at once, with no lock held (waiting
// with wait, as prepare says). It returns the backends that did not
// resolve: each is out of service (maglev.Table.Without: only its slots
// move, as on every load balancer that sees the same failure) until the
// refresh finds it resolved.
func (lb *LB) resolveMACs(svc Service, bs []Backend, wait bool) ([]string, error) {
	known := lb.knownMACs(svc)
	var need []netip.Addr
	for i := range bs {
		if len(bs[i].HW) != 0 || bs[i].Down {
			continue
		}
		if hw := known[bs[i].Addr]; hw != nil {
			bs[i].HW = hw
			continue
		}
		if lb.neigh == nil {
			return nil, fmt.Errorf("%w for %v: no interface to resolve it on", ErrNoNeighbor, bs[i].Addr)
		}
		need = append(need, bs[i].Addr)
	}
	if len(need) == 0 {
		return nil, nil
	}
	macs, err := lb.neigh.resolve(wait, need...)
	if err != nil {
		return nil, err
	}
	var unresolved []string
	for i := range bs {
		if len(bs[i].HW) != 0 || bs[i].Down {
			continue
		}
		if bs[i].HW = macs[bs[i].Addr]; bs[i].HW == nil {
			unresolved = append(unresolved, bs[i].Addr.String())
		}
	}
	return unresolved, nil
}

// upAddrs returns the addresses of the backends of bs that are not Down.
func upAddrs(bs []Backend) []netip.Addr {
	var out []netip.Addr
	for _, b := range bs {
		if !b.Down {
			out = append(out, b.Addr.Unmap())
		}
	}
	return out
}

// errChangedSince is install's error when the service is no longer at
// the generation it was given.
var errChangedSince = errors.New("xdpmaglev: the service changed since")

// install sets p.svc to the table p.full less the unresolved and the
// Down backends, with p.bs resolved; the Down ones leave the data plane.
// p.request is kept for the refresh. With gen, it does nothing
// (errChangedSince) unless the service is still at that generation.
func (lb *LB) install(p prepared, gen *uint64) error {
	table, up, err := inService(p.svc, p.bs, p.full, p.unresolved)
	if err != nil {
		return err
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.closed {
		return ErrClosed
	}
	if s := lb.services[p.svc]; gen != nil && (s == nil || s.gen != *gen) {
		return errChangedSince // the next refresh looks again
	}
	if err := lb.set(p.svc, table, up, p.opts); err != nil {
		return err
	}
	return lb.record(p)
}

// fullTable returns the table of every backend of bs, Down or not:
// maglev.NewWeighted's of their addresses (unmapped) and weights, of m
// slots.
func fullTable(bs []Backend, m int) (*maglev.Table, error) {
	names := make([]maglev.Backend, len(bs))
	for i, b := range bs {
		names[i] = maglev.Backend{Name: b.Addr.Unmap().String(), Weight: b.Weight}
	}
	return maglev.NewWeighted(names, m, nil)
}

// inService returns the table of full less the unresolved and the Down
// backends of bs, and the backends of bs that are not Down.
func inService(svc Service, bs []Backend, full *maglev.Table, unresolved []string) (*maglev.Table, []Backend, error) {
	up := make([]Backend, 0, len(bs))
	out := slices.Clone(unresolved)
	for _, b := range bs {
		if !b.Down {
			up = append(up, b)
		} else if name := b.Addr.Unmap().String(); !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	table := full
	if len(out) > 0 {
		var err error
		if table, err = full.Without(out...); err != nil {
			return nil, nil, fmt.Errorf("xdpmaglev: service %v: %w", svc, err)
		}
	}
	return table, up, nil
}

// record keeps what the refresh needs of p's install, p.request as the
// caller gave it and p.bs as prepare normalized it, and writes p.bs's
// backends that are out of the data plane (Down, unresolved) to the down
// map, so that an LB that adopts the maps knows the service's whole set.
// lb.mu is held.
func (lb *LB) record(p prepared) error {
	svc, unresolved := p.svc, p.unresolved
	s := lb.services[svc]
	lb.gen++
	s.gen, s.request, s.full, s.unresolved, s.adopted = lb.gen, p.request, p.full, unresolved, nil
	out := map[netip.Addr]maglevOut{}
	for _, b := range p.bs {
		switch {
		case b.Down:
			out[b.Addr] = maglevOut{Weight: b.Weight, Why: uint32(maglevConstsOUT_DOWN)}
		case slices.Contains(unresolved, b.Addr.String()):
			out[b.Addr] = maglevOut{Weight: b.Weight, Why: uint32(maglevConstsOUT_UNRESOLVED)}
		}
	}
	var errs []error
	for a, o := range out {
		if old, ok := s.down[a]; ok && old == o {
			continue
		}
		if err := lb.objs.Down.Put(downKey(s.id, a), o); err != nil {
			errs = append(errs, fmt.Errorf("xdpmaglev: recording %v of %v out of service: %w", a, svc, err))
		}
	}
	for a := range s.down {
		if _, ok := out[a]; !ok {
			if err := lb.objs.Down.Delete(downKey(s.id, a)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, fmt.Errorf("xdpmaglev: recording %v of %v in service: %w", a, svc, err))
			}
		}
	}
	s.down = out
	return errors.Join(errs...)
}

// downKey returns the down map's key of backend a of service id.
func downKey(id uint32, a netip.Addr) maglevDownKey {
	k := maglevDownKey{Svc: id, Addr: addrWords(a), Family: 4}
	if !a.Is4() {
		k.Family = 6
	}
	return k
}

// Backends returns svc's backends as the last SetService or SetServices
// gave them, sorted by address, Down ones included. After a Load that
// adopted pinned maps, and until svc is set again, they are the backends
// the last LB left: each one in service with its weight, and each Down
// one, which the maps record too; a ForwardL2 backend's HW is then empty
// (the LB knows its MAC, and keeps it). It returns nil if svc is not set.
func (lb *LB) Backends(svc Service) []Backend {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	s := lb.services[svc]
	if s == nil {
		return nil
	}
	src := s.given()
	out := make([]Backend, len(src))
	for i, b := range src {
		b.Addr = b.Addr.Unmap()
		b.HW = slices.Clone(b.HW)
		out[i] = b
	}
	slices.SortFunc(out, func(x, y Backend) int { return x.Addr.Compare(y.Addr) })
	return out
}

// knownMACs returns the hardware addresses of svc's backends, by address.
func (lb *LB) knownMACs(svc Service) map[netip.Addr]net.HardwareAddr {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	out := map[netip.Addr]net.HardwareAddr{}
	if s := lb.services[svc]; s != nil {
		for a, b := range s.backends {
			if b.hw != nil {
				out[a] = b.hw
			}
		}
	}
	return out
}

// serviceOptions checks opts and fills in its defaults for svc: the LB's
// M, and for an encapsulating mode its GUE port and the interface's
// address as the Source.
func (lb *LB) serviceOptions(svc Service, opts *ServiceOptions) error {
	if opts.M == 0 {
		opts.M = lb.opts.M
	}
	if err := opts.check(svc); err != nil {
		return err
	}
	switch opts.Forward {
	case ForwardL2:
		*opts = ServiceOptions{M: opts.M, Conntrack: opts.Conntrack, QUIC: opts.QUIC}
		return nil
	case ForwardIPIP:
		opts.GUEPort = 0
	case ForwardGUE:
		if opts.GUEPort == 0 {
			opts.GUEPort = DefaultGUEPort
		}
	}
	if opts.Source.IsValid() {
		opts.Source = opts.Source.Unmap()
		return nil
	}
	if lb.neigh == nil {
		return fmt.Errorf("%w %v: %v needs a Source address: the LB has no interface to take one from", ErrService, svc, opts.Forward)
	}
	src, err := lb.neigh.addr(svc.VIP.Addr().Unmap().Is4())
	if err != nil {
		return fmt.Errorf("%w %v: %v", ErrService, svc, err)
	}
	opts.Source = src.Unmap()
	return opts.check(svc) // the interface's address, with SourceBits
}

// set installs table for svc, with bs resolved. lb.mu is held.
func (lb *LB) set(svc Service, table *maglev.Table, bs []Backend, opts ServiceOptions) error {
	st, err := lb.stage(svc, table, bs, opts)
	if err != nil {
		return err
	}
	return errors.Join(lb.swapAll([]*staged{st})...)
}

// DeleteService stops load balancing svc: its packets pass to the kernel
// from then on. It returns an error wrapping ErrNoService if svc is not
// set.
func (lb *LB) DeleteService(svc Service) error {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.closed {
		return ErrClosed
	}
	s := lb.services[svc]
	if s == nil {
		return fmt.Errorf("%w: %v", ErrNoService, svc)
	}
	m, k := lb.key(svc)
	if err := m.Delete(k); err != nil {
		return fmt.Errorf("xdpmaglev: deleting service %v: %w", svc, err)
	}
	if err := lb.objs.Tables.Delete(s.id); err != nil {
		return fmt.Errorf("xdpmaglev: deleting the table of %v: %w", svc, err)
	}
	delete(lb.services, svc)
	for _, b := range s.backends {
		lb.freeBackend(b)
	}
	var errs []error
	if !s.prevUntil.IsZero() {
		if s.prevTimer != nil {
			s.prevTimer.Stop()
		}
		if err := lb.objs.PrevTables.Delete(s.id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("xdpmaglev: deleting the second hops of %v: %w", svc, err))
		}
	}
	errs = append(errs, lb.finishQUIC(s.id, s.quic, nil))
	if s.opts.Conntrack == ConntrackOff || s.quic != nil {
		errs = append(errs, lb.syncModes())
	}
	for a := range s.down {
		if err := lb.objs.Down.Delete(downKey(s.id, a)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("xdpmaglev: deleting the Down record of %v: %w", a, err))
		}
	}
	lb.svcFree = append(lb.svcFree, s.id)
	return errors.Join(append(errs, lb.syncVIP(svc.VIP.Addr()))...)
}
