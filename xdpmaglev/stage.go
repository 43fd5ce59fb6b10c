package xdpmaglev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/maglevlb/maglev"
	"golang.org/x/sys/unix"
)

// entry returns b's entry in the backends map, for service svc of opts.
// Its address, service and weight are there for an LB that adopts the
// maps (adopt), which the program reads only in the encapsulating modes.
func entry(b Backend, cookie, svc uint32, opts ServiceOptions) maglevBackend {
	v := maglevBackend{Cookie: cookie, Mode: uint8(opts.Forward), Family: 4, Addr: addrWords(b.Addr), Svc: svc, Weight: b.Weight}
	if !b.Addr.Is4() {
		v.Family = 6
	}
	copy(v.Mac[:], b.HW)
	if opts.Forward != ForwardL2 {
		v.Src = addrWords(opts.Source)
		v.Port = netOrder16(opts.GUEPort)
		v.SrcMask = uint16(1<<opts.SourceBits - 1)
	}
	return v
}

// A staged update of a service is written to the maps but for its table's
// swap: its backends' entries, and its table in a map of its own. Once
// the table is in the map of tables, finish ends it; fail undoes it.
type staged struct {
	svc       Service
	old, next *service
	isNew     bool
	inner     *ebpf.Map // the table; the caller closes it (close)
	prev      *ebpf.Map // the second hops, nil if none new; the caller closes it (close)
	before    *service  // a new service's state before it, from the Handoff it takes; nil: none
	fail      func(error) error
	undone    bool // by swapAll: fail was called, or finish failed
}

// close closes st's maps, which the maps of maps hold once they are in.
func (st *staged) close() {
	_ = st.inner.Close()
	if st.prev != nil {
		_ = st.prev.Close()
	}
}

// stage stages svc's update to table with bs resolved. lb.mu is held.
func (lb *LB) stage(svc Service, table *maglev.Table, bs []Backend, opts ServiceOptions) (*staged, error) {
	old := lb.services[svc]
	isNew := old == nil
	if isNew {
		old = &service{backends: map[netip.Addr]*backend{}}
	}
	next := &service{id: old.id, table: table, opts: opts, backends: make(map[netip.Addr]*backend, len(bs)), down: old.down, handoff: old.handoff}
	var added []uint32 // ids taken here, given back on failure
	var addedSvc bool
	qs := &quicStaged{}
	fail := func(err error) error {
		lb.undoQUIC(qs)
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
			return nil, fmt.Errorf("%w: service %v would be one more than MaxServices, %d", ErrFull, svc, lb.opts.MaxServices)
		}
		next.id, lb.svcFree = lb.svcFree[0], lb.svcFree[1:]
		addedSvc = true
		if err := zeroStats(lb.objs.ServiceStats, next.id); err != nil {
			return nil, fail(err)
		}
	}
	if err := lb.stageBackends(svc, old, next, bs, &added); err != nil {
		return nil, fail(err)
	}
	if err := lb.stageQUIC(svc, old, next, qs); err != nil {
		return nil, fail(err)
	}
	inner, owners, slots, err := lb.newTable(svc, next)
	if err != nil {
		return nil, fail(err)
	}
	st := &staged{svc: svc, old: old, next: next, isNew: isNew, inner: inner, fail: fail}
	now := time.Now()
	if isNew {
		if st.before = lb.takeHandoff(svc, next, now); st.before != nil {
			next.handoff = st.before.handoff
		}
	}
	if err := lb.stagePrev(st, slotValues(owners, slots), now); err != nil {
		_ = inner.Close()
		return nil, fail(err)
	}
	return st, nil
}

// stageBackends writes the entries of next's backends bs where they
// differ from old's, taking ids (appended to added) and cookies for the
// new ones, and fills next.backends. lb.mu is held.
func (lb *LB) stageBackends(svc Service, old, next *service, bs []Backend, added *[]uint32) error {
	newCount := 0
	for _, b := range bs {
		if old.backends[b.Addr] == nil {
			newCount++
		}
	}
	if newCount > len(lb.beFree) {
		return fmt.Errorf("%w: %d new backends for %v, %d free of MaxBackends, %d", ErrFull, newCount, svc, len(lb.beFree), lb.opts.MaxBackends)
	}
	for _, b := range bs {
		cur := old.backends[b.Addr]
		switch {
		case cur == nil:
			var err error
			if cur, err = lb.newBackend(added); err != nil {
				return err
			}
		case cur.entry == entry(b, cur.cookie, next.id, next.opts):
			next.backends[b.Addr] = cur
			continue
		default:
			cur = &backend{id: cur.id, cookie: cur.cookie}
		}
		cur.hw = slices.Clone(b.HW)
		cur.entry = entry(b, cur.cookie, next.id, next.opts)
		if err := lb.objs.Backends.Put(cur.id, cur.entry); err != nil {
			return fmt.Errorf("xdpmaglev: writing backend %v: %w", b.Addr, err)
		}
		next.backends[b.Addr] = cur
	}
	return nil
}

// newBackend takes a free backend id (appended to added) and a new
// cookie, recorded in the layout record first, so that no Load that
// adopts the maps hands the cookie out again. lb.mu is held.
func (lb *LB) newBackend(added *[]uint32) (*backend, error) {
	id := lb.beFree[0]
	lb.beFree = lb.beFree[1:]
	*added = append(*added, id)
	cookie, err := lb.newCookie()
	if err != nil {
		return nil, err
	}
	if err := zeroStats(lb.objs.BackendStats, id); err != nil {
		return nil, err
	}
	return &backend{id: id, cookie: cookie}, nil
}

