//go:build ignore

// The xdpmaglev data plane: an XDP program that sends each TCP or UDP
// packet addressed to a service (VIP, port, protocol) to a backend chosen
// by the service's Maglev table, by direct server return at layer 2, and
// passes everything else to the kernel. docs/xdp.md describes it; the Go
// control plane in this package fills its maps.

#include "bpf.h"

// Set by the control plane before loading (rodata: the verifier sees them
// as constants).
volatile const __u64 hash_seed = 0;    // Options.Seed
volatile const __u32 table_size = 65537; // Options.M, every table's slots
volatile const __u8 lb_mac[6] = {};     // the attached interface's address

#define NO_BACKEND 0xffffffffu

// A flow's 5-tuple, as the packet carries it (addresses and ports in
// network byte order; an IPv4 address fills the first word). It is the
// conntrack key.
struct flow {
	__u32 src[4];
	__u32 dst[4];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 family; // 4 or 6
	__u16 pad;
};

// An IPv4 flow's conntrack key: struct flow's fields for IPv4, in 16
// bytes instead of 40, so that the kernel hashes and compares less.
struct flow4 {
	__u32 src;
	__u32 dst;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

// A service's key: the VIP, port and protocol, laid out as in struct flow.
// IPv6 services only; an IPv4 service's key is struct svc_key4.
struct svc_key {
	__u32 addr[4];
	__u16 port;
	__u8 proto;
	__u8 family;
};

// An IPv4 service's key, in 8 bytes.
struct svc_key4 {
	__u32 addr;
	__u16 port;
	__u8 proto;
	__u8 pad;
};

struct service {
	__u32 id; // index of the service's table and counters
};


// A slot of a Maglev table, and a conntrack entry: a backend id (an index
// of the backends map, stable while the backend is in the service) and the
// cookie the backend got when it joined. A reader follows the id only
// while the backend's entry holds the same cookie, so an id freed and
// reused never sends a packet to a backend it was not meant for.
struct slot {
	__u32 id;
	__u32 cookie;
};

// A conntrack entry: the backend a flow goes to, as a table slot names
// it, and the service whose table chose it. While the backend's entry
// holds the cookie, the backend is in that service (a backend's id and
// cookie belong to one service, and a deleted service's backends are
// cleared), so a hit needs no lookup of the service.
struct ct_entry {
	struct slot backend;
	__u32 svc;
};

struct backend {
	__u8 mac[6];
	__u16 pad;
	__u32 cookie; // 0: free
};

struct stats {
	__u64 packets;
	__u64 bytes; // frame bytes, Ethernet header included
};

// Counter indexes: the Go side's counter names, in this order.
enum {
	C_TX,            // forwarded to a backend (XDP_TX)
	C_CT_HIT,        // conntrack named a backend still in the service
	C_CT_MISS,       // no usable conntrack entry: the table chose
	C_CT_STALE,      // of the misses, an entry whose backend left
	C_CT_INSERT,     // conntrack entries written
	C_PASS_NOT_IP,   // not IPv4 or IPv6 (ARP, VLAN-tagged, ...)
	C_PASS_TRUNCATED, // a header cut short
	C_PASS_MALFORMED, // IPv4 version or header length impossible
	C_PASS_NOT_TCP_UDP, // ICMP and other protocols
	C_PASS_FRAGMENT, // an IPv4 fragment or an IPv6 fragment header
	C_PASS_IP_OPTIONS, // IPv4 with options
	C_PASS_IPV6_EXT, // an IPv6 extension header other than a fragment's
	C_PASS_NO_SERVICE, // TCP or UDP, but to no service
	C_DROP_NO_BACKEND, // to a service whose table has no backend
	C_MAX,
};

// Services by key, one map per address family: the IPv4 one's smaller key
// costs less to hash and compare on every packet.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct svc_key4);
	__type(value, struct service);
	__uint(max_entries, 64); // Options.MaxServices
} services4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct svc_key);
	__type(value, struct service);
	__uint(max_entries, 64); // Options.MaxServices
} services6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 64); // Options.MaxServices
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__type(key, __u32);
		__type(value, struct slot);
		__uint(max_entries, 65537); // Options.M
		__uint(map_flags, BPF_F_MMAPABLE); // written through mmap
	});
} tables SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct backend);
	__uint(max_entries, 4096); // Options.MaxBackends
} backends SEC(".maps");

// Connection tracking, one map per address family (the IPv4 key is 16
// bytes, the IPv6 one 40), each of Options.ConntrackSize entries. The LRU
// lists are shared by the CPUs: per-CPU lists (BPF_F_NO_COMMON_LRU) would
// let a CPU evict only from its own share of the entries, and measured no
// faster here (docs/xdp.md).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow4);
	__type(value, struct ct_entry);
	__uint(max_entries, 262144); // Options.ConntrackSize
} conntrack4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow);
	__type(value, struct ct_entry);
	__uint(max_entries, 262144); // Options.ConntrackSize
} conntrack6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct stats);
	__uint(max_entries, 64); // Options.MaxServices
} service_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct stats);
	__uint(max_entries, 4096); // Options.MaxBackends
} backend_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, C_MAX);
} counters SEC(".maps");

