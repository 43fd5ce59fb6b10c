// Forwarding: a packet to its backend by the service's mode, a MAC
// rewrite on the segment (FWD_L2) or an outer IP header, with a UDP one
// for GUE, toward the backend's next hop as the kernel's routing and
// neighbour tables give it (FWD_IPIP, FWD_GUE).

#pragma once

#include "bpf.h"
#include "headers.h"
#include "maps.h"
#include "csum.h"
#include "icmp.h"
#include "fib.h"
#include "outer.h"

#define NEXTHOP_TTL 50 // jiffies
#define TX_ICMP 100 // forward's verdict for an ICMP answer sent back: XDP_TX, not counted as forwarded

// backend returns the backend with this id while it holds this cookie.
static __always_inline struct backend *backend(__u32 id, __u32 cookie)
{
	struct backend *b = bpf_map_lookup_elem(&backends, &id);
	if (!b || b->cookie != cookie || cookie == 0)
		return 0;
	return b;
}

// forward_l2 rewrites the frame's MACs to the backend's and the load
// balancer's, and sends it back out of the interface it came in on.
static __always_inline int forward_l2(struct xdp_md *ctx, struct cpu_counters *c, struct backend *b)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + ETH_HLEN > end)
		return XDP_DROP;
	// Four stores, not twelve: the MACs as words.
	*(__u32 *)data = *(__u32 *)b->mac;
	*(__u16 *)(data + 4) = *(__u16 *)(b->mac + 4);
	*(__u16 *)(data + 6) = *(volatile const __u16 *)lb_mac;
	*(__u32 *)(data + 8) = *(volatile const __u32 *)(lb_mac + 2);
	count(c, C_TX);
	return XDP_TX;
}

// nexthop returns backend id's next hop, from the cache or from
// bpf_fib_lookup, or 0 with the drop counted.
static __always_inline struct nexthop *nexthop(struct xdp_md *ctx, struct cpu_counters *c, __u32 id, struct backend *b)
{
	struct nexthop *nh = bpf_map_lookup_elem(&nexthops, &id);
	if (!nh)
		return 0;
	__u64 now = bpf_jiffies64();
	if (nh->cookie == b->cookie && now < nh->expires)
		return nh;
	struct bpf_fib_lookup fib = {};
	switch (fib_lookup(ctx, &fib, b->family, b->src, b->addr)) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		break;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		count(c, C_DROP_NO_NEIGHBOR);
		return 0;
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		count(c, C_DROP_FORWARDING_OFF);
		return 0;
	default:
		count(c, C_DROP_NO_ROUTE);
		return 0;
	}
	__builtin_memcpy(nh->dmac, fib.dmac, 6);
	__builtin_memcpy(nh->smac, fib.smac, 6);
	nh->ifindex = fib.ifindex;
	nh->mtu = fib.tot_len ? fib.tot_len : 0xffff; // mtu_result
	nh->cookie = b->cookie;
	nh->expires = now + NEXTHOP_TTL;
	return nh;
}

// A next hop's dmac and smac are a frame's MACs: read as one struct macs.
_Static_assert(__builtin_offsetof(struct nexthop, dmac) % 4 == 0 &&
		       __builtin_offsetof(struct nexthop, dmac) + __builtin_offsetof(struct macs, src) ==
			       __builtin_offsetof(struct nexthop, smac),
	       "struct nexthop's dmac and smac are a struct macs");

// nexthop_macs returns the MACs of a frame to next hop nh.
static __always_inline struct macs nexthop_macs(struct nexthop *nh)
{
	return *(struct macs *)nh->dmac;
}

// encap_len returns the octets of the outer headers forwarding to b
// puts in front of the packet: IP, and for GUE UDP and, with a second
// hop, the variant 0 header naming it (*sh its octets, else 0).
static __always_inline int encap_len(struct backend *b, struct backend *second, int *sh)
{
	int gue = b->mode == FWD_GUE;
	*sh = 0;
	if (gue && second)
		*sh = b->family == 4 ? sizeof(struct gue_second4) : sizeof(struct gue_second6);
	return (b->family == 4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr)) + (gue ? UDP_HLEN : 0) + *sh;
}

// encap_ip writes the outer IP header at l3 of a packet of len octets in
// all to backend b, from b->src with the flow hash h's bits (src_mask),
// and returns what follows it, or 0 where the frame is too short.
static __always_inline void *encap_ip(void *l3, void *end, struct backend *b, __u64 h, __u32 len)
{
	int gue = b->mode == FWD_GUE;
	__u32 bits = bpf_htonl(((__u32)(h >> 20)) & b->src_mask);
	if (b->family == 4) {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > end)
			return 0;
		outer_ip4(ip, len, gue ? IPPROTO_UDP : IPPROTO_IPIP, b->src[0] | bits, b->addr[0]);
		return ip + 1;
	}
	struct ipv6hdr *ip6 = l3;
	if ((void *)(ip6 + 1) > end)
		return 0;
	// The flow label from the flow hash: ECMP over IPv6 hashes it.
	outer_ip6(ip6, bpf_htonl(0x60000000 | ((__u32)h & 0xfffff)), len - sizeof(*ip6), gue ? IPPROTO_UDP : IPPROTO_IPV6,
		  b->src, bits, b->addr);
	return ip6 + 1;
}

