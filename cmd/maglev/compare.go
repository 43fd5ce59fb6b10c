package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/maglevlb/maglev"
)

const compareHelp = `usage: maglev compare [-n backends | -backends file] [-k keys | -keys file]
                      [-add "name [weight]"] [-remove name] [-zipf s]
                      [-inflight C] [-balance-factor F] [-m size]
                      [-vnodes list] [-hash xxh3|farm|fnv1a] [-seed n]
                      [-keyseed n] [-weights list] [-json] [-svg file]

Compare builds Maglev tables and consistent-hash rings for the same N
backends and routes the same K keys through each. It prints one table with
a row per algorithm: Maglev with M slots and with about 10·M (the smallest
prime at or above 10·M, 655373 for the default M), and rings with 5 (the
seed's), 100 and 1000 points per backend (-vnodes). Columns:

	build        time to build for the N backends, the fastest of 3 builds
	memory       heap the built table or ring keeps (in use after GC); -json
	             also gives the bytes allocated while building (alloc_bytes)
	lookup       Lookup(key) time, hashing included, averaged over the
	             first 1,000,000 keys (all K if fewer)
	load/mean    each backend's share of the K keys over its fair share K/N:
	             the largest (max), the smallest (min) and their standard
	             deviation (sd)
	add          the fraction of the K keys whose backend changes when one
	             backend joins (moved), its ideal 1/(N+1), and the excess:
	             the fraction of keys that moved between backends present
	             both before and after, which an ideal scheme never moves
	remove       the same when one backend leaves; ideal 1/N
	fail         the same when that backend fails instead: it stays
	             configured, out of service. Maglev rows route around it
	             with Table.Without, which moves only its keys (excess 0);
	             a ring's failure is its removal. The ideal is remove's

Backends are named 10.0.0.1:80, 10.0.0.2:80, ...; the joining one is
backend N+1 and the leaving one is the first. Keys are synthetic client
addresses "198.51.a.b:port" drawn from a PCG seeded with -keyseed. Both
algorithms hash backend names and keys with the same -hash and -seed.

A line under the table gives the sampling noise floor: even a perfectly
uniform assignment of K random keys to N backends shows sd ≈ √(N/K), and
max and min about √(2·ln N)·√(N/K) away from 1. Smaller differences
between rows are noise; raise -k to resolve them.

With -weights w1,w2,... backend i gets weight w[i mod len(w)] (weight 0 is
drained): Maglev rows use maglev.NewWeighted, ring rows ring.NewWeighted
over the weights divided by their greatest common divisor g (vnodes·w/g
points a backend), fair
shares are K·w/Σw, and the ideal moves are the joining and the leaving
backend's share of the total weight.

Your own data:

	-backends file   one backend a line: a name, then optionally white
	                 space and a weight (0 to 4294967295, 1 if omitted).
	                 Everything from a # on is a comment; blank lines are
	                 ignored. Replaces -n and -weights; any weight given
	                 makes the run weighted, as -weights does.
	-keys file       one key a line, as it is (without "\n" or "\r\n");
	                 empty lines are skipped; "-" reads standard input.
	                 Replaces -k and -keyseed. The file is read once and
	                 streamed through every row, so it need not fit in
	                 memory; a key on many lines is a hot key.
	-add "name [w]"  the backend that joins, weight 1 if not given (by
	                 default backend N+1, or for -backends the first of
	                 10.0.0.1:80, 10.0.0.2:80, ... not in the file)
	-remove name     the backend that leaves (default the first)

An error in a file names the file and the line: an empty file, a
duplicate name, a bad weight, a line longer than 1 MiB.

-zipf s (s > 1; 0, the default, is uniform) makes the K requests follow a
Zipf(s) popularity over K synthetic keys: the key generated i-th is drawn
with probability proportional to 1/i^s (from a PCG seeded with -keyseed),
so the load columns show what hot keys do; the note under the table gives
the hottest key's share. The K keys are kept in memory.

Giving -inflight C or -balance-factor F adds a row for bounded loads,
"bounded F=1.25 C=64" at the defaults, beside the first Maglev row: that
row's table through bounded.New(t, F), F ≥ 1, which sends a request
to the first of its key's candidates that holds fewer than its capacity
ceil(F·L·w/Σw) of the L requests in flight. The requests are simulated
in stream order with a sliding window of C in flight (1 to 1048576):
request i is released just before request i+C is placed, so every pick
sees L = C, itself included (i+1 for the first C).
The row's lookup is an Acquire and a Release, hashing included; its
spilled column is the fraction of requests placed past their key's first
candidate; and its add and remove columns compare, request by request,
the simulation with the base backends to the same simulation with one
backend added or removed: moved is the fraction of requests that go to
another backend, excess those that move between backends that stayed.

-json prints the same numbers as JSON (fractions, not percentages). -svg
writes an SVG chart of every backend's load for each algorithm. While it
runs, compare shows progress on standard error if that is a terminal. The
defaults take a few seconds.

Exit status: 0 on success, 1 if a flag value or an input file is invalid
or output fails, 2 for a malformed command line.
`

