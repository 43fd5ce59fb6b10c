//go:build ignore

// The xdpmaglev data plane: an XDP program that sends each TCP or UDP
// packet addressed to a service (VIP, port, protocol) to a backend chosen
// by the service's Maglev table, by the service's forwarding mode (a MAC
// rewrite on the segment, or IPIP or GUE encapsulation to a backend
// anywhere the kernel has a route to), sends an ICMP error about a flow to
// that flow's backend, drops what else is addressed to a VIP, and passes
// everything else to the kernel. docs/xdp.md describes it; the Go control
// plane in this package fills its maps. The decapsulator the backends run
// is bpf/decap.c.
//
// One header per concern, this file the entry point:
//
//	lb.h         a packet's steps: conntrack or the table, then forwarding
//	maps.h       the types, load-time settings and maps the Go side shares
//	flow.h       a packet's flow and the counters (maps.h's, shared with decap.c)
//	parse.h      a frame into its flow, or the reason it is not forwarded
//	hash.h       the flow hash (FlowHash's twin)
//	conntrack.h  connection tracking, and which SYNs leave an entry
//	guard.h      the flood guard: how fast new flows may turn conntrack over
//	vip.h        the loop guard: what reaches a VIP and is not forwarded
//	encap.h      forwarding: a MAC rewrite, or IPIP or GUE to the next hop
//	outer.h      the outer headers IPIP and GUE put in front (shared with decap.c)
//	fib.h        the kernel's route to an address (shared with decap.c)
//	icmp.h       ICMP "too big" answered to a client
//	csum.h       checksums

#include "lb.h"

SEC("xdp")
int xdp_maglev(struct xdp_md *ctx)
{
	return maglev(ctx);
}

// Referenced so that the enums reach the BTF bpf2go generates Go from.
const enum consts *unused_consts __attribute__((unused));
const enum forward *unused_forward __attribute__((unused));
const enum counter *unused_counter __attribute__((unused));
const struct layout_record *unused_layout __attribute__((unused));

// MIT, as the rest of the module, or GPL-2.0 at the user's choice: the
// kernel lets only GPL-compatible programs call bpf_fib_lookup.
char __license[] SEC("license") = "Dual MIT/GPL";