// Packet headers, declared here rather than taken from the kernel's.
struct ethhdr {
	__u8 dest[6];
	__u8 source[6];
	__u16 proto;
};

struct iphdr {
	__u8 version_ihl;
	__u8 tos;
	__u16 tot_len;
	__u16 id;
	__u16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__u16 check;
	__u32 saddr;
	__u32 daddr;
};

struct ipv6hdr {
	__u32 vtc_flow;
	__u16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u32 saddr[4];
	__u32 daddr[4];
};

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IP_MF_OFFSET 0x3fff
#define TCP_HLEN 20
#define UDP_HLEN 8
#define PARSED (-1)

static __always_inline void count(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &i);
	if (c)
		*c += 1;
}

static __always_inline void add_stats(void *map, __u32 i, __u64 bytes)
{
	struct stats *s = bpf_map_lookup_elem(map, &i);
	if (s) {
		s->packets += 1;
		s->bytes += bytes;
	}
}

// parse_l4 reads the ports of a TCP or UDP header at l4, whole or not at all.
static __always_inline int parse_l4(void *l4, void *end, struct flow *f)
{
	__u16 *ports = l4;
	if (l4 + (f->proto == IPPROTO_TCP ? TCP_HLEN : UDP_HLEN) > end)
		return C_PASS_TRUNCATED;
	f->sport = ports[0];
	f->dport = ports[1];
	return PARSED;
}

