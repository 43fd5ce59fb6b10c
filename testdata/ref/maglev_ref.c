/*
 * maglev_ref: an independent C reference for the Maglev tables that
 * github.com/maglevlb/maglev builds. It follows the spec as plainly as it
 * can and shares no code with the Go package: the hash functions come from
 * the reference C/C++ libraries (libxxhash, and libfarmhash through
 * farm_fp64.cc when built with -DWITH_FARM).
 *
 * Usage:
 *   maglev_ref [-names] [-hex] [-weighted] [-perms] [-without LIST] HASHER M < names.txt
 *       names.txt holds one backend name per line (with -hex, each name's
 *       bytes in hex; with -weighted, the name is followed by a space and
 *       its weight). Prints the table: by default each slot's owner index
 *       (in sorted order) as a little-endian uint32, M entries, 0xffffffff
 *       for a slot nobody owns; with -names, the owners' names separated by
 *       spaces, then a newline. With -weighted, backends take turns by
 *       Envoy's rule (see below). With -perms, prints instead one line per
 *       backend in sorted order: the name in hex, its offset and its skip.
 *       With -without, the table printed (or whose candidates -candidates
 *       prints) is the table with the backends of LIST out of service
 *       (Table.Without): LIST is their names, each in hex (with or without
 *       -hex), separated by commas.
 *   maglev_ref -ring [-hex] HASHER VNODES < names.txt
 *       Prints the consistent-hash ring's points in ring order, one a line:
 *       position (hex), backend index (in sorted order), j.
 *   maglev_ref -candidates [-hex] [-weighted] [-without LIST] HASHER M KEYS < names.txt
 *   maglev_ref -ring -candidates [-hex] HASHER VNODES KEYS < names.txt
 *       KEYS is a file of keys, one a line in hex (an empty line is the
 *       empty key). Prints, for each key, one line: every candidate of the
 *       key in preference order (Table.Candidates, or Ring.Candidates with
 *       -ring), backend indices in sorted order separated by spaces; an
 *       empty line if there is none.
 *   maglev_ref -hashes HASHER < hex.txt
 *       Prints HASHER of each line's bytes, given in hex (an empty line is
 *       the empty string), one hash a line in hex.
 *   maglev_ref -perm M NAME:OFFSET:SKIP ...
 *       Fills a table of M slots from hand-set permutations, taken in the
 *       order given, and prints the owners' names as with -names.
 *   maglev_ref -hash HASHER STRING
 *       Prints HASHER(STRING) in hex.
 *
 * HASHER is one of: xxh3, xxh3-seed, fnv1a, and farm (only when built with
 * -DWITH_FARM; see README.md).
 *
 * Spec: backends are sorted by byte order (memcmp, a shorter prefix first).
 *   offset_i = H(name_i + "|offset") mod M
 *   skip_i   = H(name_i + "|skip") mod (M-1) + 1
 *   the j-th preference of backend i is (offset_i + j*skip_i) mod M.
 * The table is filled round-robin: backends take turns in sorted order; on
 * its turn a backend walks on through its preferences from where it stopped
 * last time and claims the first empty slot; stop once all M slots are owned.
 *
 * Weighted (NewWeighted): W is the largest weight; in rounds k = 1, 2, ...
 * backends go in sorted order and backend i (weight w_i > 0, counter t_i
 * from 0) takes a turn iff k*w_i >= t_i, then adds W to t_i. Weight 0 takes
 * no turns; if every weight is 0 the table is empty.
 *
 * Without (docs/spec.md section 12): every slot that a backend of LIST
 * owns goes to the backend i, not in LIST and of non-zero weight, whose
 * preferences reach the slot first: the smallest j/w_i, where j is the
 * slot's position in i's preferences, (slot - offset_i) * skip_i^-1 mod M,
 * compared as j*w_best < j_best*w_i; on equal products the lower index
 * keeps it. Weights are 1 without -weighted. No such backend: the slot is
 * nobody's. Every other slot keeps its owner; the backends of LIST then
 * count as drained (weight 0) for the candidates.
 *
 * Ring: point j (0 <= j < VNODES) of backend name is at H(le64(j) + name),
 * le64(j) being j as 8 bytes, little-endian. Points are sorted by position,
 * equal positions by backend (sorted order), then j.
 *
 * Candidates of a key with hash h in a table (none if it is empty): first
 * the owner of slot h mod M; then, for j = 1 .. 64 while fewer than 16
 * backends have been given, the owner of slot floor(z_j * M / 2^64), with
 * z_j = SplitMix64's finalizer of h + j*0x9e3779b97f4a7c15 (mod 2^64),
 * unless already given; then every backend not given with a non-zero
 * weight, in sorted order from the first candidate's index plus 1,
 * wrapping around. On a ring: the owners of the points met walking from
 * the key's point (the first with position >= h, or point 0) in ring
 * order, wrapping around, each the first time it is met.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#ifdef WITH_FARM
uint64_t farm_fingerprint64(const char *s, size_t len); /* farm_fp64.cc */
#endif

