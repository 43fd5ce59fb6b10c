package xdpmaglev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/maglevlb/maglev"
	"golang.org/x/sys/unix"
)

// adoptedBackend is a backends map entry in use, and its id.
type adoptedBackend struct {
	id uint32
	e  maglevBackend
}

// adopt rebuilds the LB's state from adopted maps: each service with its
// id, table and options, each backend with its id, cookie and entry, the
// free ids and the cookie counter. So SetService with the same
// backends keeps every backend's id and cookie, and the flows connection
// tracking holds for them stay where they are. Entries that no service
// names (a SetService cut short by the end of its process) are cleared.
// The LB is not shared yet: lb.mu need not be held.
func (lb *LB) adopt(cookie uint32) error {
	entries, err := readArray[maglevBackend](lb.objs.Backends)
	if err != nil {
		return fmt.Errorf("%w: reading the backends: %v", ErrLayout, err)
	}
	bySvc := map[uint32][]adoptedBackend{}
	for id, e := range entries {
		if e.Cookie != 0 {
			bySvc[e.Svc] = append(bySvc[e.Svc], adoptedBackend{uint32(id), e})
			cookie = max(cookie, e.Cookie)
		}
	}
	used, outs, err := lb.adoptServices(bySvc)
	if err != nil {
		return err
	}
	if err := lb.adoptQUICMaps(used); err != nil {
		return err
	}
	for id := range uint32(lb.opts.MaxServices) {
		if !used[id] {
			_ = lb.objs.Tables.Delete(id) // a table no service names: none, normally
			lb.svcFree = append(lb.svcFree, id)
		}
	}
	for id, e := range entries {
		if e.Cookie != 0 && !used[e.Svc] {
			if err := lb.objs.Backends.Put(uint32(id), maglevBackend{}); err != nil {
				return fmt.Errorf("xdpmaglev: clearing backend %d: %w", id, err)
			}
			e.Cookie = 0
		}
		if e.Cookie == 0 {
			lb.beFree = append(lb.beFree, uint32(id))
		}
	}
	lb.cookie = cookie
	for id := range uint32(lb.opts.MaxServices) {
		if !used[id] {
			_ = lb.objs.PrevTables.Delete(id) // second hops no service names: none, normally
		}
	}
	if err := lb.syncModes(); err != nil {
		return err
	}
	for id, out := range outs {
		if used[id] {
			continue
		}
		for a := range out {
			if err := lb.objs.Down.Delete(downKey(id, a)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("xdpmaglev: clearing the record of %v out of service: %w", a, err)
			}
		}
	}
	return lb.adoptVIPs()
}

// adoptServices adopts the services of the maps of services, with their
// backends bySvc and the records of those out of the data plane, and
// returns the ids they use and those records by service id. The LB is not
// shared yet.
func (lb *LB) adoptServices(bySvc map[uint32][]adoptedBackend) (map[uint32]bool, map[uint32]map[netip.Addr]maglevOut, error) {
	used := map[uint32]bool{}                     // service ids
	outs := map[uint32]map[netip.Addr]maglevOut{} // the backends out of the data plane, by service id
	var dk maglevDownKey
	var dv maglevOut
	for it := lb.objs.Down.Iterate(); it.Next(&dk, &dv); {
		if outs[dk.Svc] == nil {
			outs[dk.Svc] = map[netip.Addr]maglevOut{}
		}
		outs[dk.Svc][entryAddr(dk.Addr, dk.Family)] = dv
	}
	add := func(svc Service, v maglevService) error {
		id := v.Id
		if used[id] || id >= uint32(lb.opts.MaxServices) {
			return fmt.Errorf("%w: service %v has id %d, which is taken or out of range", ErrLayout, svc, id)
		}
		s, err := lb.adoptService(svc, id, int(v.M), bySvc[id], outs[id])
		if err != nil {
			return err
		}
		if err := lb.adoptModes(svc, s, v); err != nil {
			return err
		}
		adoptQUIC(s, v)
		lb.gen++
		s.gen = lb.gen
		lb.services[svc] = s
		used[id] = true
		return nil
	}
	var k4 maglevSvcKey4
	var k6 maglevSvcKey
	var v maglevService
	for it := lb.objs.Services4.Iterate(); it.Next(&k4, &v); {
		if err := add(service4(k4), v); err != nil {
			return nil, nil, err
		}
	}
	for it := lb.objs.Services6.Iterate(); it.Next(&k6, &v); {
		if err := add(service6(k6), v); err != nil {
			return nil, nil, err
		}
	}
	return used, outs, nil
}

