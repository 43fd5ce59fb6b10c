//go:build ignore

// The xdpmaglev data plane: an XDP program that sends each TCP or UDP
// packet addressed to a service (VIP, port, protocol) to a backend chosen
// by the service's Maglev table, by the service's forwarding mode (a MAC
// rewrite on the segment, or IPIP or GUE encapsulation to a backend
// anywhere the kernel has a route to), sends an ICMP error about a flow to
// that flow's backend, and passes everything else to the kernel.
// docs/xdp.md describes it; the Go control plane in this package fills
// its maps. The decapsulator the backends run is bpf/decap.c.

#include "bpf.h"
#include "headers.h"

// Set by the control plane before loading (rodata: the verifier sees them
// as constants).
volatile const __u64 hash_seed = 0;    // Options.Seed
volatile const __u8 lb_mac[6] __attribute__((aligned(2))) = {}; // the attached interface's address
volatile const __u32 flood_rate = 125000; // Options.FloodRate: new flows a second, per CPU; 0: no guard

// Constants the Go side shares, generated into maglev_bpfel.go by bpf2go
// (-type consts, -type forward).
enum consts {
	NO_BACKEND = 0xffffffffu, // a table slot with no backend
	// The version of the maps' layout and meaning, which a control plane
	// checks before it adopts maps pinned by another (Options.PinPath):
	// raise it with any change of a map's type, key or value, or of what
	// the program or the control plane makes of a map's contents (what a
	// slot, a cookie or an entry means). TestLayoutVersion fails when the
	// maps' layout changes and this does not; a change of meaning alone
	// is for the author to see.
	LAYOUT_VERSION = 1,
};

// How a service's packets reach its backends (ServiceOptions.Forward).
enum forward {
	FWD_L2 = 0,   // the frame's MACs rewritten, sent back out (XDP_TX)
	FWD_IPIP = 1, // inside an outer IP header: IPv4 in IPv4 (protocol 4), IPv6 in IPv6 (41)
	FWD_GUE = 2,  // inside outer IP and UDP headers: GUE variant 1, the inner IP packet as UDP payload
};

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

// A backend of one service, and how that service reaches it: by its MAC
// (FWD_L2), or by its address from the load balancer's (the encapsulating
// modes, whose next hop bpf_fib_lookup finds). The program reads none of
// svc and weight, nor addr in FWD_L2: they are there for a control plane
// that adopts pinned maps, to know each backend again.
struct backend {
	__u8 mac[6];
	__u8 mode;   // enum forward
	__u8 family; // of addr and src: 4 or 6
	__u32 cookie; // 0: free
	__u32 addr[4]; // the backend's address, in network order (IPv4: the first word)
	__u32 src[4];  // the outer source address
	__u16 port;    // FWD_GUE: the outer UDP destination port, network order
	__u16 src_mask; // the low bits of src that come from the flow hash (host order; 0: none)
	__u32 svc;     // the id of the backend's service
	__u32 weight;  // its weight in the service's table (0: draining)
};

// A CPU's flood guard: new flows counted in windows of 1/FLOOD_WINDOWS s.
// Once a window has seen more than flood_rate/FLOOD_WINDOWS new flows, and
// for FLOOD_HOLD ns after the last new flow over that share, new flows are
// routed by the table without a conntrack entry.
struct flood {
	__u64 start; // the window's start, bpf_ktime_get_coarse_ns
	__u64 count; // new flows in the window
	__u64 ns;    // time spent with the guard on, summed from new flow to new flow
	__u64 over;  // when a new flow last went over the window's share; 0: never
	__u64 last;  // the last new flow's time
};

struct stats {
	__u64 packets;
	__u64 bytes; // frame bytes, Ethernet header included
};

