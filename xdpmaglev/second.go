package xdpmaglev

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ConntrackMode says whether a service's flows are tracked
// (ServiceOptions.Conntrack).
type ConntrackMode uint8

const (
	// ConntrackOn keeps each flow on the backend its first packet went
	// to, by an entry of connection tracking, while that backend stays
	// in the service. The zero value.
	ConntrackOn ConntrackMode = iota
	// ConntrackOff makes the service stateless: every packet goes by the
	// table, with its slot's second hop (SecondChance), and connection
	// tracking is neither read nor written. A flood costs no state, and
	// a flow that reaches another load balancer, or outlives a restart,
	// keeps its backend while the backends stay the same, and through a
	// change within the second chance window. A flow on a slot that moved
	// breaks once the window is over.
	ConntrackOff
)

// String returns "on" or "off".
func (m ConntrackMode) String() string {
	switch m {
	case ConntrackOn:
		return "on"
	case ConntrackOff:
		return "off"
	}
	return fmt.Sprintf("ConntrackMode(%d)", uint8(m))
}

// Second chance: when a service's table changes, each slot that moved
// keeps the backend it had before, its second hop, for the window
// (ServiceOptions.SecondChance) after the service's last change: a packet
// whose slot moved carries it in its GUE header, and the backend that
// gets the packet without a connection of it passes it on there
// (AttachDecap). A slot's second hop is the owner it had before it last
// moved; the table of them (prev_tables, one per service) goes once the
// service has had no change for the window. docs/xdp-design.md, "Second chance and stateless services".

// slotValues returns the slot of each of table t's slots, by the slot
// values of its backends (vals, by t's backend index).
func slotValues(owners []uint32, vals []maglevSlot) []maglevSlot {
	out := make([]maglevSlot, len(owners))
	for i, o := range owners {
		out[i] = maglevSlot{Id: noBackend}
		if o != math.MaxUint32 {
			out[i] = vals[o]
		}
	}
	return out
}

// slotsBy returns the slots of the table s has in use, each owner as the
// slot value of backends (next's: a backend that is not one of them owns
// no slot, as it is no second hop), or nil if s has no table.
func (s *service) slotsBy(backends map[netip.Addr]*backend) []maglevSlot {
	if s.table == nil || s.table.Size() == 0 {
		return nil
	}
	vals := make([]maglevSlot, s.table.NumBackends())
	for i := range vals {
		vals[i] = maglevSlot{Id: noBackend}
		if be := backends[netip.MustParseAddr(s.table.Backend(i))]; be != nil {
			vals[i] = maglevSlot{Id: be.id, Cookie: be.cookie}
		}
	}
	return slotValues(s.table.AppendSlots(make([]uint32, 0, s.table.Size())), vals)
}

// prevSlots returns the second hops of a service going from old to next,
// whose table's slots are now, at time t, and whether the table changed:
// each slot's owner in old where it differs from now's and is still a
// backend of next; where it is not, or the owner is the same, the second
// hop old had, while its window runs. A table of another size than old's
// takes old's slots whole (a slot of one is no slot of the other). Where
// the table did not change (a change of options alone, or the same
// backends again) it returns nil, false: old's second hops and window
// stay as they are. Where it changed and no slot has a second hop, it
// returns nil, true.
func prevSlots(old, next *service, now []maglevSlot, t time.Time) ([]maglevSlot, bool) {
	if old.table == nil || next.table == nil {
		return nil, true
	}
	if old.table.Size() == next.table.Size() && old.table.Diff(next.table) == 0 {
		return nil, false
	}
	was := old.slotsBy(next.backends)
	if len(was) != len(now) {
		return was, true
	}
	carry := old.prev != nil && len(old.prev) == len(now) && t.Before(old.prevUntil)
	out := make([]maglevSlot, len(now))
	some := false
	for i := range now {
		switch {
		case was[i] != now[i] && was[i].Id != noBackend:
			out[i] = was[i]
		case carry && old.prev[i] != now[i]:
			out[i] = old.prev[i]
		default:
			out[i] = maglevSlot{Id: noBackend}
		}
		some = some || out[i].Id != noBackend
	}
	if !some {
		return nil, true
	}
	return out, true
}

