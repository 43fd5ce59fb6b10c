package maglev

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// slowCandidates is the candidate order of Candidates written out plainly,
// from its documentation: it reads owners through LookupHashIndex, computes
// every probe's slot with math/big, dedups with a map, and finds the
// slot-owning backends by counting slots. It returns the whole order.
func slowCandidates(t *Table, h uint64) []int {
	return slowOrder(t, t.Counts(), h)
}

// slowOrder is slowCandidates with the table's slot counts given.
func slowOrder(t *Table, counts []int, h uint64) []int {
	m := uint64(t.Size())
	if !slices.ContainsFunc(counts, func(c int) bool { return c > 0 }) {
		return nil
	}
	seen := map[int]bool{}
	var out []int
	add := func(i int) {
		if !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	first := t.LookupHashIndex(uint64(int(h % m)))
	add(first)
	bigM := new(big.Int).SetUint64(m)
	for j := uint64(1); j <= 64 && len(out) < 16; j++ {
		z := h + j*0x9e3779b97f4a7c15
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		slot := new(big.Int).Mul(new(big.Int).SetUint64(z), bigM)
		add(t.LookupHashIndex(slot.Rsh(slot, 64).Uint64()))
	}
	n := t.NumBackends()
	for d := 1; d < n; d++ {
		if i := (first + d) % n; counts[i] > 0 {
			add(i)
		}
	}
	return out
}

// collect returns the first k candidates of h (all of them for k < 0).
func collect(t *Table, h uint64, k int) []int {
	var out []int
	if k == 0 {
		return out
	}
	for i := range t.CandidatesHash(h) {
		out = append(out, i)
		if len(out) == k {
			break
		}
	}
	return out
}

// candidateTables are tables of every shape the order treats differently:
// tiny M, N = M, one backend, fewer and more backends than the walk finds,
// weights with drained backends and with one backend owning nearly every
// slot, and both slot widths' code paths through owner.
func candidateTables(t testing.TB) map[string]*Table {
	r := rand.New(rand.NewPCG(1, 2))
	tabs := map[string]*Table{
		"one":         mustNew(t, []string{"a"}, 7, nil),
		"M=2/N=2":     mustNew(t, names("b", 2), 2, nil),
		"M=7/N=3":     mustNew(t, names("b", 3), 7, nil),
		"M=7/N=7":     mustNew(t, names("b", 7), 7, nil),
		"M=1009/N=5":  mustNew(t, names("b", 5), 1009, FNV1a()),
		"N=16":        mustNew(t, names("b", 16), 1009, Farm()),
		"N=17":        mustNew(t, names("b", 17), 1009, nil),
		"N=100":       mustNew(t, names("b", 100), 4099, XXH3Seed(7)),
		"N=1009":      mustNew(t, names("b", 1009), 1009, nil),
		"drained":     mustWeighted(t, weighted(0, 3, 0, 1, 2, 0, 5), 1009, nil),
		"skewed":      mustWeighted(t, weighted(1000, 1, 1, 1), 1009, nil),
		"weighted40":  mustWeighted(t, goldenWeights(40), 2003, nil),
		"all-drained": mustWeighted(t, weighted(0, 0), 7, nil),
		"empty":       mustNew(t, nil, 7, nil),
	}
	for i := range 4 {
		n := 1 + r.IntN(60)
		m := smallPrimes[r.IntN(len(smallPrimes))]
		if n > m {
			n = m
		}
		bs := make([]Backend, n)
		for j := range bs {
			bs[j] = Backend{fmt.Sprintf("r%d", j), uint32(r.IntN(4))}
		}
		tabs[fmt.Sprintf("random%d/M=%d/N=%d", i, m, n)] = mustWeighted(t, bs, m, nil)
	}
	return tabs
}

// TestCandidatesReference compares the order with slowCandidates, in full
// and cut short, for many key hashes on every shape of table.
func TestCandidatesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for name, tab := range candidateTables(t) {
		counts := tab.Counts()
		for range 300 {
			h := r.Uint64()
			want := slowOrder(tab, counts, h)
			if got := collect(tab, h, -1); !slices.Equal(got, want) {
				t.Fatalf("%s: h=%#x: candidates %v, want %v", name, h, got, want)
			}
			k := r.IntN(len(want) + 1)
			if got := collect(tab, h, k); !slices.Equal(got, want[:k]) {
				t.Fatalf("%s: h=%#x: first %d candidates %v, want %v", name, h, k, got, want[:k])
			}
		}
	}
}