#define XXH3_SEED 0x9e3779b97f4a7c15ULL
#define GOLDEN64 0x9e3779b97f4a7c15ULL /* SplitMix64's increment */

static void die(const char *msg)
{
	fprintf(stderr, "maglev_ref: %s\n", msg);
	exit(2);
}

/* ---- hashers ---- */

static uint64_t fnv1a64(const unsigned char *p, size_t n)
{
	uint64_t h = 14695981039346656037ULL;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

typedef uint64_t (*hash_fn)(const unsigned char *p, size_t n);

static uint64_t h_xxh3(const unsigned char *p, size_t n)
{
	return XXH3_64bits(p, n);
}

static uint64_t h_xxh3_seed(const unsigned char *p, size_t n)
{
	return XXH3_64bits_withSeed(p, n, XXH3_SEED);
}

#ifdef WITH_FARM
static uint64_t h_farm(const unsigned char *p, size_t n)
{
	return farm_fingerprint64((const char *)p, n);
}
#endif

static hash_fn pick_hasher(const char *name)
{
	if (strcmp(name, "xxh3") == 0)
		return h_xxh3;
	if (strcmp(name, "xxh3-seed") == 0)
		return h_xxh3_seed;
	if (strcmp(name, "fnv1a") == 0)
		return fnv1a64;
	if (strcmp(name, "farm") == 0) {
#ifdef WITH_FARM
		return h_farm;
#else
		die("farm: not built in (build with -DWITH_FARM, see README.md)");
#endif
	}
	die("unknown hasher (want xxh3, xxh3-seed, fnv1a or farm)");
	return NULL;
}

/* H(name + suffix), with + byte concatenation. */
static uint64_t hash_with_suffix(hash_fn h, const unsigned char *name, size_t len,
				 const char *suffix)
{
	size_t slen = strlen(suffix);
	unsigned char *buf = malloc(len + slen + 1);
	if (!buf)
		die("out of memory");
	memcpy(buf, name, len);
	memcpy(buf + len, suffix, slen);
	uint64_t v = h(buf, len + slen);
	free(buf);
	return v;
}

/* ---- backends ---- */

struct backend {
	unsigned char *name;
	size_t len;
	uint64_t offset, skip;
	uint64_t next;   /* how many of its preferences it has looked at */
	uint64_t weight; /* -weighted only */
	uint64_t t;      /* the weighted rule's counter t_i */
};

/* Byte order: memcmp over the common prefix, then the shorter one first. */
static int cmp_backend(const void *a, const void *b)
{
	const struct backend *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->name, y->name, n);
	if (c != 0)
		return c;
	if (x->len < y->len)
		return -1;
	if (x->len > y->len)
		return 1;
	return 0;
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

static uint64_t parse_u64(const char *s);

/*
 * Reads one name per line from f (a trailing "\n" is not part of a name).
 * With hex, a line is the name's bytes in hex; with weighted, the name is
 * followed by a space and a decimal weight.
 */
static struct backend *read_backends(FILE *f, size_t *count, int hex, int weighted)
{
	struct backend *bs = NULL;
	size_t n = 0, cap = 0;
	char *line = NULL;
	size_t linecap = 0;
	ssize_t got;
	while ((got = getline(&line, &linecap, f)) != -1) {
		size_t len = (size_t)got;
		uint64_t weight = 1;
		if (len > 0 && line[len - 1] == '\n')
			len--;
		if (weighted) {
			char *sp = NULL;
			for (size_t k = len; k > 0; k--)
				if (line[k - 1] == ' ') {
					sp = &line[k - 1];
					break;
				}
			if (!sp)
				die("-weighted wants NAME WEIGHT");
			line[len] = '\0';
			weight = parse_u64(sp + 1);
			if (weight > 0xffffffffULL)
				die("weight above 2^32-1");
			len = (size_t)(sp - line);
		}
		if (hex)
			len = unhex(line, len);
		if (len == 0)
			die("empty backend name");
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			bs = realloc(bs, cap * sizeof *bs);
			if (!bs)
				die("out of memory");
		}
		bs[n].name = malloc(len);
		if (!bs[n].name)
			die("out of memory");
		memcpy(bs[n].name, line, len);
		bs[n].len = len;
		bs[n].weight = weight;
		n++;
	}
	free(line);
	*count = n;
	return bs;
}

