//go:build ignore

// The xdpmaglev decapsulator: an XDP program for the backends of a service
// that the load balancer reaches by IPIP or GUE (bpf/maglev.c). It strips
// the outer header of a packet addressed to one of this host's addresses
// that carries a packet to one of the configured VIPs, from an outer
// source it trusts (the load balancers', and with second chance the other
// backends'), and passes the inner packet to the kernel, which delivers
// it to the VIP held on lo; the backend answers the client directly. Such
// a packet from any other source is dropped: whoever can send it could
// otherwise put any inner source in front of the backend. A packet that
// names a second hop (GUE variant 0, second chance) and belongs to no
// connection of this host is passed on there instead, as GUE variant 1,
// which nothing passes on again. Everything else (other tunnels among it)
// passes unchanged. Hosts with the kernel's ipip or fou modules can use
// those instead (docs/xdp.md), without second chance. It reads IP
// headers with the load balancer's parser (parse.h), writes the outer
// headers a packet passed on carries with its writer (outer.h), and finds
// the route with its lookup (fib.h).

#include "bpf.h"
#include "headers.h"
#include "parse.h"
#include "fib.h"
#include "outer.h"

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
	D_SECOND_HOP,   // named a second hop, and no connection here has it: passed on there
	D_SECOND_LOCAL, // named a second hop, and decapsulated here: a SYN, a connection here, not TCP, or no hops left
	D_SECOND_NO_ROUTE, // named a second hop this host has no route to (or forwarding is off): decapsulated here
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

// A CPU's counters, one struct looked up once per packet (as the load
// balancer's struct cpu_counters).
struct decap_cpu_counters {
	__u64 n[D_MAX]; // by enum decap_counter
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct decap_cpu_counters);
	__uint(max_entries, 1);
} decap_counters SEC(".maps");

// bump adds one to counter i of the CPU's counters c.
static __always_inline void bump(struct decap_cpu_counters *c, __u32 i)
{
	if (i < D_MAX)
		c->n[i] += 1;
}

static __always_inline int done(struct decap_cpu_counters *c, __u32 i)
{
	bump(c, i);
	return XDP_PASS;
}