// stagePrev makes st's table of second hops, for a service with second
// chance whose table changes at time t to the slots now: st.prev, a map
// of the tables' layout, and st.next's prev and prevUntil. Where the
// table did not change, the service keeps what it had (an adopted
// service's second hops, whose slots this LB may not know, among them);
// where it changed and no slot has a second hop, it has none (putPrev
// takes them out). A new service has none, unless it takes a Handoff
// (st.before): then its second hops are those of a change from the
// handoff's table, or the handoff's own where the table is the same.
// lb.mu is held.
func (lb *LB) stagePrev(st *staged, now []maglevSlot, t time.Time) error {
	if st.next.opts.SecondChance <= 0 {
		return nil
	}
	base := st.old
	if st.isNew {
		if base = st.before; base == nil {
			return nil
		}
	}
	prev, changed := prevSlots(base, st.next, now, t)
	until := t.Add(st.next.opts.SecondChance)
	switch {
	case prev != nil:
	case changed:
		return nil // none: st.next has no second hops
	case !st.isNew:
		st.next.prev, st.next.prevUntil, st.next.prevSized = st.old.prev, st.old.prevUntil, st.old.prevSized
		return nil
	case base.prev == nil:
		return nil
	default:
		prev, until = base.prev, base.prevUntil // the handoff's, as its load balancer has them
	}
	spec := *lb.inner
	spec.MaxEntries = 1 + uint32(len(prev))
	m, err := ebpf.NewMap(&spec)
	if err != nil {
		return fmt.Errorf("xdpmaglev: creating the second hops of %v: %w", st.svc, err)
	}
	owners := make([]uint32, len(prev))
	for i := range owners {
		owners[i] = uint32(i)
	}
	if err := writeSlots(m, owners, prev); err != nil {
		_ = m.Close()
		return fmt.Errorf("xdpmaglev: writing the second hops of %v: %w", st.svc, err)
	}
	st.prev = m
	st.next.prev, st.next.prevUntil = prev, until
	st.next.prevSized = len(prev) != st.next.table.Size()
	return nil
}

// putPrev puts st's second hops into prev_tables, or takes the service's
// out where it has none any more (no second chance, or its window over).
// lb.mu is held.
func (lb *LB) putPrev(st *staged) error {
	if st.prev != nil {
		if err := lb.objs.PrevTables.Put(st.next.id, st.prev); err != nil {
			return fmt.Errorf("xdpmaglev: swapping the second hops of %v: %w", st.svc, err)
		}
		return nil
	}
	if st.old.prevUntil.IsZero() || !st.next.prevUntil.IsZero() {
		return nil
	}
	if err := lb.objs.PrevTables.Delete(st.next.id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xdpmaglev: removing the second hops of %v: %w", st.svc, err)
	}
	return nil
}

// armPrev sets the timer that takes s's second hops out at the end of its
// window, in place of old's (nil: none); s keeps old's timer where it
// kept its window. lb.mu is held.
func (lb *LB) armPrev(svc Service, old, s *service) {
	if old != nil && old.prevUntil.Equal(s.prevUntil) {
		s.prevTimer = old.prevTimer
		return
	}
	if old != nil && old.prevTimer != nil {
		old.prevTimer.Stop()
	}
	if s.prevUntil.IsZero() {
		return
	}
	until := s.prevUntil
	s.prevTimer = time.AfterFunc(time.Until(until), func() { lb.expirePrev(svc, until) })
}

// expirePrev takes svc's second hops out, if they are still those whose
// window ends at until.
func (lb *LB) expirePrev(svc Service, until time.Time) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	s := lb.services[svc]
	if lb.closed || s == nil || !s.prevUntil.Equal(until) {
		return
	}
	if err := lb.objs.PrevTables.Delete(s.id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return // the next change of the service replaces or removes them
	}
	s.prev, s.prevUntil, s.prevTimer, s.prevSized = nil, time.Time{}, nil, false
	_ = lb.putService(svc, s) // best effort: until is for an adopting LB, which checks it against its clock
}

// monotonic returns t as seconds of CLOCK_MONOTONIC, the clock an LB that
// adopts the maps reads the end of a window by: 0 for the zero time.
func monotonic(t time.Time) uint32 {
	if t.IsZero() {
		return 0
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return uint32(max(0, ts.Sec+int64(time.Until(t).Seconds())+1))
}

// fromMonotonic is monotonic's inverse: the time of s seconds of
// CLOCK_MONOTONIC, or the zero time for 0.
func fromMonotonic(s uint32) time.Time {
	if s == 0 {
		return time.Time{}
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Time{}
	}
	return time.Now().Add(time.Duration(int64(s)-ts.Sec) * time.Second)
}

// syncModes writes the number of stateless services to the map modes:
// with none, the program looks connection tracking up first, which an
// established flow needs alone. lb.mu is held.
func (lb *LB) syncModes() error {
	var m maglevModes
	for _, s := range lb.services {
		if s.opts.Conntrack == ConntrackOff {
			m.Stateless++
		}
		if s.quic != nil {
			m.Quic++
		}
	}
	if err := lb.objs.Modes.Put(uint32(0), m); err != nil {
		return fmt.Errorf("xdpmaglev: writing the modes: %w", err)
	}
	return nil
}
