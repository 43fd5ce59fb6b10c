package xdpmaglev

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/maglevlb/maglev"
)

// A Handoff is a service's second chance as one load balancer has it,
// for a load balancer that did not see the service's changes: a later
// process on the same machine without pins (from a file the earlier one
// wrote), or another load balancer that starts while the window runs
// (from a running one). It holds the table the service is routed by (its
// backends and size, from which every load balancer computes the same
// table) and each slot's second hop, by address, with the end of their
// window. Handoffs returns a load balancer's; SetHandoffs gives them to
// another, whose services take them as they are created. Its JSON form
// (MarshalJSON) is what l4lb's peers exchange and its state file holds.
// docs/xdp-design.md, "Second chance without the change".
type Handoff struct {
	// Service is the service.
	Service Service
	// M is the size of its table.
	M int
	// Backends are the table's backends: each one's Addr, Weight and
	// Down (HW is not part of a handoff). The table is
	// maglev.NewWeighted's of them all, Without the Down ones, as
	// SetService makes it.
	Backends []Backend
	// Hops are the second hops' addresses, and Slots each slot's: slot
	// i's second hop is Hops[Slots[i]-1], and it has none where Slots[i]
	// is 0. Slots has one entry per slot of the second hops' table: M,
	// or the table's size before M last changed. Nil: no second hop.
	Hops  []netip.Addr
	Slots []uint32
	// Until is the end of the second hops' window: zero without them.
	Until time.Time
	// From says where the handoff came from ("state file", "peer
	// 198.18.0.3:9181"), for the taker's records (SecondHops); it is not
	// part of the JSON form.
	From string
}

// parseService returns the Service of its String form: "tcp/VIP:PORT"
// or "udp/[IPv6]:PORT".
func parseService(s string) (Service, error) {
	p, vip, ok := strings.Cut(s, "/")
	if !ok {
		return Service{}, fmt.Errorf("%w %q: not PROTO/VIP:PORT", ErrService, s)
	}
	var svc Service
	switch p {
	case "tcp":
		svc.Proto = TCP
	case "udp":
		svc.Proto = UDP
	default:
		return Service{}, fmt.Errorf("%w %q: protocol %q is neither tcp nor udp", ErrService, s, p)
	}
	var err error
	if svc.VIP, err = netip.ParseAddrPort(vip); err != nil {
		return Service{}, fmt.Errorf("%w %q: %v", ErrService, s, err)
	}
	return svc, svc.check()
}

// handoffJSON is a Handoff's JSON form. Slots is packed: for each slot
// with a second hop, in slot order, the number of slots without one
// since the last (uvarint), then its hop (uvarint, 1 + the index in
// hops), base64 as JSON writes bytes; prev_m is the number of slots.
type handoffJSON struct {
	V        int           `json:"v"`
	Service  string        `json:"service"`
	M        int           `json:"m"`
	Backends []backendJSON `json:"backends"`
	Hops     []netip.Addr  `json:"hops,omitempty"`
	PrevM    int           `json:"prev_m,omitempty"`
	Slots    []byte        `json:"slots,omitempty"`
	Until    *time.Time    `json:"until,omitempty"`
}

type backendJSON struct {
	Addr   netip.Addr `json:"addr"`
	Weight uint32     `json:"weight"`
	Down   bool       `json:"down,omitempty"`
}

// handoffVersion is the version of the JSON form.
const handoffVersion = 1

// MarshalJSON returns h's JSON form, its slots packed.
func (h Handoff) MarshalJSON() ([]byte, error) {
	j := handoffJSON{V: handoffVersion, Service: h.Service.String(), M: h.M, Backends: make([]backendJSON, len(h.Backends)), Hops: h.Hops}
	for i, b := range h.Backends {
		j.Backends[i] = backendJSON{Addr: b.Addr, Weight: b.Weight, Down: b.Down}
	}
	if h.Slots != nil {
		j.PrevM = len(h.Slots)
		last := -1
		for i, v := range h.Slots {
			if v == 0 {
				continue
			}
			j.Slots = binary.AppendUvarint(j.Slots, uint64(i-last-1))
			j.Slots = binary.AppendUvarint(j.Slots, uint64(v))
			last = i
		}
	}
	if !h.Until.IsZero() {
		u := h.Until.UTC()
		j.Until = &u
	}
	return json.Marshal(j)
}

