// QUIC-LB (draft-ietf-quic-load-balancers; docs/quic.md): a UDP packet
// of a service with QUIC-LB configurations goes to the backend whose
// server ID its destination connection ID carries, wherever its client's
// address has moved, when it carries one the service knows; every other
// packet goes by the table, counted by reason, never dropped for that
// alone. The Go package quiclb is this file's twin (its Decoder), and the
// tests hold one against the other (FuzzQUIC).
//
// A long header Initial or 0-RTT packet carries the ID its client chose,
// so the table routes it; a Handshake packet, and every short header
// packet, the one a server issued. A connection ID is its first octet
// (the codepoint in the top three bits: 7 is unroutable), then the
// server ID and the nonce, in the clear or encrypted with the service's
// key: one AES block when they are 16 octets together, else the
// four-pass Feistel network of AES. The kernel's AES runs through the
// BPF crypto kfuncs; an encrypted ID's server ID is kept in quic_cache
// once decrypted, so that a connection's packets after its first look it
// up instead.

#pragma once

#include "bpf.h"
#include "headers.h"
#include "maps.h"
#include "encap.h"

#define QUIC_V1 0x00000001u
#define QUIC_V2 0x6b3343cfu // RFC 9369

// quic_long returns 0 for a long header packet of version v and type t
// (the first octet's bits 4 and 5) whose destination connection ID a
// server chose (a Handshake packet of versions 1 and 2), else the counter
// of the reason the table routes it.
static __always_inline int quic_long(__u32 v, __u8 t)
{
	if (v == QUIC_V1) {
		if (t == 0 || t == 1) // Initial, 0-RTT
			return C_QUIC_INITIAL;
		return t == 2 ? 0 : C_QUIC_LONG_OTHER; // Handshake; Retry
	}
	if (v == QUIC_V2) {
		if (t == 1 || t == 2) // Initial, 0-RTT
			return C_QUIC_INITIAL;
		return t == 3 ? 0 : C_QUIC_LONG_OTHER; // Handshake; Retry
	}
	return C_QUIC_LONG_OTHER; // a Version Negotiation (0), or a version unknown here
}

// The four-pass network's halves are ceil(n/2) octets, 10 at most;
// struct quic_blocks's arrays are sized so that masked indexes stay in.
#define QUIC_HALF 10
#define QUIC_HALF_MASK 15  // of left and right, 16 octets
#define QUIC_BLOCK_MASK 31 // of blk, 32 octets

// below returns 0xff if i < n, else 0, without a branch: the four-pass
// network's loops mask every octet of a half, so that the verifier walks
// one path, not one per length.
static __always_inline __u8 below(__u32 i, __u32 n)
{
	return (__u8)((__s32)(i - n) >> 31);
}

// quic_round runs one pass of the four-pass network on s: the AES
// encryption of expand(n, pass, src) XORed into dst, halves whose octets
// past h are zero and stay so.
static __always_inline int quic_round(struct bpf_crypto_ctx *ctx, struct quic_blocks *s, struct bpf_dynptr *in,
				      struct bpf_dynptr *out, __u32 n, __u32 h, __u8 pass, __u8 *src, __u8 *dst)
{
	__builtin_memset(s->in, 0, 16);
	__builtin_memcpy(s->in, src, QUIC_HALF); // zero past h
	s->in[14] = n;
	s->in[15] = pass;
	if (bpf_crypto_encrypt(ctx, in, out, 0))
		return -1;
#pragma unroll
	for (int i = 0; i < QUIC_HALF; i++)
		dst[i] ^= s->out[i] & below(i, h);
	return 0;
}

// quic_clear keeps the split nibbles of an odd block clear: the last four
// bits of the left half (left), or the first four of the right one.
static __always_inline void quic_clear(struct quic_blocks *s, __u32 h, __u32 odd, int left)
{
	if (left)
		s->left[(h - 1) & QUIC_HALF_MASK] &= (__u8)(0xff << (odd * 4));
	else
		s->right[0] &= (__u8)(0xff >> (odd * 4));
}

