// Outer headers, shared by the load balancer (encap.h), which puts them
// in front of a client's packet for IPIP and GUE, and the decapsulator
// (decap.c), which makes them anew to pass a packet on to its second hop.

#pragma once

#include "bpf.h"
#include "headers.h"
#include "csum.h"

// A frame's MACs as its Ethernet header holds them, destination then
// source: 12 octets copied as one unit, three 4-octet words (a frame's
// start and a map value's are 4-aligned).
struct macs {
	__u8 dst[6];
	__u8 src[6];
} __attribute__((aligned(4)));

_Static_assert(sizeof(struct macs) == 12, "struct macs is the Ethernet header's 12 octets of MACs");
_Static_assert(__builtin_offsetof(struct ethhdr, dest) == __builtin_offsetof(struct macs, dst) &&
		       __builtin_offsetof(struct ethhdr, source) == __builtin_offsetof(struct macs, src),
	       "struct macs lays the MACs out as struct ethhdr does");

// outer_eth writes the Ethernet header at eth: the MACs m, and the
// EtherType of IP version v (4 or 6).
static __always_inline void outer_eth(struct ethhdr *eth, struct macs m, int v)
{
	*(struct macs *)eth = m;
	eth->proto = v == 4 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
}

// outer_ip4 writes an outer IPv4 header at ip: a packet of tot_len octets
// in all, of protocol proto, from saddr to daddr (network order), DF set,
// TTL 64. The checksum comes from the values, not read back from the
// header just written: 32-bit words summed fold to the 16-bit sum.
static __always_inline void outer_ip4(struct iphdr *ip, __u32 tot_len, __u8 proto, __u32 saddr, __u32 daddr)
{
	__u16 len = bpf_htons(tot_len);
	__u16 ttl_proto = bpf_htons(64 << 8 | proto);
	ip->version_ihl = 0x45;
	ip->tos = 0;
	ip->tot_len = len;
	ip->id = 0;
	ip->frag_off = bpf_htons(IP_DF);
	ip->ttl = 64;
	ip->protocol = proto;
	ip->check = csum_fold((__u64)bpf_htons(0x4500) + len + bpf_htons(IP_DF) + ttl_proto + saddr + daddr);
	ip->saddr = saddr;
	ip->daddr = daddr;
}

// outer_ip6 writes an outer IPv6 header at ip6: its first word vtc_flow
// (version, class and flow label, network order), payload_len octets
// after it, next header next, from saddr with src_bits ORed into its last
// word (the bits from the flow hash; 0: none) to daddr, hop limit 64.
static __always_inline void outer_ip6(struct ipv6hdr *ip6, __u32 vtc_flow, __u32 payload_len, __u8 next,
				      const __u32 *saddr, __u32 src_bits, const __u32 *daddr)
{
	ip6->vtc_flow = vtc_flow;
	ip6->payload_len = bpf_htons(payload_len);
	ip6->nexthdr = next;
	ip6->hop_limit = 64;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		ip6->saddr[i] = i == 3 ? saddr[i] | src_bits : saddr[i];
		ip6->daddr[i] = daddr[i];
	}
}

// outer_udp writes GUE's UDP header at udp: from port sport to dport
// (network order), len octets with itself, checksum 0 (none).
static __always_inline void outer_udp(struct udphdr *udp, __u16 sport, __u16 dport, __u32 len)
{
	udp->source = sport;
	udp->dest = dport;
	udp->len = bpf_htons(len);
	udp->check = 0;
}
