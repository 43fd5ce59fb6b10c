//go:build ignore

// The control plane's maker of AES contexts for QUIC-LB (quic.h): a
// sleepable BPF_PROG_TYPE_SYSCALL program, run by BPF_PROG_TEST_RUN with
// struct quic_key_args as its context, which makes the kernel's
// "ecb(aes)" context of a key (the best AES the kernel has: AES-NI where
// it is built in, a constant-time generic one otherwise) and puts it in
// quic_keys at the slot given, releasing the one there before. An object
// of its own, which Load does not load: a kernel without the BPF crypto
// kfuncs (before Linux 6.10) runs the data plane all the same, and only a
// service with an encrypted configuration needs this.

#include "bpf.h"
#include "maps.h"

struct bpf_crypto_params {
	char type[14];
	__u8 reserved[2];
	char algo[128];
	__u8 key[256];
	__u32 key_len;
	__u32 authsize;
};

extern struct bpf_crypto_ctx *bpf_crypto_ctx_create(const struct bpf_crypto_params *params, __u32 params__sz, int *err) __ksym;
extern void bpf_crypto_ctx_release(struct bpf_crypto_ctx *ctx) __ksym;
static void *(*bpf_kptr_xchg)(void *map_value, void *ptr) = (void *)194;

// The program's context: the slot of quic_keys and the key, in; the
// error, out (0, or a negative errno: the context was not made).
struct quic_key_args {
	__u32 slot;
	__u8 key[16];
	__s32 err;
};

SEC("syscall")
int quic_key_set(struct quic_key_args *a)
{
	struct bpf_crypto_params p = {
		.type = "skcipher",
		.algo = "ecb(aes)",
		.key_len = 16,
	};
	__builtin_memcpy(p.key, a->key, 16);
	int err = 0;
	struct bpf_crypto_ctx *ctx = bpf_crypto_ctx_create(&p, sizeof(p), &err);
	if (!ctx) {
		a->err = err ? err : -22;
		return 0;
	}
	__u32 slot = a->slot;
	struct quic_key *k = bpf_map_lookup_elem(&quic_keys, &slot);
	if (!k) {
		bpf_crypto_ctx_release(ctx);
		a->err = -7; // E2BIG: no such slot
		return 0;
	}
	struct bpf_crypto_ctx *old = bpf_kptr_xchg(&k->ctx, ctx); // a kptr, by the map's BTF
	if (old)
		bpf_crypto_ctx_release(old);
	a->err = 0;
	return 0;
}

char __license[] SEC("license") = "Dual MIT/GPL";