// parse fills f from the packet, or returns the counter of the reason it
// passes. It reads nothing beyond end: each header is checked whole before
// any of its fields is read. The checks, in order: Ethernet header,
// EtherType, IP header, IPv4 version and header length, protocol
// (IPv6: extension headers first), fragments, IPv4 options, then the TCP
// (20 bytes) or UDP (8 bytes) header.
static __always_inline int parse(void *data, void *end, struct flow *f)
{
	struct ethhdr *eth = data;
	if (data + sizeof(*eth) > end)
		return C_PASS_TRUNCATED;
	void *l3 = data + sizeof(*eth);

	if (eth->proto == bpf_ntohs(ETH_P_IP)) {
		struct iphdr *ip = l3;
		if (l3 + sizeof(*ip) > end)
			return C_PASS_TRUNCATED;
		if ((ip->version_ihl >> 4) != 4 || (ip->version_ihl & 0xf) < 5)
			return C_PASS_MALFORMED;
		if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
			return C_PASS_NOT_TCP_UDP;
		if (ip->frag_off & bpf_ntohs(IP_MF_OFFSET))
			return C_PASS_FRAGMENT;
		if ((ip->version_ihl & 0xf) != 5)
			return C_PASS_IP_OPTIONS;
		f->src[0] = ip->saddr;
		f->dst[0] = ip->daddr;
		f->proto = ip->protocol;
		f->family = 4;
		return parse_l4(l3 + sizeof(*ip), end, f);
	}
	if (eth->proto == bpf_ntohs(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		if (l3 + sizeof(*ip6) > end)
			return C_PASS_TRUNCATED;
		if ((*(__u8 *)ip6 >> 4) != 6)
			return C_PASS_MALFORMED;
		switch (ip6->nexthdr) {
		case IPPROTO_TCP:
		case IPPROTO_UDP:
			break;
		case 44: // fragment
			return C_PASS_FRAGMENT;
		case 0:   // hop-by-hop options
		case 43:  // routing
		case 51:  // authentication
		case 60:  // destination options
		case 135: // mobility
		case 139: // host identity protocol
		case 140: // shim6
		case 253: // experimental
		case 254: // experimental
			return C_PASS_IPV6_EXT;
		default:
			return C_PASS_NOT_TCP_UDP;
		}
#pragma unroll
		for (int i = 0; i < 4; i++) {
			f->src[i] = ip6->saddr[i];
			f->dst[i] = ip6->daddr[i];
		}
		f->proto = ip6->nexthdr;
		f->family = 6;
		return parse_l4(l3 + sizeof(*ip6), end, f);
	}
	return C_PASS_NOT_IP;
}

// The flow hash: MurmurHash3's 64-bit block mix and finalizer over the
// 5-tuple as 64-bit words of numbers (addresses and ports as integers, not
// as bytes in memory). docs/xdp.md specifies it; FlowHash in flowhash.go is
// its Go twin, pinned by golden values.
static __always_inline __u64 rotl(__u64 x, int r)
{
	return (x << r) | (x >> (64 - r));
}

static __always_inline __u64 mix(__u64 h, __u64 k)
{
	k *= 0x87c37b91114253d5ULL;
	k = rotl(k, 31);
	k *= 0x4cf5ad432745937fULL;
	h ^= k;
	h = rotl(h, 27);
	return h * 5 + 0x52dce729;
}

static __always_inline __u64 flow_hash(const struct flow *f)
{
	__u64 h = hash_seed;
	__u64 last = (__u64)bpf_ntohs(f->sport) << 48 | (__u64)bpf_ntohs(f->dport) << 32 |
		     (__u64)f->proto << 8 | f->family;
	if (f->family == 4) {
		h = mix(h, (__u64)bpf_ntohl(f->src[0]) << 32 | bpf_ntohl(f->dst[0]));
		h = mix(h, last);
		h ^= 16;
	} else {
		h = mix(h, (__u64)bpf_ntohl(f->src[0]) << 32 | bpf_ntohl(f->src[1]));
		h = mix(h, (__u64)bpf_ntohl(f->src[2]) << 32 | bpf_ntohl(f->src[3]));
		h = mix(h, (__u64)bpf_ntohl(f->dst[0]) << 32 | bpf_ntohl(f->dst[1]));
		h = mix(h, (__u64)bpf_ntohl(f->dst[2]) << 32 | bpf_ntohl(f->dst[3]));
		h = mix(h, last);
		h ^= 40;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

// backend returns the backend with this id while it holds this cookie.
static __always_inline struct backend *backend(__u32 id, __u32 cookie)
{
	struct backend *b = bpf_map_lookup_elem(&backends, &id);
	if (!b || b->cookie != cookie || cookie == 0)
		return 0;
	return b;
}

// choose looks the flow's slot up in the service's table. A slot whose
// backend left after this packet read the table (the control plane frees
// removed backends just after it swaps the table in) sends it to the
// table once more, which is then the new one.
static __always_inline struct backend *choose(__u32 svc, __u64 h, struct slot *out)
{
	__u32 i = h % table_size;
#pragma unroll
	for (int try = 0; try < 2; try++) {
		void *table = bpf_map_lookup_elem(&tables, &svc);
		if (!table)
			return 0;
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

// The conntrack lookups, one function each: clang would otherwise merge
// the two calls into one whose map the verifier does not know, which it
// cannot inline.
static __attribute__((noinline)) struct ct_entry *lookup_ct4(struct flow4 *f)
{
	return bpf_map_lookup_elem(&conntrack4, f);
}

static __attribute__((noinline)) struct ct_entry *lookup_ct6(struct flow *f)
{
	return bpf_map_lookup_elem(&conntrack6, f);
}

SEC("xdp")
int xdp_maglev(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct flow f = {};
	int r = parse(data, end, &f);
	if (r != PARSED) {
		count(r);
		return XDP_PASS;
	}

	// Connection tracking first: an entry whose backend is still in the
	// service names the service, so an established flow costs one hash
	// lookup. Each family's lookups are separate calls, so that the
	// verifier knows each call's map and inlines the lookup.
	struct flow4 f4 = {};
	struct ct_entry *ct;
	if (f.family == 4) {
		f4.src = f.src[0];
		f4.dst = f.dst[0];
		f4.sport = f.sport;
		f4.dport = f.dport;
		f4.proto = f.proto;
		ct = lookup_ct4(&f4);
	} else {
		ct = lookup_ct6(&f);
	}
	struct backend *b = 0;
	struct ct_entry e = {};
	if (ct) {
		e = *ct;
		b = backend(e.backend.id, e.backend.cookie);
	}
	if (!b) {
		struct service *svc;
		if (f.family == 4) {
			struct svc_key4 k = {.addr = f.dst[0], .port = f.dport, .proto = f.proto};
			svc = bpf_map_lookup_elem(&services4, &k);
		} else {
			struct svc_key k = {};
#pragma unroll
			for (int i = 0; i < 4; i++)
				k.addr[i] = f.dst[i];
			k.port = f.dport;
			k.proto = f.proto;
			k.family = f.family;
			svc = bpf_map_lookup_elem(&services6, &k);
		}
		if (!svc) {
			count(C_PASS_NO_SERVICE);
			return XDP_PASS;
		}
		e.svc = svc->id;
	}
	__u32 svc_id = e.svc;

	if (b) {
		count(C_CT_HIT);
	} else {
		count(C_CT_MISS);
		if (ct)
			count(C_CT_STALE);
		b = choose(svc_id, flow_hash(&f), &e.backend);
		if (!b) {
			count(C_DROP_NO_BACKEND);
			return XDP_DROP;
		}
		long err;
		if (f.family == 4)
			err = bpf_map_update_elem(&conntrack4, &f4, &e, BPF_ANY);
		else
			err = bpf_map_update_elem(&conntrack6, &f, &e, BPF_ANY);
		if (err == 0)
			count(C_CT_INSERT);
	}

	__u64 bytes = end - data;
	add_stats(&service_stats, svc_id, bytes);
	add_stats(&backend_stats, e.backend.id, bytes);

	struct ethhdr *eth = data; // parse checked it is whole
	__builtin_memcpy(eth->dest, b->mac, 6);
#pragma unroll
	for (int i = 0; i < 6; i++)
		eth->source[i] = lb_mac[i];
	count(C_TX);
	return XDP_TX;
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
	struct flow f = {};
	if (parse(data, end, &f) != PARSED)
		return XDP_PASS;
	__u64 h = bpf_htonll(flow_hash(&f));
	__builtin_memcpy(data, &h, 8); // parse checked 14 bytes or more
	return XDP_TX;
}

char __license[] SEC("license") = "MIT";
