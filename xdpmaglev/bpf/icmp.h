// ICMP the load balancer answers itself: "fragmentation needed" (IPv4)
// and "packet too big" (IPv6) to a client whose packet would not fit the
// path to its backend once encapsulated. (ICMP errors about a flow are
// parsed in parse.h and forwarded to the flow's backend like its packets.)

#pragma once

#include "bpf.h"
#include "headers.h"
#include "maps.h"
#include "csum.h"
#include "outer.h"

// icmp_eth writes the answer's Ethernet header at data: back where the
// packet came from, its MACs, which the head's move left at old,
// swapped.
static __always_inline void icmp_eth(void *data, void *old, int v)
{
	struct macs in = *(struct macs *)old;
	struct ethhdr *eth = data;
	__builtin_memcpy(eth->dest, in.src, 6);
	__builtin_memcpy(eth->source, in.dst, 6);
	eth->proto = v == 4 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
}

// too_big4 makes the frame at data, the IPv4 header and the ICMP header
// in front of the quote (the client's IP header and 8 bytes), into ICMP
// fragmentation needed naming mtu, from the VIP to the client, and says
// whether the frame was whole.
static __always_inline int too_big4(void *data, void *end, __u32 mtu)
{
	if (data + ETH_HLEN + 20 + ICMP_HLEN + 28 > end)
		return 0;
	struct iphdr *q = data + ETH_HLEN + 28; // the quoted header
	icmp_eth(data, data + 28, 4);
	struct iphdr *ip = data + ETH_HLEN;
	ip->version_ihl = 0x45;
	ip->tos = 0;
	ip->tot_len = bpf_htons(20 + ICMP_HLEN + 28);
	ip->id = 0;
	ip->frag_off = 0;
	ip->ttl = 64;
	ip->protocol = IPPROTO_ICMP;
	ip->check = 0;
	ip->saddr = q->daddr;
	ip->daddr = q->saddr;
	ip->check = ip4_csum(ip);
	__u8 *icmp = (void *)(ip + 1);
	icmp[0] = 3; // destination unreachable
	icmp[1] = 4; // fragmentation needed and DF set
	*(__u16 *)(icmp + 2) = 0;
	*(__u16 *)(icmp + 4) = 0;
	*(__u16 *)(icmp + 6) = bpf_htons(mtu);
	__u16 *w = (__u16 *)icmp;
	__u64 sum = 0;
#pragma unroll
	for (int i = 0; i < (ICMP_HLEN + 28) / 2; i++)
		sum += w[i];
	*(__u16 *)(icmp + 2) = csum_fold(sum);
	return 1;
}

// too_big6 is too_big4 for IPv6: ICMPv6 packet too big, its checksum over
// the pseudo-header too.
static __always_inline int too_big6(void *data, void *end, __u32 mtu)
{
	if (data + ETH_HLEN + 40 + ICMP_HLEN + 48 > end)
		return 0;
	struct ipv6hdr *q = data + ETH_HLEN + 48;
	icmp_eth(data, data + 48, 6);
	struct ipv6hdr *ip6 = data + ETH_HLEN;
	ip6->vtc_flow = bpf_htonl(0x60000000);
	ip6->payload_len = bpf_htons(ICMP_HLEN + 48);
	ip6->nexthdr = IPPROTO_ICMPV6;
	ip6->hop_limit = 64;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		ip6->saddr[i] = q->daddr[i];
		ip6->daddr[i] = q->saddr[i];
	}
	__u8 *icmp = (void *)(ip6 + 1);
	icmp[0] = 2; // packet too big
	icmp[1] = 0;
	*(__u16 *)(icmp + 2) = 0;
	*(__u32 *)(icmp + 4) = bpf_htonl(mtu);
	// The pseudo-header: addresses, upper-layer length, next header.
	__u16 *w = (__u16 *)ip6->saddr;
	__u64 sum = 0;
#pragma unroll
	for (int i = 0; i < 16; i++)
		sum += w[i];
	sum += bpf_htons(ICMP_HLEN + 48);
	sum += bpf_htons(IPPROTO_ICMPV6);
	w = (__u16 *)icmp;
#pragma unroll
	for (int i = 0; i < (ICMP_HLEN + 48) / 2; i++)
		sum += w[i];
	*(__u16 *)(icmp + 2) = csum_fold(sum);
	return 1;
}

// too_big answers the client's packet with ICMP fragmentation needed
// (IPv4) or packet too big (IPv6) naming mtu, from the VIP, quoting the
// packet's IP header and first 8 bytes after it, and sends it back where
// the packet came from. The packet, which parse checked, becomes the
// answer.
static __always_inline int too_big(struct xdp_md *ctx, struct cpu_counters *c, __u8 family, __u32 mtu)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	int ip_len = family == 4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
	int quote = ip_len + 8;
	// Cut the packet after the quote, then make room for the new IP and
	// ICMP headers in front.
	if (bpf_xdp_adjust_tail(ctx, (int)(ETH_HLEN + quote) - (int)(end - data)))
		return XDP_DROP;
	if (bpf_xdp_adjust_head(ctx, -(ip_len + ICMP_HLEN))) {
		count(c, C_DROP_NO_ROOM);
		return XDP_DROP;
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (!(family == 4 ? too_big4(data, end, mtu) : too_big6(data, end, mtu)))
		return XDP_DROP;
	count(c, C_ICMP_TOO_BIG);
	return XDP_TX;
}