// TestCandidatesProperties checks the order's promises directly: the first
// candidate is LookupIndex, every slot owner appears exactly once, and no
// drained backend appears.
func TestCandidatesProperties(t *testing.T) {
	for name, tab := range candidateTables(t) {
		counts := tab.Counts()
		owning := 0
		for _, c := range counts {
			if c > 0 {
				owning++
			}
		}
		for k := range 200 {
			key := fmt.Sprint("key", k)
			got := slices.Collect(tab.Candidates(key))
			if fromBytes := slices.Collect(tab.CandidatesBytes([]byte(key))); !slices.Equal(fromBytes, got) {
				t.Fatalf("%s: CandidatesBytes(%q) = %v, Candidates %v", name, key, fromBytes, got)
			}
			if owning == 0 {
				if len(got) != 0 {
					t.Fatalf("%s: table without slot owners yields %v", name, got)
				}
				continue
			}
			if got[0] != tab.LookupIndex(key) {
				t.Fatalf("%s: first candidate of %q is %d, LookupIndex %d", name, key, got[0], tab.LookupIndex(key))
			}
			if len(got) != owning {
				t.Fatalf("%s: %q has %d candidates, want %d", name, key, len(got), owning)
			}
			seen := make([]bool, tab.NumBackends())
			for _, i := range got {
				switch {
				case seen[i]:
					t.Fatalf("%s: %q: backend %d appears twice in %v", name, key, i, got)
				case counts[i] == 0:
					t.Fatalf("%s: %q: backend %d owns no slot but appears", name, key, i)
				}
				seen[i] = true
			}
		}
	}
}

// TestCandidatesStop checks that breaking out of the loop stops the
// iterator at once, at every point of the order.
func TestCandidatesStop(t *testing.T) {
	tab := mustWeighted(t, goldenWeights(40), 2003, nil)
	for h := range uint64(50) {
		all := collect(tab, h, -1)
		for k := 1; k <= len(all); k++ {
			calls := 0
			for range tab.CandidatesHash(h) {
				if calls++; calls == k {
					break
				}
			}
			if calls != k {
				t.Fatalf("h=%d: loop body ran %d times after a break at %d", h, calls, k)
			}
		}
	}
}

// secondChoiceSpread measures, for the keys whose first candidate is
// backend a, how their second candidates spread over the other slot owners
// against the share promised, count_j / (M − count_a), for keys hashed by
// a fixed random source. It returns the chi-square statistic, its degrees
// of freedom, and the largest relative deviation of a backend's observed
// count from its expected count.
func secondChoiceSpread(tab *Table, a, keys int) (chi2 float64, df int, maxDev float64) {
	r := rand.New(rand.NewPCG(1, 2))
	counts := tab.Counts()
	m := tab.Size()
	got := make([]int, tab.NumBackends())
	total := 0
	for total < keys {
		h := r.Uint64()
		if tab.LookupHashIndex(h) != a {
			continue
		}
		c := collect(tab, h, 2)
		got[c[1]]++
		total++
	}
	for j, c := range counts {
		if j == a || c == 0 {
			continue
		}
		want := float64(total) * float64(c) / float64(m-counts[a])
		d := float64(got[j]) - want
		chi2 += d * d / want
		df++
		maxDev = max(maxDev, math.Abs(d)/want)
	}
	return chi2, df - 1, maxDev
}

// spreadKeys is the number of keys per case of TestCandidatesSpread.
var spreadKeys = flag.Int("spread.keys", 20000, "keys per case of TestCandidatesSpread")

