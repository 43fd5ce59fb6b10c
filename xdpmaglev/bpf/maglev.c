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
//	maps.h       the types, load-time settings and maps the Go side shares
//	parse.h      a frame into its flow, or the reason it is not forwarded
//	hash.h       the flow hash (FlowHash's twin)
//	conntrack.h  connection tracking, and which SYNs leave an entry
//	guard.h      the flood guard: how fast new flows may turn conntrack over
//	vip.h        the loop guard: what reaches a VIP and is not forwarded
//	encap.h      forwarding: a MAC rewrite, or IPIP or GUE to the next hop
//	icmp.h       ICMP "too big" answered to a client
//	csum.h       checksums

#include "bpf.h"
#include "headers.h"
#include "maps.h"
#include "parse.h"
#include "hash.h"
#include "conntrack.h"
#include "vip.h"
#include "encap.h"

// choose looks the flow's slot up in the service's table: slot 0 holds
// the table's size M (in its id), and slot 1 + h mod M the flow's, so a
// table swapped in carries its own size. A slot whose backend left after
// this packet read the table (the control plane frees removed backends
// just after it swaps the table in) sends it to the table once more,
// which is then the new one.
static __always_inline struct backend *choose(__u32 svc, __u64 h, struct slot *out)
{
	__u32 zero = 0;
#pragma unroll
	for (int try = 0; try < 2; try++) {
		void *table = bpf_map_lookup_elem(&tables, &svc);
		if (!table)
			return 0;
		struct slot *head = bpf_map_lookup_elem(table, &zero);
		if (!head || head->id == 0)
			return 0;
		__u32 i = 1 + h % head->id;
		struct slot *s = bpf_map_lookup_elem(table, &i);
		if (!s || s->id == NO_BACKEND)
			return 0;
		struct backend *b = backend(s->id, s->cookie);
		if (b) {
			*out = *s;
			return b;
		}
	}
	return 0;
}

// lookup_service finds the service of flow f of the given family, a
// constant, or returns 0.
static __always_inline struct service *lookup_service(struct flow *f, const int family)
{
	if (family == 4) {
		struct svc_key4 k = {.addr = f->dst[0], .port = f->dport, .proto = f->proto};
		return bpf_map_lookup_elem(&services4, &k);
	}
	struct svc_key k = {};
#pragma unroll
	for (int i = 0; i < 4; i++)
		k.addr[i] = f->dst[i];
	k.port = f->dport;
	k.proto = f->proto;
	k.family = f->family;
	return bpf_map_lookup_elem(&services6, &k);
}

// maglev_flow sends the parsed packet p (a frame of bytes bytes) of the
// given family, a constant, to its backend: connection tracking first (an
// entry whose backend is still in the service names the service, so an
// established flow costs one hash lookup; ct_follows says which SYNs
// leave it), else the service's table, whose choice it then writes to
// conntrack unless the flood guard refuses. An ICMP error looks up the
// flow it is about, the same way, and writes no entry. The flow hash is
// computed only where it is used: on a miss, and where the encapsulation
// reads it (uses_hash).
static __always_inline int maglev_flow(struct xdp_md *ctx, struct cpu_counters *c, struct pkt *p, __u64 bytes, const int family)
{
	struct flow *f = &p->f;
	struct flow4 f4 = {};
	struct ct_entry *ct = ct_lookup(f, &f4, family);
	struct backend *b = 0;
	struct slot be = {};
	__u32 svc_id = 0;
	int reopen = 0;
	if (ct) {
		be.id = ct->backend.id;
		be.cookie = ct->backend.cookie;
		svc_id = ct->svc;
		b = backend(be.id, be.cookie);
		if (b && !ct_follows(c, ct, b, p->tcp)) {
			b = 0;
			reopen = 1;
		}
	}
	__u64 h = 0;
	if (b) {
		count(c, C_CT_HIT);
		if (uses_hash(b))
			h = flow_hash(f);
	} else {
		struct service *svc = lookup_service(f, family);
		if (!svc)
			return not_forwarded(c, p, p->icmp ? C_PASS_NOT_TCP_UDP : C_PASS_NO_SERVICE);
		svc_id = svc->id;
		h = flow_hash(f);
		count(c, C_CT_MISS);
		if (reopen)
			count(c, C_CT_REOPEN);
		else if (ct)
			count(c, C_CT_STALE);
		b = choose(svc_id, h, &be);
		if (!b) {
			count(c, C_DROP_NO_BACKEND);
			return XDP_DROP;
		}
		if (!p->icmp)
			ct_write(c, ct, f, &f4, be, svc_id, family);
	}

	// The frame's bytes as it came, counted once it is on its way.
	int verdict = forward(ctx, c, be.id, b, h, p->l3_len, !p->icmp && p->df);
	if (verdict == XDP_TX || verdict == XDP_REDIRECT) {
		add_stats(&service_stats, svc_id, bytes);
		add_stats(&backend_stats, be.id, bytes);
		if (p->icmp)
			count(c, C_ICMP_FORWARDED);
	}
	return verdict == TX_ICMP ? XDP_TX : verdict;
}

