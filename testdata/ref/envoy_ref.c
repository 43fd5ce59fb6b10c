/*
 * envoy_ref: an independent C reference for the Maglev table Envoy builds,
 * which github.com/maglevlb/maglev/envoymaglev reproduces. It is a plain
 * port of Envoy's build loop (MaglevTable::constructMaglevTableInternal and
 * OriginalMaglevTable::constructImplementationInternals in
 * source/extensions/load_balancing_policies/maglev/maglev_lb.cc, and the
 * weight normalization in source/common/upstream/thread_aware_lb_impl.cc),
 * written afresh and sharing no code with the Go packages; XXH64 comes from
 * the xxHash C library Envoy also uses (Debian's libxxhash-dev).
 *
 * Usage:
 *   envoy_ref [-names] [-hex] M < hosts.txt
 *       hosts.txt holds one host a line: its key (the string Envoy hashes:
 *       "ip:port", a hostname or a hash_key; with -hex, the key's bytes in
 *       hex), then optionally a space and its weight (1 if absent).
 *       Prints the table: by default each slot's host index (in sorted
 *       order) as a little-endian uint32, M entries, 0xffffffff for every
 *       slot when there are no hosts; with -names, the hosts' keys
 *       separated by spaces, then a newline.
 *   envoy_ref -batch < cases
 *       Many tables in one run. cases holds, for each table, a line "M N"
 *       followed by N host lines as with -hex, each with its weight. Writes
 *       each table as above (M little-endian uint32), one after another.
 *   envoy_ref -hash SEED HEX
 *       Prints XXH64 of the bytes given in hex (may be empty), with SEED, in
 *       hex.
 *
 * The build, as Envoy does it, for hosts with keys and weights w_i >= 1:
 *   - hosts are sorted by key, byte order (memcmp, a shorter prefix first);
 *   - offset_i = XXH64(key_i, seed 0) mod M,
 *     skip_i   = XXH64(key_i, seed 1) mod (M - 1) + 1,
 *     the j-th preference of host i is (offset_i + skip_i * j) mod M;
 *   - normalized weights, in double: weight_i = w_i * 1.0 / sum(w), and
 *     max_weight = the largest of them;
 *   - for iteration = 1, 2, ... (uint32_t) while the table is not full,
 *     for each host i in order while the table is not full: skip i if
 *     iteration * weight_i < target_i (target_i a double from 0);
 *     otherwise target_i += max_weight, and i claims its first preference,
 *     continuing from where it stopped, that nobody owns.
 * Envoy accepts only weights of 1 or more and a total of at most
 * 2^32 - 1; this program checks both. With no hosts the table is empty.
 *
 * Build with IEEE double arithmetic and no excess precision (any x86-64 or
 * arm64 compiler; -ffp-contract=off keeps a compiler from fusing anything):
 *   cc -O2 -ffp-contract=off -o envoy_ref envoy_ref.c -lxxhash
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#define EMPTY 0xffffffffu

static void die(const char *msg)
{
	fprintf(stderr, "envoy_ref: %s\n", msg);
	exit(2);
}

struct host {
	unsigned char *key;
	size_t len;
	uint32_t weight;
	uint32_t index; /* position in sorted order */
	uint64_t offset, skip;
	double normalized, target;
	uint64_t next;
};

static int cmp_host(const void *a, const void *b)
{
	const struct host *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->key, y->key, n);
	if (c != 0)
		return c;
	return (x->len > y->len) - (x->len < y->len);
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decodes len hex digits at p in place; returns the number of bytes. */
static size_t unhex(char *p, size_t len)
{
	if (len % 2 != 0)
		die("odd number of hex digits");
	for (size_t k = 0; k < len / 2; k++) {
		int hi = hexval((unsigned char)p[2 * k]), lo = hexval((unsigned char)p[2 * k + 1]);
		if (hi < 0 || lo < 0)
			die("bad hex digit");
		p[k] = (char)(hi << 4 | lo);
	}
	return len / 2;
}

static int is_prime(uint64_t n)
{
	if (n < 2)
		return 0;
	for (uint64_t d = 2; d * d <= n; d++)
		if (n % d == 0)
			return 0;
	return 1;
}

/* Parses one host line: KEY or KEY WEIGHT (KEY in hex with hex). */
static void parse_host(char *line, int hex, struct host *h)
{
	size_t len = strcspn(line, "\r\n");
	line[len] = 0;
	char *sp = strchr(line, ' ');
	h->weight = 1;
	if (sp) {
		*sp = 0;
		char *end;
		unsigned long long w = strtoull(sp + 1, &end, 10);
		if (end == sp + 1 || *end != 0 || w > 0xffffffffull)
			die("bad weight");
		h->weight = (uint32_t)w;
		len = (size_t)(sp - line);
	}
	if (hex)
		len = unhex(line, len);
	h->key = malloc(len + 1);
	if (!h->key)
		die("out of memory");
	memcpy(h->key, line, len);
	h->len = len;
}

/* Builds Envoy's table of m slots for the n hosts (sorted in place):
 * owner[s] is the sorted index of slot s's host, EMPTY with no hosts. */
