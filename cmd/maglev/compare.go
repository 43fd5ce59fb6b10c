package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/ring"
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

// A report is the result of compare, as -json prints it.
type report struct {
	N          int      `json:"n"`
	K          int      `json:"k"`
	Hash       string   `json:"hash"`
	Seed       uint64   `json:"seed"`
	KeySeed    uint64   `json:"key_seed"`
	Weights    []uint32 `json:"weights,omitempty"`
	Added      string   `json:"added_backend"`
	Removed    string   `json:"removed_backend"`
	NoiseFloor float64  `json:"noise_floor"` // √(N/K)
	Go         string   `json:"go"`
	Platform   string   `json:"platform"`
	CPUs       int      `json:"cpus"`
	Rows       []result `json:"rows"`
}

// A result is one row of a report: one algorithm's measurements.
type result struct {
	Name        string  `json:"name"`
	Algorithm   string  `json:"algorithm"` // "maglev" or "ring"
	M           int     `json:"m,omitempty"`
	Vnodes      int     `json:"vnodes,omitempty"`
	BuildNs     int64   `json:"build_ns"`
	MemoryBytes int64   `json:"memory_bytes"`
	AllocBytes  uint64  `json:"alloc_bytes"`
	LookupNs    float64 `json:"lookup_ns"`
	LoadMax     float64 `json:"load_max_mean"`
	LoadMin     float64 `json:"load_min_mean"`
	LoadStddev  float64 `json:"load_stddev_mean"`
	Add         moves   `json:"add"`
	Remove      moves   `json:"remove"`

	loads []float64 // per-backend load over fair share, NaN if drained
}

// moves is the disruption of one membership change, as fractions of the
// keys.
type moves struct {
	Moved  float64 `json:"moved"`  // keys whose backend changed
	Ideal  float64 `json:"ideal"`  // the least that must move
	Excess float64 `json:"excess"` // keys moved between unchanged backends
}

// A lookuper is a built Maglev table or ring.
type lookuper interface {
	Lookup(key string) string
	LookupHash(h uint64) string
}

// An algorithm is one row of the comparison.
type algorithm struct {
	name   string
	kind   string // "maglev" or "ring"
	m      int
	vnodes int
	build  func(backends []maglev.Backend) (lookuper, error)
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

// algorithms returns the rows to compare.
func (c *compareConfig) algorithms() []algorithm {
	weighted := c.weights != nil
	var algs []algorithm
	for _, m := range []int{c.m, nextPrime(10 * c.m)} {
		if m > maglev.MaxSize {
			continue
		}
		algs = append(algs, algorithm{
			name: fmt.Sprintf("maglev M=%d", m), kind: "maglev", m: m,
			build: func(backends []maglev.Backend) (lookuper, error) {
				if weighted {
					return maglev.NewWeighted(backends, m, c.h)
				}
				return maglev.New(names(backends), m, c.h)
			},
		})
	}
	g := uint32(0)
	for _, w := range c.weights {
		g = gcd(g, w)
	}
	for _, v := range c.vnodes {
		algs = append(algs, algorithm{
			name: fmt.Sprintf("ring vnodes=%d", v), kind: "ring", vnodes: v,
			build: func(backends []maglev.Backend) (lookuper, error) {
				if weighted {
					return weightedRing(backends, v, g, c.h)
				}
				return ring.New(names(backends), v, c.h)
			},
		})
	}
	return algs
}

// weightedRing builds a ring where each backend has vnodes·w/g points,
// placed where ring.New places them: point j of backend name at
// H(le64(j) + name). Drained backends have no points.
func weightedRing(backends []maglev.Backend, vnodes int, g uint32, h maglev.Hasher) (lookuper, error) {
	positions := make(map[string][]uint64, len(backends))
	total := 0
	for _, b := range backends {
		if b.Weight == 0 {
			continue
		}
		n := uint64(vnodes) * uint64(b.Weight/g)
		if total += int(min(n, ring.MaxPoints+1)); total > ring.MaxPoints {
			return nil, fmt.Errorf("%w: vnodes %d times the weights", ring.ErrTooManyPoints, vnodes)
		}
		pos := make([]uint64, n)
		buf := append(make([]byte, 8, 8+len(b.Name)), b.Name...)
		for j := range pos {
			binary.LittleEndian.PutUint64(buf, uint64(j))
			pos[j] = h.Hash(buf)
		}
		positions[b.Name] = pos
	}
	return ring.NewWithPositions(positions, h)
}

func names(backends []maglev.Backend) []string {
	s := make([]string, len(backends))
	for i, b := range backends {
		s[i] = b.Name
	}
	return s
}

func gcd(a, b uint32) uint32 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// nextPrime returns the smallest prime at or above n.
func nextPrime(n int) int {
	for !big.NewInt(int64(n)).ProbablyPrime(0) { // exact below 2^64
		n++
	}
	return n
}

// backendName returns the name of backend i, counting from 0.
func backendName(i int) string {
	x := i + 1
	return fmt.Sprintf("10.%d.%d.%d:80", x>>16&255, x>>8&255, x&255)
}

// keys returns k synthetic client addresses drawn from a PCG seeded with
// seed.
func keys(k int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 0))
	ks := make([]string, k)
	var buf []byte
	for i := range ks {
		buf = append(buf[:0], "198.51."...)
		buf = strconv.AppendUint(buf, r.Uint64N(256), 10)
		buf = append(buf, '.')
		buf = strconv.AppendUint(buf, r.Uint64N(256), 10)
		buf = append(buf, ':')
		buf = strconv.AppendUint(buf, 1024+r.Uint64N(65536-1024), 10)
		ks[i] = string(buf)
	}
	return ks
}

