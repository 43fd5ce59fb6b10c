package xdpmaglev

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/maglevlb/maglev"
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

// overhead returns the bytes f adds to a packet of the given IP family
// (4 or 6).
func (f Forward) overhead(family int) int {
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

// Validate checks svc, o and backends as SetService does before it
// touches the data plane, with no LB: it returns the error SetService
// would for bad input (wrapping ErrService or ErrBackend), or nil. What
// only an LB knows is left to SetService: the table size of an M of 0
// (the LB's Options.M), the Source of an encapsulating mode without one
// (the interface's address), and the neighbours of ForwardL2 backends.
func (o ServiceOptions) Validate(svc Service, backends []Backend) error {
	if err := svc.check(); err != nil {
		return err
	}
	if err := o.check(svc); err != nil {
		return err
	}
	bs, err := checkBackends(svc, backends, o)
	if err != nil {
		return err
	}
	if o.QUIC != nil {
		_, err = checkQUIC(svc, o.QUIC, bs)
	}
	return err
}

// check checks o for svc, but for what only an LB knows (see Validate).
func (o ServiceOptions) check(svc Service) error {
	if o.M != 0 {
		if err := maglev.CheckSize(o.M); err != nil {
			return fmt.Errorf("%w %v: M: %w", ErrService, svc, err)
		}
	}
	if o.Conntrack != ConntrackOn && o.Conntrack != ConntrackOff {
		return fmt.Errorf("%w %v: Conntrack %v", ErrService, svc, o.Conntrack)
	}
	if o.SecondChance < 0 {
		return fmt.Errorf("%w %v: SecondChance %v: a window is positive", ErrService, svc, o.SecondChance)
	}
	if o.SecondChance > 0 && o.Forward != ForwardGUE {
		return fmt.Errorf("%w %v: second chance needs ForwardGUE, not %v: only GUE's header carries the second hop", ErrService, svc, o.Forward)
	}
	switch o.Forward {
	case ForwardL2:
		return nil
	case ForwardIPIP, ForwardGUE:
	default:
		return fmt.Errorf("%w %v: forwarding mode %v", ErrService, svc, o.Forward)
	}
	if o.SourceBits > MaxSourceBits {
		return fmt.Errorf("%w %v: SourceBits %d: at most %d", ErrService, svc, o.SourceBits, MaxSourceBits)
	}
	if !o.Source.IsValid() {
		return nil // the interface's, which SetService checks
	}
	src := o.Source.Unmap()
	if src.Is4() != svc.VIP.Addr().Unmap().Is4() || src.Zone() != "" {
		return fmt.Errorf("%w %v: Source %v is not an address of the VIP's family", ErrService, svc, src)
	}
	if p, err := src.Prefix(src.BitLen() - int(o.SourceBits)); err != nil || p.Addr() != src {
		return fmt.Errorf("%w %v: Source %v has bits set in its lowest %d (SourceBits), which vary per flow: give the prefix's first address", ErrService, svc, src, o.SourceBits)
	}
	return nil
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
