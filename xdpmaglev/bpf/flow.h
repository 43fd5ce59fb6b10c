// A packet's flow, and the load balancer's counters, among them the
// reasons a packet is not forwarded: what the parser (parse.h) fills and
// returns, apart from maps.h so that the decapsulator (decap.c), which
// reads its outer headers with the same parser, shares them without the
// load balancer's maps. Types the Go side shares, as maps.h's.

#pragma once

#include "bpf.h"

// A flow's 5-tuple, as the packet carries it (addresses and ports in
// network byte order; an IPv4 address fills the first word). It is the
// conntrack key.
struct flow {
	__u32 src[4];
	__u32 dst[4];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 family; // 4 or 6
	__u16 pad;
};

// Counter indexes: the Go side's counter names (counterNames, stats.go),
// by these names: stats.go fails to compile when the two differ in length.
enum counter {
	C_TX,            // forwarded to a backend (XDP_TX or XDP_REDIRECT)
	C_CT_HIT,        // conntrack named a backend still in the service
	C_CT_MISS,       // no usable conntrack entry: the table chose
	C_CT_STALE,      // of the misses, an entry whose backend left
	C_CT_REOPEN,     // of the misses, a TCP SYN on the tuple of a flow that ended (CT_CLOSED) or whose backend drains
	C_CT_INSERT,     // conntrack entries written
	C_CT_FLOOD,      // of the misses, routed without an entry: the flood guard was on
	C_CT_CLOSED,     // entries marked CT_CLOSED: the client sent a FIN or a RST
	C_STATELESS,     // packets of stateless services: routed by the table, conntrack neither read nor written
	C_SECOND_HOP,    // forwarded with a second hop, the slot's previous owner, in the GUE header
	C_ICMP_FORWARDED, // an ICMP error about a flow, sent to the flow's backend
	C_ICMP_TOO_BIG,  // ICMP "too big" sent to a client: its packet did not fit once encapsulated
	C_PASS_NOT_IP,   // not IPv4 or IPv6 (ARP, LLDP, ...)
	C_PASS_VLAN,     // a frame with its 802.1Q or 802.1ad tag in it: not this device's untagged segment
	C_PASS_TRUNCATED, // a header cut short
	C_PASS_MALFORMED, // an impossible version, header or total length, or TCP data offset
	C_PASS_NOT_TCP_UDP, // ICMP and other protocols
	C_PASS_FRAGMENT, // an IPv4 fragment or an IPv6 fragment header
	C_PASS_IP_OPTIONS, // IPv4 with options
	C_PASS_IPV6_EXT, // an IPv6 extension header other than a fragment's
	C_PASS_NO_SERVICE, // TCP or UDP, but to no service
	C_DROP_NO_BACKEND, // to a service whose table has no backend
	C_DROP_TOO_BIG,  // too big once encapsulated, and no ICMP allowed (IPv4 without DF, or an ICMP error)
	C_DROP_NO_ROUTE, // bpf_fib_lookup found no route to the backend
	C_DROP_NO_NEIGHBOR, // bpf_fib_lookup found the route, but no neighbour entry for its next hop
	C_DROP_FORWARDING_OFF, // bpf_fib_lookup: forwarding is off on the interface (sysctl net.ipv4.conf.DEV.forwarding, net.ipv6.conf.all.forwarding)
	C_DROP_NO_ROOM,  // the driver had no headroom for the outer header
	C_DROP_VIP_NO_SERVICE, // TCP or UDP to a VIP, at a port or protocol no service takes
	C_DROP_VIP_FRAGMENT, // a fragment to a VIP
	C_DROP_VIP_ICMP, // ICMP to a VIP that is no error about a flow of a service (echo requests among them)
	C_DROP_VIP_OTHER, // anything else to a VIP: other protocols, IP options, IPv6 extension headers, malformed or cut short
	// QUIC-LB services' UDP packets (quic.h): by the connection ID, or
	// by the table for a reason.
	C_QUIC_CID,       // its destination connection ID named a server in service: sent to it, no conntrack
	C_QUIC_DECRYPTED, // an encrypted ID decrypted (not in quic_cache): AES ran
	C_QUIC_INITIAL,   // a long header Initial or 0-RTT packet, whose ID the client chose: by the table
	C_QUIC_LONG_OTHER, // another long header: a version other than 1 and 2, a Retry, a Version Negotiation: by the table
	C_QUIC_UNROUTABLE, // an ID of the codepoint 0b111, which carries no server ID: by the table
	C_QUIC_UNKNOWN_CONFIG, // an ID of a codepoint with no configuration: by the table
	C_QUIC_UNKNOWN_SERVER, // an ID whose server ID names no backend in service: by the table
	C_QUIC_SHORT,     // a packet too short for a connection ID of its configuration (or a long header's ID shorter): by the table
	C_MAX,
};
