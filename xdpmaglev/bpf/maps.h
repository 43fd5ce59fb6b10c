// The data plane's types, load-time settings and maps: everything the Go
// control plane shares with the program (bpf2go generates the Go types of
// the structs and enums named in gen.go), in one place, so that the
// layout a pinned set of maps has is read here whole.

#pragma once

#include "bpf.h"
#include "flow.h" // struct flow and enum counter, which the decapsulator's parser shares

// Set by the control plane before loading (rodata: the verifier sees them
// as constants).
volatile const __u64 hash_seed = 0;    // Options.Seed
volatile const __u8 lb_mac[6] __attribute__((aligned(2))) = {}; // the attached interface's address
// The flood guard (guard.h): the ns of credit a CPU spends on one new
// conntrack entry, possible CPUs × 10^9 / Options.FloodRate; 0: no guard.
volatile const __u64 flood_cost = 0;

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
	LAYOUT_VERSION = 3,
	// struct ct_entry's flags.
	CT_CLOSED = 1, // the client sent a FIN or a RST: the flow ended, and a SYN on its tuple opens a new one
	// struct out's why.
	OUT_DOWN = 1,       // Backend.Down: failed its health check
	OUT_UNRESOLVED = 2, // ForwardL2, and the neighbour table has no MAC for it
	// struct service's flags.
	SVC_STATELESS = 1,     // no connection tracking: every packet by the table (ServiceOptions.Conntrack)
	SVC_SECOND_CHANCE = 2, // a moved slot's previous owner rides along as the second hop (ServiceOptions.SecondChance)
	SVC_PREV_SIZED = 4,    // the second hops' table has a size of its own (the table's before M changed): read from its slot 0
	SVC_QUIC = 8,          // QUIC-LB: a packet whose destination connection ID names a server goes to it (ServiceOptions.QUIC; quic.h)
	// QUIC-LB (quic.h): a service's configurations, by codepoint (the
	// connection ID's first three bits; 7 is unroutable), and how each
	// writes its server IDs (struct quic_cfg's mode).
	QUIC_CONFIGS = 7,
	QUIC_MAX_BLOCK = 19, // the most octets of server ID and nonce
	QUIC_MAX_SID = 15,   // the most octets of a server ID
	QUIC_WORDS = 3,      // the 8-octet words a block is read as (19 octets at most)
	QUIC_PROBES = 4,     // the most entries of a service's table of server IDs an ID's lookup reads
	QUIC_OFF = 0,        // no configuration at the codepoint
	QUIC_PLAIN = 1,      // the server ID in the clear
	QUIC_SINGLE = 2,     // one AES block (server ID and nonce are 16 octets)
	QUIC_FOUR = 3,       // the four-pass Feistel network of AES
};

