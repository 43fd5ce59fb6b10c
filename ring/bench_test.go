package ring

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/maglevlb/maglev"
	"github.com/zeebo/xxh3"
)

// The ring and Maglev are benchmarked side by side on the same backends,
// the same keys and the same hasher (nil, meaning XXH3, which both call
// directly rather than through the interface).
//
//	go test -run '^$' -bench . -count 6 ./ring/ > ring-bench.txt
//	go run golang.org/x/perf/cmd/benchstat@latest ring-bench.txt

// Sizes shared by every benchmark.
var (
	benchN      = []int{10, 100, 1000}
	benchVnodes = []int{5, 100, 1000}
)

// benchM returns the Maglev table sizes to compare at n backends: the
// default, and the paper's M > 100·N when that is larger.
func benchM(n int) []int {
	return slices.Compact([]int{maglev.DefaultSize, maglev.SizeFor(n)})
}

// Sinks keep the compiler from discarding results.
var (
	sinkString string
	sinkInt    int
	sinkRing   *Ring
	sinkTable  *maglev.Table
)

// benchBackends returns n backend names, as in bench/peers.
func benchBackends(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("10.0.%d.%d:80", i/256, i%256)
	}
	return names
}

const (
	keyLen  = 16      // a client address: an IPv6 address in binary
	numKeys = 1 << 16 // distinct keys, cycled through
)

// benchKeys returns numKeys random 16-byte keys laid end to end in one
// string, so that taking key i is slicing, with no header to load, and
// their XXH3 hashes.
var benchKeys = sync.OnceValues(func() (string, []uint64) {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 0, keyLen*numKeys)
	for range numKeys {
		b = binary.LittleEndian.AppendUint64(b, r.Uint64())
		b = binary.LittleEndian.AppendUint64(b, r.Uint64())
	}
	keys := string(b)
	hashes := make([]uint64, numKeys)
	for i := range hashes {
		hashes[i] = xxh3.HashString(keys[i*keyLen : (i+1)*keyLen])
	}
	return keys, hashes
})

// BenchmarkLookup routes keys: one XXH3 hash of 16 bytes, then the ring's
// binary search or Maglev's table index.
func BenchmarkLookup(b *testing.B) {
	keys, _ := benchKeys()
	for _, n := range benchN {
		names := benchBackends(n)
		for _, v := range benchVnodes {
			r := mustNew(b, names, v, nil)
			b.Run(fmt.Sprintf("algo=ring/N=%d/vnodes=%d", n, v), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					k := i & (numKeys - 1) * keyLen
					sinkString = r.Lookup(keys[k : k+keyLen])
				}
			})
		}
		for _, m := range benchM(n) {
			t, err := maglev.New(names, m, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("algo=maglev/N=%d/M=%d", n, m), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					k := i & (numKeys - 1) * keyLen
					sinkString = t.Lookup(keys[k : k+keyLen])
				}
			})
		}
	}
}

// BenchmarkLookupHash routes pre-hashed keys, isolating the structure from
// the hash: the ring's binary search against Maglev's modulo and index.
func BenchmarkLookupHash(b *testing.B) {
	_, hashes := benchKeys()
	for _, n := range benchN {
		names := benchBackends(n)
		for _, v := range benchVnodes {
			r := mustNew(b, names, v, nil)
			b.Run(fmt.Sprintf("algo=ring/N=%d/vnodes=%d", n, v), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					sinkString = r.LookupHash(hashes[i&(numKeys-1)])
				}
			})
		}
		for _, m := range benchM(n) {
			t, err := maglev.New(names, m, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("algo=maglev/N=%d/M=%d", n, m), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					sinkString = t.LookupHash(hashes[i&(numKeys-1)])
				}
			})
		}
	}
}

// BenchmarkBuild builds rings and tables from scratch. B/op counts every
// byte allocated, scratch included; held-B is what the result keeps: 12
// bytes a ring point, 2 bytes a Maglev slot (names not counted).
func BenchmarkBuild(b *testing.B) {
	for _, n := range benchN {
		names := benchBackends(n)
		for _, v := range benchVnodes {
			b.Run(fmt.Sprintf("algo=ring/N=%d/vnodes=%d", n, v), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					sinkRing = mustNew(b, names, v, nil)
				}
				b.ReportMetric(float64(12*n*v), "held-B")
			})
		}
		for _, m := range benchM(n) {
			b.Run(fmt.Sprintf("algo=maglev/N=%d/M=%d", n, m), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					t, err := maglev.New(names, m, nil)
					if err != nil {
						b.Fatal(err)
					}
					sinkTable = t
				}
				b.ReportMetric(float64(2*m), "held-B")
			})
		}
	}
}

// BenchmarkSearch compares the two lower-bound loops on sorted random
// positions of growing size, with the same pre-hashed keys: the evidence
// for bigRing, where search switches from one to the other.
func BenchmarkSearch(b *testing.B) {
	_, hashes := benchKeys()
	r := rand.New(rand.NewPCG(3, 4))
	for _, shift := range []int{6, 10, 13, 15, 16, 17, 18, 20} {
		pos := make([]uint64, 1<<shift)
		for i := range pos {
			pos[i] = r.Uint64()
		}
		slices.Sort(pos)
		for _, loop := range []struct {
			name string
			f    func([]uint64, uint64) int
		}{
			{"branchless", lowerBoundBranchless},
			{"branchy", lowerBoundBranchy},
		} {
			b.Run(fmt.Sprintf("points=2^%d/loop=%s", shift, loop.name), func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					sinkInt = loop.f(pos, hashes[i&(numKeys-1)])
				}
			})
		}
	}
}