// maglev is the load balancer's program, xdp_maglev; the benchmark
// programs below wrap it too. Each family has its own copy of
// maglev_flow, so that each map lookup's map is one the verifier knows,
// and inlines (clang would otherwise merge the two families' lookups into
// one call of either map).
static __always_inline int maglev(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct cpu_counters *c = bpf_map_lookup_elem(&counters, &zero);
	if (!c)
		return XDP_PASS;
	struct pkt p = {};
	int r = parse(data, end, &p);
	if (r != PARSED)
		return not_forwarded(c, &p, r);
	if (p.f.family == 4)
		return maglev_flow(ctx, c, &p, end - data, 4);
	return maglev_flow(ctx, c, &p, end - data, 6);
}

SEC("xdp")
int xdp_maglev(struct xdp_md *ctx)
{
	return maglev(ctx);
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} bench_seq SEC(".maps");

// bench runs maglev on the packet and then puts the packet back as it
// came (the Ethernet header, and the head an encapsulation moved), so
// that BPF_PROG_TEST_RUN's repeats, which run on one buffer, each see
// the input. With new_flow, each repeat first gives the IPv4 packet a
// new source address and port from a per-CPU sequence, in 10.CPU.0.0/16
// so that no two CPUs send the same flow. Benchmarks only: the restore is
// counted in the program's cost.
static __always_inline int bench(struct xdp_md *ctx, int new_flow)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + ETH_HLEN + sizeof(struct iphdr) + TCP_HLEN > end)
		return XDP_ABORTED;
	if (new_flow) {
		__u32 k = 0;
		__u64 *seq = bpf_map_lookup_elem(&bench_seq, &k);
		if (!seq)
			return XDP_ABORTED;
		__u64 n = ++*seq;
		struct iphdr *ip = data + ETH_HLEN;
		__u32 cpu = bpf_get_smp_processor_id() & 0xff;
		ip->saddr = bpf_htonl(0x0a000000 | cpu << 16 | ((n >> 16) & 0xffff));
		*(__u16 *)(ip + 1) = bpf_htons(n & 0xffff);
	}
	// The Ethernet header, as words.
	__u64 eth0 = *(__u64 *)data;
	__u32 eth1 = *(__u32 *)(data + 8);
	__u16 eth2 = *(__u16 *)(data + 12);
	long before = end - data;
	int r = maglev(ctx);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	long moved = (end - data) - before; // the outer headers' bytes
	if (moved < 0 || moved > 64)
		return XDP_ABORTED;
	if (moved) {
		if (bpf_xdp_adjust_head(ctx, (int)moved))
			return XDP_ABORTED;
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
	}
	if (data + ETH_HLEN > end)
		return XDP_ABORTED;
	*(__u64 *)data = eth0;
	*(__u32 *)(data + 8) = eth1;
	*(__u16 *)(data + 12) = eth2;
	return r;
}

SEC("xdp")
int xdp_bench(struct xdp_md *ctx)
{
	return bench(ctx, 0);
}

SEC("xdp")
int xdp_bench_new(struct xdp_md *ctx)
{
	return bench(ctx, 1);
}

// xdp_pass passes every packet: the floor the benchmarks measure the
// load balancer against, and the program a veth peer needs for XDP_TX.
SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

// xdp_flow_hash writes the flow hash of a packet xdp_maglev would parse
// into its first 8 bytes, big-endian, and returns XDP_TX; it passes any
// other packet. Tests compare it with FlowHash.
SEC("xdp")
int xdp_flow_hash(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct pkt p = {};
	if (parse(data, end, &p) != PARSED || p.icmp)
		return XDP_PASS;
	__u64 h = bpf_htonll(flow_hash(&p.f));
	__builtin_memcpy(data, &h, 8); // parse checked 14 bytes or more
	return XDP_TX;
}

// Referenced so that the enums reach the BTF bpf2go generates Go from.
const enum consts *unused_consts __attribute__((unused));
const enum forward *unused_forward __attribute__((unused));
const enum counter *unused_counter __attribute__((unused));
const struct layout_record *unused_layout __attribute__((unused));

// MIT, as the rest of the module, or GPL-2.0 at the user's choice: the
// kernel lets only GPL-compatible programs call bpf_fib_lookup.
char __license[] SEC("license") = "Dual MIT/GPL";
