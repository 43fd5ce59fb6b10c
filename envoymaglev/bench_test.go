package envoymaglev

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/maglevlb/maglev"
)

// Benchmark sizes: Envoy's default table and a thousand hosts.
var benchSizes = []struct{ n, m int }{{1000, 65537}}

// Sinks keep results alive so the compiler cannot drop the work.
var (
	sinkTable  *maglev.Table
	sinkString string
)

// benchHosts returns n hosts 10.x.y.z:8080 with weights drawn from 1..hi
// (all 1 if hi is 1), with a fixed seed.
func benchHosts(n, hi int) []Host {
	r := rand.New(rand.NewPCG(1, 2))
	hosts := make([]Host, n)
	for i := range hosts {
		hosts[i] = Host{Key: fmt.Sprintf("10.%d.%d.%d:8080", i>>16, i>>8&0xff, i&0xff), Weight: uint32(1 + r.IntN(hi))}
	}
	return hosts
}

// backends returns hosts as the root package's weighted backends.
func backends(hosts []Host) []maglev.Backend {
	bs := make([]maglev.Backend, len(hosts))
	for i, h := range hosts {
		bs[i] = maglev.Backend{Name: h.Key, Weight: h.Weight}
	}
	return bs
}

// benchBuild times, at every benchmark size, the builder that prepare
// returns for hosts of weights 1..maxWeight (prepare's own work, such as
// converting the hosts, is not timed).
func benchBuild(b *testing.B, maxWeight int, prepare func(hosts []Host) func(m int) (*maglev.Table, error)) {
	for _, sz := range benchSizes {
		build := prepare(benchHosts(sz.n, maxWeight))
		b.Run(fmt.Sprintf("N=%d/M=%d", sz.n, sz.m), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				t, err := build(sz.m)
				if err != nil {
					b.Fatal(err)
				}
				sinkTable = t
			}
		})
	}
}

// BenchmarkNew builds Envoy's table for hosts of weights 1..100.
func BenchmarkNew(b *testing.B) { benchBuild(b, 100, envoyNew) }

// envoyNew is New for benchBuild.
func envoyNew(hosts []Host) func(m int) (*maglev.Table, error) {
	return func(m int) (*maglev.Table, error) { return New(hosts, m) }
}

// BenchmarkNewWeighted builds the root package's weighted table for the
// same hosts, hashed with XXH64, for comparison.
func BenchmarkNewWeighted(b *testing.B) {
	benchBuild(b, 100, func(hosts []Host) func(m int) (*maglev.Table, error) {
		bs := backends(hosts)
		return func(m int) (*maglev.Table, error) { return maglev.NewWeighted(bs, m, XXH64()) }
	})
}

// BenchmarkNewEqual builds Envoy's table for hosts of equal weights.
func BenchmarkNewEqual(b *testing.B) { benchBuild(b, 1, envoyNew) }

// BenchmarkLookup looks keys up in Envoy's table: XXH64 through the
// Hasher interface, then the slot.
func BenchmarkLookup(b *testing.B) {
	for _, sz := range benchSizes {
		t, err := New(benchHosts(sz.n, 100), sz.m)
		if err != nil {
			b.Fatal(err)
		}
		keys := make([]string, 1024)
		for i := range keys {
			keys[i] = fmt.Sprintf("198.51.%d.%d:%d", i>>8, i&0xff, 40000+i)
		}
		b.Run(fmt.Sprintf("N=%d/M=%d", sz.n, sz.m), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sinkString = t.Lookup(keys[i&1023])
				i++
			}
		})
	}
}
