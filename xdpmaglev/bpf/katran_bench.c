//go:build ignore

// Katran's XDP load balancer (github.com/facebookincubator/katran,
// katran/lib/bpf/balancer.bpf.c) wrapped for BPF_PROG_TEST_RUN exactly as
// bench.c wraps ours, so that BenchmarkKatran measures both through one
// harness on the same packets. This file holds none of Katran's code: it
// includes Katran's program from a Katran checkout at build time (the
// checkout's root on the include path), unmodified, and bench/katran.sh
// compiles it with the flags of Katran's own open-source build. go
// generate does not build it, and no object of it is committed.
//
// The object holds Katran's program as it is (balancer_ingress, in its
// section) and the two wrappers below, into which the compiler inlines
// it (flatten: clang marks the call to it always_inline), as bench.c's
// wrappers inline ours.

#include "katran/lib/bpf/balancer.bpf.c"

// The new-flow sequence, per CPU (bench.c's bench_seq).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} katran_bench_seq SEC(".maps");

// Katran's build-time constants the benchmark needs, as this object was
// built with them, so that the Go side hard-codes none: the ring's size and
// the flow hash's seeds (it predicts the backend), the flags and the stats
// map's counter indexes it sets and reads, the new-connection rate per
// CPU and second above which Katran stops writing its LRU
// (is_under_flood), and the QUIC VIP's flag and the size of its map of
// server IDs. The fields are in the order of katranConsts.
struct katran_consts {
	__u64 max_conn_rate;
	__u32 ring_size;
	__u32 max_vips;
	__u32 hash_seed;
	__u32 hash_seed_v6;
	__u32 f_lru_bypass;
	__u32 f_ipv6;
	__u32 lru_cntrs;
	__u32 lru_miss_cntr;
	__u32 fallback_lru_cntr;
	__u32 xdp_tx_cntr;
	__u32 f_quic_vip;
	__u32 max_quic_reals;
};

const volatile struct katran_consts katran_consts = {
	.max_conn_rate = MAX_CONN_RATE,
	.ring_size = RING_SIZE,
	.max_vips = MAX_VIPS,
	.hash_seed = INIT_JHASH_SEED,
	.hash_seed_v6 = INIT_JHASH_SEED_V6,
	.f_lru_bypass = F_LRU_BYPASS,
	.f_ipv6 = F_IPV6,
	.lru_cntrs = LRU_CNTRS,
	.lru_miss_cntr = LRU_MISS_CNTR,
	.fallback_lru_cntr = FALLBACK_LRU_CNTR,
	.xdp_tx_cntr = XDP_TX_CNTR,
	.f_quic_vip = F_QUIC_VIP,
	.max_quic_reals = MAX_QUIC_REALS,
};

// katran_bench runs Katran on the packet and then puts the packet back as
// it came, as bench.c's bench does for ours: the Ethernet header is saved
// and written back, and the head the encapsulation moved (IPIP: 20 bytes,
// IPv6 outer header: 40) is moved back. With new_flow, each repeat first
// gives the packet a new source address and TCP source port from a per-CPU
// sequence: an IPv4 source in 10.CPU.0.0/16, an IPv6 source's last 32 bits
// CPU.0.0/16. The restore is counted in the cost, as it is in ours.
static __attribute__((always_inline, flatten)) int katran_bench(struct xdp_md *ctx, int new_flow)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + sizeof(struct ethhdr) + sizeof(struct iphdr) + sizeof(struct tcphdr) > end)
		return XDP_ABORTED;
	if (new_flow) {
		__u32 k = 0;
		__u64 *seq = bpf_map_lookup_elem(&katran_bench_seq, &k);
		if (!seq)
			return XDP_ABORTED;
		__u64 n = ++*seq;
		__u32 cpu = bpf_get_smp_processor_id() & 0xff;
		__u32 src = cpu << 16 | ((n >> 16) & 0xffff);
		if (((struct ethhdr *)data)->h_proto == bpf_htons(ETH_P_IPV6)) {
			struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
			if ((void *)(ip6 + 1) + sizeof(struct tcphdr) > end)
				return XDP_ABORTED;
			ip6->saddr.in6_u.u6_addr32[3] = bpf_htonl(src);
			*(__u16 *)(ip6 + 1) = bpf_htons(n & 0xffff);
		} else {
			struct iphdr *ip = data + sizeof(struct ethhdr);
			ip->saddr = bpf_htonl(0x0a000000 | src);
			*(__u16 *)(ip + 1) = bpf_htons(n & 0xffff);
		}
	}
	// The Ethernet header, as words.
	__u64 eth0 = *(__u64 *)data;
	__u32 eth1 = *(__u32 *)(data + 8);
	__u16 eth2 = *(__u16 *)(data + 12);
	long before = end - data;
	int r = balancer_ingress(ctx);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	long moved = (end - data) - before; // the outer header's bytes
	if (moved < 0 || moved > 128)
		return XDP_ABORTED;
	if (moved) {
		if (bpf_xdp_adjust_head(ctx, (int)moved))
			return XDP_ABORTED;
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
	}
	if (data + sizeof(struct ethhdr) > end)
		return XDP_ABORTED;
	*(__u64 *)data = eth0;
	*(__u32 *)(data + 8) = eth1;
	*(__u16 *)(data + 12) = eth2;
	return r;
}

SEC("xdp")
int xdp_katran_bench(struct xdp_md *ctx)
{
	return katran_bench(ctx, 0);
}

SEC("xdp")
int xdp_katran_bench_new(struct xdp_md *ctx)
{
	return katran_bench(ctx, 1);
}

// Katran's balancer.bpf.c declares the license (GPL).
