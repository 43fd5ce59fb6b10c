// Package peers benchmarks github.com/maglevlb/maglev against other Maglev
// table builders. It is a separate module so that the peers' dependency trees
// stay out of the main module; see README.md.
package peers

import (
	"fmt"
	"sync"
	"testing"

	cilb "github.com/cilium/cilium/pkg/loadbalancer"
	cilmaglev "github.com/cilium/cilium/pkg/maglev"

	"github.com/maglevlb/maglev"
)

const (
	// mCilium is the largest table size Cilium's agent accepts below 2^16
	// (its --bpf-lb-maglev-table-size must be one of 251, 509, 1021, 2039,
	// 4093, 8191, 16381, 32749, 65521, 131071).
	mCilium = 65521
	// mOurs is the smallest prime above 2^16.
	mOurs = 65537
)

// Sinks keep the compiler from discarding the results.
var (
	sinkCilium []int
	sinkOurs   *maglev.Table
)

// backendNames returns n distinct backend names.
func backendNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("10.0.%d.%d:80", i/256, i%256)
	}
	return names
}

// ciliumBackends returns Cilium's input for names: a map from name to
// backend, each with weight 1 (unweighted) and ID = index in names.
func ciliumBackends(names []string) map[string]*cilb.Backend {
	m := make(map[string]*cilb.Backend, len(names))
	for i, name := range names {
		m[name] = &cilb.Backend{ID: cilb.BackendID(i), Weight: 1}
	}
	return m
}

var (
	ciliumOnce sync.Once
	ciliumErr  error
)

// ciliumInit sets up Cilium's package-level state (hash seeds and the
// preallocated permutation buffer) for table size mCilium, once, as the
// agent does at start-up.
func ciliumInit(tb testing.TB) {
	tb.Helper()
	ciliumOnce.Do(func() { ciliumErr = cilmaglev.Init(cilmaglev.DefaultHashSeed, mCilium) })
	if ciliumErr != nil {
		tb.Fatal(ciliumErr)
	}
}

func BenchmarkBuild(b *testing.B) {
	b.Run("impl=cilium", func(b *testing.B) {
		// N=10000 is left out: Cilium fills a 10000×65521 uint64
		// permutation matrix (5.2 GB), about 5 s per table here.
		for _, n := range []int{100, 1000} {
			b.Run(fmt.Sprintf("N=%d/M=%d", n, mCilium), func(b *testing.B) {
				ciliumInit(b)
				backends := ciliumBackends(backendNames(n))
				// Cilium keeps its N×M permutation matrix in a package-level
				// buffer that only grows. Build once untimed so that the loop
				// measures the steady state of a running agent, as it reuses
				// that buffer; the buffer itself (8·N·M bytes) is not counted.
				sinkCilium = cilmaglev.GetLookupTable(backends, mCilium)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					sinkCilium = cilmaglev.GetLookupTable(backends, mCilium)
				}
			})
		}
	})
	b.Run("impl=maglevlb", func(b *testing.B) {
		for _, n := range []int{100, 1000, 10000} {
			for _, m := range []int{mCilium, mOurs} {
				b.Run(fmt.Sprintf("N=%d/M=%d", n, m), func(b *testing.B) {
					names := backendNames(n)
					b.ReportAllocs()
					b.ResetTimer()
					for b.Loop() {
						t, err := maglev.New(names, m, nil)
						if err != nil {
							b.Fatal(err)
						}
						sinkOurs = t
					}
				})
			}
		}
	})
}

// checkBalanced fails unless every one of n backends owns a number of the m
// slots within 1 of every other's.
func checkBalanced(t *testing.T, counts []int, n, m int) {
	t.Helper()
	if len(counts) != n {
		t.Fatalf("%d counts, want %d", len(counts), n)
	}
	lo, hi, sum := counts[0], counts[0], 0
	for _, c := range counts {
		lo, hi, sum = min(lo, c), max(hi, c), sum+c
	}
	if sum != m {
		t.Errorf("counts sum to %d, want %d", sum, m)
	}
	if hi-lo > 1 {
		t.Errorf("slot counts range over [%d, %d], want a spread of at most 1", lo, hi)
	}
}

func TestBalanced(t *testing.T) {
	for _, n := range []int{1, 7, 100, 1000} {
		t.Run(fmt.Sprintf("impl=cilium/N=%d/M=%d", n, mCilium), func(t *testing.T) {
			ciliumInit(t)
			table := cilmaglev.GetLookupTable(ciliumBackends(backendNames(n)), mCilium)
			if len(table) != mCilium {
				t.Fatalf("table has %d slots, want %d", len(table), mCilium)
			}
			counts := make([]int, n)
			for _, id := range table {
				if id < 0 || id >= n {
					t.Fatalf("slot holds backend ID %d, want [0, %d)", id, n)
				}
				counts[id]++
			}
			checkBalanced(t, counts, n, mCilium)
		})
		for _, m := range []int{mCilium, mOurs} {
			t.Run(fmt.Sprintf("impl=maglevlb/N=%d/M=%d", n, m), func(t *testing.T) {
				table, err := maglev.New(backendNames(n), m, nil)
				if err != nil {
					t.Fatal(err)
				}
				if table.Size() != m || table.NumBackends() != n {
					t.Fatalf("Size, NumBackends = %d, %d; want %d, %d", table.Size(), table.NumBackends(), m, n)
				}
				checkBalanced(t, table.Counts(), n, m)
			})
		}
	}
}
