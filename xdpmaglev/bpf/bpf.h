// The few kernel and libbpf declarations maglev.c and decap.c use, so that
// building them needs clang alone: no kernel headers and no libbpf headers, whose
// versions would otherwise leak into the committed objects.

#pragma once

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef int __s32;

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))

// BTF-defined maps, as libbpf and cilium/ebpf read them.
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name
#define __array(name, val) typeof(val) *name[]

// Map types and update flags (include/uapi/linux/bpf.h).
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_LRU_HASH 9
#define BPF_MAP_TYPE_LPM_TRIE 11
#define BPF_MAP_TYPE_ARRAY_OF_MAPS 12
#define BPF_ANY 0
#define BPF_F_NO_PREALLOC (1U << 0)
#define BPF_F_MMAPABLE (1U << 10)
#define BPF_F_INNER_MAP (1U << 12)

// XDP verdicts and context.
enum xdp_action {
	XDP_ABORTED = 0,
	XDP_DROP,
	XDP_PASS,
	XDP_TX,
	XDP_REDIRECT,
};

struct xdp_md {
	__u32 data;
	__u32 data_end;
	__u32 data_meta;
	__u32 ingress_ifindex;
	__u32 rx_queue_index;
	__u32 egress_ifindex;
};

// Helpers, by their stable numbers.
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u64 (*bpf_ktime_get_coarse_ns)(void) = (void *)160;
static __u32 (*bpf_get_smp_processor_id)(void) = (void *)8;
static long (*bpf_redirect)(__u32 ifindex, __u64 flags) = (void *)23;
static long (*bpf_xdp_adjust_head)(struct xdp_md *ctx, int delta) = (void *)44;
static long (*bpf_xdp_adjust_tail)(struct xdp_md *ctx, int delta) = (void *)65;
static long (*bpf_fib_lookup)(void *ctx, void *params, int plen, __u32 flags) = (void *)69;
static __u64 (*bpf_jiffies64)(void) = (void *)118;

// The kernel's AES for QUIC-LB (quic.h): memory through dynptrs, and the
// BPF crypto kfuncs of Linux 6.10 and later, weak: where the kernel lacks
// them, cilium/ebpf resolves their addresses to 0, bpf_ksym_exists says
// so, and the verifier drops the code that calls them as dead.
struct bpf_dynptr {
	__u64 opaque[2];
} __attribute__((aligned(8)));

// The kernel's context of a key: the program never reads its fields,
// but a kfunc's prototype must name a struct, not a declaration, to
// match the kernel's.
struct bpf_crypto_ctx {
	int opaque;
};

static long (*bpf_dynptr_from_mem)(void *data, __u32 size, __u64 flags, struct bpf_dynptr *ptr) = (void *)197;

#define __ksym __attribute__((section(".ksyms")))
#define __weak __attribute__((weak))
#define bpf_ksym_exists(sym) (!!(sym))

extern int bpf_crypto_encrypt(struct bpf_crypto_ctx *ctx, const struct bpf_dynptr *src, const struct bpf_dynptr *dst,
			      const struct bpf_dynptr *siv) __weak __ksym;
extern int bpf_crypto_decrypt(struct bpf_crypto_ctx *ctx, const struct bpf_dynptr *src, const struct bpf_dynptr *dst,
			      const struct bpf_dynptr *siv) __weak __ksym;

// Sockets (the decapsulator's second chance): the socket a packet of a
// tuple would meet, full or not (a request or time-wait socket),
// released after; a listener's SYN cookie checked.
struct bpf_sock_tuple {
	union {
		struct {
			__u32 saddr;
			__u32 daddr;
			__u16 sport;
			__u16 dport;
		} ipv4;
		struct {
			__u32 saddr[4];
			__u32 daddr[4];
			__u16 sport;
			__u16 dport;
		} ipv6;
	};
};

struct bpf_sock {
	__u32 bound_dev_if;
	__u32 family;
	__u32 type;
	__u32 protocol;
	__u32 mark;
	__u32 priority;
	__u32 src_ip4;
	__u32 src_ip6[4];
	__u32 src_port;
	__u16 dst_port;
	__u16 pad;
	__u32 dst_ip4;
	__u32 dst_ip6[4];
	__u32 state;
	__s32 rx_queue_mapping;
};

#define BPF_F_CURRENT_NETNS (-1L)
#define TCP_LISTEN 10

static struct bpf_sock *(*bpf_skc_lookup_tcp)(void *ctx, struct bpf_sock_tuple *tuple, __u32 tuple_size, __u64 netns, __u64 flags) = (void *)99;
static long (*bpf_sk_release)(void *sock) = (void *)86;
static long (*bpf_tcp_check_syncookie)(void *sk, void *iph, __u32 iph_len, void *th, __u32 th_len) = (void *)100;

// bpf_fib_lookup's parameters and results (include/uapi/linux/bpf.h).
#define AF_INET 2
#define AF_INET6 10
#define BPF_FIB_LKUP_RET_SUCCESS 0
#define BPF_FIB_LKUP_RET_FWD_DISABLED 5
#define BPF_FIB_LKUP_RET_NO_NEIGH 7
#define BPF_FIB_LKUP_RET_FRAG_NEEDED 8

struct bpf_fib_lookup {
	__u8 family;
	__u8 l4_protocol;
	__u16 sport;
	__u16 dport;
	__u16 tot_len; // in: the L3 length to check against the MTU; out: mtu_result
	__u32 ifindex;
	__u32 flowinfo;
	__u32 src[4]; // ipv4_src in the first word
	__u32 dst[4]; // ipv4_dst in the first word; out: the gateway
	__u16 h_vlan_proto;
	__u16 h_vlan_TCI;
	__u8 smac[6];
	__u8 dmac[6];
};

// Byte order: packet fields are big-endian.
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define bpf_ntohs(x) __builtin_bswap16(x)
#define bpf_ntohl(x) __builtin_bswap32(x)
#define bpf_htonll(x) __builtin_bswap64(x)
#define bpf_htons(x) __builtin_bswap16(x)
#define bpf_htonl(x) __builtin_bswap32(x)
#else
#define bpf_ntohs(x) (x)
#define bpf_ntohl(x) (x)
#define bpf_htonll(x) (x)
#define bpf_htons(x) (x)
#define bpf_htonl(x) (x)
#endif
