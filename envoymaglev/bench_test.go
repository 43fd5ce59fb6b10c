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

// BenchmarkNew builds Envoy's table for hosts of weights 1..100.
func BenchmarkNew(b *testing.B) {
	for _, sz := range benchSizes {
		hosts := benchHosts(sz.n, 100)
		b.Run(fmt.Sprintf("N=%d/M=%d", sz.n, sz.m), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				t, err := New(hosts, sz.m)
				if err != nil {
					b.Fatal(err)
				}
				sinkTable = t
			}
		})
	}
}

// BenchmarkNewWeighted builds the root package's weighted table for the
// same hosts, hashed with XXH64, for comparison.
func BenchmarkNewWeighted(b *testing.B) {
	for _, sz := range benchSizes {
		bs := backends(benchHosts(sz.n, 100))
		b.Run(fmt.Sprintf("N=%d/M=%d", sz.n, sz.m), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				t, err := maglev.NewWeighted(bs, sz.m, XXH64())
				if err != nil {
					b.Fatal(err)
				}
				sinkTable = t
			}
		})
	}
}

// BenchmarkNewEqual builds Envoy's table for hosts of equal weights.
func BenchmarkNewEqual(b *testing.B) {
	for _, sz := range benchSizes {
		hosts := benchHosts(sz.n, 1)
		b.Run(fmt.Sprintf("N=%d/M=%d", sz.n, sz.m), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				t, err := New(hosts, sz.m)
				if err != nil {
					b.Fatal(err)
				}
				sinkTable = t
			}
		})
	}
}

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