// How a service's packets reach its backends (ServiceOptions.Forward).
enum forward {
	FWD_L2 = 0,   // the frame's MACs rewritten, sent back out (XDP_TX)
	FWD_IPIP = 1, // inside an outer IP header: IPv4 in IPv4 (protocol 4), IPv6 in IPv6 (41)
	FWD_GUE = 2,  // inside outer IP and UDP headers: GUE variant 1, the inner IP packet as UDP payload
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

// A QUIC-LB configuration of a service, at one codepoint.
// The block after a connection ID's first octet is read as words (three
// 8-octet loads: QUIC_WORDS), each ANDed with its mask, so that the
// octets past the server ID, or past the block, are zero: a key of the
// maps built with no loop. The control plane writes the masks as the
// host lays the words out (its byte order is the program's).
struct quic_cfg {
	__u8 mode;    // QUIC_OFF, QUIC_PLAIN, QUIC_SINGLE, QUIC_FOUR
	__u8 sid_len; // the server ID's octets
	__u8 len;     // the server ID's and the nonce's octets: the block after the first octet
	__u8 pad;
	__u32 key;    // encrypted: the index of the key's AES context in quic_keys
	__u32 key_id; // encrypted: the key's id in quic_cache, never given to another key
	__u32 pad2;
	__u64 sid_mask[2]; // the server ID's octets of the block's first two words
	__u64 blk_mask[QUIC_WORDS]; // the block's octets of its words
};

struct service {
	__u32 id;    // index of the service's table and counters
	__u32 m;     // its table's size, for a control plane that adopts the maps
	__u32 flags; // SVC_STATELESS, SVC_SECOND_CHANCE, SVC_PREV_SIZED
	__u32 until; // with second chance: when its entry of prev_tables goes, in CLOCK_MONOTONIC seconds (the control plane's)
	__u32 lookup_m; // the size packets index the table by: m, or 0 while m changes (the table's slot 0 says)
	struct quic_cfg quic[QUIC_CONFIGS]; // SVC_QUIC: the QUIC-LB configurations, by codepoint
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
// it, the service whose table chose it, and what the flow's packets said
// of its end. While the backend's entry holds the cookie, the backend is
// in that service (a backend's id and cookie belong to one service, and a
// deleted service's backends are cleared), so a hit needs no lookup of the
// service.
struct ct_entry {
	struct slot backend;
	__u32 svc;
	__u32 flags;        // CT_CLOSED
	struct slot second; // the flow's second hop (second chance): its slot's owner before the slot moved; id NO_BACKEND: none
};

// A backend of one service, and how that service reaches it: by its MAC
// (FWD_L2), or by its address from the load balancer's (the encapsulating
// modes, whose next hop bpf_fib_lookup finds). The program reads weight
// (0: draining, so a SYN on one of its flows' tuples goes to the table)
// and, in the encapsulating modes, addr; svc is there for a control plane
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

// A backend of a service that is out of the data plane, Down (failed its
// health check) or unresolved: it owns no slot and has no usable entry in
// backends, and the program never reads the map of them. The control
// plane records it so that one that adopts the pinned maps knows the
// service's whole set of backends, as it knows the others by their
// entries: a service's table is the table of them all Without those out
// (maglev.Table.Without), so the adopting control plane computes it again
// rather than read it (reading a map of maps' inner maps back takes
// CAP_SYS_ADMIN, which the load balancer does not need otherwise).
struct down_key {
	__u32 svc;     // the service's id
	__u32 addr[4]; // the backend's address, as in struct backend
	__u8 family;   // 4 or 6
	__u8 pad[3];
};

struct out {
	__u32 weight; // the backend's weight in the service
	__u32 why;    // OUT_DOWN or OUT_UNRESOLVED
};

// A CPU's flood guard (guard.h): new conntrack entries cost flood_cost ns
// of credit each, which accrues with time up to FLOOD_BURST.
struct flood {
	__u64 credit;  // ns of credit
	__u64 last;    // the last new flow's time, bpf_ktime_get_coarse_ns
	__u64 ns;      // time spent refusing entries, summed from a refused new flow to the next
	__u64 refused; // 1: the last new flow was refused an entry
};

struct stats {
	__u64 packets;
	__u64 bytes; // frame bytes, Ethernet header included
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

// The VIPs of the services, with the number of services of each: a packet
// to one that no service forwards is dropped (vip.h), never passed to a
// kernel that would route it back to the router it came from.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32); // the address, network order
	__type(value, __u32);
	__uint(max_entries, 64); // Options.MaxServices
} vips4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32[4]);
	__type(value, __u32);
	__uint(max_entries, 64); // Options.MaxServices
} vips6 SEC(".maps");

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

// Second chance: each service's previous owners, a table of the same
// layout (slot 0 its size), whose slot is the owner the slot had before
// it last moved (NO_BACKEND where it has not), kept for the service's
// window after its last change (ServiceOptions.SecondChance). A packet
// whose slot moved carries the previous owner in its GUE header, and the
// backend that gets it and has no connection of it passes it on there.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 64); // Options.MaxServices
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__type(key, __u32);
		__type(value, struct slot);
		__uint(max_entries, 65538);
		__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	});
} prev_tables SEC(".maps");