static __always_inline int drop(struct decap_cpu_counters *c, __u32 i)
{
	bump(c, i);
	return XDP_DROP;
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

#define MAX_OVER 256 // the most bytes of outer headers: IPv6, UDP, and GUE's 128

// A packet's outer headers, as parse_outer reads them: the IP header as
// the load balancer's parser reads one (parse.h), and the rest.
struct outer {
	struct pkt p;    // the IP header: f.dst this host's address, f.src the outer source, l3_len; GUE: f.sport the UDP source port, the flow's entropy
	__u32 over;      // bytes of outer headers: IP, and for GUE UDP and GUE's own
	__u32 flow;      // IPv6: the outer header's first word (version, class, flow label)
	__u32 second[4]; // the second hop, where hops
	struct macs mac; // the frame's MACs
	__u8 inner;      // the inner packet's version if the outer header says it (IPIP), else 0
	__u8 trusted;    // the outer source is in sources4 or sources6
	__u8 hops;       // second chance: the hops left; 0: no second hop
};

// parse_gue reads the GUE header at p, the UDP payload, into o: variant 1
// (the inner packet at once), or variant 0 whose extension fields are
// private data alone, and second chance's if they say so. Control
// messages and optional fields this program does not read pass.
static __always_inline int parse_gue(void *p, void *end, struct outer *o)
{
	__u8 *b = p;
	if (p + 1 > end)
		return D_MALFORMED;
	if ((b[0] >> 6) == 1)
		return PARSED;
	if ((b[0] >> 5) != 0)
		return D_PASSED; // another variant, or a control message
	if (p + 4 > end)
		return D_MALFORMED;
	__u32 hlen = (b[0] & 0x1f) * 4;
	if (*(__u16 *)(b + 2) != 0)
		return D_PASSED;
	o->over += 4 + hlen;
	if (o->p.f.family == 4 && hlen >= 8) {
		struct gue_second4 *g = p;
		if ((void *)(g + 1) > end)
			return D_MALFORMED;
		if (g->magic[0] == SECOND_MAGIC0 && g->magic[1] == SECOND_MAGIC1 && g->version == SECOND_VERSION) {
			o->hops = g->hops;
			o->second[0] = g->addr;
		}
	} else if (o->p.f.family == 6 && hlen >= 20) {
		struct gue_second6 *g = p;
		if ((void *)(g + 1) > end)
			return D_MALFORMED;
		if (g->magic[0] == SECOND_MAGIC0 && g->magic[1] == SECOND_MAGIC1 && g->version == SECOND_VERSION) {
			o->hops = g->hops;
#pragma unroll
			for (int i = 0; i < 4; i++)
				o->second[i] = g->addr[i];
		}
	}
	return PARSED;
}

// parse_next reads what follows the outer IP header at p, of protocol
// proto: IPIP or IPv6 in IP, or UDP to the GUE port and its GUE header.
static __always_inline int parse_next(void *p, void *end, __u8 proto, struct outer *o)
{
	if (proto == IPPROTO_IPIP || proto == IPPROTO_IPV6) {
		o->inner = proto == IPPROTO_IPIP ? 4 : 6;
		return PARSED;
	}
	if (proto != IPPROTO_UDP)
		return D_PASSED;
	struct udphdr *udp = p;
	if ((void *)(udp + 1) > end || udp->dest != gue_port || gue_port == 0)
		return D_PASSED;
	o->over += sizeof(*udp);
	o->p.f.sport = udp->source;
	return parse_gue(udp + 1, end, o);
}

// to_host reports whether o's outer destination is this host's, of the
// family, a constant (so that each map lookup is one the verifier knows,
// and inlines), and reads whether its source is trusted.
static __always_inline int to_host(struct outer *o, const int family)
{
	if (!known(&hosts, o->p.f.dst, family))
		return D_PASSED;
	o->trusted = trusted(o->p.f.src, family);
	return PARSED;
}

// parse_outer reads the outer headers of the frame, an IP packet of the
// family, a constant, into o, or returns the counter of why it passes:
// not encapsulated, or not to this host.
static __always_inline int parse_outer(void *data, void *end, struct outer *o, const int family)
{
	void *l3 = data + ETH_HLEN;
	int r;
	o->mac = *(struct macs *)data; // xdp_decap checked the Ethernet header
	if (family == 4) {
		struct iphdr *ip = l3;
		if (ip4_header(l3, end, &o->p) != PARSED || ip->version_ihl != 0x45 || (ip->frag_off & bpf_ntohs(IP_MF_OFFSET)))
			return D_PASSED;
		o->over = sizeof(*ip);
		r = parse_next(ip + 1, end, ip->protocol, o);
	} else {
		struct ipv6hdr *ip6 = l3;
		if (ip6_header(l3, end, &o->p) != PARSED)
			return D_PASSED;
		o->over = sizeof(*ip6);
		o->flow = ip6->vtc_flow;
		r = parse_next(ip6 + 1, end, ip6->nexthdr, o);
	}
	return r != PARSED ? r : to_host(o, family);
}

// parse_inner reads the inner packet at in into ip: its version (the
// outer header's, IPIP, or the first nibble's, GUE variant 1), its IP
// header whole, and its destination a VIP.
static __always_inline int parse_inner(void *in, void *end, struct outer *o, struct pkt *ip)
{
	if (in + 1 > end)
		return D_MALFORMED;
	__u8 v = *(__u8 *)in >> 4;
	if (o->inner && v != o->inner)
		return D_MALFORMED;
	// Each family's lookup of vips its own, as to_host's.
	if (v == 4) {
		if (ip4_header(in, end, ip) != PARSED)
			return D_MALFORMED;
		return known(&vips, ip->ip_dst, 4) ? PARSED : D_PASSED;
	}
	if (v == 6) {
		if (ip6_header(in, end, ip) != PARSED)
			return D_MALFORMED;
		return known(&vips, ip->ip_dst, 6) ? PARSED : D_PASSED;
	}
	return D_MALFORMED;
}

// local reports whether the inner packet at in, its IP header read into
// ip, belongs here: anything but TCP, a SYN (a new connection), and a
// packet of a connection of this host's, which is a socket other than a
// listener (established, a request, time-wait) or a listener whose SYN
// cookie the packet carries. The listener of the port answers any other
// packet of a connection it does not have with a reset: that one is for
// the second hop.
static __always_inline int local(struct xdp_md *ctx, struct pkt *ip, void *in, void *end)
{
	struct bpf_sock_tuple t = {};
	__u32 tlen, iplen;
	if (ip->ip_proto != IPPROTO_TCP)
		return 1;
	ip->f.proto = IPPROTO_TCP;
	if (ip->f.family == 4) {
		if (*(__u8 *)in != 0x45)
			return 1;
		iplen = sizeof(struct iphdr);
		if (parse_l4(in + sizeof(struct iphdr), end, ip) != PARSED)
			return 1;
		t.ipv4.saddr = ip->f.src[0];
		t.ipv4.daddr = ip->f.dst[0];
		t.ipv4.sport = ip->f.sport;
		t.ipv4.dport = ip->f.dport;
		tlen = sizeof(t.ipv4);
	} else {
		iplen = sizeof(struct ipv6hdr);
		if (parse_l4(in + sizeof(struct ipv6hdr), end, ip) != PARSED)
			return 1;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			t.ipv6.saddr[i] = ip->f.src[i];
			t.ipv6.daddr[i] = ip->f.dst[i];
		}
		t.ipv6.sport = ip->f.sport;
		t.ipv6.dport = ip->f.dport;
		tlen = sizeof(t.ipv6);
	}
	if ((ip->tcp & (TCP_SYN | TCP_ACK)) == TCP_SYN)
		return 1;
	void *th = in + iplen;
	if (th + TCP_HLEN > end)
		return 1;
	struct bpf_sock *sk = bpf_skc_lookup_tcp(ctx, &t, tlen, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	int here = sk->state != TCP_LISTEN;
	if (!here && (ip->tcp & TCP_ACK))
		here = bpf_tcp_check_syncookie(sk, in, iplen, th, TCP_HLEN) == 0;
	bpf_sk_release(sk);
	return here;
}

// second_headers writes the outer headers of the frame at data passed on
// to o's second hop: the MACs m, an IP header from the address from to
// the second hop of a packet of len octets, and UDP to the GUE port, GUE
// variant 1 (the GUE header cut: no second hop any more). It says
// whether the frame had room for them.
static __always_inline int second_headers(void *data, void *end, struct outer *o, struct macs m, const __u32 *from, __u32 len)
{
	struct udphdr *udp;
	__u32 ip_len;
	outer_eth(data, m, o->p.f.family);
	if (o->p.f.family == 4) {
		struct iphdr *ip = data + ETH_HLEN;
		if ((void *)(ip + 1) > end)
			return 0;
		outer_ip4(ip, len, IPPROTO_UDP, from[0], o->second[0]);
		udp = (void *)(ip + 1);
		ip_len = sizeof(*ip);
	} else {
		struct ipv6hdr *ip6 = data + ETH_HLEN;
		if ((void *)(ip6 + 1) > end)
			return 0;
		outer_ip6(ip6, o->flow, len - sizeof(*ip6), IPPROTO_UDP, from, 0, o->second);
		udp = (void *)(ip6 + 1);
		ip_len = sizeof(*ip6);
	}
	if ((void *)(udp + 1) > end)
		return 0;
	outer_udp(udp, o->p.f.sport, gue_port, len - ip_len);
	return 1;
}

// pass_on sends the packet on to o's second hop: its outer headers made
// anew, from this host to the second hop, as GUE variant 1 (no second hop
// any more), toward the next hop the kernel's tables give; where the
// kernel has the route but not yet the next hop's MAC (a backend on this
// one's segment that it never spoke to), the packet so made, from its
// outer source as it came (the kernel forwards no packet from its own
// address), is passed to the kernel, which forwards it, asking for the
// MAC. It returns the verdict, or -1 with the packet unchanged where the
// kernel has no route to the second hop (or forwards nothing).
static __always_inline int pass_on(struct xdp_md *ctx, struct outer *o)
{
	struct bpf_fib_lookup fib = {};
	long fr = fib_lookup(ctx, &fib, o->p.f.family, o->p.f.dst, o->second);
	if (fr != BPF_FIB_LKUP_RET_SUCCESS && fr != BPF_FIB_LKUP_RET_NO_NEIGH)
		return -1;
	__u32 ip_len = o->p.f.family == 4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
	__u32 gh = o->over - ip_len - UDP_HLEN; // the GUE header's bytes, cut
	if (gh > MAX_OVER || o->p.l3_len < ip_len + UDP_HLEN + gh)
		return -1;
	if (bpf_xdp_adjust_head(ctx, (int)gh))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + ETH_HLEN + ip_len + UDP_HLEN > end)
		return XDP_DROP;
	// To the next hop from this host; or to this host, as it came: the
	// kernel forwards it.
	struct macs m = o->mac;
	const __u32 *from = o->p.f.src;
	if (fr == BPF_FIB_LKUP_RET_SUCCESS) {
		__builtin_memcpy(m.dst, fib.dmac, 6);
		__builtin_memcpy(m.src, fib.smac, 6);
		from = o->p.f.dst;
	}
	if (!second_headers(data, end, o, m, from, o->p.l3_len - gh))
		return XDP_DROP;
	if (fr != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;
	return send_out(ctx, fib.ifindex);
}

// strip moves the Ethernet header over the outer headers (over bytes
// after it), which are then cut, so the inner packet, of EtherType proto,
// is the frame's.
static __always_inline int strip(struct xdp_md *ctx, struct decap_cpu_counters *c, __u32 over, __u16 proto)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end || over > MAX_OVER)
		return done(c, D_MALFORMED);
	struct ethhdr *neweth = data + over;
	if ((void *)(neweth + 1) > end)
		return done(c, D_MALFORMED);
	*(struct macs *)neweth = *(struct macs *)eth;
	neweth->proto = proto;
	if (bpf_xdp_adjust_head(ctx, (int)over))
		return done(c, D_MALFORMED);
	return done(c, D_DECAPSULATED);
}