// newTable writes next's table into a map of its own, to be swapped in
// whole, and returns it with the table's owners and the slot value of
// each backend (a Down one owns no slot: NO_BACKEND). lb.mu is held.
func (lb *LB) newTable(svc Service, next *service) (*ebpf.Map, []uint32, []maglevSlot, error) {
	table := next.table
	slots := make([]maglevSlot, table.NumBackends())
	for i := range slots {
		be := next.backends[netip.MustParseAddr(table.Backend(i))]
		if be == nil {
			slots[i] = maglevSlot{Id: noBackend} // Down: out of the table, owns no slot
			continue
		}
		slots[i] = maglevSlot{Id: be.id, Cookie: be.cookie}
	}
	owners := table.AppendSlots(make([]uint32, 0, table.Size()))
	spec := *lb.inner
	spec.MaxEntries = 1 + uint32(table.Size())
	inner, err := ebpf.NewMap(&spec)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("xdpmaglev: creating the table of %v: %w", svc, err)
	}
	if err := writeSlots(inner, owners, slots); err != nil {
		_ = inner.Close()
		return nil, nil, nil, fmt.Errorf("xdpmaglev: writing the table of %v: %w", svc, err)
	}
	return inner, owners, slots, nil
}

// finish ends st once its table is in the map of tables: a new service's
// entry, the LB's state, and the backends that left freed. lb.mu is held.
func (lb *LB) finish(st *staged) error {
	st.next.val = st.old.val
	if st.isNew {
		if err := lb.putService(st.svc, st.next); err != nil {
			_ = lb.objs.Tables.Delete(st.next.id)     // best effort: the error is err
			_ = lb.objs.PrevTables.Delete(st.next.id) // the same
			return st.fail(err)
		}
	}
	lb.services[st.svc] = st.next
	if st.isNew {
		delete(lb.handoffs, st.svc) // taken, or not for it (no second chance)
	}
	lb.armPrev(st.svc, st.old, st.next)
	var errs []error
	if !st.isNew {
		errs = append(errs, lb.putService(st.svc, st.next)) // its size, flags and window, for an LB that adopts the maps
	}
	errs = append(errs, lb.finishQUIC(st.next.id, st.old.quic, st.next.quic))
	if st.isNew {
		errs = append(errs, lb.syncVIP(st.svc.VIP.Addr())) // the service is in; its VIP's packets to other ports pass, as before
	}
	if st.isNew || st.old.opts.Conntrack != st.next.opts.Conntrack || (st.old.quic == nil) != (st.next.quic == nil) {
		errs = append(errs, lb.syncModes())
	}

	// Backends that left: freed after the swap, so a packet that read the
	// old table finds its backend, or looks at the new table.
	for addr, b := range st.old.backends {
		if st.next.backends[addr] == nil {
			lb.freeBackend(b)
		}
	}
	return errors.Join(errs...)
}

// putService writes s's value to the map of services, where it differs
// from what it holds: its id, which the program reads, and its table's
// size, flags and second chance window, which an LB that adopts the maps
// reads too. lb.mu is held.
func (lb *LB) putService(svc Service, s *service) error {
	v := maglevService{Id: s.id, M: uint32(s.table.Size()), LookupM: uint32(s.table.Size()), Until: monotonic(s.prevUntil)}
	if s.opts.Conntrack == ConntrackOff {
		v.Flags |= uint32(maglevConstsSVC_STATELESS)
	}
	if s.opts.SecondChance > 0 {
		v.Flags |= uint32(maglevConstsSVC_SECOND_CHANCE)
	}
	if s.prevSized && !s.prevUntil.IsZero() {
		v.Flags |= uint32(maglevConstsSVC_PREV_SIZED)
	}
	putQUIC(&v, s)
	if v == s.val {
		return nil
	}
	m, k := lb.key(svc)
	if err := m.Put(k, v); err != nil {
		return fmt.Errorf("xdpmaglev: writing service %v: %w", svc, err)
	}
	s.val = v
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

// syncVIP writes the number of services of VIP a to the map of VIPs,
// whose packets the program drops when it does not forward them, or
// deletes a when it has none. A 4-in-6 VIP is an IPv6 packet's
// destination, as in LB.key. lb.mu is held.
func (lb *LB) syncVIP(a netip.Addr) error {
	n := uint32(0)
	for s := range lb.services {
		if s.VIP.Addr() == a {
			n++
		}
	}
	m, k := lb.objs.Vips6, any(addrWords(a))
	if a.Is4() {
		m, k = lb.objs.Vips4, addrWords(a)[0]
	}
	var err error
	if n == 0 {
		if err = m.Delete(k); errors.Is(err, ebpf.ErrKeyNotExist) {
			err = nil
		}
	} else {
		err = m.Put(k, n)
	}
	if err != nil {
		return fmt.Errorf("xdpmaglev: the VIP %v: %w", a, err)
	}
	return nil
}

// writeSlots writes the table map: slot 0 holds the table's size (in its
// id), and slot 1 + i slots[owners[i]], or no backend. The map is BPF_F_MMAPABLE, so this is a copy into its memory,
// mapped here and unmapped before returning (a map stays alive while it
// is mapped): one system call each way instead of one update per slot.
func writeSlots(m *ebpf.Map, owners []uint32, slots []maglevSlot) error {
	size := 8 * (1 + len(owners))
	page := unix.Getpagesize()
	mem, err := unix.Mmap(m.FD(), 0, (size+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	binary.NativeEndian.PutUint32(mem, uint32(len(owners)))
	binary.NativeEndian.PutUint32(mem[4:], 0)
	for i, o := range owners {
		v := maglevSlot{Id: noBackend}
		if o != math.MaxUint32 {
			v = slots[o]
		}
		binary.NativeEndian.PutUint32(mem[8+8*i:], v.Id)
		binary.NativeEndian.PutUint32(mem[8+8*i+4:], v.Cookie)
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