// adoptModes takes what service s's value v says of it: stateless or not,
// second chance or not, and the end of its window, whose timer it arms,
// or past which it takes the second hops out. The LB is not shared yet.
func (lb *LB) adoptModes(svc Service, s *service, v maglevService) error {
	s.val = v
	s.prevSized = v.Flags&uint32(maglevConstsSVC_PREV_SIZED) != 0
	if v.Flags&uint32(maglevConstsSVC_STATELESS) != 0 {
		s.opts.Conntrack = ConntrackOff
	}
	until := fromMonotonic(v.Until)
	if v.Flags&uint32(maglevConstsSVC_SECOND_CHANCE) == 0 || until.IsZero() {
		return nil
	}
	s.opts.SecondChance = max(time.Until(until), time.Nanosecond) // what is left of it; the next SetService says the window
	if time.Now().Before(until) {
		s.prevUntil = until
		s.prev = lb.readPrev(s.id) // nil where the kernel does not let it: then Handoffs has none
		lb.armPrev(svc, nil, s)
		return nil
	}
	if err := lb.objs.PrevTables.Delete(s.id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xdpmaglev: removing the second hops of %v, whose window is over: %w", svc, err)
	}
	s.val.Until = 0
	return nil
}

// readPrev returns the second hops prev_tables holds for service id, or
// nil if it holds none or they cannot be read: reading an inner map takes
// its id to a file descriptor, which the kernel allows only with
// CAP_SYS_ADMIN. The LB is not shared yet.
func (lb *LB) readPrev(id uint32) []maglevSlot {
	var m *ebpf.Map
	if err := lb.objs.PrevTables.Lookup(id, &m); err != nil {
		return nil
	}
	defer func() { _ = m.Close() }()
	slots, err := readSlots(m)
	if err != nil {
		return nil
	}
	return slots
}