// A compareConfig is what the flags of compare ask for, and, once checked,
// the backends and keys they name.
type compareConfig struct {
	n, k, m      int
	vnodes       []int
	hash         string
	seed         uint64
	keySeed      uint64
	weights      []uint32 // -weights; nil for unweighted or -backends
	h            maglev.Hasher
	backendsFile string  // -backends
	keysFile     string  // -keys
	add, remove  string  // -add and -remove
	zipf         float64 // -zipf; 0 for uniform keys
	factor       float64 // -balance-factor
	inflight     int     // -inflight

	set map[string]bool // the flags given on the command line

	// Filled in by check.
	backends []maglev.Backend // the base set, then the added backend last
	removed  int              // the index in backends of the removed one
	weighted bool             // a weight was given
	bounded  bool             // -inflight or -balance-factor was given: a bounded row
	keysName string           // the keys file in messages
}

// runCompare runs compare with the command line args and returns the exit
// status.
func runCompare(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	var c compareConfig
	fs.IntVar(&c.n, "n", 100, "number of backends `N`")
	fs.IntVar(&c.k, "k", 1_000_000, "number of keys `K`")
	fs.IntVar(&c.m, "m", maglev.DefaultSize, "Maglev table `size`, a prime; a second row uses the smallest prime ≥ 10·size")
	vnodes := fs.String("vnodes", "5,100,1000", "ring points per backend, a comma-separated `list`")
	fs.StringVar(&c.hash, "hash", "xxh3", "hash `function`: xxh3, farm or fnv1a")
	fs.Uint64Var(&c.seed, "seed", 0, "`seed` for -hash xxh3 (0 is unseeded XXH3)")
	fs.Uint64Var(&c.keySeed, "keyseed", 1, "`seed` of the synthetic keys")
	weights := fs.String("weights", "", "backend weights, a comma-separated `list` used in turn (default: unweighted)")
	fs.StringVar(&c.backendsFile, "backends", "", "read the backends from `file`: a name and an optional weight a line")
	fs.StringVar(&c.keysFile, "keys", "", "read the keys from `file`, one a line (- for standard input)")
	fs.StringVar(&c.add, "add", "", "the joining backend, \"`name` [weight]\" (default: backend N+1)")
	fs.StringVar(&c.remove, "remove", "", "the leaving backend's `name` (default: the first)")
	fs.Float64Var(&c.zipf, "zipf", 0, "Zipf exponent `s` > 1 of the keys' popularity (0: uniform)")
	fs.IntVar(&c.inflight, "inflight", 64, "requests in flight `C` of the bounded-loads row (giving it adds the row)")
	fs.Float64Var(&c.factor, "balance-factor", 1.25, "balance factor `F` ≥ 1 of the bounded-loads row (giving it adds the row)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	svg := fs.String("svg", "", "write a chart of per-backend load to `file`")
	if status := parseFlags(fs, args, compareHelp, stdout, stderr); status >= 0 {
		return status
	}
	c.set = make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	if err := c.check(*vnodes, *weights); err != nil {
		return reportError(stderr, err)
	}
	ks, closeKeys, err := c.openKeys(stdin)
	if err != nil {
		return reportError(stderr, err)
	}
	var p progress
	if isTerminal(stderr) {
		p.w = stderr
	}
	r, err := compare(&c, c.algorithms(), ks, &p)
	p.done()
	closeKeys()
	if err != nil {
		return reportError(stderr, err)
	}
	if *svg != "" {
		if err := os.WriteFile(*svg, []byte(chart(r)), 0o666); err != nil {
			return reportError(stderr, err)
		}
	}
	if *asJSON {
		err = writeJSON(stdout, r)
	} else {
		err = writeText(stdout, r)
	}
	if err != nil {
		return reportError(stderr, err)
	}
	return 0
}

// check validates c and fills in its lists, its hasher and its backends.
func (c *compareConfig) check(vnodes, weights string) error {
	var err error
	if c.h, err = hasherFor(c.hash, c.seed); err != nil {
		return err
	}
	if _, err := maglev.NewGenerator(c.m, c.h); err != nil {
		return fmt.Errorf("-m: %v", err)
	}
	for _, pair := range [][2]string{
		{"backends", "n"}, {"backends", "weights"},
		{"keys", "k"}, {"keys", "keyseed"}, {"keys", "zipf"},
	} {
		if c.set[pair[0]] && c.set[pair[1]] {
			return fmt.Errorf("-%s and -%s: give one or the other", pair[1], pair[0])
		}
	}
	if c.backendsFile == "" {
		if c.n < 2 {
			return fmt.Errorf("-n %d: want at least 2 backends", c.n)
		}
		if c.n+1 > c.m {
			return fmt.Errorf("-n %d: a table of -m %d slots holds at most %d backends, and compare adds one", c.n, c.m, c.m)
		}
	}
	if c.keysFile == "" && c.k < 1 {
		return fmt.Errorf("-k %d: want at least 1 key", c.k)
	}
	if c.zipf != 0 && !(c.zipf > 1 && !math.IsInf(c.zipf, 1)) {
		return fmt.Errorf("-zipf %v: want an exponent above 1, or 0 for uniform keys", c.zipf)
	}
	c.bounded = c.set["inflight"] || c.set["balance-factor"]
	if c.bounded && !(c.factor >= 1 && c.factor <= math.MaxFloat64) {
		return fmt.Errorf("-balance-factor %v: want a finite factor of at least 1", c.factor)
	}
	if c.bounded && (c.inflight < 1 || c.inflight > maxInflight) {
		return fmt.Errorf("-inflight %d: want from 1 to %d requests in flight", c.inflight, maxInflight)
	}
	for _, f := range strings.Split(vnodes, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return fmt.Errorf("-vnodes %q: want positive integers separated by commas", vnodes)
		}
		c.vnodes = append(c.vnodes, v)
	}
	if weights != "" {
		for _, f := range strings.Split(weights, ",") {
			w, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
			if err != nil {
				return fmt.Errorf("-weights %q: want integers from 0 to 4294967295 separated by commas", weights)
			}
			c.weights = append(c.weights, uint32(w))
		}
	}
	return c.checkBackends(weights)
}

