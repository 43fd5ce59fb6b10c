package peers

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cilmaglev "github.com/cilium/cilium/pkg/maglev"
	"github.com/shirou/gopsutil/v3/mem"
	"github.com/zeebo/xxh3"
)

const (
	// lookupKeys is how many distinct keys the lookup benchmarks cycle
	// through: the first lookupKeys of the load keys.
	lookupKeys = 1024
	// loadKeys is how many keys the load and churn measurements route.
	loadKeys = 1_000_000
	// The keys are 16-character hex strings of the uint64s that PCG with
	// this fixed seed draws, the same for every peer and every run.
	keySeed1, keySeed2 = 12, 2016
)

// reportSizes are the backend counts of the report.
var reportSizes = []int{10, 100, 1000}

var (
	reportFlag   = flag.Bool("report", false, "run TestReport: benchmark every peer and print the markdown table")
	reportRounds = flag.Int("report.rounds", 8, "TestReport: interleaved rounds of benchmarks; the table shows medians")
	reportDoc    = flag.String("report.doc", "", "TestReport: replace the generated block of this markdown file instead of printing it")
	reportRaw    = flag.String("report.raw", "", "TestReport: also write every round's results to this file, in the format benchstat reads")
)

var (
	keysOnce sync.Once
	keysAll  []string
)

// randomKeys returns the loadKeys keys, generated once.
func randomKeys() []string {
	keysOnce.Do(func() {
		r := rand.New(rand.NewPCG(keySeed1, keySeed2))
		keysAll = make([]string, loadKeys)
		for i := range keysAll {
			keysAll[i] = fmt.Sprintf("%016x", r.Uint64())
		}
	})
	return keysAll
}

// benchBuild times build, which builds one peer's structure.
func benchBuild(b *testing.B, build func() any) {
	b.ReportAllocs()
	for b.Loop() {
		sinkBuilt = build()
	}
	sinkBuilt = nil
}

// benchName is the name of one of BenchmarkPeers' sub-benchmarks.
func benchName(op string, n int, impl string) string {
	return fmt.Sprintf("op=%s/N=%d/impl=%s", op, n, impl)
}

// BenchmarkPeers times building every peer's structure for N backends, and
// lookups in it (hashing included) of the same lookupKeys random keys.
func BenchmarkPeers(b *testing.B) {
	keys := randomKeys()[:lookupKeys]
	for _, n := range reportSizes {
		names := backendNames(n)
		for _, p := range peers {
			b.Run(benchName("build", n, p.impl), func(b *testing.B) {
				benchBuild(b, p.prepare(b, names))
			})
		}
		for _, p := range peers {
			if p.benchLookup == nil {
				continue
			}
			var s any // built once, on first use
			b.Run(benchName("lookup", n, p.impl), func(b *testing.B) {
				if s == nil {
					s = p.prepare(b, names)()
				}
				p.benchLookup(b, s, keys)
			})
		}
	}
}

// keptBytes builds a structure and returns it with the growth of the live
// heap across the build: HeapAlloc after a full GC with the structure
// reachable, less HeapAlloc after a full GC before the build. Each GC runs
// twice, so that sync.Pool's victim caches are empty both times.
func keptBytes(build func() any) (int64, any) {
	sinkBuilt = nil
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := build()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	// build may hold the peer's prepared input (Cilium's backend map);
	// keep it alive so that freeing it does not count against the build.
	runtime.KeepAlive(build)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), s
}

// assign routes keys with lookup and returns the index in names of the
// backend each goes to. It fails unless every key goes to one of names.
func assign(tb testing.TB, impl string, lookup func(string) string, names, keys []string) []int32 {
	tb.Helper()
	index := make(map[string]int32, len(names))
	for i, name := range names {
		index[name] = int32(i)
	}
	owners := make([]int32, len(keys))
	for i, k := range keys {
		name := lookup(k)
		j, ok := index[name]
		if !ok {
			tb.Fatalf("impl=%s/N=%d: key %q goes to %q, not one of the backends", impl, len(names), k, name)
		}
		owners[i] = j
	}
	return owners
}

// maxMean returns the largest number of keys any of n backends gets, over
// the mean, len(owners)/n.
func maxMean(owners []int32, n int) float64 {
	counts := make([]int, n)
	for _, o := range owners {
		counts[o]++
	}
	return float64(slices.Max(counts)) * float64(n) / float64(len(owners))
}

// moved returns the fraction of keys whose owner differs between a and b.
func moved(a, b []int32) float64 {
	k := 0
	for i := range a {
		if a[i] != b[i] {
			k++
		}
	}
	return float64(k) / float64(len(a))
}

// churn holds the owners of keys before and after a membership change.
type churn struct {
	base, joined, left []int32 // N backends; N+1 (names[N] joins); N-1 (names[N-1] leaves)
}

