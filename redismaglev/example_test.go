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