// weight returns the weight of synthetic backend i.
func (c *compareConfig) weight(i int) uint32 {
	if c.weights == nil {
		return 1
	}
	return c.weights[i%len(c.weights)]
}

// gcdWeights returns the weights whose greatest common divisor divides the
// ring's points: the -weights list, or every compared backend's weight.
func (c *compareConfig) gcdWeights() []uint32 {
	if c.weights != nil {
		return c.weights
	}
	ws := make([]uint32, len(c.backends))
	for i, b := range c.backends {
		ws[i] = b.Weight
	}
	return ws
}

// checkBackends makes the backends: the base set from -backends or -n and
// -weights, the added one from -add (or the default) and the removed one
// from -remove (or the first). weights is the -weights flag, for errors.
func (c *compareConfig) checkBackends(weights string) error {
	l, source, err := c.baseBackends()
	if err != nil {
		return err
	}
	c.weighted = l.weighted
	added, err := c.addedBackend(l, source)
	if err != nil {
		return err
	}
	c.removed = 0
	if c.set["remove"] {
		if c.remove == "" {
			return fmt.Errorf("-remove %q: empty name", c.remove)
		}
		i := -1
		for j, b := range l.backends {
			if b.Name == c.remove {
				i = j
			}
		}
		if i < 0 {
			return fmt.Errorf("-remove %q: not one of %s", c.remove, source)
		}
		c.removed = i
	}
	c.backends = append(l.backends, added)

	// The backends that stay when one leaves must take the keys.
	for i, b := range l.backends {
		if i != c.removed && b.Weight != 0 {
			return nil
		}
	}
	gone := l.backends[c.removed].Name
	switch {
	case c.backendsFile != "":
		return fmt.Errorf("%s: every backend left after removing %q has weight 0", c.backendsFile, gone)
	case c.removed == 0:
		return fmt.Errorf("-weights %q: backends 2 to %d would all be drained", weights, c.n)
	}
	return fmt.Errorf("-weights %q: every backend left after removing %q would be drained", weights, gone)
}

