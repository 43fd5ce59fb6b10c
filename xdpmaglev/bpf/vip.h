// The loop guard: a packet to a VIP that the load balancer does not
// forward (another port or protocol, a fragment, ICMP that is no error
// about a flow of a service) is dropped and counted. The load balancer
// does not hold its VIPs, so its kernel would route such a packet back to
// the router that sent it here, which routes the VIP here again, until
// the TTL runs out.

#pragma once

#include "bpf.h"
#include "headers.h"
#include "maps.h"
#include "parse.h"

// to_vip reports whether p's IP destination, read whole, is a VIP.
static __always_inline int to_vip(struct pkt *p)
{
	if (p->ip_family == 4)
		return bpf_map_lookup_elem(&vips4, &p->ip_dst[0]) != 0;
	if (p->ip_family == 6)
		return bpf_map_lookup_elem(&vips6, p->ip_dst) != 0;
	return 0;
}

// not_forwarded counts and returns the verdict of a packet that the load
// balancer does not forward, for reason r (a C_PASS_ counter): to a VIP,
// dropped by the matching C_DROP_VIP_ reason; else passed to the kernel,
// the load balancer's own traffic.
static __always_inline int not_forwarded(struct cpu_counters *c, struct pkt *p, int r)
{
	if (!to_vip(p)) {
		count(c, r);
		return XDP_PASS;
	}
	__u32 d = C_DROP_VIP_OTHER;
	if (r == C_PASS_NO_SERVICE)
		d = C_DROP_VIP_NO_SERVICE;
	else if (r == C_PASS_FRAGMENT)
		d = C_DROP_VIP_FRAGMENT;
	else if (p->ip_proto == IPPROTO_ICMP || p->ip_proto == IPPROTO_ICMPV6)
		d = C_DROP_VIP_ICMP;
	count(c, d);
	return XDP_DROP;
}
