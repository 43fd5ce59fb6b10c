// The flow hash: MurmurHash3's 64-bit block mix and finalizer over the
// 5-tuple as 64-bit words of numbers (addresses and ports as integers, not
// as bytes in memory). docs/xdp-reference.md specifies it; FlowHash in flowhash.go is
// its Go twin, pinned by golden values.

#pragma once

#include "bpf.h"
#include "maps.h"

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