// baseBackends returns the base set, from -backends or -n and -weights,
// and where their names are, for messages.
func (c *compareConfig) baseBackends() (*backendList, string, error) {
	if c.backendsFile == "" {
		l := &backendList{line: make(map[string]int, c.n), weighted: c.weights != nil}
		for i := range c.n {
			b := maglev.Backend{Name: backendName(i), Weight: c.weight(i)}
			l.backends = append(l.backends, b)
			l.line[b.Name] = 0
		}
		return l, fmt.Sprintf("the %d backends", c.n), nil
	}
	f, err := os.Open(c.backendsFile)
	if err != nil {
		return nil, "", err
	}
	l, err := readBackends(c.backendsFile, f)
	_ = f.Close() // read only: nothing to lose
	if err != nil {
		return nil, "", err
	}
	n := len(l.backends)
	if n < 2 {
		return nil, "", fmt.Errorf("%s: 1 backend: compare removes one, so give at least 2", c.backendsFile)
	}
	if n+1 > c.m {
		return nil, "", fmt.Errorf("%s: %d backends: a table of -m %d slots holds at most %d, and compare adds one", c.backendsFile, n, c.m, c.m)
	}
	return l, c.backendsFile, nil
}

// addedBackend returns the backend that joins the base set l: -add's, or
// the default, the first synthetic name not taken; source is where l's
// names are, for messages.
func (c *compareConfig) addedBackend(l *backendList, source string) (maglev.Backend, error) {
	n := len(l.backends)
	added := maglev.Backend{Name: backendName(n), Weight: c.weight(n)}
	if c.backendsFile != "" {
		// The first synthetic name not taken, among n+1 (distinct unless
		// there are more than 2^24 backends).
		added = maglev.Backend{Weight: 1}
		for i := n; i <= 2*n && added.Name == ""; i++ {
			if _, taken := l.line[backendName(i)]; !taken {
				added.Name = backendName(i)
			}
		}
		if added.Name == "" && !c.set["add"] {
			return added, fmt.Errorf("%s: no free name for the joining backend: give one with -add", c.backendsFile)
		}
	}
	if !c.set["add"] {
		return added, nil
	}
	b, hasWeight, err := parseBackend(c.add)
	if err != nil {
		return added, fmt.Errorf("-add %q: %v", c.add, err)
	}
	if line, taken := l.line[b.Name]; taken {
		if line > 0 {
			return added, fmt.Errorf("-add %q: already a backend (%s:%d)", b.Name, source, line)
		}
		return added, fmt.Errorf("-add %q: already one of %s", b.Name, source)
	}
	c.weighted = c.weighted || hasWeight
	return b, nil
}

// openKeys returns the stream of keys c asks for, and a function that
// releases it.
func (c *compareConfig) openKeys(stdin io.Reader) (keyStream, func(), error) {
	switch {
	case c.keysFile != "":
		c.keysName = c.keysFile
		if c.keysFile == "-" {
			c.keysName = "stdin"
		}
		return openKeys(c.keysFile, stdin)
	case c.zipf != 0:
		return newZipfKeys(c.k, c.keySeed, c.zipf), func() {}, nil
	}
	return newSynthKeys(c.k, c.keySeed), func() {}, nil
}
