package xdpmaglev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"time"

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

// Forward is how a service's packets reach its backends.
type Forward uint8

// The forwarding modes. docs/xdp.md draws each, with its backend setup,
// overhead and MTU rule.
const (
	// ForwardL2 rewrites the frame's MACs and sends it back out of the
	// interface (direct server return at layer 2): every backend is on
	// the load balancer's segment. No overhead. The zero value.
	ForwardL2 = Forward(maglevForwardFWD_L2)
	// ForwardIPIP puts the packet inside a new outer IP header (IPv4 in
	// IPv4, protocol 4; IPv6 in IPv6, protocol 41) from the service's
	// Source to the backend's address, to its next hop by the kernel's
	// routing and neighbour tables: a backend may be anywhere the load
	// balancer has a route to. 20 bytes (IPv4) or 40 (IPv6) a packet.
	ForwardIPIP = Forward(maglevForwardFWD_IPIP)
	// ForwardGUE is ForwardIPIP with a UDP header after the outer IP
	// header (GUE variant 1, the same bytes as the kernel's FOU: the
	// UDP payload is the inner IP packet), its source port from the flow
	// hash so that routers' ECMP and NICs' RSS spread flows. 28 bytes
	// (IPv4) or 48 (IPv6) a packet.
	ForwardGUE = Forward(maglevForwardFWD_GUE)
)

// DefaultGUEPort is the UDP destination port of ForwardGUE packets and of
// the decapsulator when none is given.
const DefaultGUEPort = 6080

// String returns "l2", "ipip" or "gue".
func (f Forward) String() string {
	switch f {
	case ForwardL2:
		return "l2"
	case ForwardIPIP:
		return "ipip"
	case ForwardGUE:
		return "gue"
	}
	return fmt.Sprintf("Forward(%d)", uint8(f))
}

// ParseForward returns the mode named "l2", "ipip" or "gue".
func ParseForward(s string) (Forward, error) {
	for _, f := range []Forward{ForwardL2, ForwardIPIP, ForwardGUE} {
		if s == f.String() {
			return f, nil
		}
	}
	return 0, fmt.Errorf("%w: forwarding mode %q is not l2, ipip or gue", ErrService, s)
}

// Overhead returns the bytes f adds to a packet of the given IP family
// (4 or 6).
func (f Forward) Overhead(family int) int {
	ip := 20
	if family == 6 {
		ip = 40
	}
	switch f {
	case ForwardIPIP:
		return ip
	case ForwardGUE:
		return ip + 8
	}
	return 0
}

// ServiceOptions say how a service's packets reach its backends. The zero
// value is ForwardL2.
type ServiceOptions struct {
	// Forward is the mode.
	Forward Forward
	// Source is the outer source address of the encapsulating modes, of
	// the VIP's family: if invalid, the interface's first global unicast
	// address of that family.
	Source netip.Addr
	// GUEPort is ForwardGUE's outer UDP destination port: DefaultGUEPort
	// if 0.
	GUEPort uint16
	// M is the service's table size, a prime: the LB's Options.M if 0.
	// It is the service's alone: services of many backends want large
	// tables, and many services of few backends small ones (8·M bytes of
	// kernel memory each). A table holds its size, so changing M swaps
	// the service's table as any change does, atomically.
	M int
	// SourceBits, at most MaxSourceBits, varies the outer source per flow,
	// as Katran does: the lowest SourceBits bits of Source (which must be
	// zero) come from the flow hash (its bits 20 and up), so that a
	// backend's NIC, which spreads packets over its receive queues by
	// their outer addresses, spreads the service's flows too. The
	// addresses need not be assigned anywhere: nothing answers them but a
	// router's ICMP error about an encapsulated packet. 0: one source.
	SourceBits uint8
	// Conntrack is ConntrackOn (the zero value) or ConntrackOff, which
	// makes the service stateless: every packet by the table, with its
	// second hop. docs/xdp.md, "Second chance and stateless services".
	Conntrack ConntrackMode
	// SecondChance, for ForwardGUE only, is the window of second chance:
	// after a change of the service's table, a packet whose slot moved
	// carries the slot's previous owner in its GUE header, and the
	// backend that gets it without a connection of it passes it on there
	// (AttachDecap), until the service has had no change for this long.
	// It costs 8·M bytes of kernel memory while it runs. 0: none.
	SecondChance time.Duration
	// QUIC, for a UDP service, routes its QUIC packets by the server ID
	// their connection IDs carry (QUIC-LB): see QUIC. nil: none.
	QUIC *QUIC
}

