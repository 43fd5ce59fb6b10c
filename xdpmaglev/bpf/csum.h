// Internet checksums (RFC 1071) of the headers the program writes.

#pragma once

#include "bpf.h"
#include "headers.h"

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