// decap is the decapsulator's program for the frame from data to end,
// its Ethernet header checked, whose outer header is IP of the family, a
// constant. Each family has its own copy, so that
// each map lookup's map is one the verifier knows, and inlines or calls
// directly (clang would otherwise merge the two families' lookups of
// hosts and of the trusted sources into one call of either map).
static __always_inline int decap(struct xdp_md *ctx, struct decap_cpu_counters *c, void *data, void *end,
				 const int family)
{
	struct outer o = {};
	int r = parse_outer(data, end, &o, family);
	if (r != PARSED)
		return done(c, r);
	__u32 over = o.over;
	if (over > MAX_OVER)
		return done(c, D_MALFORMED);
	void *in = data + ETH_HLEN + over;
	struct pkt ip = {}; // the inner packet's IP header
	r = parse_inner(in, end, &o, &ip);
	if (r != PARSED)
		return done(c, r);
	if (!o.trusted)
		return drop(c, D_UNTRUSTED);
	if (o.hops && ip.f.family == family && !local(ctx, &ip, in, end)) {
		int verdict = pass_on(ctx, &o);
		if (verdict >= 0) {
			bump(c, D_SECOND_HOP);
			return verdict;
		}
		bump(c, D_SECOND_NO_ROUTE);
	} else if (o.hops) {
		bump(c, D_SECOND_LOCAL);
	}
	return strip(ctx, c, over, ip.f.family == 4 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6));
}

SEC("xdp")
int xdp_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct decap_cpu_counters *c = bpf_map_lookup_elem(&decap_counters, &zero);
	if (!c)
		return XDP_PASS;
	struct ethhdr *eth = data;
	if (data + ETH_HLEN > end)
		return done(c, D_PASSED);
	if (eth->proto == bpf_htons(ETH_P_IP))
		return decap(ctx, c, data, end, 4);
	if (eth->proto == bpf_htons(ETH_P_IPV6))
		return decap(ctx, c, data, end, 6);
	return done(c, D_PASSED);
}

// Referenced so that the enum reaches the BTF bpf2go generates Go from.
const enum decap_counter *unused_counter __attribute__((unused));

// MIT, as the rest of the module, or GPL-2.0 at the user's choice: the
// kernel lets only GPL-compatible programs call bpf_fib_lookup.
char __license[] SEC("license") = "Dual MIT/GPL";