static void build(struct host *hosts, size_t n, uint64_t m, uint32_t *owner)
{
	for (uint64_t s = 0; s < m; s++)
		owner[s] = EMPTY;
	if (n == 0)
		return;
	if (n > m)
		die("more hosts than slots");
	qsort(hosts, n, sizeof *hosts, cmp_host);

	/* normalizeHostWeights, with a normalized locality weight of 1.0. */
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++) {
		if (hosts[i].weight == 0)
			die("weight 0 (Envoy requires at least 1)");
		sum += hosts[i].weight;
		if (sum > 0xffffffffull)
			die("total weight exceeds 2^32 - 1");
	}
	const double normalized_locality_weight = 1.0;
	double max_weight = 0.0;
	for (size_t i = 0; i < n; i++) {
		if (i > 0 && cmp_host(&hosts[i - 1], &hosts[i]) == 0)
			die("duplicate key");
		if (hosts[i].len == 0)
			die("empty key");
		struct host *h = &hosts[i];
		h->index = (uint32_t)i;
		h->normalized = h->weight * normalized_locality_weight / sum;
		if (h->normalized > max_weight)
			max_weight = h->normalized;
		h->offset = XXH64(h->key, h->len, 0) % m;
		h->skip = XXH64(h->key, h->len, 1) % (m - 1) + 1;
		h->target = 0.0;
		h->next = 0;
	}

	/* The build loop. */
	uint64_t filled = 0;
	for (uint32_t iteration = 1; filled < m; ++iteration) {
		for (size_t i = 0; i < n && filled < m; i++) {
			struct host *h = &hosts[i];
			if (iteration * h->normalized < h->target)
				continue;
			h->target += max_weight;
			uint64_t c = (h->offset + h->skip * h->next) % m;
			while (owner[c] != EMPTY) {
				h->next++;
				c = (h->offset + h->skip * h->next) % m;
			}
			owner[c] = h->index;
			h->next++;
			filled++;
		}
	}
}

static void write_table(const uint32_t *owner, uint64_t m)
{
	for (uint64_t s = 0; s < m; s++) {
		unsigned char b[4] = {owner[s] & 0xff, owner[s] >> 8 & 0xff, owner[s] >> 16 & 0xff,
				      owner[s] >> 24 & 0xff};
		if (fwrite(b, 1, 4, stdout) != 4)
			die("write failed");
	}
}

static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long m = strtoull(s, &end, 10);
	if (end == s || *end != 0 || !is_prime(m) || m > (1ull << 32))
		die("table size must be a prime below 2^32");
	return m;
}

int main(int argc, char **argv)
{
	int names = 0, hex = 0, batch = 0;
	int a = 1;
	for (; a < argc && argv[a][0] == '-'; a++) {
		if (strcmp(argv[a], "-names") == 0)
			names = 1;
		else if (strcmp(argv[a], "-hex") == 0)
			hex = 1;
		else if (strcmp(argv[a], "-batch") == 0)
			batch = 1;
		else if (strcmp(argv[a], "-hash") == 0) {
			if (argc - a != 3)
				die("usage: envoy_ref -hash SEED HEX");
			unsigned long long seed = strtoull(argv[a + 1], NULL, 10);
			char *in = strdup(argv[a + 2]);
			size_t len = unhex(in, strlen(in));
			printf("%016llx\n", (unsigned long long)XXH64(in, len, seed));
			return 0;
		} else
			die("unknown flag (want -names, -hex, -batch or -hash)");
	}

	static char line[1 << 16];
	if (batch) {
		while (fgets(line, sizeof line, stdin)) {
			unsigned long long m, n;
			if (sscanf(line, "%llu %llu", &m, &n) != 2)
				die("bad case header (want \"M N\")");
			char ms[32];
			snprintf(ms, sizeof ms, "%llu", m);
			m = parse_size(ms);
			struct host *hosts = calloc(n ? n : 1, sizeof *hosts);
			uint32_t *owner = malloc(m * sizeof *owner);
			if (!hosts || !owner)
				die("out of memory");
			for (unsigned long long i = 0; i < n; i++) {
				if (!fgets(line, sizeof line, stdin))
					die("short case");
				parse_host(line, 1, &hosts[i]);
			}
			build(hosts, n, m, owner);
			write_table(owner, m);
			for (unsigned long long i = 0; i < n; i++)
				free(hosts[i].key);
			free(hosts);
			free(owner);
		}
		return 0;
	}

	if (argc - a != 1)
		die("usage: envoy_ref [-names] [-hex] M < hosts.txt");
	uint64_t m = parse_size(argv[a]);
	size_t n = 0, cap = 16;
	struct host *hosts = calloc(cap, sizeof *hosts);
	if (!hosts)
		die("out of memory");
	while (fgets(line, sizeof line, stdin)) {
		if (n == cap) {
			cap *= 2;
			hosts = realloc(hosts, cap * sizeof *hosts);
			if (!hosts)
				die("out of memory");
		}
		memset(&hosts[n], 0, sizeof hosts[n]);
		parse_host(line, hex, &hosts[n]);
		n++;
	}
	uint32_t *owner = malloc(m * sizeof *owner);
	if (!owner)
		die("out of memory");
	build(hosts, n, m, owner);
	if (!names) {
		write_table(owner, m);
		return 0;
	}
	/* hosts are sorted now: index i is hosts[i]. */
	for (uint64_t s = 0; s < m; s++) {
		if (s > 0)
			putchar(' ');
		if (owner[s] != EMPTY)
			fwrite(hosts[owner[s]].key, 1, hosts[owner[s]].len, stdout);
	}
	putchar('\n');
	return 0;
}