// Counter indexes: the Go side's counter names (counterNames, stats.go),
// in this order; TestCounterNames checks that the two agree.
enum counter {
	C_TX,            // forwarded to a backend (XDP_TX or XDP_REDIRECT)
	C_CT_HIT,        // conntrack named a backend still in the service
	C_CT_MISS,       // no usable conntrack entry: the table chose
	C_CT_STALE,      // of the misses, an entry whose backend left
	C_CT_INSERT,     // conntrack entries written
	C_CT_FLOOD,      // of the misses, routed without an entry: the flood guard was on
	C_ICMP_FORWARDED, // an ICMP error about a flow, sent to the flow's backend
	C_ICMP_TOO_BIG,  // ICMP "too big" sent to a client: its packet did not fit once encapsulated
	C_PASS_NOT_IP,   // not IPv4 or IPv6 (ARP, LLDP, ...)
	C_PASS_VLAN,     // a frame with its 802.1Q or 802.1ad tag in it: not this device's untagged segment
	C_PASS_TRUNCATED, // a header cut short
	C_PASS_MALFORMED, // an impossible version, header or total length, or TCP data offset
	C_PASS_NOT_TCP_UDP, // ICMP and other protocols
	C_PASS_FRAGMENT, // an IPv4 fragment or an IPv6 fragment header
	C_PASS_IP_OPTIONS, // IPv4 with options
	C_PASS_IPV6_EXT, // an IPv6 extension header other than a fragment's
	C_PASS_NO_SERVICE, // TCP or UDP, but to no service
	C_DROP_NO_BACKEND, // to a service whose table has no backend
	C_DROP_TOO_BIG,  // too big once encapsulated, and no ICMP allowed (IPv4 without DF, or an ICMP error)
	C_DROP_NO_ROUTE, // bpf_fib_lookup found no route to the backend
	C_DROP_NO_NEIGHBOR, // bpf_fib_lookup found the route, but no neighbour entry for its next hop
	C_DROP_FORWARDING_OFF, // bpf_fib_lookup: forwarding is off on the interface (sysctl net.ipv4.conf.DEV.forwarding, net.ipv6.conf.all.forwarding)
	C_DROP_NO_ROOM,  // the driver had no headroom for the outer header
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
		__uint(max_entries, 65538); // 1 + each service's own M (ServiceOptions.M)
		// written through mmap; tables of different sizes
		__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
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

// A CPU's counters, one struct looked up once per packet.
struct cpu_counters {
	__u64 n[C_MAX]; // by enum counter
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct cpu_counters);
	__uint(max_entries, 1);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct flood);
	__uint(max_entries, 1);
} flood_state SEC(".maps");

// A backend's next hop as bpf_fib_lookup last gave it, per CPU, by
// backend id: looked up again when older than NEXTHOP_TTL ticks of the
// kernel's clock (jiffies) or when the id now holds another backend
// (cookie), so route and neighbour changes reach the packets within
// NEXTHOP_TTL ticks: 500 ms at HZ 100, 200 ms at HZ 250, 50 ms at HZ 1000.
// Jiffies, not nanoseconds: the kernel inlines bpf_jiffies64 into one
// load, where a clock in ns costs a helper call on every packet.
struct nexthop {
	__u8 dmac[6];
	__u8 smac[6];
	__u32 ifindex;
	__u32 mtu;    // the route's MTU
	__u32 cookie; // the backend's, when looked up
	__u64 expires; // bpf_jiffies64
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct nexthop);
	__uint(max_entries, 4096); // Options.MaxBackends
} nexthops SEC(".maps");

// The layout record, the one entry of the map layout, which the program
// never reads: what a control plane checks before it adopts pinned maps
// (Options.PinPath), and the state it needs beside the maps. Its own
// layout never changes, version first.
struct layout_record {
	__u32 version; // LAYOUT_VERSION of the maps; 0: still being pinned
	__u32 cookie;  // the last backend cookie handed out
	__u64 spec;    // a hash of the maps' types, keys, values and flags (specHash in pin.go)
	__u64 netns;   // the inode of the network namespace of the interface; 0: none
	__u32 ifindex; // the interface the maps were made for; 0: none
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct layout_record);
	__uint(max_entries, 1);
} layout SEC(".maps");

#define PARSED (-1)
#define FLOOD_WINDOWS 8            // windows a second
#define FLOOD_HOLD 1000000000ULL // ns the guard stays on after the rate was last exceeded
#define NEXTHOP_TTL 50 // jiffies
#define TX_ICMP 100 // forward's verdict for an ICMP answer sent back: XDP_TX, not counted as forwarded

// A parsed packet: its flow (for an ICMP error, the flow the error is
// about, as that flow's own packets carry it), the length of its IP packet
// (the IP header's, which a frame's padding may exceed), and what kind.
struct pkt {
	struct flow f;
	__u32 l3_len;
	__u8 icmp; // an ICMP error about flow f
	__u8 df;   // IPv4 with DF set, or IPv6: never fragmented on the way
};

