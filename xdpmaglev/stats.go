package xdpmaglev

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Counter names, indexed by the data plane's counter enum (bpf/maps.h,
// generated into maglev_bpfel.go), so a name cannot sit at another
// counter's index; the constant below fails to compile when the C enum
// gains or loses a counter.
var counterNames = [...]string{
	maglevCounterC_TX:                  "tx",
	maglevCounterC_CT_HIT:              "conntrack_hit",
	maglevCounterC_CT_MISS:             "conntrack_miss",
	maglevCounterC_CT_STALE:            "conntrack_stale",
	maglevCounterC_CT_REOPEN:           "conntrack_reopen",
	maglevCounterC_CT_INSERT:           "conntrack_insert",
	maglevCounterC_CT_FLOOD:            "conntrack_flood",
	maglevCounterC_CT_CLOSED:           "conntrack_closed",
	maglevCounterC_STATELESS:           "stateless",
	maglevCounterC_SECOND_HOP:          "second_hop",
	maglevCounterC_ICMP_FORWARDED:      "icmp_forwarded",
	maglevCounterC_ICMP_TOO_BIG:        "icmp_too_big",
	maglevCounterC_PASS_NOT_IP:         "pass_not_ip",
	maglevCounterC_PASS_VLAN:           "pass_vlan",
	maglevCounterC_PASS_TRUNCATED:      "pass_truncated",
	maglevCounterC_PASS_MALFORMED:      "pass_malformed",
	maglevCounterC_PASS_NOT_TCP_UDP:    "pass_not_tcp_udp",
	maglevCounterC_PASS_FRAGMENT:       "pass_fragment",
	maglevCounterC_PASS_IP_OPTIONS:     "pass_ip_options",
	maglevCounterC_PASS_IPV6EXT:        "pass_ipv6_ext",
	maglevCounterC_PASS_NO_SERVICE:     "pass_no_service",
	maglevCounterC_DROP_NO_BACKEND:     "drop_no_backend",
	maglevCounterC_DROP_TOO_BIG:        "drop_too_big",
	maglevCounterC_DROP_NO_ROUTE:       "drop_no_route",
	maglevCounterC_DROP_NO_NEIGHBOR:    "drop_no_neighbor",
	maglevCounterC_DROP_FORWARDING_OFF: "drop_forwarding_off",
	maglevCounterC_DROP_NO_ROOM:        "drop_no_room",
	maglevCounterC_DROP_VIP_NO_SERVICE: "drop_vip_no_service",
	maglevCounterC_DROP_VIP_FRAGMENT:   "drop_vip_fragment",
	maglevCounterC_DROP_VIP_ICMP:       "drop_vip_icmp",
	maglevCounterC_DROP_VIP_OTHER:      "drop_vip_other",
	maglevCounterC_QUIC_CID:            "quic_cid",
	maglevCounterC_QUIC_DECRYPTED:      "quic_decrypted",
	maglevCounterC_QUIC_INITIAL:        "quic_table_initial",
	maglevCounterC_QUIC_LONG_OTHER:     "quic_table_long_other",
	maglevCounterC_QUIC_UNROUTABLE:     "quic_table_unroutable",
	maglevCounterC_QUIC_UNKNOWN_CONFIG: "quic_table_unknown_config",
	maglevCounterC_QUIC_UNKNOWN_SERVER: "quic_table_unknown_server",
	maglevCounterC_QUIC_SHORT:          "quic_table_short",
}

// Both are 0 only when counterNames has one name per counter.
const (
	_ = uint(len(counterNames) - int(maglevCounterC_MAX))
	_ = uint(int(maglevCounterC_MAX) - len(counterNames))
)