// compare runs the comparison c asks for.
func compare(c *compareConfig, p *progress) (*report, error) {
	// Backend i is backends[i]; the base set is the first n, the added
	// backend is n, and the removed one is 0.
	backends := make([]maglev.Backend, c.n+1)
	index := make(map[string]int32, c.n+1)
	for i := range backends {
		backends[i] = maglev.Backend{Name: backendName(i), Weight: c.weight(i)}
		index[backends[i].Name] = int32(i)
	}
	base, added, removed := backends[:c.n], backends, backends[1:c.n]
	var total uint64
	for _, b := range base {
		total += uint64(b.Weight)
	}
	r := &report{
		N: c.n, K: c.k, Hash: c.hash, Seed: c.seed, KeySeed: c.keySeed, Weights: c.weights,
		Added:      backends[c.n].Name,
		Removed:    backends[0].Name,
		NoiseFloor: math.Sqrt(float64(c.n) / float64(c.k)),
		Go:         runtime.Version(),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
		CPUs:       runtime.NumCPU(),
	}
	addIdeal := float64(backends[c.n].Weight) / float64(total+uint64(backends[c.n].Weight))
	removeIdeal := float64(backends[0].Weight) / float64(total)
	if c.weights == nil {
		addIdeal, removeIdeal = 1/float64(c.n+1), 1/float64(c.n)
	}

	p.say("generating %d keys", c.k)
	ks := keys(c.k, c.keySeed)
	hashes := make([]uint64, len(ks))
	for i, k := range ks {
		hashes[i] = c.h.HashString(k)
	}
	before := make([]int32, len(ks))
	after := make([]int32, len(ks))
	for _, alg := range c.algorithms() {
		res := result{Name: alg.name, Algorithm: alg.kind, M: alg.m, Vnodes: alg.vnodes}

		p.say("%s: building", alg.name)
		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		var l lookuper
		for i := range 3 {
			start := time.Now()
			li, err := alg.build(base)
			d := time.Since(start)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", alg.name, err)
			}
			if i == 0 {
				runtime.ReadMemStats(&ms1)
				res.AllocBytes = ms1.TotalAlloc - ms0.TotalAlloc
				res.BuildNs = d.Nanoseconds()
				l = li
			}
			res.BuildNs = min(res.BuildNs, d.Nanoseconds())
		}
		runtime.GC()
		runtime.ReadMemStats(&ms1)
		res.MemoryBytes = int64(ms1.HeapAlloc) - int64(ms0.HeapAlloc)

		p.say("%s: timing lookups", alg.name)
		res.LookupNs = timeLookups(l, ks)
		runtime.KeepAlive(l)

		p.say("%s: measuring load", alg.name)
		owners(before, l, hashes, index)
		res.loads = loads(before, backends[:c.n], total, c.k)
		res.LoadMax, res.LoadMin, res.LoadStddev = loadStats(res.loads)

		p.say("%s: adding a backend", alg.name)
		res.Add.Ideal = addIdeal
		if err := diff(&res.Add, alg, added, before, after, hashes, index, int32(c.n)); err != nil {
			return nil, err
		}
		p.say("%s: removing a backend", alg.name)
		res.Remove.Ideal = removeIdeal
		if err := diff(&res.Remove, alg, removed, before, after, hashes, index, 0); err != nil {
			return nil, err
		}
		r.Rows = append(r.Rows, res)
	}
	return r, nil
}

