package redismaglev_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/redismaglev"
	"github.com/redis/go-redis/v9"
)

// A Ring over three Redis servers that sends each key to its shard in the
// Maglev table of the shard names. (Compile-only: it needs the servers.)
func Example() {
	rdb := redis.NewRing(&redis.RingOptions{
		Addrs: map[string]string{
			"shard1": "10.0.0.1:6379",
			"shard2": "10.0.0.2:6379",
			"shard3": "10.0.0.3:6379",
		},
		NewConsistentHash: redismaglev.NewConsistentHash,
	})
	defer func() {
		if err := rdb.Close(); err != nil {
			log.Print(err)
		}
	}()

	ctx := context.Background()
	if err := rdb.Set(ctx, "user:42", "Ada", 0).Err(); err != nil {
		log.Fatal(err)
	}
	name, err := rdb.Get(ctx, "user:42").Result()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(name)
}

// The shard of each key, as the Ring computes it; the order of the names
// does not matter. Names maglev.New rejects give a hash that names no
// shard, so that the Ring fails the commands.
func ExampleNewConsistentHash() {
	h := redismaglev.NewConsistentHash([]string{"shard3", "shard1", "shard2"})
	for _, key := range []string{"user:1", "user:2", "user:3", "user:4", "user:5"} {
		fmt.Println(key, "is on", h.Get(key))
	}

	bad := redismaglev.NewConsistentHash([]string{"shard1", ""})
	fmt.Printf("bad names: %q, %v\n", bad.Get("user:1"), errors.Is(bad.(*redismaglev.Hash).Err(), maglev.ErrEmptyName))
	// Output:
	// user:1 is on shard3
	// user:2 is on shard3
	// user:3 is on shard1
	// user:4 is on shard2
	// user:5 is on shard2
	// bad names: "", true
}

// Weights by shard name, a table of 10,007 slots and a fleet's seed. A
// shard not in Weights weighs 1; weight 0 drains one, which the Ring
// still counts live but which owns no slots. The Ring calls the function
// with its live shards, in map order; the table does not depend on it.
func ExampleNewConsistentHashFunc() {
	newHash, err := redismaglev.NewConsistentHashFunc(redismaglev.Options{
		Weights:   map[string]uint32{"shard1": 3, "shard3": 0},
		TableSize: 10007,
		Seed:      0x5eed,
	})
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewRing(&redis.RingOptions{
		Addrs: map[string]string{
			"shard1": "10.0.0.1:6379",
			"shard2": "10.0.0.2:6379",
			"shard3": "10.0.0.3:6379",
		},
		NewConsistentHash: newHash,
	})
	defer func() { _ = rdb.Close() }()

	// What the Ring builds while all three shards are up.
	t := newHash([]string{"shard3", "shard1", "shard2"}).(*redismaglev.Hash).Table()
	fmt.Println("shards: ", t.Backends())
	fmt.Println("weights:", t.Weights())
	fmt.Println("counts: ", t.Counts())

	_, err = redismaglev.NewConsistentHashFunc(redismaglev.Options{TableSize: 10000})
	fmt.Println("size 10000:", errors.Is(err, redismaglev.ErrInvalidConfig), errors.Is(err, maglev.ErrSize))
	fmt.Println(err)
	drained := newHash([]string{"shard3"}).(*redismaglev.Hash)
	fmt.Println("only shard3 up:", errors.Is(drained.Err(), maglev.ErrNoBackends))
	// Output:
	// shards:  [shard1 shard2 shard3]
	// weights: [3 1 0]
	// counts:  [7505 2502 0]
	// size 10000: true true
	// redismaglev: invalid config: TableSize: unsupported table size: 10000 is not a prime
	// only shard3 up: true
}