// quic_decrypt decrypts the block of k (of configuration qc) into s->blk:
// its first qc->sid_len octets, the server ID, at least (four passes stop
// after three when it lies in the left half's whole octets). It returns
// 0, or -1 where the key or the kernel's AES is missing.
static __always_inline int quic_decrypt(struct quic_cfg *qc, struct quic_cid *k, struct quic_blocks *s)
{
	if (!bpf_ksym_exists(bpf_crypto_encrypt) || !bpf_ksym_exists(bpf_crypto_decrypt))
		return -1;
	__u32 slot = qc->key;
	struct quic_key *key = bpf_map_lookup_elem(&quic_keys, &slot);
	if (!key)
		return -1;
	struct bpf_crypto_ctx *ctx = (void *)key->ctx; // a kptr, by the map's BTF
	if (!ctx)
		return -1;
	struct bpf_dynptr in, out;
	bpf_dynptr_from_mem(s->in, 16, 0, &in);
	bpf_dynptr_from_mem(s->out, 16, 0, &out);
	if (qc->mode == QUIC_SINGLE) {
		__builtin_memcpy(s->in, k->blk, 16);
		if (bpf_crypto_decrypt(ctx, &in, &out, 0))
			return -1;
		__builtin_memcpy(s->blk, s->out, 16);
		return 0;
	}
	__u32 n = qc->len & 0x1f, h = (n + 1) / 2, odd = n & 1;
	__builtin_memcpy(s->blk, k->blk, sizeof(k->blk)); // zero past n
	__builtin_memset(s->blk + sizeof(k->blk), 0, sizeof(s->blk) - sizeof(k->blk));
#pragma unroll
	for (int i = 0; i < QUIC_HALF; i++) {
		__u8 m = below(i, h);
		s->left[i] = s->blk[i] & m;
		s->right[i] = s->blk[(n - h + i) & QUIC_BLOCK_MASK] & m;
	}
	quic_clear(s, h, odd, 1);
	quic_clear(s, h, odd, 0);
	if (quic_round(ctx, s, &in, &out, n, h, 4, s->right, s->left))
		return -1;
	quic_clear(s, h, odd, 1);
	if (quic_round(ctx, s, &in, &out, n, h, 3, s->left, s->right))
		return -1;
	quic_clear(s, h, odd, 0);
	if (quic_round(ctx, s, &in, &out, n, h, 2, s->right, s->left))
		return -1;
	quic_clear(s, h, odd, 1);
	if (qc->sid_len > n / 2) { // the server ID runs into right_0: the fourth pass
		if (quic_round(ctx, s, &in, &out, n, h, 1, s->left, s->right))
			return -1;
		quic_clear(s, h, odd, 0);
	}
	// The halves joined: left, then right, the middle octet's nibbles
	// together when n is odd (left's octets past h are zero, and right's
	// go past n).
	__builtin_memcpy(s->blk, s->left, QUIC_HALF);
	s->blk[(h - 1) & QUIC_BLOCK_MASK] |= s->right[0] & (__u8)(0xff * odd);
#pragma unroll
	for (int i = 0; i < QUIC_HALF; i++)
		s->blk[(h + i) & QUIC_BLOCK_MASK] = s->right[(i + odd) & QUIC_HALF_MASK];
	return 0;
}

// quic_hash is the hash of server ID id of codepoint cp, with the table's
// seed: the index of its entry in its service's table, less 1, is the
// hash ANDed with the table's mask, or one of the QUIC_PROBES after it.
// quicHash in quic.go is its twin, by which the control plane places the
// IDs.
static __always_inline __u64 quic_hash(__u64 seed, __u32 cp, struct quic_server_id *id)
{
	__u64 h = seed ^ cp;
	h ^= id->sid[0] * 0x9e3779b97f4a7c15ULL;
	h ^= id->sid[1] * 0xc2b2ae3d27d4eb4fULL;
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ULL;
	h ^= h >> 32;
	return h;
}

// quic_server returns the backend of server ID id of codepoint cp in
// service svc's table of server IDs, with its slot in out, or 0 if it has
// none.
static __always_inline struct backend *quic_server(__u32 svc, __u32 cp, struct quic_server_id *id, struct slot *out)
{
	void *t = bpf_map_lookup_elem(&quic_tables, &svc);
	if (!t)
		return 0;
	__u32 zero = 0;
	struct quic_entry *hdr = bpf_map_lookup_elem(t, &zero);
	if (!hdr)
		return 0;
	__u32 mask = hdr->cp, i = quic_hash(hdr->sid[0], cp, id);
#pragma unroll
	for (int p = 0; p < QUIC_PROBES; p++) {
		__u32 k = 1 + ((i + p) & mask);
		struct quic_entry *e = bpf_map_lookup_elem(t, &k);
		if (!e || e->cp == 0)
			return 0;
		if (e->cp == cp + 1 && e->sid[0] == id->sid[0] && e->sid[1] == id->sid[1]) {
			struct backend *b = backend(e->be.id, e->be.cookie);
			if (b)
				*out = e->be;
			return b;
		}
	}
	return 0;
}

// quic_decode's outcomes but 0, the server ID found.
#define QUIC_NO_KEY 1    // the configuration's key is missing: the control plane is between its writes
#define QUIC_NO_SERVER 2 // the server ID names no server of the service

