package redismaglev_test

import (
	"fmt"
	"testing"

	"github.com/maglevlb/maglev/redismaglev"
	"github.com/redis/go-redis/v9"
)

// Benchmark results go to these sinks, so that the compiler keeps the
// work.
var (
	sinkString string
	sinkHash   redis.ConsistentHash
)

// benchSizes are the numbers of shards the benchmarks run at.
var benchSizes = []int{4, 64}

// benchHashes returns the two constructors compared: NewConsistentHash
// and the Ring's default, rendezvous hashing.
func benchHashes(b *testing.B) []struct {
	name string
	new  func([]string) redis.ConsistentHash
} {
	return []struct {
		name string
		new  func([]string) redis.ConsistentHash
	}{{"maglev", redismaglev.NewConsistentHash}, {"rendezvous", defaultConsistentHash(b)}}
}

// BenchmarkGet compares the Ring's per-command shard choice,
// ConsistentHash.Get, of NewConsistentHash and of the Ring's default, over
// 1,024 keys of 11 bytes.
func BenchmarkGet(b *testing.B) {
	ks := keys("user", 1024)
	for _, n := range benchSizes {
		for _, h := range benchHashes(b) {
			hash := h.new(shardNames(n))
			b.Run(fmt.Sprintf("%s/N=%d", h.name, n), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					sinkString = hash.Get(ks[i&1023])
					i++
				}
			})
		}
	}
}

// BenchmarkNewConsistentHash measures what the Ring pays when a shard
// comes or goes: building the hash.
func BenchmarkNewConsistentHash(b *testing.B) {
	for _, n := range benchSizes {
		names := shardNames(n)
		for _, h := range benchHashes(b) {
			b.Run(fmt.Sprintf("%s/N=%d", h.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					sinkHash = h.new(names)
				}
			})
		}
	}
}