// encap_second writes at p the GUE variant 0 header that names second
// as the second hop, one hop left, for a backend of the family, and says
// whether the frame had room for it.
static __always_inline int encap_second(void *p, void *end, __u8 family, struct backend *second)
{
	if (family == 4) {
		struct gue_second4 *g = p;
		if ((void *)(g + 1) > end)
			return 0;
		*(__u32 *)g = bpf_htonl(2 << 24 | IPPROTO_IPIP << 16);
		g->magic[0] = SECOND_MAGIC0;
		g->magic[1] = SECOND_MAGIC1;
		g->version = SECOND_VERSION;
		g->hops = 1;
		g->addr = second->addr[0];
		return 1;
	}
	struct gue_second6 *g = p;
	if ((void *)(g + 1) > end)
		return 0;
	*(__u32 *)g = bpf_htonl(5 << 24 | IPPROTO_IPV6 << 16);
	g->magic[0] = SECOND_MAGIC0;
	g->magic[1] = SECOND_MAGIC1;
	g->version = SECOND_VERSION;
	g->hops = 1;
#pragma unroll
	for (int i = 0; i < 4; i++)
		g->addr[i] = second->addr[i];
	return 1;
}

// encap_gue writes GUE's UDP header at l4, for an inner packet of l3_len
// octets and a variant 0 header of sh octets (0: none) naming second,
// and says whether the frame had room for them.
static __always_inline int encap_gue(void *l4, void *end, struct cpu_counters *c, struct backend *b, __u64 h,
				     __u32 l3_len, int sh, struct backend *second)
{
	struct udphdr *udp = l4;
	if ((void *)(udp + 1) > end)
		return 0;
	// 49152-65535, the dynamic ports, from the hash's top 14 bits.
	outer_udp(udp, bpf_htons((__u16)(0xc000 | (h >> 50))), b->port, l3_len + UDP_HLEN + sh);
	if (!sh)
		return 1;
	if (!encap_second(udp + 1, end, b->family, second))
		return 0;
	count(c, C_SECOND_HOP);
	return 1;
}

// forward_encap sends the packet (its IP packet of l3_len bytes) to the
// backend inside an outer IP header from b->src to b->addr (FWD_IPIP), or
// outer IP and UDP headers (FWD_GUE: source port from the flow hash h, so
// routers' ECMP and NICs' RSS see the flow's entropy; UDP checksum 0). The
// next hop's MAC, the interface and the MTU come from the kernel's routing
// and neighbour tables (nexthop). A packet that would not fit the MTU once
// encapsulated is answered with ICMP too big when icmp_ok (a client's
// packet with DF), dropped otherwise. With second, a GUE packet names the
// backend second in a variant 0 header (second chance).
static __always_inline int forward_encap(struct xdp_md *ctx, struct cpu_counters *c, __u32 id, struct backend *b, __u64 h, __u32 l3_len, int icmp_ok, struct backend *second)
{
	int sh;
	int over = encap_len(b, second, &sh);
	struct nexthop *nh = nexthop(ctx, c, id, b);
	if (!nh)
		return XDP_DROP;
	if (l3_len + over > nh->mtu) {
		if (!icmp_ok) {
			count(c, C_DROP_TOO_BIG);
			return XDP_DROP;
		}
		int r = too_big(ctx, c, b->family, nh->mtu - over);
		return r == XDP_TX ? TX_ICMP : r;
	}
	__u32 ifindex = nh->ifindex;
	struct macs m = nexthop_macs(nh);
	if (bpf_xdp_adjust_head(ctx, -over)) {
		count(c, C_DROP_NO_ROOM);
		return XDP_DROP;
	}
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + ETH_HLEN + over > end)
		return XDP_DROP;
	outer_eth(data, m, b->family);
	void *l4 = encap_ip(data + ETH_HLEN, end, b, h, l3_len + over);
	if (!l4)
		return XDP_DROP;
	if (b->mode == FWD_GUE && !encap_gue(l4, end, c, b, h, l3_len, sh, second))
		return XDP_DROP;
	count(c, C_TX);
	return send_out(ctx, ifindex);
}

// uses_hash says whether forwarding to b reads the flow hash: GUE's
// source port, IPv6's flow label, and the outer source's bits from the
// hash (src_mask) do; a MAC rewrite and IPv4 in IPv4 from one address do
// not.
static __always_inline int uses_hash(struct backend *b)
{
	if (b->mode == FWD_L2)
		return 0;
	return b->mode == FWD_GUE || b->family == 6 || b->src_mask != 0;
}

// forward sends the packet to backend b by its service's mode, with the
// second hop second (0: none) where the mode is GUE.
static __always_inline int forward(struct xdp_md *ctx, struct cpu_counters *c, __u32 id, struct backend *b, __u64 h, __u32 l3_len, int icmp_ok, struct backend *second)
{
	if (b->mode == FWD_L2)
		return forward_l2(ctx, c, b);
	return forward_encap(ctx, c, id, b, h, l3_len, icmp_ok, second);
}