/* ---- the fill ---- */

/*
 * Fills owner[0..m-1] with backend indices, round-robin, as the spec says.
 * Each preference is computed afresh with %, as in a textbook.
 */
static void fill(struct backend *bs, size_t n, uint64_t m, int64_t *owner)
{
	uint64_t filled = 0;
	for (uint64_t s = 0; s < m; s++)
		owner[s] = -1;
	for (size_t i = 0; i < n; i++)
		bs[i].next = 0;
	if (n == 0)
		return;
	while (filled < m) {
		for (size_t i = 0; i < n && filled < m; i++) {
			for (;;) {
				uint64_t slot = (bs[i].offset + bs[i].next * bs[i].skip) % m;
				bs[i].next++;
				if (owner[slot] == -1) {
					owner[slot] = (int64_t)i;
					filled++;
					break;
				}
			}
		}
	}
}

/* Takes backend i's turn: claims the first empty slot of its preferences. */
static void claim(struct backend *b, size_t i, uint64_t m, int64_t *owner)
{
	for (;;) {
		uint64_t slot = (b->offset + b->next * b->skip) % m;
		b->next++;
		if (owner[slot] == -1) {
			owner[slot] = (int64_t)i;
			return;
		}
	}
}

/*
 * Fills owner[0..m-1] by the weighted rule, round by round, visiting every
 * backend every round.
 */
static void fill_weighted(struct backend *bs, size_t n, uint64_t m, int64_t *owner)
{
	uint64_t filled = 0, maxw = 0;
	for (uint64_t s = 0; s < m; s++)
		owner[s] = -1;
	for (size_t i = 0; i < n; i++) {
		bs[i].next = 0;
		bs[i].t = 0;
		if (bs[i].weight > maxw)
			maxw = bs[i].weight;
	}
	if (maxw == 0)
		return;
	for (uint64_t k = 1; filled < m; k++) {
		for (size_t i = 0; i < n && filled < m; i++) {
			if (bs[i].weight == 0 || k * bs[i].weight < bs[i].t)
				continue;
			bs[i].t += maxw;
			claim(&bs[i], i, m, owner);
			filled++;
		}
	}
}

static void print_names(const struct backend *bs, uint64_t m, const int64_t *owner)
{
	for (uint64_t s = 0; s < m; s++) {
		if (s > 0)
			putchar(' ');
		if (owner[s] >= 0)
			fwrite(bs[owner[s]].name, 1, bs[owner[s]].len, stdout);
	}
	putchar('\n');
}

