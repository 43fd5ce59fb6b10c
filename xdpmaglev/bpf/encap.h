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
	fib.family = b->family == 4 ? AF_INET : AF_INET6;
	fib.ifindex = ctx->ingress_ifindex;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		fib.src[i] = b->src[i];
		fib.dst[i] = b->addr[i];
	}
	switch (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0)) {
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
	int v4 = b->family == 4;
	int gue = b->mode == FWD_GUE;
	int sh = 0; // the second hop's GUE header
	if (gue && second)
		sh = v4 ? sizeof(struct gue_second4) : sizeof(struct gue_second6);
	int over = (v4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr)) + (gue ? UDP_HLEN : 0) + sh;
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
	// The next hop's MACs, dmac then smac as the frame has them, as words.
	__u32 mac0 = *(__u32 *)nh->dmac;
	__u32 mac1 = *(__u32 *)(nh->dmac + 4);
	__u32 mac2 = *(__u32 *)(nh->dmac + 8);

	if (bpf_xdp_adjust_head(ctx, -over)) {
		count(c, C_DROP_NO_ROOM);
		return XDP_DROP;
	}
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if (data + ETH_HLEN + over > end)
		return XDP_DROP;
	*(__u32 *)data = mac0;
	*(__u32 *)(data + 4) = mac1;
	*(__u32 *)(data + 8) = mac2;
	void *l4;
	if (v4) {
		struct iphdr *ip = data + ETH_HLEN;
		if ((void *)(ip + 1) > end)
			return XDP_DROP;
		eth->proto = bpf_htons(ETH_P_IP);
		__u16 tot_len = bpf_htons(l3_len + over);
		__u16 ttl_proto = bpf_htons(64 << 8 | (gue ? IPPROTO_UDP : IPPROTO_IPIP));
		__u32 saddr = b->src[0] | bpf_htonl(((__u32)(h >> 20)) & b->src_mask);
		__u32 daddr = b->addr[0];
		ip->version_ihl = 0x45;
		ip->tos = 0;
		ip->tot_len = tot_len;
		ip->id = 0;
		ip->frag_off = bpf_htons(IP_DF);
		ip->ttl = 64;
		ip->protocol = gue ? IPPROTO_UDP : IPPROTO_IPIP;
		// The checksum from the values, not read back from the header
		// just written: 32-bit words summed fold to the 16-bit sum.
		ip->check = csum_fold((__u64)bpf_htons(0x4500) + tot_len + bpf_htons(IP_DF) + ttl_proto + saddr + daddr);
		ip->saddr = saddr;
		ip->daddr = daddr;
		l4 = ip + 1;
	} else {
		struct ipv6hdr *ip6 = data + ETH_HLEN;
		if ((void *)(ip6 + 1) > end)
			return XDP_DROP;
		eth->proto = bpf_htons(ETH_P_IPV6);
		// The flow label from the flow hash: ECMP over IPv6 hashes it.
		ip6->vtc_flow = bpf_htonl(0x60000000 | ((__u32)h & 0xfffff));
		ip6->payload_len = bpf_htons(l3_len + over - sizeof(struct ipv6hdr));
		ip6->nexthdr = gue ? IPPROTO_UDP : IPPROTO_IPV6;
		ip6->hop_limit = 64;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			ip6->saddr[i] = b->src[i];
			ip6->daddr[i] = b->addr[i];
		}
		ip6->saddr[3] |= bpf_htonl(((__u32)(h >> 20)) & b->src_mask);
		l4 = ip6 + 1;
	}
	if (gue) {
		struct udphdr *udp = l4;
		if ((void *)(udp + 1) > end)
			return XDP_DROP;
		// 49152-65535, the dynamic ports, from the hash's top 14 bits.
		udp->source = bpf_htons((__u16)(0xc000 | (h >> 50)));
		udp->dest = b->port;
		udp->len = bpf_htons(l3_len + UDP_HLEN + sh);
		udp->check = 0;
		if (sh && v4) {
			struct gue_second4 *g = (void *)(udp + 1);
			if ((void *)(g + 1) > end)
				return XDP_DROP;
			*(__u32 *)g = bpf_htonl(2 << 24 | IPPROTO_IPIP << 16);
			g->magic[0] = SECOND_MAGIC0;
			g->magic[1] = SECOND_MAGIC1;
			g->version = SECOND_VERSION;
			g->hops = 1;
			g->addr = second->addr[0];
			count(c, C_SECOND_HOP);
		} else if (sh) {
			struct gue_second6 *g = (void *)(udp + 1);
			if ((void *)(g + 1) > end)
				return XDP_DROP;
			*(__u32 *)g = bpf_htonl(5 << 24 | IPPROTO_IPV6 << 16);
			g->magic[0] = SECOND_MAGIC0;
			g->magic[1] = SECOND_MAGIC1;
			g->version = SECOND_VERSION;
			g->hops = 1;
#pragma unroll
			for (int i = 0; i < 4; i++)
				g->addr[i] = second->addr[i];
			count(c, C_SECOND_HOP);
		}
	}
	count(c, C_TX);
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(ifindex, 0);
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

