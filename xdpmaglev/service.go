package xdpmaglev

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/maglevlb/maglev"
	"golang.org/x/sys/unix"
)

// Proto is an IP protocol number: TCP or UDP.
type Proto uint8

// The protocols a Service may have.
const (
	TCP Proto = 6
	UDP Proto = 17
)

// String returns "tcp", "udp", or the number.
func (p Proto) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	}
	return fmt.Sprintf("proto-%d", uint8(p))
}

// A Service is what a packet is addressed to: a virtual IP address (the
// VIP, which every backend holds on its loopback device) and port, and a
// protocol.
type Service struct {
	VIP   netip.AddrPort
	Proto Proto
}

// String returns "tcp/203.0.113.1:80" or "udp/[2001:db8::1]:53".
func (s Service) String() string { return s.Proto.String() + "/" + s.VIP.String() }

// A Backend is a server of a service, on the load balancer's layer-2
// segment.
type Backend struct {
	// Addr is the backend's own address: its name in the Maglev table
	// (Addr.String(), after Unmap), and the address whose hardware
	// address the neighbour table gives when HW is empty.
	Addr netip.Addr
	// Weight is the backend's share, as in maglev.NewWeighted. 0 means
	// drained: the backend gets no new flows, but the flows conntrack
	// holds for it keep going to it.
	Weight uint32
	// HW is the backend's Ethernet address; if empty, SetService reads it
	// from the interface's neighbour table, resolving it if needed.
	HW net.HardwareAddr
}

// service is the state of one service.
type service struct {
	id       uint32
	table    *maglev.Table
	backends map[netip.Addr]*backend
}

// backend is the state of one backend of a service: its id, the index of
// its entry in the backends and backend_stats maps, and the cookie the
// entry holds while the backend is in the service.
type backend struct {
	id, cookie uint32
	hw         net.HardwareAddr
}

func (s Service) check() error {
	if !s.VIP.Addr().IsValid() || s.VIP.Addr().Zone() != "" {
		return fmt.Errorf("%w %v: invalid VIP", ErrService, s)
	}
	if s.VIP.Port() == 0 {
		return fmt.Errorf("%w %v: port 0", ErrService, s)
	}
	if s.Proto != TCP && s.Proto != UDP {
		return fmt.Errorf("%w %v: protocol %d is neither TCP (6) nor UDP (17)", ErrService, s, uint8(s.Proto))
	}
	return nil
}

// key returns the map the service's key goes in (services4 for an IPv4
// VIP, services6 otherwise) and the key. A 4-in-6 VIP is an IPv6 packet's
// destination, so it is not unmapped.
func (lb *LB) key(s Service) (*ebpf.Map, any) {
	var p [2]byte
	binary.BigEndian.PutUint16(p[:], s.VIP.Port())
	port := binary.NativeEndian.Uint16(p[:])
	if s.VIP.Addr().Is4() {
		return lb.objs.Services4, maglevSvcKey4{Addr: addrWords(s.VIP.Addr())[0], Port: port, Proto: uint8(s.Proto)}
	}
	return lb.objs.Services6, maglevSvcKey{Addr: addrWords(s.VIP.Addr()), Port: port, Proto: uint8(s.Proto), Family: 6}
}

func nativeWord(b []byte) uint32 { return binary.NativeEndian.Uint32(b) }