// readSlots returns the slots of a table map written by writeSlots (slot
// 0, the size, left out), read from its memory.
func readSlots(m *ebpf.Map) ([]maglevSlot, error) {
	size := 8 * int(m.MaxEntries())
	page := unix.Getpagesize()
	mem, err := unix.Mmap(m.FD(), 0, (size+page-1)/page*page, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	defer func() { _ = unix.Munmap(mem) }()
	n := int(binary.NativeEndian.Uint32(mem))
	if n != int(m.MaxEntries())-1 {
		return nil, fmt.Errorf("%w: a table of %d slots in a map of %d", ErrLayout, n, m.MaxEntries())
	}
	out := make([]maglevSlot, n)
	for i := range out {
		out[i] = maglevSlot{Id: binary.NativeEndian.Uint32(mem[8+8*i:]), Cookie: binary.NativeEndian.Uint32(mem[8+8*i+4:])}
	}
	return out, nil
}

// adoptVIPs makes the maps of VIPs those of the adopted services: a VIP
// no service has (a DeleteService cut short) is deleted. The LB is not
// shared yet.
func (lb *LB) adoptVIPs() error {
	vips := map[netip.Addr]bool{}
	for s := range lb.services {
		vips[s.VIP.Addr()] = true
	}
	var k4 uint32
	var k6 [4]uint32
	var n uint32
	var stale []netip.Addr
	for it := lb.objs.Vips4.Iterate(); it.Next(&k4, &n); {
		if a := entryAddr([4]uint32{k4}, 4); !vips[a] {
			stale = append(stale, a)
		}
	}
	for it := lb.objs.Vips6.Iterate(); it.Next(&k6, &n); {
		if a := entryAddr(k6, 6); !vips[a] {
			stale = append(stale, a)
		}
	}
	for a := range vips {
		stale = append(stale, a)
	}
	for _, a := range stale { // syncVIP counts, and deletes those with none
		if err := lb.syncVIP(a); err != nil {
			return err
		}
	}
	return nil
}

// adoptService rebuilds service svc of id id and table size m from its
// backends' entries and its backends out of the data plane, out. Its
// table is computed again, not read: the table of every backend Without
// those out, as install made it (the table depends on nothing else), and
// reading a map of maps' inner map back would take CAP_SYS_ADMIN.
func (lb *LB) adoptService(svc Service, id uint32, m int, bes []adoptedBackend, out map[netip.Addr]maglevOut) (*service, error) {
	if err := maglev.CheckSize(m); err != nil {
		return nil, fmt.Errorf("%w: the table of %v: %w", ErrLayout, svc, err)
	}
	s := &service{id: id, backends: make(map[netip.Addr]*backend, len(bes)), opts: ServiceOptions{M: m}, down: out}
	for i, b := range bes {
		addr := entryAddr(b.e.Addr, b.e.Family)
		o, isOut := out[addr]
		if s.backends[addr] != nil || (isOut && o.Why != uint32(maglevConstsOUT_UNRESOLVED)) {
			return nil, fmt.Errorf("%w: service %v has backend %v twice", ErrLayout, svc, addr)
		}
		be := &backend{id: b.id, cookie: b.e.Cookie, entry: b.e}
		if Forward(b.e.Mode) == ForwardL2 && !isOut {
			be.hw = slices.Clone(b.e.Mac[:])
		}
		s.backends[addr] = be
		s.adopted = append(s.adopted, Backend{Addr: addr, Weight: b.e.Weight})
		if isOut { // unresolved: an entry, without a MAC
			s.unresolved = append(s.unresolved, addr.String())
		}
		if i == 0 {
			s.opts = entryOptions(b.e, m)
		}
	}
	for addr, o := range out {
		if s.backends[addr] != nil {
			continue // unresolved, above
		}
		if o.Why == uint32(maglevConstsOUT_UNRESOLVED) {
			s.unresolved = append(s.unresolved, addr.String())
			s.adopted = append(s.adopted, Backend{Addr: addr, Weight: o.Weight})
		} else {
			s.adopted = append(s.adopted, Backend{Addr: addr, Weight: o.Weight, Down: true})
		}
	}
	var err error
	if s.full, err = fullTable(s.adopted, m); err != nil {
		return nil, fmt.Errorf("%w: the table of %v: %w", ErrLayout, svc, err)
	}
	if s.table, _, err = inService(svc, s.adopted, s.full, s.unresolved); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLayout, err)
	}
	return s, nil
}

// readArray returns every value of an array map, by index: a batch
// lookup of 1,024 a system call, or one lookup an entry where the kernel
// has no batches.
func readArray[V any](m *ebpf.Map) ([]V, error) {
	out := make([]V, m.MaxEntries())
	keys := make([]uint32, 1024)
	vals := make([]V, 1024)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			if keys[i] < uint32(len(out)) {
				out[keys[i]] = vals[i]
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	for i := range out {
		if err := m.Lookup(uint32(i), &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// service4 and service6 return the Service of a services map key: the
// inverse of LB.key.
func service4(k maglevSvcKey4) Service {
	return Service{VIP: netip.AddrPortFrom(entryAddr([4]uint32{k.Addr}, 4), hostPort(k.Port)), Proto: Proto(k.Proto)}
}

func service6(k maglevSvcKey) Service {
	return Service{VIP: netip.AddrPortFrom(entryAddr(k.Addr, 6), hostPort(k.Port)), Proto: Proto(k.Proto)}
}

// hostPort returns a port as the maps hold it (network order, in a native
// word) as a number.
func hostPort(p uint16) uint16 {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], p)
	return binary.BigEndian.Uint16(b[:])
}

// entryAddr is the inverse of addrWords: the address of family 4 or 6.
func entryAddr(w [4]uint32, family uint8) netip.Addr {
	var b [16]byte
	for i, x := range w {
		binary.NativeEndian.PutUint32(b[4*i:], x)
	}
	if family == 4 {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}

// entryOptions returns the ServiceOptions of a service of M slots whose
// backend entry e is: the inverse of entry.
func entryOptions(e maglevBackend, m int) ServiceOptions {
	o := ServiceOptions{Forward: Forward(e.Mode), M: m}
	if o.Forward == ForwardL2 {
		return o
	}
	o.Source = entryAddr(e.Src, e.Family)
	o.GUEPort = hostPort(e.Port)
	o.SourceBits = uint8(bits.OnesCount16(e.SrcMask))
	return o
}