static __always_inline void count(struct cpu_counters *c, __u32 i)
{
	if (i < C_MAX)
		c->n[i] += 1;
}

static __always_inline void add_stats(void *map, __u32 i, __u64 bytes)
{
	struct stats *s = bpf_map_lookup_elem(map, &i);
	if (s) {
		s->packets += 1;
		s->bytes += bytes;
	}
}

// parse_l4 reads the ports of a TCP or UDP header at l4, whole or not at
// all, and checks a TCP header's data offset.
static __always_inline int parse_l4(void *l4, void *end, struct flow *f)
{
	__u16 *ports = l4;
	if (f->proto == IPPROTO_TCP) {
		if (l4 + TCP_HLEN > end)
			return C_PASS_TRUNCATED;
		if ((((__u8 *)l4)[12] >> 4) < 5)
			return C_PASS_MALFORMED;
	} else if (l4 + UDP_HLEN > end) {
		return C_PASS_TRUNCATED;
	}
	f->sport = ports[0];
	f->dport = ports[1];
	return PARSED;
}

// ipv6_next classifies an IPv6 next-header value: 0 for TCP and UDP, else
// the counter of the reason the packet passes.
static __always_inline int ipv6_next(__u8 next)
{
	switch (next) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
		return 0;
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
	}
	return C_PASS_NOT_TCP_UDP;
}

// parse_icmp4 reads an ICMPv4 destination unreachable at l4 whose quoted
// packet is a TCP or UDP packet from a VIP (a backend's reply), and fills
// f with the flow it is about: the quoted packet's 5-tuple reversed.
// Other ICMP returns C_PASS_NOT_TCP_UDP.
static __always_inline int parse_icmp4(void *l4, void *end, struct flow *f)
{
	__u8 *icmp = l4;
	if (l4 + ICMP_HLEN > end)
		return C_PASS_TRUNCATED;
	if (icmp[0] != 3) // destination unreachable, fragmentation needed among them
		return C_PASS_NOT_TCP_UDP;
	struct iphdr *in = l4 + ICMP_HLEN;
	if ((void *)(in + 1) + 8 > end)
		return C_PASS_TRUNCATED;
	if (in->version_ihl != 0x45)
		return C_PASS_MALFORMED;
	if (in->protocol != IPPROTO_TCP && in->protocol != IPPROTO_UDP)
		return C_PASS_NOT_TCP_UDP;
	__u16 *ports = (void *)(in + 1);
	f->src[0] = in->daddr;
	f->dst[0] = in->saddr;
	f->sport = ports[1];
	f->dport = ports[0];
	f->proto = in->protocol;
	return PARSED;
}

// parse_icmp6 is parse_icmp4 for ICMPv6 destination unreachable (1) and
// packet too big (2).
static __always_inline int parse_icmp6(void *l4, void *end, struct flow *f)
{
	__u8 *icmp = l4;
	if (l4 + ICMP_HLEN > end)
		return C_PASS_TRUNCATED;
	if (icmp[0] != 1 && icmp[0] != 2)
		return C_PASS_NOT_TCP_UDP;
	struct ipv6hdr *in = l4 + ICMP_HLEN;
	if ((void *)(in + 1) + 8 > end)
		return C_PASS_TRUNCATED;
	if ((*(__u8 *)in >> 4) != 6)
		return C_PASS_MALFORMED;
	if (in->nexthdr != IPPROTO_TCP && in->nexthdr != IPPROTO_UDP)
		return C_PASS_NOT_TCP_UDP;
	__u16 *ports = (void *)(in + 1);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		f->src[i] = in->daddr[i];
		f->dst[i] = in->saddr[i];
	}
	f->sport = ports[1];
	f->dport = ports[0];
	f->proto = in->nexthdr;
	return PARSED;
}

