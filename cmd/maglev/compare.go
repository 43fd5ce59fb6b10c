package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/maglevlb/maglev"
)

const compareHelp = `usage: maglev compare [-n backends] [-k keys] [-m size] [-vnodes list]
                      [-hash xxh3|farm|fnv1a] [-seed n] [-keyseed n]
                      [-weights list] [-json] [-svg file]

Compare builds Maglev tables and consistent-hash rings for the same N
backends and routes the same K keys through each. It prints one table with
a row per algorithm: Maglev with M slots and with about 10·M (the smallest
prime at or above 10·M, 655373 for the default M), and rings with 5 (the
seed's), 100 and 1000 points per backend (-vnodes). Columns:

	build        time to build for the N backends, the fastest of 3 builds
	memory       heap the built table or ring keeps (in use after GC); -json
	             also gives the bytes allocated while building (alloc_bytes)
	lookup       Lookup(key) time, hashing included, averaged over the K keys
	load/mean    each backend's share of the K keys over its fair share K/N:
	             the largest (max), the smallest (min) and their standard
	             deviation (sd)
	add          the fraction of the K keys whose backend changes when one
	             backend joins (moved), its ideal 1/(N+1), and the excess:
	             the fraction of keys that moved between backends present
	             both before and after, which an ideal scheme never moves
	remove       the same when one backend leaves; ideal 1/N

Backends are named 10.0.0.1:80, 10.0.0.2:80, ...; the joining one is
backend N+1 and the leaving one is the first. Keys are synthetic client
addresses "198.51.a.b:port" drawn from a PCG seeded with -keyseed. Both
algorithms hash backend names and keys with the same -hash and -seed.

A line under the table gives the sampling noise floor: even a perfectly
uniform assignment of K random keys to N backends shows sd ≈ √(N/K), and
max and min about √(2·ln N)·√(N/K) away from 1. Smaller differences
between rows are noise; raise -k to resolve them.

With -weights w1,w2,... backend i gets weight w[i mod len(w)] (weight 0 is
drained): Maglev rows use maglev.NewWeighted, ring rows give each backend
vnodes·w/g points (g the greatest common divisor of the weights), fair
shares are K·w/Σw, and the ideal moves are the joining and the leaving
backend's share of the total weight.

-json prints the same numbers as JSON (fractions, not percentages). -svg
writes an SVG chart of every backend's load for each algorithm. While it
runs, compare shows progress on standard error if that is a terminal. The
defaults take a few seconds.

Exit status: 0 on success, 1 if a flag value is invalid or output fails,
2 for a malformed command line.
`

// A compareConfig is what the flags of compare ask for.
type compareConfig struct {
	n, k, m int
	vnodes  []int
	hash    string
	seed    uint64
	keySeed uint64
	weights []uint32 // nil for unweighted
	h       maglev.Hasher
}

func runCompare(args []string, stdout, stderr io.Writer) int {
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
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	svg := fs.String("svg", "", "write a chart of per-backend load to `file`")
	if status := parseFlags(fs, args, compareHelp, stdout, stderr); status >= 0 {
		return status
	}
	if err := c.check(*vnodes, *weights); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	var p progress
	if isTerminal(stderr) {
		p.w = stderr
	}
	r, err := compare(&c, &p)
	p.done()
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	if *svg != "" {
		if err := os.WriteFile(*svg, []byte(chart(r)), 0o666); err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return 1
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	} else {
		err = writeText(stdout, r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	return 0
}

// check validates c and fills in its lists and hasher.
func (c *compareConfig) check(vnodes, weights string) error {
	var err error
	if c.h, err = hasherFor(c.hash, c.seed); err != nil {
		return err
	}
	if _, err := maglev.NewGenerator(c.m, c.h); err != nil {
		return fmt.Errorf("-m: %v", err)
	}
	if c.n < 2 {
		return fmt.Errorf("-n %d: want at least 2 backends", c.n)
	}
	if c.n+1 > c.m {
		return fmt.Errorf("-n %d: a table of -m %d slots holds at most %d backends, and compare adds one", c.n, c.m, c.m)
	}
	if c.k < 1 {
		return fmt.Errorf("-k %d: want at least 1 key", c.k)
	}
	for _, f := range strings.Split(vnodes, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return fmt.Errorf("-vnodes %q: want positive integers separated by commas", vnodes)
		}
		c.vnodes = append(c.vnodes, v)
	}
	if weights == "" {
		return nil
	}
	for _, f := range strings.Split(weights, ",") {
		w, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return fmt.Errorf("-weights %q: want integers from 0 to 4294967295 separated by commas", weights)
		}
		c.weights = append(c.weights, uint32(w))
	}
	// Backends 1..n-1 stay when backend 0 leaves: one must take keys.
	for i := 1; i < c.n; i++ {
		if c.weight(i) != 0 {
			return nil
		}
	}
	return fmt.Errorf("-weights %q: backends 2 to %d would all be drained", weights, c.n)
}

// weight returns the weight of backend i.
func (c *compareConfig) weight(i int) uint32 {
	if c.weights == nil {
		return 1
	}
	return c.weights[i%len(c.weights)]
}