// MaxSourceBits is the most bits of the outer source ServiceOptions can
// vary per flow: 65,536 addresses.
const MaxSourceBits = 16

// A Backend is a server of a service: on the load balancer's layer-2
// segment for ForwardL2, anywhere the load balancer has a route to for
// the encapsulating modes.
type Backend struct {
	// Addr is the backend's own address: its name in the Maglev table
	// (Addr.String(), after Unmap), and the address whose hardware
	// address the neighbour table gives when HW is empty.
	Addr netip.Addr
	// Weight is the backend's share, as in maglev.NewWeighted. 0 means
	// drained: the backend gets no new flows, but the flows conntrack
	// holds for it keep going to it.
	Weight uint32
	// HW is the backend's Ethernet address for ForwardL2; if empty,
	// SetService reads it from the interface's neighbour table, asking
	// the kernel to resolve it if needed (see LB.Unresolved). The
	// encapsulating modes ignore it.
	HW net.HardwareAddr
	// Down takes the backend out of service as failed (by a health
	// check): the service's table is the table of every backend, Down or
	// not, less the Down ones (maglev.Table.Without), so only their slots
	// move, and every load balancer given the same backends and the same
	// Down ones computes the same table. A Down backend leaves the data
	// plane: its tracked flows are hashed again by the table, and it is
	// not resolved. Cleared again, it takes back exactly the slots it had.
	Down bool
}

// service is the state of one service.
type service struct {
	id         uint32
	table      *maglev.Table  // the table in use: full, less the unresolved and Down backends
	full       *maglev.Table  // the table of every backend of the request
	request    []Backend      // the caller's backends, as given
	unresolved []string       // L2 backends whose MAC is not known, out of service
	gen        uint64         // the install that made this state
	opts       ServiceOptions // normalized: Source and GUEPort set for the encapsulating modes
	backends   map[netip.Addr]*backend
	down       map[netip.Addr]maglevOut // the backends out of the data plane (Down, unresolved), as the down map holds them
	adopted    []Backend                // adopted from pinned maps, until the first install: the backends the last LB left
	val        maglevService            // the service's value in services4 or services6, as last written
	prev       []maglevSlot             // the second hops in prev_tables; nil if none, or not known (adopted)
	prevUntil  time.Time                // when prev_tables' entry of the service goes; zero: it has none
	prevSized  bool                     // prev_tables' entry has a size of its own, the table's before M changed (SVC_PREV_SIZED)
	prevTimer  *time.Timer              // takes it out then
	quic       *quicState               // QUIC-LB: its configurations and server IDs in the data plane; nil: none
	handoff    string                   // the From of the Handoff the service took when it was created; "": none
}

// given returns the backends s was last given: the request, or before
// the first, those an adopted service's maps record.
func (s *service) given() []Backend {
	if s.request == nil {
		return s.adopted
	}
	return s.request
}