// parse fills p from the packet, or returns the counter of the reason it
// passes. It reads nothing beyond end: each header is checked whole before
// any of its fields is read. The checks, in order: Ethernet header,
// EtherType, IP header, IPv4 version and header length, protocol
// (IPv6: extension headers first), fragments, IPv4 options, then the TCP
// (20 bytes, data offset 5 or more) or UDP (8 bytes) header, or the ICMP
// error and the packet it quotes; last, an IP length beyond the frame or
// too short for the headers is malformed.
static __always_inline int parse(void *data, void *end, struct pkt *p)
{
	struct flow *f = &p->f;
	struct ethhdr *eth = data;
	if (data + sizeof(*eth) > end)
		return C_PASS_TRUNCATED;
	void *l3 = data + sizeof(*eth);
	int r;

	if (eth->proto == bpf_ntohs(ETH_P_IP)) {
		struct iphdr *ip = l3;
		if (l3 + sizeof(*ip) > end)
			return C_PASS_TRUNCATED;
		if ((ip->version_ihl >> 4) != 4 || (ip->version_ihl & 0xf) < 5)
			return C_PASS_MALFORMED;
		if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP && ip->protocol != IPPROTO_ICMP)
			return C_PASS_NOT_TCP_UDP;
		if (ip->frag_off & bpf_ntohs(IP_MF_OFFSET))
			return C_PASS_FRAGMENT;
		if ((ip->version_ihl & 0xf) != 5)
			return C_PASS_IP_OPTIONS;
		f->family = 4;
		if (ip->protocol == IPPROTO_ICMP) {
			r = parse_icmp4(l3 + sizeof(*ip), end, f);
			if (r != PARSED)
				return r;
			if (f->dst[0] != ip->daddr) // about a packet from elsewhere than the VIP
				return C_PASS_NOT_TCP_UDP;
			p->icmp = 1;
		} else {
			f->src[0] = ip->saddr;
			f->dst[0] = ip->daddr;
			f->proto = ip->protocol;
			r = parse_l4(l3 + sizeof(*ip), end, f);
			if (r != PARSED)
				return r;
		}
		p->l3_len = bpf_ntohs(ip->tot_len);
		p->df = (ip->frag_off & bpf_ntohs(IP_DF)) != 0;
		if (l3 + p->l3_len > end || p->l3_len < sizeof(*ip) + UDP_HLEN)
			return C_PASS_MALFORMED;
		return PARSED;
	}
	if (eth->proto == bpf_ntohs(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		if (l3 + sizeof(*ip6) > end)
			return C_PASS_TRUNCATED;
		if ((*(__u8 *)ip6 >> 4) != 6)
			return C_PASS_MALFORMED;
		f->family = 6;
		if (ip6->nexthdr == IPPROTO_ICMPV6) {
			r = parse_icmp6(l3 + sizeof(*ip6), end, f);
			if (r != PARSED)
				return r;
			if (f->dst[0] != ip6->daddr[0] || f->dst[1] != ip6->daddr[1] ||
			    f->dst[2] != ip6->daddr[2] || f->dst[3] != ip6->daddr[3])
				return C_PASS_NOT_TCP_UDP;
			p->icmp = 1;
		} else {
			r = ipv6_next(ip6->nexthdr);
			if (r)
				return r;
#pragma unroll
			for (int i = 0; i < 4; i++) {
				f->src[i] = ip6->saddr[i];
				f->dst[i] = ip6->daddr[i];
			}
			f->proto = ip6->nexthdr;
			r = parse_l4(l3 + sizeof(*ip6), end, f);
			if (r != PARSED)
				return r;
		}
		p->l3_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
		p->df = 1;
		if (l3 + p->l3_len > end || p->l3_len < sizeof(*ip6) + UDP_HLEN)
			return C_PASS_MALFORMED;
		return PARSED;
	}
	if (eth->proto == bpf_htons(ETH_P_8021Q) || eth->proto == bpf_htons(ETH_P_8021AD))
		return C_PASS_VLAN;
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

// csum_fold folds a sum of 16-bit words into an Internet checksum.
static __always_inline __u16 csum_fold(__u64 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

// ip4_csum returns the checksum of a 20-byte IPv4 header whose check
// field is 0.
static __always_inline __u16 ip4_csum(struct iphdr *ip)
{
	__u16 *w = (__u16 *)ip;
	__u64 sum = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	return csum_fold(sum);
}

// flood_guard counts a new flow on this CPU and says whether the CPU is
// over flood_rate: then the flow is routed without a conntrack entry, so
// a flood of new tuples cannot evict the entries of established flows.
// The guard stays on for FLOOD_HOLD after the rate was last exceeded, so
// that a flood with pauses (a sender descheduled, bursts) writes at most
// one window's share of entries per CPU, once, unless it pauses for longer
// than that.
static __always_inline int flood_guard(void)
{
	if (flood_rate == 0)
		return 0;
	__u32 k = 0;
	struct flood *s = bpf_map_lookup_elem(&flood_state, &k);
	if (!s)
		return 0;
	__u64 limit = flood_rate / FLOOD_WINDOWS;
	__u64 now = bpf_ktime_get_coarse_ns();
	int was_on = s->over && now - s->over < FLOOD_HOLD;
	if (was_on)
		s->ns += now - s->last;
	s->last = now;
	if (now - s->start >= 1000000000ULL / FLOOD_WINDOWS) {
		s->start = now;
		s->count = 0;
	}
	s->count++;
	if (s->count > limit)
		s->over = now;
	return s->over && now - s->over < FLOOD_HOLD;
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

// too_big answers the client's packet with ICMP fragmentation needed
// (IPv4) or packet too big (IPv6) naming mtu, from the VIP, quoting the
// packet's IP header and first 8 bytes after it, and sends it back where
// the packet came from. The packet, which parse checked, becomes the
// answer.
static __always_inline int too_big(struct xdp_md *ctx, struct cpu_counters *c, __u8 family, __u32 mtu)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	int ip_len = family == 4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
	int quote = ip_len + 8;
	// Cut the packet after the quote, then make room for the new IP and
	// ICMP headers in front.
	if (bpf_xdp_adjust_tail(ctx, (int)(ETH_HLEN + quote) - (int)(end - data)))
		return XDP_DROP;
	if (bpf_xdp_adjust_head(ctx, -(ip_len + ICMP_HLEN))) {
		count(c, C_DROP_NO_ROOM);
		return XDP_DROP;
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	__u8 mac[12];
	__u64 sum = 0;
	if (family == 4) {
		if (data + ETH_HLEN + 20 + ICMP_HLEN + 28 > end)
			return XDP_DROP;
		struct ethhdr *old = data + 28;
		__builtin_memcpy(mac, old, 12);
		struct iphdr *q = data + ETH_HLEN + 28; // the quoted header
		struct ethhdr *eth = data;
		__builtin_memcpy(eth->dest, mac + 6, 6);
		__builtin_memcpy(eth->source, mac, 6);
		eth->proto = bpf_htons(ETH_P_IP);
		struct iphdr *ip = data + ETH_HLEN;
		ip->version_ihl = 0x45;
		ip->tos = 0;
		ip->tot_len = bpf_htons(20 + ICMP_HLEN + 28);
		ip->id = 0;
		ip->frag_off = 0;
		ip->ttl = 64;
		ip->protocol = IPPROTO_ICMP;
		ip->check = 0;
		ip->saddr = q->daddr;
		ip->daddr = q->saddr;
		ip->check = ip4_csum(ip);
		__u8 *icmp = (void *)(ip + 1);
		icmp[0] = 3; // destination unreachable
		icmp[1] = 4; // fragmentation needed and DF set
		*(__u16 *)(icmp + 2) = 0;
		*(__u16 *)(icmp + 4) = 0;
		*(__u16 *)(icmp + 6) = bpf_htons(mtu);
		__u16 *w = (__u16 *)icmp;
#pragma unroll
		for (int i = 0; i < (ICMP_HLEN + 28) / 2; i++)
			sum += w[i];
		*(__u16 *)(icmp + 2) = csum_fold(sum);
	} else {
		if (data + ETH_HLEN + 40 + ICMP_HLEN + 48 > end)
			return XDP_DROP;
		struct ethhdr *old = data + 48;
		__builtin_memcpy(mac, old, 12);
		struct ipv6hdr *q = data + ETH_HLEN + 48;
		struct ethhdr *eth = data;
		__builtin_memcpy(eth->dest, mac + 6, 6);
		__builtin_memcpy(eth->source, mac, 6);
		eth->proto = bpf_htons(ETH_P_IPV6);
		struct ipv6hdr *ip6 = data + ETH_HLEN;
		ip6->vtc_flow = bpf_htonl(0x60000000);
		ip6->payload_len = bpf_htons(ICMP_HLEN + 48);
		ip6->nexthdr = IPPROTO_ICMPV6;
		ip6->hop_limit = 64;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			ip6->saddr[i] = q->daddr[i];
			ip6->daddr[i] = q->saddr[i];
		}
		__u8 *icmp = (void *)(ip6 + 1);
		icmp[0] = 2; // packet too big
		icmp[1] = 0;
		*(__u16 *)(icmp + 2) = 0;
		*(__u32 *)(icmp + 4) = bpf_htonl(mtu);
		// The pseudo-header: addresses, upper-layer length, next header.
		__u16 *w = (__u16 *)ip6->saddr;
#pragma unroll
		for (int i = 0; i < 16; i++)
			sum += w[i];
		sum += bpf_htons(ICMP_HLEN + 48);
		sum += bpf_htons(IPPROTO_ICMPV6);
		w = (__u16 *)icmp;
#pragma unroll
		for (int i = 0; i < (ICMP_HLEN + 48) / 2; i++)
			sum += w[i];
		*(__u16 *)(icmp + 2) = csum_fold(sum);
	}
	count(c, C_ICMP_TOO_BIG);
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
// packet with DF), dropped otherwise.
static __always_inline int forward_encap(struct xdp_md *ctx, struct cpu_counters *c, __u32 id, struct backend *b, __u64 h, __u32 l3_len, int icmp_ok)
{
	int v4 = b->family == 4;
	int gue = b->mode == FWD_GUE;
	int over = (v4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr)) + (gue ? UDP_HLEN : 0);
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
		udp->len = bpf_htons(l3_len + UDP_HLEN);
		udp->check = 0;
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

// forward sends the packet to backend b by its service's mode.
static __always_inline int forward(struct xdp_md *ctx, struct cpu_counters *c, __u32 id, struct backend *b, __u64 h, __u32 l3_len, int icmp_ok)
{
	if (b->mode == FWD_L2)
		return forward_l2(ctx, c, b);
	return forward_encap(ctx, c, id, b, h, l3_len, icmp_ok);
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
// established flow costs one hash lookup), else the service's table, whose
// choice it then writes to conntrack unless the flood guard is on. An
// ICMP error looks up the flow it is about, the same way, and writes no
// entry. The flow hash is computed only where it is used: on a miss, and
// where the encapsulation reads it (uses_hash).
static __always_inline int maglev_flow(struct xdp_md *ctx, struct cpu_counters *c, struct pkt *p, __u64 bytes, const int family)
{
	struct flow *f = &p->f;
	struct flow4 f4 = {};
	struct ct_entry *ct;
	if (family == 4) {
		f4.src = f->src[0];
		f4.dst = f->dst[0];
		f4.sport = f->sport;
		f4.dport = f->dport;
		f4.proto = f->proto;
		ct = bpf_map_lookup_elem(&conntrack4, &f4);
	} else {
		ct = bpf_map_lookup_elem(&conntrack6, f);
	}
	struct backend *b = 0;
	struct slot be = {};
	__u32 svc_id = 0;
	if (ct) {
		be.id = ct->backend.id;
		be.cookie = ct->backend.cookie;
		svc_id = ct->svc;
		b = backend(be.id, be.cookie);
	}
	__u64 h = 0;
	if (b) {
		count(c, C_CT_HIT);
		if (uses_hash(b))
			h = flow_hash(f);
	} else {
		struct service *svc = lookup_service(f, family);
		if (!svc) {
			count(c, p->icmp ? C_PASS_NOT_TCP_UDP : C_PASS_NO_SERVICE);
			return XDP_PASS;
		}
		svc_id = svc->id;
		h = flow_hash(f);
		count(c, C_CT_MISS);
		if (ct)
			count(c, C_CT_STALE);
		b = choose(svc_id, h, &be);
		if (!b) {
			count(c, C_DROP_NO_BACKEND);
			return XDP_DROP;
		}
		if (!p->icmp) {
			if (flood_guard()) {
				count(c, C_CT_FLOOD);
			} else {
				struct ct_entry e = {.backend = be, .svc = svc_id};
				long err;
				if (family == 4)
					err = bpf_map_update_elem(&conntrack4, &f4, &e, BPF_ANY);
				else
					err = bpf_map_update_elem(&conntrack6, f, &e, BPF_ANY);
				if (err == 0)
					count(c, C_CT_INSERT);
			}
		}
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
	if (r != PARSED) {
		count(c, r);
		return XDP_PASS;
	}
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
