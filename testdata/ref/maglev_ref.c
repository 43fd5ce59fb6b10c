/*
 * maglev_ref: an independent C reference for the Maglev tables that
 * github.com/maglevlb/maglev builds. It follows the spec as plainly as it
 * can and shares no code with the Go package: the hash functions come from
 * the reference C/C++ libraries (libxxhash, and libfarmhash through
 * farm_fp64.cc when built with -DWITH_FARM).
 *
 * Usage:
 *   maglev_ref [-names] HASHER M < names.txt
 *       names.txt holds one backend name per line. Prints the table: by
 *       default each slot's owner index (in sorted order) as a little-endian
 *       uint32, M entries; with -names, the owners' names separated by
 *       spaces, then a newline.
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
	uint64_t next; /* how many of its preferences it has looked at */
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

/* Reads one name per line from f (a trailing "\n" is not part of a name). */
static struct backend *read_backends(FILE *f, size_t *count)
{
	struct backend *bs = NULL;
	size_t n = 0, cap = 0;
	char *line = NULL;
	size_t linecap = 0;
	ssize_t got;
	while ((got = getline(&line, &linecap, f)) != -1) {
		size_t len = (size_t)got;
		if (len > 0 && line[len - 1] == '\n')
			len--;
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

static void usage(void)
{
	fprintf(stderr,
		"usage: maglev_ref [-names] HASHER M < names.txt\n"
		"       maglev_ref -perm M NAME:OFFSET:SKIP ...\n"
		"       maglev_ref -hash HASHER STRING\n");
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
	int names = 0;
	int i = 1;

	if (argc >= 3 && strcmp(argv[1], "-perm") == 0)
		return run_perm(argc - 2, argv + 2);
	if (argc == 4 && strcmp(argv[1], "-hash") == 0) {
		hash_fn h = pick_hasher(argv[2]);
		printf("%016llx\n",
		       (unsigned long long)h((const unsigned char *)argv[3], strlen(argv[3])));
		return 0;
	}
	if (i < argc && strcmp(argv[i], "-names") == 0) {
		names = 1;
		i++;
	}
	if (argc - i != 2)
		usage();
	hash_fn h = pick_hasher(argv[i]);
	uint64_t m = parse_m(argv[i + 1]);
	if (m < 2)
		die("M must be at least 2");

	size_t n;
	struct backend *bs = read_backends(stdin, &n);
	if (n > m)
		die("more backends than slots");
	if (n > 0)
		qsort(bs, n, sizeof *bs, cmp_backend);
	for (size_t k = 1; k < n; k++)
		if (cmp_backend(&bs[k - 1], &bs[k]) == 0)
			die("duplicate backend name");

	for (size_t k = 0; k < n; k++) {
		bs[k].offset = hash_with_suffix(h, bs[k].name, bs[k].len, "|offset") % m;
		bs[k].skip = hash_with_suffix(h, bs[k].name, bs[k].len, "|skip") % (m - 1) + 1;
	}

	int64_t *owner = malloc(m * sizeof *owner);
	if (!owner)
		die("out of memory");
	fill(bs, n, m, owner);
	if (names)
		print_names(bs, m, owner);
	else
		print_binary(m, owner);
	return 0;
}