// TestCandidatesSpread checks that second choices follow slot counts: for
// keys first owned by one backend, the chi-square statistic of their second
// choices against count_j / (M − count_a) stays within df + 5·√(2·df),
// five standard deviations above its expectation df, at N = 10 and 100,
// weighted (weights 1 to 4) and not. The largest relative deviation of a
// backend's count from its expected count is bounded by 4.5 standard
// deviations of the smallest expected count (keys · 0.4/N, for weight 1
// against the mean weight 2.5): 1/√(that count) is one. With -v it logs
// the figures docs/hotkeys.md quotes; -spread.keys sets the keys per case.
func TestCandidatesSpread(t *testing.T) {
	keys := *spreadKeys
	for _, n := range []int{10, 100} {
		bs := make([]Backend, n)
		for i := range bs {
			bs[i] = Backend{fmt.Sprintf("10.0.%d.%d:80", i/256, i%256), uint32(1 + i%4)}
		}
		for _, tab := range []*Table{
			mustNew(t, names("10.0.0.", n), DefaultSize, nil),
			mustWeighted(t, bs, DefaultSize, nil),
		} {
			for _, a := range []int{0, n / 2, n - 1} {
				chi2, df, maxDev := secondChoiceSpread(tab, a, keys)
				t.Logf("N=%d weighted=%v first=%d: chi-square %.1f, df %d, largest relative deviation %.1f%%",
					n, tab.weights != nil, a, chi2, df, 100*maxDev)
				if limit := float64(df) + 5*math.Sqrt(2*float64(df)); chi2 > limit {
					t.Errorf("N=%d weighted=%v first=%d: chi-square %.1f over %d degrees of freedom, limit %.1f",
						n, tab.weights != nil, a, chi2, df, limit)
				}
				// Expected count of the smallest share: keys · min share.
				minWant := float64(keys) / float64(n) * 0.4
				if limit := 4.5 / math.Sqrt(minWant); maxDev > limit {
					t.Errorf("N=%d weighted=%v first=%d: a backend's second-choice count is %.1f%% off, limit %.1f%%",
						n, tab.weights != nil, a, 100*maxDev, 100*limit)
				}
			}
		}
	}
}

// TestCandidatesZeroAllocs checks that ranging over the candidates
// allocates nothing, cut short or in full, with the default hasher and
// through the Hasher interface.
func TestCandidatesZeroAllocs(t *testing.T) {
	tab := mustWeighted(t, goldenWeights(100), DefaultSize, nil)
	farmTab := mustNew(t, names("b", 100), DefaultSize, Farm())
	key := "0123456789abcdef"
	keyBytes := []byte(key)
	var sink int
	// Each case ranges over the iterator where it is made, as callers
	// write it; passing the iterator to a helper would make it escape.
	for name, f := range map[string]func(){
		"CandidatesHash/k=1": func() {
			for i := range tab.CandidatesHash(12345) {
				sink += i
				break
			}
		},
		"CandidatesHash/k=3": func() {
			n := 0
			for i := range tab.CandidatesHash(12345) {
				if sink += i; n == 2 {
					break
				}
				n++
			}
		},
		"CandidatesHash/all": func() {
			for i := range tab.CandidatesHash(12345) {
				sink += i
			}
		},
		"Candidates/k=2": func() {
			n := 0
			for i := range tab.Candidates(key) {
				if sink += i; n == 1 {
					break
				}
				n++
			}
		},
		"CandidatesBytes/all": func() {
			for i := range tab.CandidatesBytes(keyBytes) {
				sink += i
			}
		},
		"Candidates/farm/all": func() {
			for i := range farmTab.Candidates(key) {
				sink += i
			}
		},
	} {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s allocates %.1f times per call", name, a)
		}
	}
	_ = sink
}

// goldenCandidateKeys are the keys whose candidates TestGoldenCandidates
// pins.
var goldenCandidateKeys = []string{"", "a", "192.0.2.7", "user:42", "tenant/acme", "\x00\xff"}