static void print_binary(uint64_t m, const int64_t *owner)
{
	for (uint64_t s = 0; s < m; s++) {
		uint32_t v = (uint32_t)owner[s];
		unsigned char b[4] = {
			(unsigned char)(v & 0xff),
			(unsigned char)((v >> 8) & 0xff),
			(unsigned char)((v >> 16) & 0xff),
			(unsigned char)((v >> 24) & 0xff),
		};
		fwrite(b, 1, 4, stdout);
	}
}

static int is_prime(uint64_t m)
{
	if (m < 2)
		return 0;
	for (uint64_t d = 2; d * d <= m; d++)
		if (m % d == 0)
			return 0;
	return 1;
}

static uint64_t parse_u64(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (*s == '\0' || *end != '\0' || *s == '-')
		die("bad number");
	return (uint64_t)v;
}

static uint64_t parse_m(const char *s)
{
	uint64_t m = parse_u64(s);
	if (!is_prime(m) || m > 0xffffffffULL)
		die("M must be a prime below 2^32");
	return m;
}

/* ---- removing backends (Without) ---- */

/* x^e mod m, for m < 2^32: every product is below 2^64. */
static uint64_t pow_mod(uint64_t x, uint64_t e, uint64_t m)
{
	uint64_t r = 1 % m;
	x %= m;
	while (e > 0) {
		if (e & 1)
			r = r * x % m;
		x = x * x % m;
		e >>= 1;
	}
	return r;
}

/*
 * Marks in gone[] the backends named in list: names in hex, separated by
 * commas (an empty list names none). Dies on a name that is not a backend,
 * or one named twice.
 */
static void parse_without(const char *list, const struct backend *bs, size_t n, unsigned char *gone)
{
	size_t len = strlen(list);
	char *buf = malloc(len + 1);
	if (!buf)
		die("out of memory");
	memcpy(buf, list, len + 1);
	for (char *p = buf; *p != '\0';) {
		char *comma = strchr(p, ',');
		size_t k = comma ? (size_t)(comma - p) : strlen(p);
		size_t nl = unhex(p, k);
		size_t i = 0;
		while (i < n && (bs[i].len != nl || memcmp(bs[i].name, p, nl) != 0))
			i++;
		if (i == n)
			die("-without: a name that is not a backend");
		if (gone[i])
			die("-without: a name given twice");
		gone[i] = 1;
		if (!comma)
			break;
		p = comma + 1;
	}
	free(buf);
}

/*
 * Takes the backends with gone[i] out of service in the table owner, by
 * the rule of docs/spec.md section 12, each freed slot looked at by itself:
 * every backend left (not gone, weight > 0) in sorted order, the slot's
 * position in its preferences from the inverse of its skip (skip^(M-2)
 * mod M, M being prime), the smallest j/w winning. Then sets the weight of
 * the backends taken out to 0.
 */
static void remove_backends(struct backend *bs, size_t n, uint64_t m, int64_t *owner,
			    const unsigned char *gone)
{
	uint64_t *inv = malloc((n ? n : 1) * sizeof *inv);
	if (!inv)
		die("out of memory");
	for (size_t i = 0; i < n; i++)
		inv[i] = pow_mod(bs[i].skip, m - 2, m);
	for (uint64_t s = 0; s < m; s++) {
		if (owner[s] < 0 || !gone[owner[s]])
			continue;
		int64_t best = -1;
		uint64_t best_j = 0, best_w = 0;
		for (size_t i = 0; i < n; i++) {
			if (gone[i] || bs[i].weight == 0)
				continue;
			uint64_t j = (s + m - bs[i].offset) % m * inv[i] % m;
			if ((bs[i].offset + j * bs[i].skip) % m != s)
				die("internal error: a position that is not the slot's");
			/* j < 2^25, w < 2^32: the products fit in 64 bits */
			if (best < 0 || j * best_w < best_j * bs[i].weight) {
				best = (int64_t)i;
				best_j = j;
				best_w = bs[i].weight;
			}
		}
		owner[s] = best;
	}
	for (size_t i = 0; i < n; i++)
		if (gone[i])
			bs[i].weight = 0;
	free(inv);
}

