// Parsing: a frame into the flow it belongs to, or the counter of the
// reason it is not the load balancer's to forward. Each helper reads a
// header only after checking it whole against the end of the frame.

#pragma once

#include "bpf.h"
#include "headers.h"
#include "flow.h"

// One convention for every parser here (and the decapsulator's, which
// reads its outer headers with ip4_header and ip6_header): a parser
// returns PARSED when it read what it was for, else the reason it did
// not, a counter (C_PASS_..., or the decapsulator's D_...). PARSED is no
// counter's index.
#define PARSED (-1)

// A parsed packet: its flow (for an ICMP error, the flow the error is
// about, as that flow's own packets carry it), the length of its IP packet
// (the IP header's, which a frame's padding may exceed), what kind, and,
// once the IP header was whole, its destination and protocol, which the
// loop guard (vip.h) reads of a packet that is not forwarded.
struct pkt {
	struct flow f;
	__u32 l3_len;
	__u8 icmp; // an ICMP error about flow f
	__u8 df;   // IPv4 with DF set, or IPv6: never fragmented on the way
	__u8 tcp;  // TCP: the flags (TCP_SYN, ...)
	__u8 ip_family; // 4 or 6 once the IP header was read whole; 0 before
	__u8 ip_proto;  // the IP protocol (IPv6: the first next header)
	__u32 ip_dst[4]; // the IP destination (IPv4: the first word)
};

// parse_l4 reads the ports of a TCP or UDP header at l4, whole or not at
// all, and a TCP header's flags, and checks its data offset.
static __always_inline int parse_l4(void *l4, void *end, struct pkt *p)
{
	struct flow *f = &p->f;
	__u16 *ports = l4;
	if (f->proto == IPPROTO_TCP) {
		if (l4 + TCP_HLEN > end)
			return C_PASS_TRUNCATED;
		if ((((__u8 *)l4)[12] >> 4) < 5)
			return C_PASS_MALFORMED;
		p->tcp = ((__u8 *)l4)[13];
	} else if (l4 + UDP_HLEN > end) {
		return C_PASS_TRUNCATED;
	}
	f->sport = ports[0];
	f->dport = ports[1];
	return PARSED;
}

// ipv6_next classifies an IPv6 next-header value: PARSED for TCP and
// UDP, else the counter of the reason the packet passes.
static __always_inline int ipv6_next(__u8 next)
{
	switch (next) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
		return PARSED;
	case 44: // fragment
		return C_PASS_FRAGMENT;
	case 0:   // hop-by-hop options
	case 43:  // routing
	case 51:  // authentication
	case 60:  // destination options
	case 135: // mobility
	case 139: // host identity protocol
	case 140: // shim6
	case 253: // experimental
	case 254: // experimental
		return C_PASS_IPV6_EXT;
	}
	return C_PASS_NOT_TCP_UDP;
}

// parse_icmp4 reads an ICMPv4 destination unreachable at l4 whose quoted
// packet is a TCP or UDP packet from a VIP (a backend's reply), and fills
// f with the flow it is about: the quoted packet's 5-tuple reversed.
// Other ICMP returns C_PASS_NOT_TCP_UDP.
static __always_inline int parse_icmp4(void *l4, void *end, struct flow *f)
{
	__u8 *icmp = l4;
	if (l4 + ICMP_HLEN > end)
		return C_PASS_TRUNCATED;
	if (icmp[0] != 3) // destination unreachable, fragmentation needed among them
		return C_PASS_NOT_TCP_UDP;
	struct iphdr *in = l4 + ICMP_HLEN;
	if ((void *)(in + 1) + 8 > end)
		return C_PASS_TRUNCATED;
	if (in->version_ihl != 0x45)
		return C_PASS_MALFORMED;
	if (in->protocol != IPPROTO_TCP && in->protocol != IPPROTO_UDP)
		return C_PASS_NOT_TCP_UDP;
	__u16 *ports = (void *)(in + 1);
	f->src[0] = in->daddr;
	f->dst[0] = in->saddr;
	f->sport = ports[1];
	f->dport = ports[0];
	f->proto = in->protocol;
	return PARSED;
}

// parse_icmp6 is parse_icmp4 for ICMPv6 destination unreachable (1) and
// packet too big (2).
static __always_inline int parse_icmp6(void *l4, void *end, struct flow *f)
{
	__u8 *icmp = l4;
	if (l4 + ICMP_HLEN > end)
		return C_PASS_TRUNCATED;
	if (icmp[0] != 1 && icmp[0] != 2)
		return C_PASS_NOT_TCP_UDP;
	struct ipv6hdr *in = l4 + ICMP_HLEN;
	if ((void *)(in + 1) + 8 > end)
		return C_PASS_TRUNCATED;
	if ((*(__u8 *)in >> 4) != 6)
		return C_PASS_MALFORMED;
	if (in->nexthdr != IPPROTO_TCP && in->nexthdr != IPPROTO_UDP)
		return C_PASS_NOT_TCP_UDP;
	__u16 *ports = (void *)(in + 1);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		f->src[i] = in->daddr[i];
		f->dst[i] = in->saddr[i];
	}
	f->sport = ports[1];
	f->dport = ports[0];
	f->proto = in->nexthdr;
	return PARSED;
}