// goldenCandidates pins, per built-in hasher, the first 5 candidates
// (backend names) of goldenCandidateKeys in two tables: "plain", the first
// 20 backends of largeBackends at M = 65537 (New), and "weighted", the same
// names with goldenWeights (NewWeighted), whose drained backends must not
// appear. The values were produced by slowCandidates, the order written out
// from its documentation, and agree with the package's iterator on
// linux/amd64, linux/386 and linux/s390x (big-endian, under QEMU). A
// change to any of them moves keys' later choices: a breaking change.
var goldenCandidates = map[string]string{
	"xxh3/plain/\"\"":                    "10.0.0.7:80 10.0.0.2:80 10.0.0.6:80 10.0.0.11:80 10.0.0.3:80",
	"xxh3/plain/\"a\"":                   "10.0.0.17:80 10.0.0.2:80 10.0.0.12:80 10.0.0.13:80 10.0.0.15:80",
	"xxh3/plain/\"192.0.2.7\"":           "10.0.0.5:80 10.0.0.11:80 10.0.0.6:80 10.0.0.3:80 10.0.0.18:80",
	"xxh3/plain/\"user:42\"":             "10.0.0.2:80 10.0.0.3:80 10.0.0.15:80 10.0.0.4:80 10.0.0.20:80",
	"xxh3/plain/\"tenant/acme\"":         "10.0.0.11:80 10.0.0.9:80 10.0.0.1:80 10.0.0.15:80 10.0.0.5:80",
	"xxh3/plain/\"\\x00\\xff\"":          "10.0.0.5:80 10.0.0.2:80 10.0.0.9:80 10.0.0.7:80 10.0.0.18:80",
	"xxh3/weighted/\"\"":                 "10.0.0.7:80 10.0.0.10:80 10.0.0.2:80 10.0.0.9:80 10.0.0.15:80",
	"xxh3/weighted/\"a\"":                "10.0.0.9:80 10.0.0.2:80 10.0.0.20:80 10.0.0.5:80 10.0.0.15:80",
	"xxh3/weighted/\"192.0.2.7\"":        "10.0.0.5:80 10.0.0.20:80 10.0.0.10:80 10.0.0.3:80 10.0.0.15:80",
	"xxh3/weighted/\"user:42\"":          "10.0.0.20:80 10.0.0.3:80 10.0.0.15:80 10.0.0.4:80 10.0.0.7:80",
	"xxh3/weighted/\"tenant/acme\"":      "10.0.0.19:80 10.0.0.9:80 10.0.0.15:80 10.0.0.5:80 10.0.0.14:80",
	"xxh3/weighted/\"\\x00\\xff\"":       "10.0.0.5:80 10.0.0.10:80 10.0.0.9:80 10.0.0.18:80 10.0.0.14:80",
	"xxh3-seed/plain/\"\"":               "10.0.0.17:80 10.0.0.19:80 10.0.0.6:80 10.0.0.3:80 10.0.0.2:80",
	"xxh3-seed/plain/\"a\"":              "10.0.0.5:80 10.0.0.13:80 10.0.0.19:80 10.0.0.2:80 10.0.0.8:80",
	"xxh3-seed/plain/\"192.0.2.7\"":      "10.0.0.14:80 10.0.0.10:80 10.0.0.2:80 10.0.0.16:80 10.0.0.20:80",
	"xxh3-seed/plain/\"user:42\"":        "10.0.0.4:80 10.0.0.10:80 10.0.0.6:80 10.0.0.3:80 10.0.0.19:80",
	"xxh3-seed/plain/\"tenant/acme\"":    "10.0.0.1:80 10.0.0.8:80 10.0.0.4:80 10.0.0.7:80 10.0.0.19:80",
	"xxh3-seed/plain/\"\\x00\\xff\"":     "10.0.0.20:80 10.0.0.2:80 10.0.0.9:80 10.0.0.6:80 10.0.0.5:80",
	"xxh3-seed/weighted/\"\"":            "10.0.0.14:80 10.0.0.19:80 10.0.0.10:80 10.0.0.17:80 10.0.0.3:80",
	"xxh3-seed/weighted/\"a\"":           "10.0.0.5:80 10.0.0.13:80 10.0.0.19:80 10.0.0.9:80 10.0.0.8:80",
	"xxh3-seed/weighted/\"192.0.2.7\"":   "10.0.0.14:80 10.0.0.10:80 10.0.0.2:80 10.0.0.3:80 10.0.0.20:80",
	"xxh3-seed/weighted/\"user:42\"":     "10.0.0.19:80 10.0.0.10:80 10.0.0.3:80 10.0.0.15:80 10.0.0.20:80",
	"xxh3-seed/weighted/\"tenant/acme\"": "10.0.0.5:80 10.0.0.8:80 10.0.0.4:80 10.0.0.20:80 10.0.0.19:80",
	"xxh3-seed/weighted/\"\\x00\\xff\"":  "10.0.0.20:80 10.0.0.2:80 10.0.0.5:80 10.0.0.4:80 10.0.0.14:80",
	"farm/plain/\"\"":                    "10.0.0.14:80 10.0.0.1:80 10.0.0.20:80 10.0.0.5:80 10.0.0.2:80",
	"farm/plain/\"a\"":                   "10.0.0.13:80 10.0.0.18:80 10.0.0.16:80 10.0.0.3:80 10.0.0.20:80",
	"farm/plain/\"192.0.2.7\"":           "10.0.0.14:80 10.0.0.2:80 10.0.0.17:80 10.0.0.1:80 10.0.0.8:80",
	"farm/plain/\"user:42\"":             "10.0.0.10:80 10.0.0.13:80 10.0.0.2:80 10.0.0.5:80 10.0.0.9:80",
	"farm/plain/\"tenant/acme\"":         "10.0.0.18:80 10.0.0.13:80 10.0.0.19:80 10.0.0.17:80 10.0.0.9:80",
	"farm/plain/\"\\x00\\xff\"":          "10.0.0.19:80 10.0.0.6:80 10.0.0.15:80 10.0.0.10:80 10.0.0.5:80",
	"farm/weighted/\"\"":                 "10.0.0.14:80 10.0.0.3:80 10.0.0.20:80 10.0.0.5:80 10.0.0.19:80",
	"farm/weighted/\"a\"":                "10.0.0.5:80 10.0.0.13:80 10.0.0.18:80 10.0.0.10:80 10.0.0.3:80",
	"farm/weighted/\"192.0.2.7\"":        "10.0.0.14:80 10.0.0.2:80 10.0.0.5:80 10.0.0.4:80 10.0.0.18:80",
	"farm/weighted/\"user:42\"":          "10.0.0.10:80 10.0.0.14:80 10.0.0.13:80 10.0.0.2:80 10.0.0.5:80",
	"farm/weighted/\"tenant/acme\"":      "10.0.0.19:80 10.0.0.20:80 10.0.0.15:80 10.0.0.9:80 10.0.0.18:80",
	"farm/weighted/\"\\x00\\xff\"":       "10.0.0.19:80 10.0.0.14:80 10.0.0.15:80 10.0.0.10:80 10.0.0.5:80",
	"fnv1a/plain/\"\"":                   "10.0.0.7:80 10.0.0.2:80 10.0.0.3:80 10.0.0.18:80 10.0.0.6:80",
	"fnv1a/plain/\"a\"":                  "10.0.0.10:80 10.0.0.15:80 10.0.0.1:80 10.0.0.9:80 10.0.0.8:80",
	"fnv1a/plain/\"192.0.2.7\"":          "10.0.0.10:80 10.0.0.16:80 10.0.0.3:80 10.0.0.18:80 10.0.0.11:80",
	"fnv1a/plain/\"user:42\"":            "10.0.0.11:80 10.0.0.7:80 10.0.0.18:80 10.0.0.5:80 10.0.0.14:80",
	"fnv1a/plain/\"tenant/acme\"":        "10.0.0.12:80 10.0.0.15:80 10.0.0.10:80 10.0.0.11:80 10.0.0.8:80",
	"fnv1a/plain/\"\\x00\\xff\"":         "10.0.0.12:80 10.0.0.8:80 10.0.0.11:80 10.0.0.10:80 10.0.0.13:80",
	"fnv1a/weighted/\"\"":                "10.0.0.7:80 10.0.0.20:80 10.0.0.3:80 10.0.0.18:80 10.0.0.17:80",
	"fnv1a/weighted/\"a\"":               "10.0.0.10:80 10.0.0.15:80 10.0.0.18:80 10.0.0.9:80 10.0.0.8:80",
	"fnv1a/weighted/\"192.0.2.7\"":       "10.0.0.10:80 10.0.0.15:80 10.0.0.19:80 10.0.0.18:80 10.0.0.5:80",
	"fnv1a/weighted/\"user:42\"":         "10.0.0.18:80 10.0.0.7:80 10.0.0.10:80 10.0.0.5:80 10.0.0.14:80",
	"fnv1a/weighted/\"tenant/acme\"":     "10.0.0.12:80 10.0.0.15:80 10.0.0.10:80 10.0.0.8:80 10.0.0.3:80",
	"fnv1a/weighted/\"\\x00\\xff\"":      "10.0.0.12:80 10.0.0.8:80 10.0.0.17:80 10.0.0.10:80 10.0.0.13:80",
}