// Stats are the data plane's counters, summed over CPUs, since the maps
// were made: a Load that adopts pinned maps (Options.PinPath) goes on
// counting where the last LB left off.
type Stats struct {
	// Forwarded counts the packets sent to a backend (XDP_TX).
	Forwarded uint64 `json:"forwarded"`
	// Conntrack counts lookups and writes of connection tracking: a hit
	// names a backend still in the service, and the packet follows it; a
	// miss sends the flow to the table, and Inserts counts the entries
	// then written (new, or replacing one). Of the misses, Stale found an
	// entry whose backend had left, and Reopened a TCP SYN on the tuple of
	// a flow that had ended (Closed counts the entries a FIN or RST
	// marked so) or whose backend was draining.
	Conntrack struct {
		Hits     uint64 `json:"hits"`
		Misses   uint64 `json:"misses"`
		Stale    uint64 `json:"stale"`
		Reopened uint64 `json:"reopened"`
		Inserts  uint64 `json:"inserts"`
		Closed   uint64 `json:"closed"`
		// Flood counts the misses routed by the table without an
		// entry written, because the flood guard had no credit
		// (Options.FloodRate).
		Flood uint64 `json:"flood"`
	} `json:"conntrack"`
	// Stateless counts the packets of stateless services
	// (ServiceOptions.Conntrack off), routed by the table alone.
	Stateless uint64 `json:"stateless"`
	// SecondHops counts the packets forwarded with a second hop, their
	// slot's previous owner, in the GUE header (second chance).
	SecondHops uint64 `json:"second_hops"`
	// FloodSeconds is the time the flood guard refused entries, summed
	// over CPUs: on each CPU, from a new flow refused an entry to the next
	// one refused.
	FloodSeconds float64 `json:"flood_seconds"`
	// ICMP counts the ICMP errors about a flow sent to the flow's
	// backend (Forwarded), and the "too big" errors sent to clients whose
	// packets would not fit the route's MTU once encapsulated (TooBig).
	ICMP struct {
		Forwarded uint64 `json:"forwarded"`
		TooBig    uint64 `json:"too_big"`
	} `json:"icmp"`
	// QUIC counts the UDP packets of QUIC-LB services (ServiceOptions.QUIC)
	// by route: CID, those whose destination connection ID named a
	// server in service, sent to it; Table, the others, sent by the
	// table, by reason: initial (a long header Initial or 0-RTT packet,
	// whose ID the client chose), long_other (another long header: a
	// version other than 1 and 2, a Retry, a Version Negotiation),
	// unroutable (the codepoint 0b111), unknown_config (a codepoint with
	// no configuration), unknown_server (a server ID that names no
	// backend in service), short (a packet too short for its ID).
	// Decrypted counts the encrypted IDs decrypted, those the cache did
	// not have (Options.QUICCacheSize). ICMP errors about QUIC flows are
	// not counted here: they go by the table (ICMP).
	QUIC struct {
		CID       uint64            `json:"cid"`
		Decrypted uint64            `json:"decrypted"`
		Table     map[string]uint64 `json:"table"`
	} `json:"quic"`
	// Passed counts the packets passed to the kernel (XDP_PASS), by
	// reason: not_ip, vlan, truncated, malformed, not_tcp_udp, fragment,
	// ip_options, ipv6_ext, no_service (docs/xdp-reference.md, "Per packet", defines each).
	Passed map[string]uint64 `json:"passed"`
	// Dropped counts the packets dropped (XDP_DROP), by reason:
	// no_backend (a packet to a service whose table is empty), too_big,
	// no_route, no_neighbor, forwarding_off, no_room, and what reaches a
	// VIP and is not forwarded: vip_no_service (another port or
	// protocol), vip_fragment, vip_icmp (ICMP that is no error about a
	// flow of a service), vip_other (docs/xdp-reference.md, "The loop guard").
	Dropped map[string]uint64 `json:"dropped"`
	// Services has one entry per service set, by VIP then protocol.
	Services []ServiceStats `json:"services"`
	// Driver are the XDP counters the interface's driver keeps (ethtool
	// -S, the names with "xdp", summed over queues: rx_xdp_tx_errors on a
	// veth, for example), nil without an interface or where the driver
	// keeps none. They see what the program cannot: a frame of XDP_TX or
	// XDP_REDIRECT that the driver failed to send, which Forwarded counts
	// (on a veth, every XDP_TX fails while the peer has no XDP program).
	Driver map[string]uint64 `json:"driver,omitempty"`
}

// ServiceStats count the packets forwarded for one service.
type ServiceStats struct {
	Service Service `json:"-"`
	Name    string  `json:"service"` // Service.String()
	Packets uint64  `json:"packets"`
	Bytes   uint64  `json:"bytes"` // frame bytes, Ethernet header included
	// Backends has one entry per backend in the service, by address.
	// A backend's counters start at 0 when it joins the service.
	Backends []BackendStats `json:"backends"`
}

// BackendStats count the packets forwarded to one backend of a service.
type BackendStats struct {
	Addr   netip.Addr `json:"addr"`
	Weight uint32     `json:"weight"` // 0 while Unresolved
	// Unresolved: an L2 backend whose MAC the neighbour table does not
	// have, out of service (its slots given to the others, as
	// maglev.Table.Without does) until the kernel resolves it; the LB asks
	// again every second.
	Unresolved bool   `json:"unresolved,omitempty"`
	Packets    uint64 `json:"packets"`
	Bytes      uint64 `json:"bytes"`
}