// route builds p for the first n of names (n ≥ 1 and n+1 ≤ len(names))
// and for one backend more and one less, and routes keys through each. It
// also returns the bytes the N-backend structure keeps (see keptBytes).
func route(tb testing.TB, p peer, names []string, n int, keys []string) (int64, churn) {
	tb.Helper()
	var c churn
	kept, s := keptBytes(p.prepare(tb, names[:n]))
	c.base = assign(tb, p.impl, p.lookup(s), names[:n], keys)
	s = nil
	c.joined = assign(tb, p.impl, p.lookup(p.prepare(tb, names[:n+1])()), names[:n+1], keys)
	if n > 1 {
		c.left = assign(tb, p.impl, p.lookup(p.prepare(tb, names[:n-1])()), names[:n-1], keys)
	}
	return kept, c
}

// ciliumBuffer returns the bytes of Cilium's package-level permutation
// buffer after building tables of m slots for up to n backends: Init
// allocates (m/100)·m uint64s on a machine with more than 8 GiB (none
// otherwise), and a build for more backends grows it to n·m, never shrinking.
func ciliumBuffer(n, m int) int64 {
	entries := int64(n) * int64(m)
	if vm, err := mem.VirtualMemory(); err == nil && vm != nil && vm.Total > 8<<30 {
		entries = max(entries, int64(m/100)*int64(m))
	}
	return 8 * entries
}

// row is one peer at one N in the report.
type row struct {
	impl                 string
	buildNs, buildB      []float64 // one per round
	lookupNs             []float64 // one per round; nil without a lookup
	lookupAllocs         string    // allocations a lookup makes, and their bytes
	kept, buffer         int64
	maxMean, join, leave float64
}