// goldenCandidatesFull pins the SHA-256 of every candidate of 1,000 keys
// ("k0" to "k999"), as little-endian uint32 indices, each order ended by
// 0xffffffff, for the same tables and hashers. Produced by slowCandidates;
// checked on the same three platforms.
var goldenCandidatesFull = map[string]string{
	"xxh3/plain":         "b48fe0eaebe8ad24a0b46ae5838b000203a8de1cb454a568b5068a08764b004f",
	"xxh3/weighted":      "dc7d0ee51158ec171edb1acbdc52e9e5c40ac93c2e564f7b8f30f7a960174fa9",
	"xxh3-seed/plain":    "7c4a944aa4245e9e82543763a5052a94d661dd2679c2c7a513fd15305b2a034e",
	"xxh3-seed/weighted": "d1bbc81c20c4ae4409d36b81c9a9ec6d273155385ab607dfce092d1eeafb2fa1",
	"farm/plain":         "4fb1ccce9af044c127869b78286f1cf7f51e54521babf99162c4b2b98c912375",
	"farm/weighted":      "8d81b32e5f38d086de65c5bf11d1114c64643d4cfdb4b110a62332d3a5812a44",
	"fnv1a/plain":        "43475ee60ce679ea19dfb64701a92d1af1340ae9d6cda93f722ff03b67b1d680",
	"fnv1a/weighted":     "fb4d2bff9b8df2a98a33622a304939f983744f08d2ac75800d55d70fd1c2a000",
}

