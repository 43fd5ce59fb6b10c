package xdpmaglev

import (
	"math/bits"
	"net/netip"
)

// FlowHash returns the hash the data plane computes for a packet from src
// to dst with IP protocol proto (6 for TCP, 17 for UDP): the key whose
// slot, h mod M, picks the flow's backend. With the service's table, as
// LB.Table returns it or as maglev.NewWeighted builds it from the same
// backends,
//
//	backend := table.LookupHash(xdpmaglev.FlowHash(seed, client, vip, 6))
//
// names the backend a new TCP connection from client to vip goes to.
//
// The hash is MurmurHash3's 64-bit block mix and finalizer, seeded with
// seed, over 64-bit words made of the 5-tuple's numbers (addresses as
// big-endian integers, ports as integers; not bytes in memory, so the
// value is the same on every platform):
//
//	IPv4: src<<32 | dst, then ports
//	IPv6: src[0:8], src[8:16], dst[0:8], dst[8:16], then ports
//	ports = sport<<48 | dport<<32 | proto<<8 | family (4 or 6)
//
// each word k mixed into h (h starts as seed) by
//
//	k *= 0x87c37b91114253d5; k = rotl(k, 31); k *= 0x4cf5ad432745937f
//	h ^= k; h = rotl(h, 27); h = h*5 + 0x52dce729
//
// then h ^= 8 × the number of words, and MurmurHash3's fmix64. The
// definition is part of this module's compatibility surface, like the
// maglev package's tables: TestFlowHashGolden pins it, and checks the C
// side (bpf/maglev.c) against the same values through BPF_PROG_TEST_RUN.
//
// Both addresses of an IPv4 packet are 4-byte addresses; any other pair is
// hashed as the IPv6 packet carrying them (a 4-byte address as its
// IPv4-mapped form, the zero Addr as ::). FlowHash does not allocate.
func FlowHash(seed uint64, src, dst netip.AddrPort, proto uint8) uint64 {
	h := seed
	var family uint64 = 6
	if src.Addr().Is4() && dst.Addr().Is4() {
		family = 4
		s, d := src.Addr().As4(), dst.Addr().As4()
		h = mix(h, uint64(be32(s[:]))<<32|uint64(be32(d[:])))
	} else {
		s, d := src.Addr().As16(), dst.Addr().As16()
		h = mix(h, be64(s[:8]))
		h = mix(h, be64(s[8:]))
		h = mix(h, be64(d[:8]))
		h = mix(h, be64(d[8:]))
	}
	h = mix(h, uint64(src.Port())<<48|uint64(dst.Port())<<32|uint64(proto)<<8|family)
	if family == 4 {
		h ^= 16
	} else {
		h ^= 40
	}
	return fmix64(h)
}

func mix(h, k uint64) uint64 {
	k *= 0x87c37b91114253d5
	k = bits.RotateLeft64(k, 31)
	k *= 0x4cf5ad432745937f
	h ^= k
	h = bits.RotateLeft64(h, 27)
	return h*5 + 0x52dce729
}

func fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func be64(b []byte) uint64 { return uint64(be32(b[:4]))<<32 | uint64(be32(b[4:8])) }