// UnmarshalJSON sets h from its JSON form, which it checks as
// SetHandoffs does: an error wraps ErrHandoff.
func (h *Handoff) UnmarshalJSON(data []byte) error {
	var j handoffJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return fmt.Errorf("%w: %v", ErrHandoff, err)
	}
	if j.V != handoffVersion {
		return fmt.Errorf("%w: version %d, not %d", ErrHandoff, j.V, handoffVersion)
	}
	svc, err := parseService(j.Service)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrHandoff, err)
	}
	out := Handoff{Service: svc, M: j.M, Backends: make([]Backend, len(j.Backends))}
	if len(j.Hops) > 0 {
		out.Hops = j.Hops
	}
	for i, b := range j.Backends {
		out.Backends[i] = Backend{Addr: b.Addr, Weight: b.Weight, Down: b.Down}
	}
	if j.Until != nil {
		out.Until = *j.Until
	}
	if j.PrevM != 0 || len(j.Slots) != 0 {
		if err := maglev.CheckSize(j.PrevM); err != nil {
			return fmt.Errorf("%w %v: the second hops' table: %w", ErrHandoff, svc, err)
		}
		out.Slots = make([]uint32, j.PrevM)
		next := 0
		for b := j.Slots; len(b) > 0; {
			gap, n := binary.Uvarint(b)
			if n <= 0 || gap >= uint64(j.PrevM-next) {
				return fmt.Errorf("%w %v: the second hops' slots are not %d slots", ErrHandoff, svc, j.PrevM)
			}
			b = b[n:]
			v, n := binary.Uvarint(b)
			if n <= 0 || v == 0 || v > uint64(len(j.Hops)) {
				return fmt.Errorf("%w %v: a slot's second hop is not one of the %d hops", ErrHandoff, svc, len(j.Hops))
			}
			b = b[n:]
			next += int(gap)
			out.Slots[next] = uint32(v)
			next++
		}
	}
	if _, err := out.table(); err != nil {
		return err
	}
	*h = out
	return nil
}

// table checks h and returns the table of its backends: an error wraps
// ErrHandoff.
func (h Handoff) table() (*maglev.Table, error) {
	if err := h.Service.check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHandoff, err)
	}
	if err := maglev.CheckSize(h.M); err != nil {
		return nil, fmt.Errorf("%w %v: M: %w", ErrHandoff, h.Service, err)
	}
	seen := make(map[netip.Addr]bool, len(h.Backends))
	for i, b := range h.Backends {
		a := b.Addr.Unmap()
		if !a.IsValid() || a.Zone() != "" || seen[a] {
			return nil, fmt.Errorf("%w %v: backend %d, %v: invalid or listed twice", ErrHandoff, h.Service, i, b.Addr)
		}
		seen[a] = true
	}
	if h.Slots != nil {
		if err := maglev.CheckSize(len(h.Slots)); err != nil {
			return nil, fmt.Errorf("%w %v: the second hops' table: %w", ErrHandoff, h.Service, err)
		}
		if len(h.Hops) == 0 || len(h.Hops) > math.MaxUint32-1 {
			return nil, fmt.Errorf("%w %v: slots without hops", ErrHandoff, h.Service)
		}
		for _, v := range h.Slots {
			if v > uint32(len(h.Hops)) {
				return nil, fmt.Errorf("%w %v: a slot's second hop, %d, is not one of the %d hops", ErrHandoff, h.Service, v, len(h.Hops))
			}
		}
	}
	for _, a := range h.Hops {
		if !a.IsValid() || a.Zone() != "" {
			return nil, fmt.Errorf("%w %v: second hop %v: invalid", ErrHandoff, h.Service, a)
		}
	}
	full, err := fullTable(h.Backends, h.M)
	if err != nil {
		return nil, fmt.Errorf("%w %v: %w", ErrHandoff, h.Service, err)
	}
	t, _, err := inService(h.Service, h.Backends, full, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHandoff, err)
	}
	return t, nil
}

// pendingHandoff is a handoff SetHandoffs took, with its table.
type pendingHandoff struct {
	h     Handoff
	table *maglev.Table
}

