// The few kernel and libbpf declarations maglev.c uses, so that building
// it needs clang alone: no kernel headers and no libbpf headers, whose
// versions would otherwise leak into the committed objects.

#pragma once

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;

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
#define BPF_MAP_TYPE_ARRAY_OF_MAPS 12
#define BPF_ANY 0
#define BPF_F_MMAPABLE (1U << 10)

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

// Byte order: packet fields are big-endian.
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define bpf_ntohs(x) __builtin_bswap16(x)
#define bpf_ntohl(x) __builtin_bswap32(x)
#define bpf_htonll(x) __builtin_bswap64(x)
#else
#define bpf_ntohs(x) (x)
#define bpf_ntohl(x) (x)
#define bpf_htonll(x) (x)
#endif