// What the control plane says of the services as a whole: the number of
// stateless ones. With none, the program looks connection tracking up
// before the service, as an established flow needs no more; with some,
// the service first, to know whether to.
struct modes {
	__u32 stateless;
	__u32 quic; // the number of QUIC-LB services: with any, the service is looked up first too
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct modes);
	__uint(max_entries, 1);
} modes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct backend);
	__uint(max_entries, 4096); // Options.MaxBackends
} backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct down_key);
	__type(value, struct out);
	__uint(max_entries, 4096); // Options.MaxBackends
} down SEC(".maps");

// QUIC-LB (quic.h): each service's table of its server IDs, by the
// service's id: the backend of each server ID of each of its
// configurations, in an open-addressed table of a power of 2 entries
// (linear probing, at most QUIC_PROBES from an ID's hash, which the
// control plane's placement keeps to), an array the program indexes
// where a hash map would cost a function call and a jhash a packet. It
// is written whole into a map of its own and swapped in, as a service's
// Maglev table is. Entry 0 is the table's header: sid[0] the hash's
// seed, cp the mask of its size.
struct quic_entry {
	__u64 sid[2];  // the server ID's octets as words (as struct quic_server_id's)
	__u32 cp;      // 1 + the codepoint; 0: an empty entry
	__u32 pad;
	struct slot be; // the backend
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, 64); // Options.MaxServices
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__type(key, __u32);
		__type(value, struct quic_entry);
		__uint(max_entries, 9); // 1 + each table's size
		__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	});
} quic_tables SEC(".maps");

// Referenced so that the inner maps' value type is whole in the BTF (a
// type named only in an __array's definition is a declaration there).
const struct quic_entry *unused_quic_entry __attribute__((unused));

// The AES contexts of the services' encrypted configurations (struct
// quic_cfg's key), made by the control plane (bpf/quic_key.c). ctx is a
// pointer to the kernel's struct bpf_crypto_ctx, which the map holds a
// reference to (a kptr), freed when the entry is overwritten or the map
// goes: the control plane gives the field that type in the map's BTF
// (kptrSpec in quic.go), which neither clang 14 (no btf_type_tag) nor
// bpf2go (no pointers in Go types) would carry from here.
struct quic_key {
	__u64 ctx;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct quic_key);
	__uint(max_entries, 896); // Options.MaxServices × QUIC_CONFIGS × 2 (a key and its successor)
} quic_keys SEC(".maps");

// The server IDs of encrypted connection IDs decrypted before, by the
// key's id and the block: the first packet of a connection ID pays for
// AES, and the rest look its server ID up here. Only IDs that named a
// server are kept, so that a flood of made-up IDs cannot evict them.
struct quic_cid {
	__u32 key_id;
	__u32 pad;
	__u64 blk[QUIC_WORDS]; // the block's octets as words, zero-padded
};

// A server ID: its octets as the block's first two words hold them,
// zero-padded.
struct quic_server_id {
	__u64 sid[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct quic_cid);
	__type(value, struct quic_server_id);
	__uint(max_entries, 65536); // Options.QUICCacheSize
} quic_cache SEC(".maps");

// A CPU's scratch space of quic.h's encrypted IDs: quic_cache's key and
// value, the AES input and output blocks (the crypto kfuncs take memory
// through dynptrs, which the verifier makes from map values, not from
// the stack), and the four-pass network's state; here and not on the
// stack, which the rest of the program nearly fills.
struct quic_blocks {
	struct quic_cid cid;       // quic_cache's key
	struct quic_server_id val; // and value
	__u8 in[16];
	__u8 out[16];
	__u8 blk[32];   // the block, decrypted in place
	__u8 left[16];  // the four-pass network's halves
	__u8 right[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct quic_blocks);
	__uint(max_entries, 1);
} quic_scratch SEC(".maps");

// Connection tracking, one map per address family (the IPv4 key is 16
// bytes, the IPv6 one 40), each of Options.ConntrackSize entries. The LRU
// lists are shared by the CPUs: per-CPU lists (BPF_F_NO_COMMON_LRU) would
// let a CPU evict only from its own share of the entries, and measured no
// faster here (docs/notes/xdp.md).
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

// A CPU's counters: count adds one to counter i.
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
