//go:build ignore

// The xdpmaglev decapsulator: an XDP program for the backends of a service
// that the load balancer reaches by IPIP or GUE (bpf/maglev.c). It strips
// the outer header of a packet addressed to one of this host's addresses
// that carries a packet to one of the configured VIPs, from an outer
// source it trusts (the load balancers'), and passes the inner packet to
// the kernel, which delivers it to the VIP held on lo; the backend answers
// the client directly. Such a packet from any other source is dropped:
// whoever can send it could otherwise put any inner source in front of
// the backend. Everything else (other tunnels among it) passes unchanged.
// Hosts with the kernel's ipip or fou modules can use those instead
// (docs/xdp.md).

#include "bpf.h"
#include "headers.h"

volatile const __u16 gue_port = 0; // the GUE UDP port, network order (DecapOptions.GUEPort)

// An address of this host, or a VIP: the bytes in network order, an IPv4
// address in the first word.
struct addr {
	__u32 a[4];
	__u8 family; // 4 or 6
	__u8 pad[3];
};

// Counter indexes: DecapStats's fields, in this order.
enum decap_counter {
	D_DECAPSULATED, // outer header stripped, the inner packet passed
	D_PASSED,       // not encapsulated, or not to this host and a VIP: passed unchanged
	D_MALFORMED,    // encapsulated to this host, but the inner header cut short or impossible: passed unchanged
	D_UNTRUSTED,    // encapsulated to this host and a VIP from an outer source not in sources4 or sources6: dropped
	D_MAX,
};

// A trusted outer source prefix (DecapOptions.Sources), as an LPM trie's
// key: the prefix length, then the address in network order.
struct src4 {
	__u32 prefixlen;
	__u32 addr;
};

struct src6 {
	__u32 prefixlen;
	__u32 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct src4);
	__type(value, __u8);
	__uint(max_entries, 256);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} sources4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct src6);
	__type(value, __u8);
	__uint(max_entries, 256);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} sources6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct addr);
	__type(value, __u8);
	__uint(max_entries, 256);
} hosts SEC(".maps"); // this host's addresses (outer destinations)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct addr);
	__type(value, __u8);
	__uint(max_entries, 256);
} vips SEC(".maps"); // the VIPs (inner destinations)

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, D_MAX);
} decap_counters SEC(".maps");


static __always_inline int done(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&decap_counters, &i);
	if (c)
		*c += 1;
	return XDP_PASS;
}

static __always_inline int known(void *map, __u32 *a, __u8 family)
{
	struct addr k = {.family = family};
	if (family == 4) {
		k.a[0] = a[0];
	} else {
#pragma unroll
		for (int i = 0; i < 4; i++)
			k.a[i] = a[i];
	}
	return bpf_map_lookup_elem(map, &k) != 0;
}

// trusted reports whether the outer source a of the family is in a
// trusted prefix.
static __always_inline int trusted(__u32 *a, __u8 family)
{
	if (family == 4) {
		struct src4 k = {.prefixlen = 32, .addr = a[0]};
		return bpf_map_lookup_elem(&sources4, &k) != 0;
	}
	struct src6 k = {.prefixlen = 128};
#pragma unroll
	for (int i = 0; i < 4; i++)
		k.addr[i] = a[i];
	return bpf_map_lookup_elem(&sources6, &k) != 0;
}

static __always_inline int drop(__u32 i)
{
	done(i);
	return XDP_DROP;
}

SEC("xdp")
int xdp_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if (data + ETH_HLEN > end)
		return done(D_PASSED);
	void *l3 = data + ETH_HLEN;
	int over;    // bytes of outer headers
	__u8 inner;  // the inner packet's version, 4 or 6, if known from the outer header
	int ok;      // the outer source is trusted
	if (eth->proto == bpf_ntohs(ETH_P_IP)) {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > end || ip->version_ihl != 0x45 || (ip->frag_off & bpf_ntohs(IP_MF_OFFSET)))
			return done(D_PASSED);
		if (ip->protocol == IPPROTO_IPIP) {
			over = sizeof(*ip);
			inner = 4;
		} else if (ip->protocol == IPPROTO_IPV6) {
			over = sizeof(*ip);
			inner = 6;
		} else if (ip->protocol == IPPROTO_UDP) {
			struct udphdr *udp = (void *)(ip + 1);
			if ((void *)(udp + 1) > end || udp->dest != gue_port || gue_port == 0)
				return done(D_PASSED);
			over = sizeof(*ip) + sizeof(*udp);
			inner = 0;
		} else {
			return done(D_PASSED);
		}
		if (!known(&hosts, &ip->daddr, 4))
			return done(D_PASSED);
		ok = trusted(&ip->saddr, 4);
	} else if (eth->proto == bpf_ntohs(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		if ((void *)(ip6 + 1) > end)
			return done(D_PASSED);
		if (ip6->nexthdr == IPPROTO_IPV6) {
			over = sizeof(*ip6);
			inner = 6;
		} else if (ip6->nexthdr == IPPROTO_IPIP) {
			over = sizeof(*ip6);
			inner = 4;
		} else if (ip6->nexthdr == IPPROTO_UDP) {
			struct udphdr *udp = (void *)(ip6 + 1);
			if ((void *)(udp + 1) > end || udp->dest != gue_port || gue_port == 0)
				return done(D_PASSED);
			over = sizeof(*ip6) + sizeof(*udp);
			inner = 0;
		} else {
			return done(D_PASSED);
		}
		if (!known(&hosts, ip6->daddr, 6))
			return done(D_PASSED);
		ok = trusted(ip6->saddr, 6);
	} else {
		return done(D_PASSED);
	}

	// The inner packet: its version (GUE variant 1 says it by the first
	// nibble), its header whole, and its destination a VIP.
	void *in = l3 + over;
	if (in + 1 > end)
		return done(D_MALFORMED);
	__u8 v = *(__u8 *)in >> 4;
	if (inner && v != inner)
		return done(D_MALFORMED);
	__u16 proto;
	if (v == 4) {
		struct iphdr *ip = in;
		if ((void *)(ip + 1) > end || (ip->version_ihl & 0xf) < 5)
			return done(D_MALFORMED);
		if (!known(&vips, &ip->daddr, 4))
			return done(D_PASSED);
		if (!ok)
			return drop(D_UNTRUSTED);
		proto = bpf_htons(ETH_P_IP);
	} else if (v == 6) {
		struct ipv6hdr *ip6 = in;
		if ((void *)(ip6 + 1) > end)
			return done(D_MALFORMED);
		if (!known(&vips, ip6->daddr, 6))
			return done(D_PASSED);
		if (!ok)
			return drop(D_UNTRUSTED);
		proto = bpf_htons(ETH_P_IPV6);
	} else {
		return done(D_MALFORMED);
	}

	// The Ethernet header moves over the outer headers, which are then cut.
	struct ethhdr *neweth = in - ETH_HLEN;
	if ((void *)neweth < data || (void *)(neweth + 1) > end)
		return done(D_MALFORMED);
	__u8 mac[12];
	__builtin_memcpy(mac, eth, 12);
	__builtin_memcpy(neweth, mac, 12);
	neweth->proto = proto;
	if (bpf_xdp_adjust_head(ctx, over))
		return done(D_MALFORMED);
	return done(D_DECAPSULATED);
}

// Referenced so that the enum reaches the BTF bpf2go generates Go from.
const enum decap_counter *unused_counter __attribute__((unused));

// MIT, as the rest of the module, or GPL-2.0 at the user's choice: the
// kernel lets only GPL-compatible programs call bpf_fib_lookup.
char __license[] SEC("license") = "Dual MIT/GPL";