/* ---- candidates ---- */

struct key {
	unsigned char *bytes;
	size_t len;
};

/* Reads the keys file: one key a line, in hex; an empty line is "". */
static struct key *read_keys(const char *path, size_t *count)
{
	FILE *f = fopen(path, "r");
	if (!f)
		die("cannot open the keys file");
	struct key *ks = NULL;
	size_t n = 0, cap = 0;
	char *line = NULL;
	size_t linecap = 0;
	ssize_t got;
	while ((got = getline(&line, &linecap, f)) != -1) {
		size_t len = (size_t)got;
		if (len > 0 && line[len - 1] == '\n')
			len--;
		len = unhex(line, len);
		if (n == cap) {
			cap = cap ? 2 * cap : 128;
			ks = realloc(ks, cap * sizeof *ks);
			if (!ks)
				die("out of memory");
		}
		ks[n].bytes = malloc(len ? len : 1);
		if (!ks[n].bytes)
			die("out of memory");
		memcpy(ks[n].bytes, line, len);
		ks[n].len = len;
		n++;
	}
	free(line);
	fclose(f);
	*count = n;
	return ks;
}

/* SplitMix64's output function (Stafford's Mix13). */
static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/*
 * floor(z * m / 2^64) for m < 2^32, from z's 32-bit halves, with no 128-bit
 * type: z*m = hi*m*2^32 + lo*m, and hi*m + (lo*m >> 32) < 2^64.
 */
static uint64_t probe_slot(uint64_t z, uint64_t m)
{
	uint64_t hi = z >> 32, lo = z & 0xffffffffULL;
	return (hi * m + ((lo * m) >> 32)) >> 32;
}

/* Prints backend i as the next candidate of a line, and marks it given. */
static void give(size_t i, unsigned char *given, size_t *count)
{
	if (*count > 0)
		putchar(' ');
	printf("%zu", i);
	given[i] = 1;
	(*count)++;
}

/* -candidates: every candidate of each key, one line a key. */
static int run_candidates(hash_fn h, const struct backend *bs, size_t n, uint64_t m,
			  const int64_t *owner, int weighted, const struct key *ks, size_t nk)
{
	unsigned char *given = malloc(n ? n : 1);
	if (!given)
		die("out of memory");
	for (size_t k = 0; k < nk; k++) {
		uint64_t x = h(ks[k].bytes, ks[k].len);
		size_t count = 0;
		int64_t first = owner[x % m];
		memset(given, 0, n ? n : 1);
		if (first >= 0) {
			give((size_t)first, given, &count);
			for (uint64_t j = 1; j <= 64 && count < 16; j++) {
				int64_t o = owner[probe_slot(mix64(x + j * GOLDEN64), m)];
				if (!given[o])
					give((size_t)o, given, &count);
			}
			for (size_t d = 1; d < n; d++) {
				size_t i = ((size_t)first + d) % n;
				if (!given[i] && (!weighted || bs[i].weight > 0))
					give(i, given, &count);
			}
		}
		putchar('\n');
	}
	free(given);
	return 0;
}

/* ---- the ring ---- */

struct point {
	uint64_t pos;
	size_t backend;
	uint64_t j;
};

static int cmp_point(const void *a, const void *b)
{
	const struct point *x = a, *y = b;
	if (x->pos != y->pos)
		return x->pos < y->pos ? -1 : 1;
	if (x->backend != y->backend)
		return x->backend < y->backend ? -1 : 1;
	if (x->j != y->j)
		return x->j < y->j ? -1 : 1;
	return 0;
}

