// Package xdpmaglev is a layer-4 load balancer in the kernel: an XDP
// program that sends every TCP or UDP packet addressed to a service to the
// backend its Maglev table names, and the Go control plane that loads it
// and fills its tables.
//
//	lb, err := xdpmaglev.Load("eth0", xdpmaglev.Options{Seed: fleetSeed})
//	if err != nil {
//		return err // xdpmaglev: ... (errors.Is-matchable)
//	}
//	defer lb.Close() // detaches the program and frees its maps
//	svc := xdpmaglev.Service{VIP: netip.MustParseAddrPort("203.0.113.1:80"), Proto: xdpmaglev.TCP}
//	err = lb.SetService(svc, []xdpmaglev.Backend{
//		{Addr: netip.MustParseAddr("10.0.0.11"), Weight: 1}, // MAC from the neighbour table
//		{Addr: netip.MustParseAddr("10.0.0.12"), Weight: 1},
//	}, xdpmaglev.ServiceOptions{}) // ForwardL2: backends on the segment
//
// Per packet, the program hashes the 5-tuple (FlowHash, seeded), looks the
// flow up in connection tracking (an LRU map from the 5-tuple to the
// backend its first packet went to, as in section 3.3 of the Maglev paper),
// and otherwise takes the backend of slot hash mod M of the service's
// table. It forwards by direct server return at layer 2, as LVS-DR does:
// the frame's destination MAC becomes the backend's, its source MAC the
// interface's, and it leaves by XDP_TX. Backends hold the VIP on their
// loopback device and answer clients directly. Everything else (other
// addresses, ARP, ICMP, fragments, IP options, IPv6 extension headers,
// malformed headers) passes to the kernel, counted by reason.
//
// The table of a service is maglev.NewWeighted's, with the backends'
// addresses as names, so any Go process can say where a new flow goes:
//
//	lb.Table(svc).LookupHash(xdpmaglev.FlowHash(seed, client, svc.VIP, uint8(svc.Proto)))
//
// The program is C (bpf/maglev.c), compiled by cilium/ebpf's bpf2go; the
// generated Go and objects are committed, so building this package needs
// no C compiler. Loading it needs Linux and root (CAP_BPF, CAP_NET_ADMIN).
// docs/xdp.md in the repository is the guide (the topology, the
// forwarding modes, the limits); docs/xdp-design.md has the guarantees
// and docs/testing-xdp.md the measurements.
package xdpmaglev