// backend is the state of one backend of a service: its id, the index of
// its entry in the backends and backend_stats maps, and the cookie the
// entry holds while the backend is in the service.
type backend struct {
	id, cookie uint32
	hw         net.HardwareAddr
	entry      maglevBackend // as written to the backends map
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

// SetService is SetServiceOptions with the zero ServiceOptions: svc's
// packets reach backends on the segment, by ForwardL2.
func (lb *LB) SetService(svc Service, backends []Backend) error {
	return lb.SetServiceOptions(svc, backends, ServiceOptions{})
}

// SetServiceOptions makes the load balancer send svc's packets to backends
// in the way opts says, by the Maglev table maglev.NewWeighted builds with the backends' addresses
// as names, M slots and the default hasher: the table Table returns.
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
// SetServiceOptions asks the kernel to resolve each backend's next hop,
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
func (lb *LB) SetServiceOptions(svc Service, backends []Backend, opts ServiceOptions) error {
	p, err := lb.prepare(svc, backends, opts, true)
	if err != nil {
		return err
	}
	return lb.install(svc, backends, p.bs, p.full, p.opts, p.unresolved, nil)
}

// prepared is a service's update, checked, its table built and its
// backends resolved: what install takes.
type prepared struct {
	bs         []Backend
	full       *maglev.Table
	opts       ServiceOptions
	unresolved []string
}

// prepare checks an update of svc, builds its table and resolves its
// backends, with no lock held; with wait, it waits up to resolveWait for
// the neighbours the kernel is asked to resolve (see resolve and prime).
func (lb *LB) prepare(svc Service, backends []Backend, opts ServiceOptions, wait bool) (prepared, error) {
	if err := svc.check(); err != nil {
		return prepared{}, err
	}
	if err := lb.serviceOptions(svc, &opts); err != nil {
		return prepared{}, err
	}
	encap := opts.Forward != ForwardL2
	bs := make([]Backend, len(backends))
	seen := make(map[netip.Addr]bool, len(backends))
	for i, b := range backends {
		b.Addr = b.Addr.Unmap()
		if !b.Addr.IsValid() || b.Addr.Zone() != "" {
			return prepared{}, fmt.Errorf("%w %d: invalid address %v", ErrBackend, i, b.Addr)
		}
		if seen[b.Addr] {
			return prepared{}, fmt.Errorf("%w %v: listed twice", ErrBackend, b.Addr)
		}
		seen[b.Addr] = true
		if len(b.HW) != 0 && len(b.HW) != 6 {
			return prepared{}, fmt.Errorf("%w %v: hardware address %v is not 6 bytes", ErrBackend, b.Addr, b.HW)
		}
		if encap && b.Addr.Is4() != svc.VIP.Addr().Unmap().Is4() {
			return prepared{}, fmt.Errorf("%w %v: %v encapsulates IPv4 in IPv4 and IPv6 in IPv6, and the VIP is %v", ErrBackend, b.Addr, opts.Forward, svc.VIP.Addr())
		}
		if encap {
			b.HW = nil
		}
		bs[i] = b
	}
	if opts.QUIC != nil {
		var err error
		if opts.QUIC, err = checkQUIC(svc, opts.QUIC, bs); err != nil {
			return prepared{}, err
		}
	}
	table, err := fullTable(bs, opts.M)
	if err != nil {
		return prepared{}, fmt.Errorf("xdpmaglev: service %v: %w", svc, err)
	}

	// Hardware addresses: the ones the service has, else the neighbour
	// table's, all asked for at once, outside the lock. A backend that
	// does not resolve is out of service (maglev.Table.Without: only its
	// slots move, as on every load balancer that sees the same failure)
	// until the refresh finds it resolved.
	var unresolved []string
	if !encap {
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
				return prepared{}, fmt.Errorf("%w for %v: no interface to resolve it on", ErrNoNeighbor, bs[i].Addr)
			}
			need = append(need, bs[i].Addr)
		}
		if len(need) > 0 {
			macs, err := lb.neigh.resolve(wait, need...)
			if err != nil {
				return prepared{}, err
			}
			for i := range bs {
				if len(bs[i].HW) != 0 || bs[i].Down {
					continue
				}
				if bs[i].HW = macs[bs[i].Addr]; bs[i].HW == nil {
					unresolved = append(unresolved, bs[i].Addr.String())
				}
			}
		}
	} else if lb.neigh != nil && wait {
		lb.neigh.prime(upAddrs(bs)...)
	}
	return prepared{bs: bs, full: table, opts: opts, unresolved: unresolved}, nil
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