// Stats reads the counters. It costs one system call per service and
// backend, two more, and three for the driver's counters.
func (lb *LB) Stats() (Stats, error) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.closed {
		return Stats{}, ErrClosed
	}
	var st Stats
	st.Passed = map[string]uint64{}
	st.Dropped = map[string]uint64{}
	st.QUIC.Table = map[string]uint64{}
	var per []maglevCpuCounters // one per CPU
	if err := lb.objs.Counters.Lookup(uint32(0), &per); err != nil {
		return Stats{}, fmt.Errorf("xdpmaglev: reading the counters: %w", err)
	}
	fields := map[string]*uint64{
		"tx":               &st.Forwarded,
		"conntrack_hit":    &st.Conntrack.Hits,
		"conntrack_miss":   &st.Conntrack.Misses,
		"conntrack_stale":  &st.Conntrack.Stale,
		"conntrack_reopen": &st.Conntrack.Reopened,
		"conntrack_insert": &st.Conntrack.Inserts,
		"conntrack_closed": &st.Conntrack.Closed,
		"conntrack_flood":  &st.Conntrack.Flood,
		"stateless":        &st.Stateless,
		"second_hop":       &st.SecondHops,
		"icmp_forwarded":   &st.ICMP.Forwarded,
		"icmp_too_big":     &st.ICMP.TooBig,
		"quic_cid":         &st.QUIC.CID,
		"quic_decrypted":   &st.QUIC.Decrypted,
	}
	for i, name := range counterNames {
		var n uint64
		for _, c := range per {
			n += c.N[i]
		}
		if f := fields[name]; f != nil {
			*f = n
		} else if r, ok := strings.CutPrefix(name, "pass_"); ok {
			st.Passed[r] = n
		} else if r, ok := strings.CutPrefix(name, "drop_"); ok {
			st.Dropped[r] = n
		} else if r, ok := strings.CutPrefix(name, "quic_table_"); ok {
			st.QUIC.Table[r] = n
		}
	}
	var flood []maglevFlood
	if err := lb.objs.FloodState.Lookup(uint32(0), &flood); err != nil {
		return Stats{}, fmt.Errorf("xdpmaglev: reading the flood guard: %w", err)
	}
	for _, f := range flood {
		st.FloodSeconds += float64(f.Ns) / 1e9
	}
	var err error
	if st.Driver, err = lb.driver(); err != nil {
		return Stats{}, err
	}
	if st.Services, err = lb.serviceStats(); err != nil {
		return Stats{}, err
	}
	return st, nil
}

// serviceStats returns the counters of each service and its backends,
// sorted by VIP and protocol, and by address. lb.mu is held.
func (lb *LB) serviceStats() ([]ServiceStats, error) {
	var out []ServiceStats
	for svc, s := range lb.services {
		ss := ServiceStats{Service: svc, Name: svc.String()}
		var err error
		if ss.Packets, ss.Bytes, err = sumStats(lb, true, s.id); err != nil {
			return nil, err
		}
		weights := s.table.Weights()
		for addr, b := range s.backends {
			bs := BackendStats{Addr: addr, Weight: weights[s.table.Index(addr.String())], Unresolved: slices.Contains(s.unresolved, addr.String())}
			if bs.Packets, bs.Bytes, err = sumStats(lb, false, b.id); err != nil {
				return nil, err
			}
			ss.Backends = append(ss.Backends, bs)
		}
		slices.SortFunc(ss.Backends, func(a, b BackendStats) int { return a.Addr.Compare(b.Addr) })
		out = append(out, ss)
	}
	slices.SortFunc(out, func(a, b ServiceStats) int {
		if c := a.Service.VIP.Compare(b.Service.VIP); c != 0 {
			return c
		}
		return int(a.Service.Proto) - int(b.Service.Proto)
	})
	return out, nil
}

// Driver returns the XDP counters of the interface's driver, as
// Stats.Driver has them, alone: three system calls, whatever the number
// of services and backends. It returns nil without an interface, or where
// the driver keeps none.
func (lb *LB) Driver() (map[string]uint64, error) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.closed {
		return nil, ErrClosed
	}
	return lb.driver()
}

// driver reads the driver's counters. lb.mu is held.
func (lb *LB) driver() (map[string]uint64, error) {
	if lb.drv == nil {
		return nil, nil
	}
	return lb.drv.stats()
}

func sumStats(lb *LB, service bool, id uint32) (packets, bytes uint64, err error) {
	m := lb.objs.BackendStats
	if service {
		m = lb.objs.ServiceStats
	}
	var per []maglevStats
	if err := m.Lookup(id, &per); err != nil {
		return 0, 0, fmt.Errorf("xdpmaglev: reading counters: %w", err)
	}
	for _, v := range per {
		packets += v.Packets
		bytes += v.Bytes
	}
	return packets, bytes, nil
}
