//go:build ignore

// Programs for the tests and benchmarks only, which Load never loads: the
// load balancer's program wrapped to run on one buffer many times
// (BPF_PROG_TEST_RUN's repeats), the flow hash written into a frame, and
// the kernel's AES alone.
// The tests load this object against an LB's own maps.

#include "lb.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} bench_seq SEC(".maps");

// The Ethernet header bench restores, kept here and not on the stack,
// which the load balancer's program nearly fills.
struct bench_eth {
	__u64 w0;
	__u32 w1;
	__u16 w2;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct bench_eth);
	__uint(max_entries, 1);
} bench_saved SEC(".maps");

// bench runs maglev on the packet and then puts the packet back as it
// came (the Ethernet header, and the head an encapsulation moved), so
// that BPF_PROG_TEST_RUN's repeats, which run on one buffer, each see
// the input. With new_flow, each repeat first gives the packet a new
// source address and port from a per-CPU sequence: an IPv4 source in
// 10.CPU.0.0/16, an IPv6 source's last 32 bits CPU.0.0/16, so that no two
// CPUs send the same flow. Benchmarks only: the restore is
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
		__u32 cpu = bpf_get_smp_processor_id() & 0xff;
		__u32 src = cpu << 16 | ((n >> 16) & 0xffff);
		if (((struct ethhdr *)data)->proto == bpf_htons(ETH_P_IPV6)) {
			struct ipv6hdr *ip6 = data + ETH_HLEN;
			if ((void *)(ip6 + 1) + TCP_HLEN > end)
				return XDP_ABORTED;
			ip6->saddr[3] = bpf_htonl(src);
			*(__u16 *)(ip6 + 1) = bpf_htons(n & 0xffff);
		} else {
			struct iphdr *ip = data + ETH_HLEN;
			ip->saddr = bpf_htonl(0x0a000000 | src);
			*(__u16 *)(ip + 1) = bpf_htons(n & 0xffff);
		}
	}
	// The Ethernet header, as words.
	__u32 zero = 0;
	struct bench_eth *saved = bpf_map_lookup_elem(&bench_saved, &zero);
	if (!saved)
		return XDP_ABORTED;
	saved->w0 = *(__u64 *)data;
	saved->w1 = *(__u32 *)(data + 8);
	saved->w2 = *(__u16 *)(data + 12);
	long before = end - data;
	int r = maglev(ctx);
	saved = bpf_map_lookup_elem(&bench_saved, &zero);
	if (!saved)
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	long moved = (end - data) - before; // the outer headers' bytes
	if (moved < 0 || moved > 128)
		return XDP_ABORTED;
	if (moved) {
		if (bpf_xdp_adjust_head(ctx, (int)moved))
			return XDP_ABORTED;
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
	}
	if (data + ETH_HLEN > end)
		return XDP_ABORTED;
	*(__u64 *)data = saved->w0;
	*(__u32 *)(data + 8) = saved->w1;
	*(__u16 *)(data + 12) = saved->w2;
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

// aes runs the kernel's AES alone, for BenchmarkAES: the frame's first
// 16 octets through the AES context in quic_keys's slot 0 (op 1:
// decrypt, 2: encrypt), or copied (op 0: the same lookups and dynptrs,
// no AES), written back over them. XDP_TX, or XDP_ABORTED where the
// context or the kernel's AES is missing.
static __always_inline int aes(struct xdp_md *ctx, int op)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + 16 > end || !bpf_ksym_exists(bpf_crypto_encrypt) || !bpf_ksym_exists(bpf_crypto_decrypt))
		return XDP_ABORTED;
	__u32 zero = 0;
	struct quic_key *key = bpf_map_lookup_elem(&quic_keys, &zero);
	struct quic_blocks *s = bpf_map_lookup_elem(&quic_scratch, &zero);
	if (!key || !s)
		return XDP_ABORTED;
	struct bpf_crypto_ctx *cctx = (void *)key->ctx; // a kptr, by the map's BTF
	if (!cctx)
		return XDP_ABORTED;
	__builtin_memcpy(s->in, data, 16);
	struct bpf_dynptr in, out;
	bpf_dynptr_from_mem(s->in, 16, 0, &in);
	bpf_dynptr_from_mem(s->out, 16, 0, &out);
	int err = 0;
	if (op == 1)
		err = bpf_crypto_decrypt(cctx, &in, &out, 0);
	else if (op == 2)
		err = bpf_crypto_encrypt(cctx, &in, &out, 0);
	else
		__builtin_memcpy(s->out, s->in, 16);
	if (err)
		return XDP_ABORTED;
	__builtin_memcpy(data, s->out, 16);
	return XDP_TX;
}

SEC("xdp")
int xdp_aes_copy(struct xdp_md *ctx)
{
	return aes(ctx, 0);
}

SEC("xdp")
int xdp_aes_decrypt(struct xdp_md *ctx)
{
	return aes(ctx, 1);
}

SEC("xdp")
int xdp_aes_encrypt(struct xdp_md *ctx)
{
	return aes(ctx, 2);
}

char __license[] SEC("license") = "Dual MIT/GPL";
