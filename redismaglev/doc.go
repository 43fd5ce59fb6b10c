// Package redismaglev is Maglev consistent hashing for the sharded Redis
// client of github.com/redis/go-redis/v9, its Ring. A Go service gets it
// by adding one import:
//
//	import "github.com/maglevlb/maglev/redismaglev"
//
// and one field to its RingOptions:
//
//	rdb := redis.NewRing(&redis.RingOptions{
//		Addrs: map[string]string{
//			"shard1": "10.0.0.1:6379",
//			"shard2": "10.0.0.2:6379",
//			"shard3": "10.0.0.3:6379",
//		},
//		NewConsistentHash: redismaglev.NewConsistentHash,
//	})
//
// A key's shard is its owner in maglev.New(shards, maglev.DefaultSize,
// nil) over the names of the Ring's live shards (the keys of Addrs, not the
// addresses): every client with the same shards sends a key to the same
// one. The Ring rebuilds the hash when shards are added or removed
// (Ring.SetAddrs) and when a shard fails its heartbeat pings or passes
// them again, so a dead shard's keys move to the others and the rest stay,
// but for Maglev's small excess disruption. Adding a fifth shard to four
// moves about a fifth of the keys, as the Ring's default rendezvous
// hashing does; the difference is the cost of a key's shard.
//
// # Weights, seed and table size
//
// [NewConsistentHashFunc] makes the hook with [Options]: weights by shard
// name (a share of the keys; a shard not named weighs 1, and weight 0
// drains a shard, which stays live but owns no slots), the table size M
// and a seed for XXH3 (maglev.XXH3Seed):
//
//	newHash, err := redismaglev.NewConsistentHashFunc(redismaglev.Options{
//		Weights: map[string]uint32{"shard1": 2, "shard2": 1, "shard3": 1},
//		Seed:    0x5eed,
//	})
//	if err != nil {
//		return err
//	}
//	rdb := redis.NewRing(&redis.RingOptions{Addrs: addrs, NewConsistentHash: newHash})
//
// The table is maglev.NewWeighted's: the same on every machine for the
// same shards, weights, size and seed, whatever the order of the shards.
//
// # Concurrency
//
// The consistent hash NewConsistentHash returns, and those the function
// from NewConsistentHashFunc returns, are immutable and safe for
// concurrent use by multiple goroutines; the Ring replaces them whole.
//
// # Costs
//
// [Hash.Get], the Ring's per-command shard choice, is O(1): one XXH3 hash
// of the key and one table read, with no allocation, whatever the number of
// shards; the default rendezvous hash is O(N), a score for each shard. A
// rebuild builds a table of M slots (65,537 by default), 1 to 2 ms and
// 128 KiB for up to 64 shards at that size, under the Ring's lock: it happens only when a shard comes or
// goes, and commands choosing a shard meanwhile wait for it.
package redismaglev