func TestReport(t *testing.T) {
	if !*reportFlag {
		t.Skip("run with -report to benchmark every peer and print the table")
	}
	// Unless -benchtime is given, time each benchmark for 200 ms, so that
	// the whole report takes a few minutes.
	benchtimeSet := false
	flag.Visit(func(f *flag.Flag) { benchtimeSet = benchtimeSet || f.Name == "test.benchtime" })
	if !benchtimeSet {
		if err := flag.Set("test.benchtime", "200ms"); err != nil {
			t.Fatal(err)
		}
	}
	if *reportRounds < 1 {
		t.Fatalf("-report.rounds %d, want at least 1", *reportRounds)
	}
	start, loadStart := time.Now(), loadAverage()
	keys := randomKeys()
	// rows[n][i] is peers[i] at N=n.
	rows := map[int][]*row{}
	floor := map[int]float64{}
	for _, n := range reportSizes {
		names := backendNames(n + 1)
		// Mod-N hashing of the same keys: not consistent, but as even as
		// hashing these keys can be, so it shows the sampling floor of
		// max/mean.
		modN := make([]int32, len(keys))
		for i, k := range keys {
			modN[i] = int32(xxh3.HashString(k) % uint64(n))
		}
		floor[n] = maxMean(modN, n)
		for _, p := range peers {
			kept, c := route(t, p, names, n, keys)
			r := &row{impl: p.impl, kept: kept, maxMean: maxMean(c.base, n), join: moved(c.base, c.joined), leave: moved(c.base, c.left)}
			if p.impl == "cilium" {
				r.buffer = ciliumBuffer(n, cilmaglev.DefaultTableSize)
			}
			rows[n] = append(rows[n], r)
			fmt.Fprintf(os.Stderr, "report: load and churn impl=%s N=%d done (%v)\n", p.impl, n, time.Since(start).Round(time.Second))
		}
	}

	var raw bytes.Buffer
	fmt.Fprintf(&raw, "goos: %s\ngoarch: %s\npkg: github.com/maglevlb/maglev/bench/peers\ncpu: %s\n", runtime.GOOS, runtime.GOARCH, cpuModel())
	lookup := randomKeys()[:lookupKeys]
	suffix := ""
	if p := runtime.GOMAXPROCS(0); p > 1 {
		suffix = fmt.Sprintf("-%d", p)
	}
	record := func(name string, res testing.BenchmarkResult) {
		if res.N == 0 {
			t.Fatalf("%s failed", name)
		}
		fmt.Fprintf(&raw, "BenchmarkPeers/%s%s\t%s\t%s\n", name, suffix, res.String(), res.MemString())
	}
	// Interleaved rounds: every benchmark once per round.
	for round := range *reportRounds {
		for _, n := range reportSizes {
			names := backendNames(n)
			for i, p := range peers {
				r := rows[n][i]
				res := testing.Benchmark(func(b *testing.B) { benchBuild(b, p.prepare(b, names)) })
				record(benchName("build", n, p.impl), res)
				r.buildNs = append(r.buildNs, float64(res.NsPerOp()))
				r.buildB = append(r.buildB, float64(res.AllocedBytesPerOp()))
				if p.benchLookup != nil {
					s := p.prepare(t, names)()
					res := testing.Benchmark(func(b *testing.B) { p.benchLookup(b, s, lookup) })
					record(benchName("lookup", n, p.impl), res)
					r.lookupNs = append(r.lookupNs, float64(res.T.Nanoseconds())/float64(res.N))
					r.lookupAllocs = fmt.Sprint(res.AllocsPerOp())
					if b := res.AllocedBytesPerOp(); b > 0 {
						r.lookupAllocs += fmt.Sprintf(" (%d B)", b)
					}
				}
			}
		}
		fmt.Fprintf(os.Stderr, "report: round %d/%d done (%v)\n", round+1, *reportRounds, time.Since(start).Round(time.Second))
	}
	if *reportRaw != "" {
		if err := os.WriteFile(*reportRaw, raw.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var md strings.Builder
	writeReport(&md, rows, floor, time.Since(start), loadStart, loadAverage())
	if *reportDoc == "" {
		fmt.Print(md.String())
		return
	}
	if err := replaceBlock(*reportDoc, md.String()); err != nil {
		t.Fatal(err)
	}
}

// The generated block of the markdown file starts and ends with these lines.
const (
	blockBegin = "<!-- BEGIN generated by TestReport; do not edit -->"
	blockEnd   = "<!-- END generated by TestReport -->"
)

// replaceBlock replaces the lines between blockBegin and blockEnd in the
// file with block.
func replaceBlock(file, block string) error {
	old, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	s := string(old)
	i, j := strings.Index(s, blockBegin+"\n"), strings.Index(s, blockEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q block", file, blockBegin, blockEnd)
	}
	s = s[:i+len(blockBegin)+1] + block + s[j:]
	return os.WriteFile(file, []byte(s), 0o644)
}

// writeReport writes the markdown table of rows, with the machine, the
// versions and the exact settings.
func writeReport(w *strings.Builder, rows map[int][]*row, floor map[int]float64, took time.Duration, loadStart, loadEnd string) {
	fmt.Fprintf(w, "Machine: %s, %d logical CPUs (GOMAXPROCS %d), %s %s/%s. ",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "Timings are medians of %d interleaved rounds of `testing.Benchmark` at `-benchtime %s`; the whole run took %v",
		*reportRounds, flag.Lookup("test.benchtime").Value, took.Round(time.Second))
	if loadStart != "" && loadEnd != "" {
		fmt.Fprintf(w, ", with a load average (1, 5, 15 min) of %s at the start and %s at the end", loadStart, loadEnd)
	}
	w.WriteString(".\n\n")

	w.WriteString("| N | impl | build | B/op | kept | lookup | lookup allocs | max/mean | moved on join | moved on leave |\n")
	w.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range reportSizes {
		fmt.Fprintf(w, "| %d | *ideal* | | | | | | %.3f (mod N) | %s (1/(N+1)) | %s (1/N) |\n",
			n, floor[n], pct(1/float64(n+1)), pct(1/float64(n)))
		for _, r := range rows[n] {
			kept := bytesString(float64(r.kept))
			if r.buffer > 0 {
				kept += " + " + bytesString(float64(r.buffer)) + " buffer"
			}
			lookup, allocs := "—", "—"
			if r.lookupNs != nil {
				lookup, allocs = nsString(median(r.lookupNs)), r.lookupAllocs
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %.3f | %s | %s |\n",
				n, r.impl, nsString(median(r.buildNs)), bytesString(median(r.buildB)), kept, lookup, allocs, r.maxMean, pct(r.join), pct(r.leave))
		}
	}

	w.WriteString("\nVersions (this module's go.mod):\n\n")
	for _, path := range []string{
		"github.com/cilium/cilium", "github.com/kkdai/maglev", "github.com/golang/groupcache",
		"github.com/serialx/hashring", "github.com/stathat/consistent", "github.com/dgryski/go-rendezvous",
		"github.com/dgryski/go-jump", "github.com/cespare/xxhash/v2", "github.com/zeebo/xxh3",
	} {
		fmt.Fprintf(w, "- `%s` %s\n", path, requiredVersion(path))
	}
	w.WriteString("- `github.com/maglevlb/maglev` from this checkout (`replace => ../..`)\n")
}

// requiredVersion returns the version of module path that this module's
// go.mod requires. (Test binaries carry no dependency build info.)
func requiredVersion(path string) string {
	data, err := os.ReadFile("go.mod")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	return "unknown"
}

// median returns the median of xs.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// sig3 formats x with three significant digits.
func sig3(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

// nsString formats a duration in nanoseconds.
func nsString(ns float64) string {
	switch {
	case ns >= 1e9:
		return sig3(ns/1e9) + " s"
	case ns >= 1e6:
		return sig3(ns/1e6) + " ms"
	case ns >= 1e3:
		return sig3(ns/1e3) + " µs"
	default:
		return sig3(ns) + " ns"
	}
}

// bytesString formats a byte count in binary units.
func bytesString(b float64) string {
	switch {
	case b >= 1<<30:
		return sig3(b/(1<<30)) + " GiB"
	case b >= 1<<20:
		return sig3(b/(1<<20)) + " MiB"
	case b >= 1<<10:
		return sig3(b/(1<<10)) + " KiB"
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}

// pct formats a fraction as a percentage.
func pct(f float64) string {
	if math.IsNaN(f) {
		return "—"
	}
	return fmt.Sprintf("%.2f%%", 100*f)
}

// loadAverage returns Linux's 1-, 5- and 15-minute load averages, or "".
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], ", ")
}

// cpuModel returns the CPU's model name as Linux reports it, or GOARCH.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