// timeLookups returns the average time of l.Lookup over ks, in
// nanoseconds, from passes over ks that take at least 100ms in all (or 10
// passes).
func timeLookups(l lookuper, ks []string) float64 {
	n := 0
	start := time.Now()
	for passes := 1; ; passes++ {
		for _, k := range ks {
			n += len(l.Lookup(k))
		}
		if d := time.Since(start); d >= 100*time.Millisecond || passes == 10 {
			runtime.KeepAlive(n) // the lookups' results are used
			return float64(d.Nanoseconds()) / float64(passes*len(ks))
		}
	}
}

// owners sets dst[i] to the index of the backend that owns hashes[i] in l.
func owners(dst []int32, l lookuper, hashes []uint64, index map[string]int32) {
	for i, h := range hashes {
		dst[i] = index[l.LookupHash(h)]
	}
}

// loads returns each backend's count of keys in owners over its fair share
// of k keys, K·w/total; NaN for a drained backend.
func loads(owners []int32, backends []maglev.Backend, total uint64, k int) []float64 {
	counts := make([]int, len(backends))
	for _, o := range owners {
		counts[o]++
	}
	ls := make([]float64, len(backends))
	for i, b := range backends {
		ls[i] = math.NaN()
		if b.Weight > 0 {
			ls[i] = float64(counts[i]) / (float64(k) * float64(b.Weight) / float64(total))
		}
	}
	return ls
}

// loadStats returns the largest and smallest of loads and their standard
// deviation, ignoring NaNs.
func loadStats(loads []float64) (hi, lo, sd float64) {
	hi, lo = math.Inf(-1), math.Inf(1)
	var sum, sum2 float64
	n := 0
	for _, x := range loads {
		if math.IsNaN(x) {
			continue
		}
		hi, lo = max(hi, x), min(lo, x)
		sum += x
		sum2 += x * x
		n++
	}
	mean := sum / float64(n)
	return hi, lo, math.Sqrt(max(0, sum2/float64(n)-mean*mean))
}

// diff builds alg for backends and sets mv's Moved and Excess from the keys
// whose owner differs from before: every one that moved, and those that
// neither left nor joined backend changed.
func diff(mv *moves, alg algorithm, backends []maglev.Backend, before, after []int32, hashes []uint64, index map[string]int32, changed int32) error {
	l, err := alg.build(backends)
	if err != nil {
		return fmt.Errorf("%s: %v", alg.name, err)
	}
	owners(after, l, hashes, index)
	moved, excess := 0, 0
	for i, b := range before {
		if a := after[i]; a != b {
			moved++
			if a != changed && b != changed {
				excess++
			}
		}
	}
	mv.Moved = float64(moved) / float64(len(hashes))
	mv.Excess = float64(excess) / float64(len(hashes))
	return nil
}