// goldenCandidateTables returns the tables goldenCandidates pins.
func goldenCandidateTables(t testing.TB, h Hasher) map[string]*Table {
	return map[string]*Table{
		"plain":    mustNew(t, largeBackends()[:20], DefaultSize, h),
		"weighted": mustWeighted(t, goldenWeights(20), DefaultSize, h),
	}
}

func firstNames(tab *Table, order []int, k int) string {
	var b strings.Builder
	for j, i := range order[:min(k, len(order))] {
		if j > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(tab.backends[i])
	}
	return b.String()
}

func ordersSHA256(orders [][]int) string {
	h := sha256.New()
	var buf [4]byte
	for _, o := range orders {
		for _, i := range o {
			binary.LittleEndian.PutUint32(buf[:], uint32(i))
			h.Write(buf[:])
		}
		binary.LittleEndian.PutUint32(buf[:], math.MaxUint32)
		h.Write(buf[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestGoldenCandidates pins the candidate order per built-in hasher, and
// checks the golden values against the plain reference.
func TestGoldenCandidates(t *testing.T) {
	for _, b := range builtins {
		for tname, tab := range goldenCandidateTables(t, b.h) {
			for _, key := range goldenCandidateKeys {
				gk := fmt.Sprintf("%s/%s/%q", b.name, tname, key)
				got := firstNames(tab, slices.Collect(tab.Candidates(key)), 5)
				ref := firstNames(tab, slowCandidates(tab, tab.h.HashString(key)), 5)
				if got != goldenCandidates[gk] || ref != goldenCandidates[gk] {
					t.Errorf("%s: first candidates %q (reference %q), golden %q", gk, got, ref, goldenCandidates[gk])
				}
			}
			var got, ref [][]int
			counts := tab.Counts()
			for k := range 1000 {
				key := fmt.Sprint("k", k)
				got = append(got, slices.Collect(tab.Candidates(key)))
				ref = append(ref, slowOrder(tab, counts, tab.h.HashString(key)))
			}
			gk := b.name + "/" + tname
			if g, r := ordersSHA256(got), ordersSHA256(ref); g != goldenCandidatesFull[gk] || r != goldenCandidatesFull[gk] {
				t.Errorf("%s: SHA-256 of 1,000 orders %s (reference %s), golden %s", gk, g, r, goldenCandidatesFull[gk])
			}
		}
	}
}

// FuzzCandidates compares the order with slowCandidates for fuzzed names,
// weights, sizes and key hashes.
func FuzzCandidates(f *testing.F) {
	f.Add(fuzzSeedNames("a", "b", "c"), uint8(2), uint64(0), uint64(0))
	f.Add(fuzzSeedNames("x", "y", "z", "w"), uint8(6), uint64(1<<63), uint64(0x0102030405060708))
	f.Fuzz(func(t *testing.T, data []byte, size uint8, h, weightBits uint64) {
		bs := fuzzNames(data)
		m := fuzzPrimes[int(size)%len(fuzzPrimes)]
		if len(bs) > m {
			bs = bs[:m]
		}
		ws := make([]Backend, len(bs))
		for i, name := range bs {
			ws[i] = Backend{name, uint32(weightBits>>(2*(i%32))) & 3}
		}
		tab, err := NewWeighted(ws, m, nil)
		if err != nil {
			return // duplicate or empty names: New's business, fuzzed elsewhere
		}
		if got, want := collect(tab, h, -1), slowCandidates(tab, h); !slices.Equal(got, want) {
			t.Fatalf("M=%d %v h=%#x: candidates %v, want %v", m, ws, h, got, want)
		}
	})
}

// candidateSink keeps benchmark results alive.
var candidateSink int

// BenchmarkCandidates measures the first k candidates of a key hash,
// against LookupHashIndex (k = 1 is the same answer), for k = 1, 2, 3 and
// N: the replica and spill-over cases, and the whole order.
func BenchmarkCandidates(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		tab, err := New(benchBackends(n), DefaultSize, nil)
		if err != nil {
			b.Fatal(err)
		}
		const nh = 1 << 12
		hs := make([]uint64, nh)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range hs {
			hs[i] = r.Uint64()
		}
		b.Run(fmt.Sprintf("N=%d/lookup", n), func(b *testing.B) {
			b.ReportAllocs()
			s := 0
			for i := 0; b.Loop(); i++ {
				s += tab.LookupHashIndex(hs[i&(nh-1)])
			}
			candidateSink = s
		})
		for _, k := range []int{1, 2, 3, n} {
			b.Run(fmt.Sprintf("N=%d/k=%d", n, k), func(b *testing.B) {
				b.ReportAllocs()
				s := 0
				for i := 0; b.Loop(); i++ {
					got := 0
					for c := range tab.CandidatesHash(hs[i&(nh-1)]) {
						s += c
						if got++; got == k {
							break
						}
					}
				}
				candidateSink = s
			})
		}
	}
}