// ip4_header reads the IPv4 header at l3 into p: whole, version 4 and
// a header length of 5 words or more; then p's IP destination and
// protocol, the flow's family and addresses, and the IP length and DF,
// which the caller checks against the frame. It returns PARSED, or
// C_PASS_TRUNCATED or C_PASS_MALFORMED.
static __always_inline int ip4_header(void *l3, void *end, struct pkt *p)
{
	struct iphdr *ip = l3;
	if (l3 + sizeof(*ip) > end)
		return C_PASS_TRUNCATED;
	if ((ip->version_ihl >> 4) != 4 || (ip->version_ihl & 0xf) < 5)
		return C_PASS_MALFORMED;
	p->ip_family = 4;
	p->ip_proto = ip->protocol;
	p->ip_dst[0] = ip->daddr;
	p->f.family = 4;
	p->f.src[0] = ip->saddr;
	p->f.dst[0] = ip->daddr;
	p->l3_len = bpf_ntohs(ip->tot_len);
	p->df = (ip->frag_off & bpf_ntohs(IP_DF)) != 0;
	return PARSED;
}

// ip6_header is ip4_header for IPv6: the header whole and version 6; its
// protocol is the first next header.
static __always_inline int ip6_header(void *l3, void *end, struct pkt *p)
{
	struct ipv6hdr *ip6 = l3;
	if (l3 + sizeof(*ip6) > end)
		return C_PASS_TRUNCATED;
	if ((*(__u8 *)ip6 >> 4) != 6)
		return C_PASS_MALFORMED;
	p->ip_family = 6;
	p->ip_proto = ip6->nexthdr;
	p->f.family = 6;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		p->ip_dst[i] = ip6->daddr[i];
		p->f.src[i] = ip6->saddr[i];
		p->f.dst[i] = ip6->daddr[i];
	}
	p->l3_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
	p->df = 1;
	return PARSED;
}

// parse_ipv4 reads the IPv4 packet at l3 into p (parse's checks after
// the EtherType).
static __always_inline int parse_ipv4(void *l3, void *end, struct pkt *p)
{
	struct flow *f = &p->f;
	struct iphdr *ip = l3;
	int r = ip4_header(l3, end, p);
	if (r != PARSED)
		return r;
	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP && ip->protocol != IPPROTO_ICMP)
		return C_PASS_NOT_TCP_UDP;
	if (ip->frag_off & bpf_ntohs(IP_MF_OFFSET))
		return C_PASS_FRAGMENT;
	if ((ip->version_ihl & 0xf) != 5)
		return C_PASS_IP_OPTIONS;
	if (ip->protocol == IPPROTO_ICMP) {
		r = parse_icmp4(l3 + sizeof(*ip), end, f);
		if (r != PARSED)
			return r;
		if (f->dst[0] != ip->daddr) // about a packet from elsewhere than the VIP
			return C_PASS_NOT_TCP_UDP;
		p->icmp = 1;
	} else {
		f->proto = ip->protocol;
		r = parse_l4(l3 + sizeof(*ip), end, p);
		if (r != PARSED)
			return r;
	}
	if (l3 + p->l3_len > end || p->l3_len < sizeof(*ip) + UDP_HLEN)
		return C_PASS_MALFORMED;
	return PARSED;
}

// parse_ipv6 reads the IPv6 packet at l3 into p (parse's checks after
// the EtherType).
static __always_inline int parse_ipv6(void *l3, void *end, struct pkt *p)
{
	struct flow *f = &p->f;
	struct ipv6hdr *ip6 = l3;
	int r = ip6_header(l3, end, p);
	if (r != PARSED)
		return r;
	if (ip6->nexthdr == IPPROTO_ICMPV6) {
		r = parse_icmp6(l3 + sizeof(*ip6), end, f);
		if (r != PARSED)
			return r;
		if (f->dst[0] != ip6->daddr[0] || f->dst[1] != ip6->daddr[1] ||
		    f->dst[2] != ip6->daddr[2] || f->dst[3] != ip6->daddr[3])
			return C_PASS_NOT_TCP_UDP;
		p->icmp = 1;
	} else {
		r = ipv6_next(ip6->nexthdr);
		if (r != PARSED)
			return r;
		f->proto = ip6->nexthdr;
		r = parse_l4(l3 + sizeof(*ip6), end, p);
		if (r != PARSED)
			return r;
	}
	if (l3 + p->l3_len > end || p->l3_len < sizeof(*ip6) + UDP_HLEN)
		return C_PASS_MALFORMED;
	return PARSED;
}

// parse fills p from the packet, or returns the counter of the reason it
// passes. It reads nothing beyond end: each header is checked whole before
// any of its fields is read. The checks, in order: Ethernet header,
// EtherType, IP header, IPv4 version and header length, protocol
// (IPv6: extension headers first), fragments, IPv4 options, then the TCP
// (20 bytes, data offset 5 or more) or UDP (8 bytes) header, or the ICMP
// error and the packet it quotes; last, an IP length beyond the frame or
// too short for the headers is malformed.
static __always_inline int parse(void *data, void *end, struct pkt *p)
{
	struct ethhdr *eth = data;
	if (data + sizeof(*eth) > end)
		return C_PASS_TRUNCATED;
	void *l3 = data + sizeof(*eth);
	if (eth->proto == bpf_ntohs(ETH_P_IP))
		return parse_ipv4(l3, end, p);
	if (eth->proto == bpf_ntohs(ETH_P_IPV6))
		return parse_ipv6(l3, end, p);
	if (eth->proto == bpf_htons(ETH_P_8021Q) || eth->proto == bpf_htons(ETH_P_8021AD))
		return C_PASS_VLAN;
	return C_PASS_NOT_IP;
}