/*
 * Prints the ring's points, or with keys (nk of them) every candidate of
 * each key, one line a key.
 */
static int run_ring(hash_fn h, uint64_t vnodes, const struct backend *bs, size_t n,
		    const struct key *ks, size_t nk)
{
	size_t np = n * (size_t)vnodes, k = 0;
	struct point *pts = malloc((np ? np : 1) * sizeof *pts);
	if (!pts)
		die("out of memory");
	for (size_t i = 0; i < n; i++) {
		unsigned char *buf = malloc(8 + bs[i].len);
		if (!buf)
			die("out of memory");
		memcpy(buf + 8, bs[i].name, bs[i].len);
		for (uint64_t j = 0; j < vnodes; j++) {
			for (int b = 0; b < 8; b++)
				buf[b] = (unsigned char)(j >> (8 * b));
			pts[k].pos = h(buf, 8 + bs[i].len);
			pts[k].backend = i;
			pts[k].j = j;
			k++;
		}
		free(buf);
	}
	qsort(pts, np, sizeof *pts, cmp_point);
	if (!ks) {
		for (k = 0; k < np; k++)
			printf("%016llx %zu %llu\n", (unsigned long long)pts[k].pos,
			       pts[k].backend, (unsigned long long)pts[k].j);
		free(pts);
		return 0;
	}
	unsigned char *given = malloc(n ? n : 1);
	if (!given)
		die("out of memory");
	for (size_t q = 0; q < nk; q++) {
		uint64_t x = h(ks[q].bytes, ks[q].len);
		size_t start = 0, count = 0;
		memset(given, 0, n ? n : 1);
		while (start < np && pts[start].pos < x)
			start++;
		if (start == np)
			start = 0; /* past the last point: wrap */
		for (size_t d = 0; d < np && count < n; d++) {
			size_t b = pts[(start + d) % np].backend;
			if (!given[b])
				give(b, given, &count);
		}
		putchar('\n');
	}
	free(given);
	free(pts);
	return 0;
}

/* -hashes HASHER: the hash of every line of stdin, given in hex. */
static int run_hashes(hash_fn h)
{
	char *line = NULL;
	size_t linecap = 0;
	ssize_t got;
	while ((got = getline(&line, &linecap, stdin)) != -1) {
		size_t len = (size_t)got;
		if (len > 0 && line[len - 1] == '\n')
			len--;
		len = unhex(line, len);
		printf("%016llx\n", (unsigned long long)h((const unsigned char *)line, len));
	}
	free(line);
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: maglev_ref [-names] [-hex] [-weighted] [-perms] [-without LIST] HASHER M < names.txt\n"
		"       maglev_ref -ring [-hex] HASHER VNODES < names.txt\n"
		"       maglev_ref -candidates [-hex] [-weighted] [-without LIST] HASHER M KEYS < names.txt\n"
		"       maglev_ref -ring -candidates [-hex] HASHER VNODES KEYS < names.txt\n"
		"       maglev_ref -perm M NAME:OFFSET:SKIP ...\n"
		"       maglev_ref -hash HASHER STRING\n"
		"       maglev_ref -hashes HASHER < hex.txt\n");
	exit(2);
}

/* -perm M NAME:OFFSET:SKIP ...: fill from hand-set permutations. */
static int run_perm(int argc, char **argv)
{
	uint64_t m = parse_m(argv[0]);
	size_t n = (size_t)(argc - 1);
	struct backend *bs = calloc(n ? n : 1, sizeof *bs);
	if (!bs)
		die("out of memory");
	for (size_t i = 0; i < n; i++) {
		char *spec = argv[1 + i];
		char *c1 = strchr(spec, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c1 || !c2)
			die("-perm wants NAME:OFFSET:SKIP");
		*c1 = '\0';
		*c2 = '\0';
		bs[i].name = (unsigned char *)spec;
		bs[i].len = strlen(spec);
		bs[i].offset = parse_u64(c1 + 1);
		bs[i].skip = parse_u64(c2 + 1);
		if (bs[i].offset >= m || bs[i].skip < 1 || bs[i].skip >= m)
			die("-perm: want OFFSET in 0..M-1 and SKIP in 1..M-1");
	}
	int64_t *owner = malloc(m * sizeof *owner);
	if (!owner)
		die("out of memory");
	fill(bs, n, m, owner);
	print_names(bs, m, owner);
	return 0;
}