// writeText writes r as an aligned table with notes.
func writeText(w io.Writer, r *report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "N=%d backends, K=%s keys, hash %s", r.N, thousands(r.K), hasherName(r.Hash, r.Seed))
	if r.Weights != nil {
		fmt.Fprintf(&b, ", weights %s", joinUints(r.Weights))
	}
	fmt.Fprintf(&b, "; %s %s, %d CPUs\n\n", r.Go, r.Platform, r.CPUs)

	header := []string{"algorithm", "build", "memory", "lookup", "max", "min", "sd", "moved", "ideal", "excess", "moved", "ideal", "excess"}
	groups := []group{
		{"load/mean", 4, 6},
		{"add " + r.Added, 7, 9},
		{"remove " + r.Removed, 10, 12},
	}
	rows := [][]string{header}
	for _, res := range r.Rows {
		rows = append(rows, []string{
			res.Name,
			duration(res.BuildNs),
			bytesize(res.MemoryBytes),
			fmt.Sprintf("%.1f ns", res.LookupNs),
			fmt.Sprintf("%.3f", res.LoadMax),
			fmt.Sprintf("%.3f", res.LoadMin),
			fmt.Sprintf("%.3f", res.LoadStddev),
			percent(res.Add.Moved), percent(res.Add.Ideal), percent(res.Add.Excess),
			percent(res.Remove.Moved), percent(res.Remove.Ideal), percent(res.Remove.Excess),
		})
	}
	writeTable(&b, groups, rows)

	spread := math.Sqrt(2*math.Log(float64(r.N))) * r.NoiseFloor
	fmt.Fprintf(&b, "\nNoise floor: with K=%s random keys, even a perfectly uniform assignment to N=%d\n", thousands(r.K), r.N)
	fmt.Fprintf(&b, "backends shows sd ≈ √(N/K) = %.3f and max, min about %.3f from 1; moved fractions\n", r.NoiseFloor, spread)
	fmt.Fprintf(&b, "are ±%s. Smaller differences between rows are sampling noise.\n",
		percent(math.Sqrt(1/(float64(r.N)*float64(r.K)))))
	b.WriteString("build: fastest of 3; memory: heap kept by the built value; lookup: Lookup(key) with hashing;\n")
	b.WriteString("load/mean: keys per backend over the fair share; moved: fraction of keys whose backend\n")
	b.WriteString("changes; excess: keys moved between backends that stayed. \"maglev compare -h\" explains.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// A group is a label over columns first..last of a table.
type group struct {
	label       string
	first, last int
}

// writeTable writes rows as columns separated by two spaces, the first
// left-aligned and the others right-aligned, under a line of group labels.
func writeTable(b *strings.Builder, groups []group, rows [][]string) {
	const gap = 2
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for c, cell := range row {
			widths[c] = max(widths[c], len([]rune(cell)))
		}
	}
	for _, g := range groups {
		span := -gap
		for c := g.first; c <= g.last; c++ {
			span += widths[c] + gap
		}
		if extra := len([]rune(g.label)) - span; extra > 0 {
			widths[g.last] += extra
		}
	}
	// The group line: each label centred over its columns.
	var line strings.Builder
	col := 0
	for _, g := range groups {
		start, span := 0, -gap
		for c := range g.first {
			start += widths[c] + gap
		}
		for c := g.first; c <= g.last; c++ {
			span += widths[c] + gap
		}
		pad := (span - len([]rune(g.label))) / 2
		line.WriteString(strings.Repeat(" ", start+pad-col))
		line.WriteString(g.label)
		col = start + pad + len([]rune(g.label))
	}
	b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	for _, row := range rows {
		var line strings.Builder
		for c, cell := range row {
			pad := strings.Repeat(" ", widths[c]-len([]rune(cell)))
			switch {
			case c == 0:
				line.WriteString(cell + pad)
			default:
				line.WriteString(strings.Repeat(" ", gap) + pad + cell)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

func percent(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }

// duration formats ns with three significant digits.
func duration(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// bytesize formats n bytes in KiB or MiB.
func bytesize(n int64) string {
	switch {
	case n >= 10<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 10<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
}

// thousands formats n with commas between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func joinUints(ws []uint32) string {
	s := make([]string, len(ws))
	for i, w := range ws {
		s[i] = strconv.FormatUint(uint64(w), 10)
	}
	return strings.Join(s, ",")
}

// A progress reports what compare is doing on one line of a terminal. The
// zero value, with no writer, says nothing.
type progress struct {
	w     io.Writer
	start time.Time
}

func (p *progress) say(format string, args ...any) {
	if p.w == nil {
		return
	}
	if p.start.IsZero() {
		p.start = time.Now()
	}
	fmt.Fprintf(p.w, "\r\x1b[K%5.1fs  %s", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

func (p *progress) done() {
	if p.w != nil {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
