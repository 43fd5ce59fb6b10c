package memcachemaglev_test

import (
	"fmt"
	"net"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/maglevlb/maglev/memcachemaglev"
)

// Benchmark results go to these sinks, so that the compiler keeps the
// work.
var (
	sinkAddr net.Addr
	sinkErr  error
)

// benchSizes are the numbers of servers the benchmarks run at.
var benchSizes = []int{4, 64}

// benchServers returns n TCP addresses; resolving them needs no DNS and
// the benchmarks connect to none.
func benchServers(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("10.0.%d.%d:11211", i/250, i%250+1)
	}
	return s
}

// BenchmarkPickServer compares a Selector's PickServer with that of
// gomemcache's default, memcache.ServerList (crc32 modulo N under a read
// lock), over 1,024 keys of 11 bytes.
func BenchmarkPickServer(b *testing.B) {
	ks := keys("user", 1024)
	for _, n := range benchSizes {
		servers := benchServers(n)
		sel, err := memcachemaglev.New(servers...)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range []struct {
			name string
			sel  memcache.ServerSelector
		}{{"Selector", sel}, {"ServerList", serverList(b, servers...)}} {
			b.Run(fmt.Sprintf("%s/N=%d", s.name, n), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					sinkAddr, sinkErr = s.sel.PickServer(ks[i&1023])
					i++
				}
			})
		}
	}
}

// BenchmarkSetServers measures a membership change: resolving the
// addresses and building the table.
func BenchmarkSetServers(b *testing.B) {
	for _, n := range benchSizes {
		servers := benchServers(n)
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var sel memcachemaglev.Selector
			for b.Loop() {
				sinkErr = sel.SetServers(servers...)
			}
		})
	}
}