int main(int argc, char **argv)
{
	int names = 0, hex = 0, weighted = 0, perms = 0, ring = 0, candidates = 0;
	const char *without = NULL;
	int i = 1;

	if (argc >= 3 && strcmp(argv[1], "-perm") == 0)
		return run_perm(argc - 2, argv + 2);
	if (argc == 4 && strcmp(argv[1], "-hash") == 0) {
		hash_fn h = pick_hasher(argv[2]);
		printf("%016llx\n",
		       (unsigned long long)h((const unsigned char *)argv[3], strlen(argv[3])));
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "-hashes") == 0)
		return run_hashes(pick_hasher(argv[2]));
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "-names") == 0)
			names = 1;
		else if (strcmp(argv[i], "-hex") == 0)
			hex = 1;
		else if (strcmp(argv[i], "-weighted") == 0)
			weighted = 1;
		else if (strcmp(argv[i], "-perms") == 0)
			perms = 1;
		else if (strcmp(argv[i], "-ring") == 0)
			ring = 1;
		else if (strcmp(argv[i], "-candidates") == 0)
			candidates = 1;
		else if (strcmp(argv[i], "-without") == 0 && i + 1 < argc)
			without = argv[++i];
		else
			usage();
	}
	if (argc - i != 2 + candidates || (ring && (names || weighted || perms || without)) ||
	    (candidates && (names || perms)) || (perms && without))
		usage();
	hash_fn h = pick_hasher(argv[i]);
	struct key *ks = NULL;
	size_t nk = 0;
	if (candidates)
		ks = read_keys(argv[i + 2], &nk);

	size_t n;
	struct backend *bs = read_backends(stdin, &n, hex, weighted);
	if (n > 0)
		qsort(bs, n, sizeof *bs, cmp_backend);
	for (size_t k = 1; k < n; k++)
		if (cmp_backend(&bs[k - 1], &bs[k]) == 0)
			die("duplicate backend name");
	if (ring)
		return run_ring(h, parse_u64(argv[i + 1]), bs, n, ks, nk);

	uint64_t m = parse_m(argv[i + 1]);
	if (n > m)
		die("more backends than slots");
	for (size_t k = 0; k < n; k++) {
		bs[k].offset = hash_with_suffix(h, bs[k].name, bs[k].len, "|offset") % m;
		bs[k].skip = hash_with_suffix(h, bs[k].name, bs[k].len, "|skip") % (m - 1) + 1;
	}
	if (perms) {
		for (size_t k = 0; k < n; k++) {
			for (size_t b = 0; b < bs[k].len; b++)
				printf("%02x", bs[k].name[b]);
			printf(" %llu %llu\n", (unsigned long long)bs[k].offset,
			       (unsigned long long)bs[k].skip);
		}
		return 0;
	}

	int64_t *owner = malloc(m * sizeof *owner);
	if (!owner)
		die("out of memory");
	if (weighted)
		fill_weighted(bs, n, m, owner);
	else
		fill(bs, n, m, owner);
	if (without) {
		unsigned char *gone = calloc(n ? n : 1, 1);
		if (!gone)
			die("out of memory");
		parse_without(without, bs, n, gone);
		remove_backends(bs, n, m, owner, gone);
		weighted = 1; /* the removed backends are drained now */
		free(gone);
	}
	if (candidates)
		return run_candidates(h, bs, n, m, owner, weighted, ks, nk);
	if (names)
		print_names(bs, m, owner);
	else
		print_binary(m, owner);
	return 0;
}