// quic_decode puts the server ID of the encrypted block in this CPU's
// quic_scratch (its cid, the caller's, of configuration qc at codepoint
// cp of service svc) in id: from quic_cache, or decrypted, and then kept
// in quic_cache if it names a server of the service. It returns 0,
// QUIC_NO_KEY or QUIC_NO_SERVER. A global function, which the verifier
// checks once whatever calls it, with a stack of its own: the program's
// is nearly full.
__attribute__((noinline)) int quic_decode(struct quic_cfg *qc, __u32 svc, __u32 cp, struct quic_server_id *id, struct cpu_counters *c)
{
	if (!qc || !id || !c) // a global function's pointers may be null, for the verifier
		return QUIC_NO_KEY;
	__u32 zero = 0;
	struct quic_blocks *s = bpf_map_lookup_elem(&quic_scratch, &zero); // the caller's: this CPU's
	if (!s)
		return QUIC_NO_KEY;
	struct quic_cid *k = &s->cid;
	struct quic_server_id *cached = bpf_map_lookup_elem(&quic_cache, k);
	if (cached) {
		id->sid[0] = cached->sid[0];
		id->sid[1] = cached->sid[1];
		return 0;
	}
	if (quic_decrypt(qc, k, s))
		return QUIC_NO_KEY;
	count(c, C_QUIC_DECRYPTED);
	id->sid[0] = *(__u64 *)s->blk & qc->sid_mask[0];
	id->sid[1] = *(__u64 *)(s->blk + 8) & qc->sid_mask[1];
	struct slot be;
	if (!quic_server(svc, cp, id, &be))
		return QUIC_NO_SERVER; // not kept: a flood of made-up IDs evicts nothing
	s->val.sid[0] = id->sid[0];
	s->val.sid[1] = id->sid[1];
	bpf_map_update_elem(&quic_cache, k, &s->val, BPF_ANY);
	return 0;
}

// quic_route finds the backend of a UDP packet of QUIC-LB service svc,
// of the given family (a constant), by its destination connection ID: it
// returns the backend the ID's server ID names, with its slot in out, or
// 0 with the reason the table routes the packet counted.
//
// The ID's block is read as QUIC_WORDS words where they are in the
// packet: any QUIC packet has them (its packet number, at least four
// octets of it and its payload, and its 16-octet AEAD tag follow the ID),
// so a shorter one is no QUIC packet, and goes by the table.
static __always_inline struct backend *quic_route(struct xdp_md *ctx, struct cpu_counters *c, struct service *svc,
						   const int family, struct slot *out)
{
	void *data = (void *)(long)ctx->data;
	__u8 *end = (void *)(long)ctx->data_end;
	__u8 *q = data + ETH_HLEN + UDP_HLEN + (family == 4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr));
	__u8 *cid;
	__u32 room = 0xff; // the ID's octets a long header gives; a short header's run to the end
	int r = C_QUIC_SHORT;
	if (q + 6 > end)
		goto table;
	if (q[0] & 0x80) {
		__u32 v = (__u32)q[1] << 24 | (__u32)q[2] << 16 | (__u32)q[3] << 8 | q[4];
		r = quic_long(v, (q[0] >> 4) & 3);
		if (r)
			goto table;
		r = C_QUIC_SHORT;
		room = q[5];
		cid = q + 6;
	} else {
		cid = q + 1;
	}
	if (cid + 1 + 8 * QUIC_WORDS > end)
		goto table;
	__u32 cp = cid[0] >> 5;
	r = C_QUIC_UNROUTABLE;
	if (cp >= QUIC_CONFIGS)
		goto table;
	struct quic_cfg *qc = &svc->quic[cp];
	r = C_QUIC_UNKNOWN_CONFIG;
	if (qc->mode == QUIC_OFF)
		goto table;
	r = C_QUIC_SHORT;
	if (room < 1 + (__u32)qc->len)
		goto table;
	__u64 *w = (void *)(cid + 1); // unaligned: the kernel allows it of packets where the CPU does
	struct quic_server_id id;
	if (qc->mode == QUIC_PLAIN) {
		id.sid[0] = w[0] & qc->sid_mask[0];
		id.sid[1] = w[1] & qc->sid_mask[1];
	} else {
		__u32 zero = 0;
		struct quic_blocks *s = bpf_map_lookup_elem(&quic_scratch, &zero);
		r = C_QUIC_UNKNOWN_CONFIG;
		if (!s)
			goto table;
		s->cid.key_id = qc->key_id;
		s->cid.pad = 0;
		s->cid.blk[0] = w[0] & qc->blk_mask[0];
		s->cid.blk[1] = w[1] & qc->blk_mask[1];
		s->cid.blk[2] = w[2] & qc->blk_mask[2];
		int d = quic_decode(qc, svc->id, cp, &id, c);
		if (d) { // a constant counter, not d, which the verifier cannot bound
			r = d == QUIC_NO_KEY ? C_QUIC_UNKNOWN_CONFIG : C_QUIC_UNKNOWN_SERVER;
			goto table;
		}
	}
	r = C_QUIC_UNKNOWN_SERVER;
	struct backend *b = quic_server(svc->id, cp, &id, out);
	if (!b)
		goto table;
	count(c, C_QUIC_CID);
	return b;
table:
	count(c, r);
	return 0;
}
