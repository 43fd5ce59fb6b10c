// The load balancer's steps for a packet: its flow's backend, by
// connection tracking or the service's table, and its forwarding; the
// entry point xdp_maglev (maglev.c) runs maglev, and so do the benchmark
// programs (bench.c), which are loaded beside it only in tests.

#pragma once

#include "bpf.h"
#include "headers.h"
#include "maps.h"
#include "parse.h"
#include "hash.h"
#include "conntrack.h"
#include "vip.h"
#include "encap.h"
#include "quic.h"

// slot_index is the flow's slot (hash h) in a table of size m: slot 0
// holds the size, so slot 1 + h mod m.
static __always_inline __u32 slot_index(__u64 h, __u32 m)
{
	return 1 + h % m;
}

// choose looks the flow's slot (hash h) up in service svc's table. The
// size M is the service's (svc->lookup_m), so one lookup of the table
// finds the slot. While the control plane changes a service's M, it holds
// lookup_m at 0, and a packet reads the size from the table's slot 0,
// which every table carries: the control plane sets 0, waits for a grace
// period (no packet that read the old size is still in the program),
// swaps the table, waits again, and sets the new size. A slot whose backend left
// after this packet read the table (the control plane frees removed
// backends just after it swaps the table in) sends it to the table once
// more, which is then the new one.
static __always_inline struct backend *choose(struct service *svc, __u64 h, struct slot *out)
{
	__u32 zero = 0;
#pragma unroll
	for (int try = 0; try < 2; try++) {
		void *table = bpf_map_lookup_elem(&tables, &svc->id);
		if (!table)
			return 0;
		__u32 m = svc->lookup_m;
		if (m == 0) {
			struct slot *head = bpf_map_lookup_elem(table, &zero);
			if (!head || head->id == 0)
				return 0;
			m = head->id;
		}
		__u32 i = slot_index(h, m);
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

// second_hop returns the backend that owned the flow's slot (hash h) of
// service svc before the slot last moved, if the service has second
// chance and that backend is still in the service, and is not cur, the
// slot's owner now; else 0, and out's id NO_BACKEND.
static __always_inline struct backend *second_hop(struct service *svc, __u64 h, struct slot cur, struct slot *out)
{
	out->id = NO_BACKEND;
	if (!(svc->flags & SVC_SECOND_CHANCE))
		return 0;
	__u32 m = svc->lookup_m;
	if (m == 0) // the size is changing: no second hops
		return 0;
	void *prev = bpf_map_lookup_elem(&prev_tables, &svc->id);
	if (!prev)
		return 0;
	if (svc->flags & SVC_PREV_SIZED) {
		__u32 zero = 0;
		struct slot *head = bpf_map_lookup_elem(prev, &zero);
		if (!head || head->id == 0)
			return 0;
		m = head->id;
	}
	__u32 i = slot_index(h, m);
	struct slot *s = bpf_map_lookup_elem(prev, &i);
	if (!s || s->id == NO_BACKEND || (s->id == cur.id && s->cookie == cur.cookie))
		return 0;
	struct backend *b = backend(s->id, s->cookie);
	if (b)
		*out = *s;
	return b;
}

// sent counts a frame of bytes bytes forwarded for service svc to
// backend id, and returns the program's verdict of forward's.
static __always_inline int sent(struct cpu_counters *c, struct pkt *p, int verdict, __u32 svc, __u32 id, __u64 bytes)
{
	if (verdict == XDP_TX || verdict == XDP_REDIRECT) {
		add_stats(&service_stats, svc, bytes);
		add_stats(&backend_stats, id, bytes);
		if (p->icmp)
			count(c, C_ICMP_FORWARDED);
	}
	return verdict == TX_ICMP ? XDP_TX : verdict;
}

// stateless sends the parsed packet p of stateless service svc by its
// table alone, with the slot's second hop: no conntrack lookup or entry.
static __always_inline int stateless(struct xdp_md *ctx, struct cpu_counters *c, struct pkt *p, __u64 bytes, struct service *svc)
{
	count(c, C_STATELESS);
	__u64 h = flow_hash(&p->f);
	struct slot be, second;
	struct backend *b = choose(svc, h, &be);
	if (!b) {
		count(c, C_DROP_NO_BACKEND);
		return XDP_DROP;
	}
	struct backend *b2 = p->icmp ? 0 : second_hop(svc, h, be, &second);
	return sent(c, p, forward(ctx, c, be.id, b, h, p->l3_len, !p->icmp && p->df, b2), svc->id, be.id, bytes);
}

// by_cid sends the parsed packet p of QUIC-LB service svc to the backend
// its destination connection ID names (quic.h), with no conntrack lookup
// or entry and no second hop: the ID goes on naming the backend when the
// client's address moves, or the table changes. It returns the verdict,
// or -1 where the table routes the packet (its reason counted).
static __always_inline int by_cid(struct xdp_md *ctx, struct cpu_counters *c, struct pkt *p, __u64 bytes,
				  struct service *svc, const int family)
{
	struct slot be;
	struct backend *b = quic_route(ctx, c, svc, family, &be);
	if (!b)
		return -1;
	__u64 h = uses_hash(b) ? flow_hash(&p->f) : 0;
	return sent(c, p, forward(ctx, c, be.id, b, h, p->l3_len, p->df, 0), svc->id, be.id, bytes);
}

// maglev_flow sends the parsed packet p (a frame of bytes bytes) of the
// given family, a constant, to its backend: connection tracking first (an
// entry whose backend is still in the service names the service, so an
// established flow costs one hash lookup; ct_follows says which SYNs
// leave it), else the service's table, whose choice it then writes to
// conntrack unless the flood guard refuses. An ICMP error looks up the
// flow it is about, the same way, and writes no entry. The flow hash is
// computed only where it is used: on a miss, and where the encapsulation
// reads it (uses_hash). With stateless or QUIC-LB services (svc_first),
// the service is looked up first: a QUIC-LB service's packet goes by its
// connection ID where that names a server (by_cid), and a stateless
// one's by its table alone. A flow's second hop, the previous owner of
// its slot if it moved, rides along in its entry and its GUE header.
static __always_inline int maglev_flow(struct xdp_md *ctx, struct cpu_counters *c, struct pkt *p, __u64 bytes, const int family, int svc_first)
{
	struct flow *f = &p->f;
	struct service *svc = 0;
	if (svc_first) {
		svc = lookup_service(f, family);
		if (!svc)
			return not_forwarded(c, p, p->icmp ? C_PASS_NOT_TCP_UDP : C_PASS_NO_SERVICE);
		if ((svc->flags & SVC_QUIC) && !p->icmp) {
			int r = by_cid(ctx, c, p, bytes, svc, family);
			if (r >= 0)
				return r;
		}
		if (svc->flags & SVC_STATELESS)
			return stateless(ctx, c, p, bytes, svc);
	}
	struct flow4 f4 = {};
	struct ct_entry *ct = ct_lookup(f, &f4, family);
	struct backend *b = 0, *b2 = 0;
	struct slot be = {}, second = {.id = NO_BACKEND};
	__u32 svc_id = 0;
	int reopen = 0;
	if (ct) {
		be.id = ct->backend.id;
		be.cookie = ct->backend.cookie;
		svc_id = ct->svc;
		b = backend(be.id, be.cookie);
		if (b && !ct_follows(c, ct, b, p->tcp)) {
			b = 0;
			reopen = 1;
		}
	}
	__u64 h = 0;
	if (b) {
		count(c, C_CT_HIT);
		if (uses_hash(b))
			h = flow_hash(f);
		if (ct->second.id != NO_BACKEND && !p->icmp)
			b2 = backend(ct->second.id, ct->second.cookie);
	} else {
		if (!svc)
			svc = lookup_service(f, family);
		if (!svc)
			return not_forwarded(c, p, p->icmp ? C_PASS_NOT_TCP_UDP : C_PASS_NO_SERVICE);
		svc_id = svc->id;
		h = flow_hash(f);
		count(c, C_CT_MISS);
		if (reopen)
			count(c, C_CT_REOPEN);
		else if (ct)
			count(c, C_CT_STALE);
		b = choose(svc, h, &be);
		if (!b) {
			count(c, C_DROP_NO_BACKEND);
			return XDP_DROP;
		}
		if (!p->icmp) {
			b2 = second_hop(svc, h, be, &second);
			ct_write(c, ct, f, &f4, be, svc_id, second, family);
		}
	}
	// The frame's bytes as it came, counted once it is on its way.
	return sent(c, p, forward(ctx, c, be.id, b, h, p->l3_len, !p->icmp && p->df, b2), svc_id, be.id, bytes);
}

// maglev is the load balancer's program, xdp_maglev; the benchmark
// programs (bench.c) wrap it too. Each family has its own copy of
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
	if (r != PARSED)
		return not_forwarded(c, &p, r);
	struct modes *m = bpf_map_lookup_elem(&modes, &zero);
	int svc_first = m && (m->stateless || m->quic);
	if (p.f.family == 4)
		return maglev_flow(ctx, c, &p, end - data, 4, svc_first);
	return maglev_flow(ctx, c, &p, end - data, 6, svc_first);
}
