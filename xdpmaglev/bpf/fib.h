// The kernel's routes, shared by the load balancer (encap.h) and the
// decapsulator (decap.c): where a packet to an address leaves, and how.

#pragma once

#include "bpf.h"

// fib_lookup asks the kernel's routing and neighbour tables for the route
// from src to dst, addresses of the family (4 or 6; IPv4 in the first
// word), of a packet that came in on ctx's interface. It returns
// bpf_fib_lookup's result: on BPF_FIB_LKUP_RET_SUCCESS fib holds the next
// hop's MAC (dmac), the interface's (smac), the interface and the route's
// MTU (tot_len); on BPF_FIB_LKUP_RET_NO_NEIGH the route is there but not
// yet the next hop's MAC. fib must be zeroed.
static __always_inline long fib_lookup(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __u8 family,
				       const __u32 *src, const __u32 *dst)
{
	fib->family = family == 4 ? AF_INET : AF_INET6;
	fib->ifindex = ctx->ingress_ifindex;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		fib->src[i] = src[i];
		fib->dst[i] = dst[i];
	}
	return bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
}

// send_out returns the verdict that sends the frame out of interface
// ifindex: back out of the one it came in on, or redirected.
static __always_inline int send_out(struct xdp_md *ctx, __u32 ifindex)
{
	if (ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(ifindex, 0);
}