// Handoffs returns the handoff of each service with second chance, by
// service: the table it is routed by and, while the window runs, its
// second hops. A service adopted from pinned maps has its second hops
// where the kernel let Load read them back.
func (lb *LB) Handoffs() []Handoff {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	now := time.Now()
	var out []Handoff
	for svc, s := range lb.services {
		if s.opts.SecondChance <= 0 || s.table == nil {
			continue
		}
		h := Handoff{Service: svc, M: s.table.Size()}
		for _, b := range s.given() {
			h.Backends = append(h.Backends, Backend{Addr: b.Addr.Unmap(), Weight: b.Weight, Down: b.Down})
		}
		slices.SortFunc(h.Backends, func(x, y Backend) int { return x.Addr.Compare(y.Addr) })
		if s.prev != nil && now.Before(s.prevUntil) {
			addr := make(map[maglevSlot]netip.Addr, len(s.backends))
			for a, b := range s.backends {
				addr[maglevSlot{Id: b.id, Cookie: b.cookie}] = a
			}
			hop := map[netip.Addr]uint32{}
			slots := make([]uint32, len(s.prev))
			for i, v := range s.prev {
				a, ok := addr[v]
				if !ok {
					continue // none, or a backend that has left: no second hop
				}
				if hop[a] == 0 {
					h.Hops = append(h.Hops, a)
					hop[a] = uint32(len(h.Hops))
				}
				slots[i] = hop[a]
			}
			if len(h.Hops) > 0 {
				h.Slots, h.Until = slots, s.prevUntil
			}
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(x, y Handoff) int { return strings.Compare(x.Service.String(), y.Service.String()) })
	return out
}

// SetHandoffs gives the LB handoffs of services it does not have yet,
// from a state file an earlier process wrote or from other load
// balancers, in the order the caller prefers them; they replace those an
// earlier call gave. When SetService or SetServices then creates one of
// their services with second chance, it takes one: the first whose table
// is the service's new table, else the first. The service's second hops
// are then those a load balancer that had routed it by the handoff's
// table, with its second hops, and then changed to the new table would
// have (as its own change does: docs/xdp-design.md, "The rule"): with the same
// table, the handoff's second hops until the handoff's Until; with
// another, each slot that differs takes the handoff's owner, each that
// does not keeps the handoff's second hop while its window runs, for the
// service's window from then. A second hop that is not one of the new
// service's backends is none. A service the LB has, or one without
// second chance, takes none, and a service takes one handoff once: the
// others of its service are dropped. A bad handoff returns an error
// wrapping ErrHandoff, and none is taken. Each handoff's table is built
// here (a millisecond or so each).
func (lb *LB) SetHandoffs(hs []Handoff) error {
	pending := map[Service][]pendingHandoff{}
	for _, h := range hs {
		t, err := h.table()
		if err != nil {
			return err
		}
		h.Backends, h.Hops, h.Slots = slices.Clone(h.Backends), slices.Clone(h.Hops), slices.Clone(h.Slots)
		pending[h.Service] = append(pending[h.Service], pendingHandoff{h: h, table: t})
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.closed {
		return ErrClosed
	}
	lb.handoffs = pending
	return nil
}

// SecondHops returns the end of the window of svc's second hops (zero
// if it has none now), and the From of the Handoff it took when it was
// created ("" if it took none).
func (lb *LB) SecondHops(svc Service) (until time.Time, from string) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	s := lb.services[svc]
	if s == nil {
		return time.Time{}, ""
	}
	if time.Now().Before(s.prevUntil) {
		until = s.prevUntil
	}
	return until, s.handoff
}

// takeHandoff returns the service before next, new service svc, as the
// handoff it takes describes it, or nil if it takes none (see
// SetHandoffs). The service's handoffs go once it is in (finish). lb.mu
// is held.
func (lb *LB) takeHandoff(svc Service, next *service, t time.Time) *service {
	hs := lb.handoffs[svc]
	if len(hs) == 0 || next.opts.SecondChance <= 0 || next.table == nil {
		return nil
	}
	p := hs[0]
	for _, c := range hs {
		if c.table.Size() == next.table.Size() && c.table.Diff(next.table) == 0 {
			p = c
			break
		}
	}
	// The second hops name the new service's backends, by their ids and
	// cookies; an address that is not one of them is no second hop.
	before := &service{table: p.table, handoff: p.h.From}
	if p.h.Slots != nil && t.Before(p.h.Until) {
		before.prev = make([]maglevSlot, len(p.h.Slots))
		for i, v := range p.h.Slots {
			before.prev[i] = maglevSlot{Id: noBackend}
			if v == 0 {
				continue
			}
			if b := next.backends[p.h.Hops[v-1].Unmap()]; b != nil {
				before.prev[i] = maglevSlot{Id: b.id, Cookie: b.cookie}
			}
		}
		before.prevUntil = p.h.Until
		before.prevSized = len(before.prev) != next.table.Size()
	}
	return before
}