// SetService makes the load balancer send svc's packets to backends, by
// the Maglev table maglev.NewWeighted builds with the backends' addresses
// as names, M slots and the default hasher: the table Table returns.
//
// The update is atomic for the service: the new table is written to a new
// map, which then replaces the old one in one step, so every packet is
// routed by the old table or by the new one, never by a mix. Connection
// tracking keeps each flow on the backend its first packet went to while
// that backend stays in the service (with any weight, 0 included); a
// removed backend's flows are hashed again by the new table.
//
// Bad input returns an error wrapping ErrService, ErrBackend,
// ErrNoNeighbor, ErrFull or the maglev package's error, and changes
// nothing. An empty backends list (or all weights 0) is valid: the
// service's packets are then dropped, and counted. SetService costs one
// table build (about a millisecond for 1,000 backends at M = 65,537) and a
// write of 8·M bytes to the kernel.
func (lb *LB) SetService(svc Service, backends []Backend) error {
	if err := svc.check(); err != nil {
		return err
	}
	bs := make([]Backend, len(backends))
	seen := make(map[netip.Addr]bool, len(backends))
	for i, b := range backends {
		b.Addr = b.Addr.Unmap()
		if !b.Addr.IsValid() || b.Addr.Zone() != "" {
			return fmt.Errorf("%w %d: invalid address %v", ErrBackend, i, b.Addr)
		}
		if seen[b.Addr] {
			return fmt.Errorf("%w %v: listed twice", ErrBackend, b.Addr)
		}
		seen[b.Addr] = true
		if len(b.HW) != 0 && len(b.HW) != 6 {
			return fmt.Errorf("%w %v: hardware address %v is not 6 bytes", ErrBackend, b.Addr, b.HW)
		}
		bs[i] = b
	}
	names := make([]maglev.Backend, len(bs))
	for i, b := range bs {
		names[i] = maglev.Backend{Name: b.Addr.String(), Weight: b.Weight}
	}
	table, err := maglev.NewWeighted(names, lb.opts.M, nil)
	if err != nil {
		return fmt.Errorf("xdpmaglev: service %v: %w", svc, err)
	}

	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.closed {
		return ErrClosed
	}
	for i := range bs {
		if len(bs[i].HW) == 0 {
			if old := lb.services[svc]; old != nil && old.backends[bs[i].Addr] != nil {
				bs[i].HW = old.backends[bs[i].Addr].hw
				continue
			}
			if lb.neigh == nil {
				return fmt.Errorf("%w for %v: no interface to resolve it on", ErrNoNeighbor, bs[i].Addr)
			}
			if bs[i].HW, err = lb.neigh.resolve(bs[i].Addr); err != nil {
				return err
			}
		}
	}
	return lb.set(svc, table, bs)
}

// set installs table for svc, with bs resolved. lb.mu is held.
func (lb *LB) set(svc Service, table *maglev.Table, bs []Backend) error {
	old := lb.services[svc]
	isNew := old == nil
	if isNew {
		old = &service{backends: map[netip.Addr]*backend{}}
	}
	next := &service{id: old.id, table: table, backends: make(map[netip.Addr]*backend, len(bs))}
	var added []uint32 // ids taken here, given back on failure
	var addedSvc bool
	fail := func(err error) error {
		for _, id := range added {
			_ = lb.objs.Backends.Put(id, maglevBackend{}) // best effort: the error is err
		}
		lb.beFree = append(lb.beFree, added...)
		if addedSvc {
			lb.svcFree = append(lb.svcFree, next.id)
		}
		return err
	}
	if isNew {
		if len(lb.svcFree) == 0 {
			return fmt.Errorf("%w: service %v would be one more than MaxServices, %d", ErrFull, svc, lb.opts.MaxServices)
		}
		next.id, lb.svcFree = lb.svcFree[0], lb.svcFree[1:]
		addedSvc = true
		if err := zeroStats(lb.objs.ServiceStats, next.id); err != nil {
			return fail(err)
		}
	}
	newCount := 0
	for _, b := range bs {
		if old.backends[b.Addr] == nil {
			newCount++
		}
	}
	if newCount > len(lb.beFree) {
		return fail(fmt.Errorf("%w: %d new backends for %v, %d free of MaxBackends, %d", ErrFull, newCount, svc, len(lb.beFree), lb.opts.MaxBackends))
	}
	for _, b := range bs {
		cur := old.backends[b.Addr]
		if cur == nil {
			id := lb.beFree[0]
			lb.beFree = lb.beFree[1:]
			added = append(added, id)
			lb.cookie++
			if lb.cookie == 0 {
				lb.cookie = 1
			}
			cur = &backend{id: id, cookie: lb.cookie}
			if err := zeroStats(lb.objs.BackendStats, id); err != nil {
				return fail(err)
			}
		} else if slices.Equal(cur.hw, b.HW) {
			next.backends[b.Addr] = cur
			continue
		} else {
			cur = &backend{id: cur.id, cookie: cur.cookie}
		}
		cur.hw = slices.Clone(b.HW)
		v := maglevBackend{Cookie: cur.cookie}
		copy(v.Mac[:], cur.hw)
		if err := lb.objs.Backends.Put(cur.id, v); err != nil {
			return fail(fmt.Errorf("xdpmaglev: writing backend %v: %w", b.Addr, err))
		}
		next.backends[b.Addr] = cur
	}

	// The table, in a map of its own, swapped in whole.
	slots := make([]maglevSlot, table.Len())
	for i := range slots {
		be := next.backends[netip.MustParseAddr(table.Backend(i))]
		slots[i] = maglevSlot{Id: be.id, Cookie: be.cookie}
	}
	owners := table.AppendSlots(make([]uint32, 0, lb.opts.M))
	inner, err := ebpf.NewMap(lb.inner)
	if err != nil {
		return fail(fmt.Errorf("xdpmaglev: creating the table of %v: %w", svc, err))
	}
	defer func() { _ = inner.Close() }() // the outer map holds the table
	if err := writeSlots(inner, owners, slots); err != nil {
		return fail(fmt.Errorf("xdpmaglev: writing the table of %v: %w", svc, err))
	}
	if err := lb.objs.Tables.Put(next.id, inner); err != nil {
		return fail(fmt.Errorf("xdpmaglev: swapping the table of %v: %w", svc, err))
	}
	if isNew {
		m, k := lb.key(svc)
		if err := m.Put(k, maglevService{Id: next.id}); err != nil {
			_ = lb.objs.Tables.Delete(next.id) // best effort: the error is err
			return fail(fmt.Errorf("xdpmaglev: adding service %v: %w", svc, err))
		}
	}
	lb.services[svc] = next

	// Backends that left: freed after the swap, so a packet that read the
	// old table finds its backend, or looks at the new table.
	for addr, b := range old.backends {
		if next.backends[addr] == nil {
			lb.freeBackend(b)
		}
	}
	return nil
}

