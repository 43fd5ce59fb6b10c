// Connection tracking: which backend each flow's first packet went to, so
// that the flow stays there across table changes while its backend is in
// the service (section 3.3 of the Maglev paper), and which new TCP
// connections may leave a stale entry for the table (docs/xdp-design.md,
// "Connection tracking").

#pragma once

#include "bpf.h"
#include "maps.h"
#include "parse.h"
#include "guard.h"

// ct_lookup returns the entry of flow f of the given family, a constant,
// or 0; f4 is filled in for IPv4, whose map has the shorter key.
static __always_inline struct ct_entry *ct_lookup(struct flow *f, struct flow4 *f4, const int family)
{
	if (family == 4) {
		f4->src = f->src[0];
		f4->dst = f->dst[0];
		f4->sport = f->sport;
		f4->dport = f->dport;
		f4->proto = f->proto;
		return bpf_map_lookup_elem(&conntrack4, f4);
	}
	return bpf_map_lookup_elem(&conntrack6, f);
}

// ct_follows says whether a packet with the TCP flags tcp (0 for UDP and
// ICMP) follows its flow's entry ct, whose backend b is still in the
// service. Every packet does but a TCP SYN without ACK on the tuple of a
// flow that ended (the client sent a FIN or a RST) or whose backend is
// draining (weight 0): that SYN opens a new connection, which the table
// places. A SYN on a live flow's tuple whose backend takes new flows
// follows the entry, so a spoofed SYN that quotes the tuple cannot move
// the flow. A FIN or a RST marks the entry CT_CLOSED, in place.
static __always_inline int ct_follows(struct cpu_counters *c, struct ct_entry *ct, struct backend *b, __u8 tcp)
{
	if ((tcp & (TCP_SYN | TCP_ACK)) == TCP_SYN)
		return b->weight != 0 && !(ct->flags & CT_CLOSED);
	if ((tcp & (TCP_FIN | TCP_RST)) && !(ct->flags & CT_CLOSED)) {
		ct->flags |= CT_CLOSED;
		count(c, C_CT_CLOSED);
	}
	return 1;
}

// ct_write records the table's choice be, of service svc, with the second
// hop second, for flow f (f4 for IPv4), whose entry ct (0: none) it did
// not follow, unless the
// flood guard refuses: then a stale entry is deleted instead (the flow's
// packets then follow the table, as this one did), and a new flow has
// none. Writing replaces the entry whole (a new element), never in place:
// an element the LRU evicted and handed to another flow meanwhile must
// not take this flow's backend.
static __always_inline void ct_write(struct cpu_counters *c, struct ct_entry *ct, struct flow *f, struct flow4 *f4, struct slot be, __u32 svc, struct slot second, const int family)
{
	void *key = f;
	void *map = &conntrack6;
	if (family == 4) {
		key = f4;
		map = &conntrack4;
	}
	if (flood_guard()) {
		count(c, C_CT_FLOOD);
		if (ct)
			bpf_map_delete_elem(map, key);
		return;
	}
	struct ct_entry e = {.backend = be, .svc = svc, .second = second};
	if (bpf_map_update_elem(map, key, &e, BPF_ANY) == 0)
		count(c, C_CT_INSERT);
}
