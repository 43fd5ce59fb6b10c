// Packet headers and protocol numbers, declared here rather than taken
// from the kernel's headers (see bpf.h), shared by maglev.c and decap.c.
// Every multi-byte field is in network byte order.

#pragma once

#include "bpf.h"

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

struct udphdr {
	__u16 source;
	__u16 dest;
	__u16 len;
	__u16 check;
};

#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define IPPROTO_ICMP 1
#define IPPROTO_IPIP 4
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_IPV6 41
#define IPPROTO_ICMPV6 58
#define IP_DF 0x4000
#define IP_MF_OFFSET 0x3fff
#define TCP_HLEN 20
#define UDP_HLEN 8
#define ICMP_HLEN 8

// TCP flags, in the TCP header's 14th byte.
#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

// Second chance (docs/xdp-design.md, "The rule"): a packet whose slot moved
// is sent as GUE variant 0 (RFC draft-ietf-intarea-gue), whose header's
// extension is private data naming the slot's previous owner, the second
// hop; every other GUE packet is variant 1, the inner packet right after
// the UDP header. The backend that gets one and has no connection of its
// passes it on to the second hop, as variant 1: one extra hop at most.
#define SECOND_MAGIC0 'M'
#define SECOND_MAGIC1 'G'
#define SECOND_VERSION 1

struct gue_second4 {
	__u8 hlen;     // version 0 and no control flag in the top bits; the extension's words: 2
	__u8 proto;    // the inner packet's protocol: IPPROTO_IPIP
	__u16 flags;   // 0: the extension is private data alone
	__u8 magic[2]; // SECOND_MAGIC0, SECOND_MAGIC1
	__u8 version;  // SECOND_VERSION
	__u8 hops;     // hops left: 1 from the load balancer
	__u32 addr;    // the second hop
};

struct gue_second6 {
	__u8 hlen;     // 5
	__u8 proto;    // IPPROTO_IPV6
	__u16 flags;
	__u8 magic[2];
	__u8 version;
	__u8 hops;
	__u32 addr[4];
};