// freeBackend clears b's entry, so that no conntrack entry or old table
// slot reaches it, and makes its id free. lb.mu is held.
func (lb *LB) freeBackend(b *backend) {
	// A failure here leaves the entry's cookie, which nothing names any
	// more once the id is reused: the next Put replaces it.
	_ = lb.objs.Backends.Put(b.id, maglevBackend{}) // see above
	lb.beFree = append(lb.beFree, b.id)
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
	lb.svcFree = append(lb.svcFree, s.id)
	return nil
}

// Table returns the table svc's packets are routed by, or nil if svc is
// not set. Its backend names are the backends' addresses (Addr.String()):
//
//	lb.Table(svc).LookupHash(xdpmaglev.FlowHash(seed, client, svc.VIP, uint8(svc.Proto)))
//
// is the address of the backend a new flow from client goes to.
func (lb *LB) Table(svc Service) *maglev.Table {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if s := lb.services[svc]; s != nil {
		return s.table
	}
	return nil
}

// Services returns the services set, in no particular order.
func (lb *LB) Services() []Service {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	out := make([]Service, 0, len(lb.services))
	for s := range lb.services {
		out = append(out, s)
	}
	return out
}

// writeSlots writes the table map: slot i holds slots[owners[i]], or no
// backend. The map is BPF_F_MMAPABLE, so this is a copy into its memory,
// mapped here and unmapped before returning (a map stays alive while it
// is mapped): one system call each way instead of one update per slot.
func writeSlots(m *ebpf.Map, owners []uint32, slots []maglevSlot) error {
	size := 8 * len(owners)
	page := unix.Getpagesize()
	mem, err := unix.Mmap(m.FD(), 0, (size+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	for i, o := range owners {
		v := maglevSlot{Id: noBackend}
		if o != maglev.NoBackend {
			v = slots[o]
		}
		binary.NativeEndian.PutUint32(mem[8*i:], v.Id)
		binary.NativeEndian.PutUint32(mem[8*i+4:], v.Cookie)
	}
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("munmap: %w", err)
	}
	return nil
}

// zeroStats sets every CPU's counters of entry i of m to zero.
func zeroStats(m *ebpf.Map, i uint32) error {
	if err := m.Put(i, make([]maglevStats, ebpf.MustPossibleCPU())); err != nil {
		return fmt.Errorf("xdpmaglev: resetting counters: %w", err)
	}
	return nil
}