// install sets svc to the table full less the unresolved and the Down
// backends, with bs resolved; the Down ones leave the data plane. request
// is the caller's list, kept for the refresh. With gen, it does nothing
// (errChangedSince) unless the service is still at that generation.
func (lb *LB) install(svc Service, request, bs []Backend, full *maglev.Table, opts ServiceOptions, unresolved []string, gen *uint64) error {
	table, up, err := inService(svc, bs, full, unresolved)
	if err != nil {
		return err
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.closed {
		return ErrClosed
	}
	if gen != nil && (lb.services[svc] == nil || lb.services[svc].gen != *gen) {
		return errChangedSince // the next refresh looks again
	}
	if err := lb.set(svc, table, up, opts); err != nil {
		return err
	}
	return lb.record(svc, request, bs, full, unresolved)
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

// record keeps what the refresh needs of svc's install, request as the
// caller gave it and bs as prepare normalized it, and writes bs's
// backends that are out of the data plane (Down, unresolved) to the down
// map, so that an LB that adopts the maps knows the service's whole set.
// lb.mu is held.
func (lb *LB) record(svc Service, request, bs []Backend, full *maglev.Table, unresolved []string) error {
	s := lb.services[svc]
	lb.gen++
	s.gen, s.request, s.full, s.unresolved, s.adopted = lb.gen, request, full, unresolved, nil
	out := map[netip.Addr]maglevOut{}
	for _, b := range bs {
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

// An Update is one service's backends and options, for SetServices.
type Update struct {
	Service  Service
	Backends []Backend
	Options  ServiceOptions
}

// SetServices sets each update's service as SetServiceOptions does, and
// swaps their tables in with one batch update of the map of tables: the
// kernel waits for running programs to be done with the maps it replaces
// once, not once a service (about 10 ms each: 100 tables took 1.15 s one
// by one and 9 ms in one batch; docs/l4lb.md, "Many services at scale"). Each
// service's swap is atomic, as SetServiceOptions's is. If one update is
// bad, or the data plane cannot take them all, none is made.
func (lb *LB) SetServices(us []Update) error {
	type ready struct {
		u     Update
		p     prepared
		table *maglev.Table
		up    []Backend
	}
	rs := make([]ready, 0, len(us))
	seen := make(map[Service]bool, len(us))
	if lb.neigh != nil {
		// The neighbours of every update asked for, and waited for, at
		// once: each prepare then takes what the table has.
		var l2, encap []netip.Addr
		for _, u := range us {
			if u.Options.Forward == ForwardL2 {
				for _, b := range u.Backends {
					if len(b.HW) == 0 && !b.Down {
						l2 = append(l2, b.Addr.Unmap())
					}
				}
			} else {
				encap = append(encap, upAddrs(u.Backends)...)
			}
		}
		if len(l2) > 0 {
			_, _ = lb.neigh.resolve(true, l2...) // an error is each prepare's again
		}
		if len(encap) > 0 {
			lb.neigh.prime(encap...)
		}
	}
	for _, u := range us {
		if seen[u.Service] {
			return fmt.Errorf("%w %v: updated twice", ErrService, u.Service)
		}
		seen[u.Service] = true
		p, err := lb.prepare(u.Service, u.Backends, u.Options, false)
		if err != nil {
			return err
		}
		table, up, err := inService(u.Service, p.bs, p.full, p.unresolved)
		if err != nil {
			return err
		}
		rs = append(rs, ready{u: u, p: p, table: table, up: up})
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.closed {
		return ErrClosed
	}
	sts := make([]*staged, 0, len(rs))
	for _, r := range rs {
		st, err := lb.stage(r.u.Service, r.table, r.up, r.p.opts)
		if err != nil {
			for i := len(sts) - 1; i >= 0; i-- {
				sts[i].close()
				err = sts[i].fail(err)
			}
			return err
		}
		sts = append(sts, st)
	}
	errs := lb.swapAll(sts)
	for i, st := range sts {
		if st.undone {
			continue
		}
		if err := lb.record(rs[i].u.Service, rs[i].u.Backends, rs[i].p.bs, rs[i].p.full, rs[i].p.unresolved); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// swapAll swaps the staged updates sts in, their tables with one batch
// update of the map of tables (their second hops first, one by one: a
// service's second hops change only with its table, which SetServices
// mostly makes anew), and finishes them, marking those it could not
// undone. lb.mu is held.
func (lb *LB) swapAll(sts []*staged) []error {
	var errs []error
	undo := func(st *staged, err error) {
		st.close()
		st.undone = true
		errs = append(errs, st.fail(err))
		if !st.isNew && st.old.val.LookupM == 0 && st.old.val.M != 0 {
			_ = lb.putService(st.svc, st.old) // best effort: the size its table has, which stays
		}
	}
	// A service whose size M changes: packets read the size from the
	// table's slot 0 (lookup_m 0) from a grace period before the swap to
	// one after it, so that none indexes a table by the other's size.
	resizing := 0
	for _, st := range sts {
		if st.isNew || st.old.val.LookupM == uint32(st.next.table.Size()) {
			continue
		}
		if err := lb.holdSize(st); err != nil {
			undo(st, err)
			continue
		}
		resizing++
	}
	if resizing > 0 {
		grace()
	}
	var keys, fds []uint32
	var in []*staged
	for _, st := range sts {
		if st.undone {
			continue
		}
		if err := lb.putPrev(st); err != nil {
			undo(st, err)
			continue
		}
		keys, fds, in = append(keys, st.next.id), append(fds, uint32(st.inner.FD())), append(in, st)
	}
	if len(in) > 0 {
		n, err := lb.objs.Tables.BatchUpdate(keys, fds, nil)
		if err != nil {
			// The first n are swapped in: they are finished, the rest
			// undone.
			err = fmt.Errorf("xdpmaglev: swapping the tables of %d of %d services: %w", len(in)-n, len(in), err)
			for i := len(in) - 1; i >= n; i-- {
				undo(in[i], err)
			}
			in = in[:n]
		}
	}
	if resizing > 0 {
		grace()
	}
	for _, st := range in {
		st.close() // the outer maps hold the tables
		if err := lb.finish(st); err != nil {
			st.undone = true
			errs = append(errs, err)
		}
	}
	return errs
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

// serviceOptions checks opts and fills in its defaults for svc.
func (lb *LB) serviceOptions(svc Service, opts *ServiceOptions) error {
	if opts.M == 0 {
		opts.M = lb.opts.M
	}
	if err := maglev.CheckSize(opts.M); err != nil {
		return fmt.Errorf("%w %v: M: %w", ErrService, svc, err)
	}
	if opts.Conntrack != ConntrackOn && opts.Conntrack != ConntrackOff {
		return fmt.Errorf("%w %v: Conntrack %v", ErrService, svc, opts.Conntrack)
	}
	if opts.SecondChance < 0 || (opts.SecondChance > 0 && opts.Forward != ForwardGUE) {
		return fmt.Errorf("%w %v: SecondChance %v: a positive window, with ForwardGUE (only its header carries the second hop)", ErrService, svc, opts.SecondChance)
	}
	switch opts.Forward {
	case ForwardL2:
		*opts = ServiceOptions{M: opts.M, Conntrack: opts.Conntrack, QUIC: opts.QUIC}
		return nil
	case ForwardIPIP, ForwardGUE:
	default:
		return fmt.Errorf("%w %v: forwarding mode %v", ErrService, svc, opts.Forward)
	}
	if opts.Forward == ForwardGUE && opts.GUEPort == 0 {
		opts.GUEPort = DefaultGUEPort
	}
	if opts.Forward == ForwardIPIP {
		opts.GUEPort = 0
	}
	v4 := svc.VIP.Addr().Unmap().Is4()
	if !opts.Source.IsValid() {
		if lb.neigh == nil {
			return fmt.Errorf("%w %v: %v needs a Source address: the LB has no interface to take one from", ErrService, svc, opts.Forward)
		}
		src, err := lb.neigh.addr(v4)
		if err != nil {
			return fmt.Errorf("%w %v: %v", ErrService, svc, err)
		}
		opts.Source = src
	}
	opts.Source = opts.Source.Unmap()
	if opts.Source.Is4() != v4 || opts.Source.Zone() != "" {
		return fmt.Errorf("%w %v: Source %v is not an address of the VIP's family", ErrService, svc, opts.Source)
	}
	if opts.SourceBits > MaxSourceBits {
		return fmt.Errorf("%w %v: SourceBits %d: at most %d", ErrService, svc, opts.SourceBits, MaxSourceBits)
	}
	if p, err := opts.Source.Prefix(opts.Source.BitLen() - int(opts.SourceBits)); err != nil || p.Addr() != opts.Source {
		return fmt.Errorf("%w %v: Source %v has bits set in its lowest %d (SourceBits), which vary per flow: give the prefix's first address", ErrService, svc, opts.Source, opts.SourceBits)
	}
	return nil
}

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

// set installs table for svc, with bs resolved. lb.mu is held.
func (lb *LB) set(svc Service, table *maglev.Table, bs []Backend, opts ServiceOptions) error {
	st, err := lb.stage(svc, table, bs, opts)
	if err != nil {
		return err
	}
	return errors.Join(lb.swapAll([]*staged{st})...)
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

// holdSize writes st's service's value with lookup_m 0: packets read the
// table's size from its slot 0 until finish writes the new size. lb.mu
// is held.
func (lb *LB) holdSize(st *staged) error {
	v := st.old.val
	v.LookupM = 0
	m, k := lb.key(st.svc)
	if err := m.Put(k, v); err != nil {
		return fmt.Errorf("xdpmaglev: writing service %v: %w", st.svc, err)
	}
	st.old.val = v
	return nil
}

// graceWait is how long grace sleeps where the kernel cannot wait for a
// grace period on the process's behalf: far longer than any run of the
// program.
const graceWait = 50 * time.Millisecond

// grace waits until every run of the program that began before it has
// ended: an RCU grace period (membarrier's MEMBARRIER_CMD_GLOBAL waits for
// one; XDP programs run inside RCU read-side sections), or graceWait where
// membarrier refuses (a kernel with nohz_full CPUs, or a filter).
func grace() {
	const membarrierCmdGlobal = 1 // MEMBARRIER_CMD_GLOBAL, <linux/membarrier.h>
	if _, _, e := unix.Syscall(unix.SYS_MEMBARRIER, membarrierCmdGlobal, 0, 0); e != 0 {
		time.Sleep(graceWait)
	}
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

// Unresolved returns the ForwardL2 backends of svc whose MAC the
// neighbour table does not have, sorted: they are out of service, their
// slots the others', until the kernel resolves them (the LB asks again
// every second). It returns nil if there are none or svc is not set.
func (lb *LB) Unresolved(svc Service) []netip.Addr {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	s := lb.services[svc]
	if s == nil || len(s.unresolved) == 0 {
		return nil
	}
	out := make([]netip.Addr, 0, len(s.unresolved))
	for _, name := range s.unresolved {
		if a, err := netip.ParseAddr(name); err == nil {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
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
