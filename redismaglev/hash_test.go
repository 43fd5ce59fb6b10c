package redismaglev_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/redismaglev"
	"github.com/redis/go-redis/v9"
)

// keys returns n distinct keys.
func keys(prefix string, n int) []string {
	k := make([]string, n)
	for i := range k {
		k[i] = fmt.Sprintf("%s:%06d", prefix, i)
	}
	return k
}

// shardNames returns n shard names.
func shardNames(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("shard%d", i)
	}
	return s
}

// defaultConsistentHash returns the constructor a Ring uses when
// RingOptions.NewConsistentHash is nil, read from the options of a real
// Ring (go-redis's rendezvous hash, in an internal package). The Ring
// calls it with the names of its live shards, as the tests do.
func defaultConsistentHash(t testing.TB) func([]string) redis.ConsistentHash {
	t.Helper()
	r := redis.NewRing(&redis.RingOptions{})
	f := r.Options().NewConsistentHash
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if f == nil {
		t.Fatal("a Ring's options have no NewConsistentHash")
	}
	return f
}

// TestGetIsLookup checks that Get is maglev.New(shards, DefaultSize,
// nil).Lookup, whatever the order of the shards.
func TestGetIsLookup(t *testing.T) {
	names := shardNames(5)
	want, err := maglev.New(names, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	reversed := []string{names[4], names[3], names[2], names[1], names[0]}
	for _, list := range [][]string{names, reversed} {
		h := redismaglev.NewConsistentHash(list)
		seen := map[string]int{}
		for _, k := range keys("k", 5000) {
			if got := h.Get(k); got != want.Lookup(k) {
				t.Fatalf("Get(%q) = %q, want %q", k, got, want.Lookup(k))
			}
			seen[h.Get(k)]++
		}
		if len(seen) != len(names) {
			t.Errorf("5000 keys went to %d shards of %d", len(seen), len(names))
		}
		mh := h.(*redismaglev.Hash)
		if mh.Err() != nil || mh.Table().Diff(want) != 0 {
			t.Errorf("Err = %v; Table differs from maglev.New's in %d slots", mh.Err(), mh.Table().Diff(want))
		}
	}
}

// TestBadShards checks that shard lists maglev.New rejects give a Hash
// whose Get returns "" for every key, with the reason in Err, and that an
// empty list gives a Hash whose Get returns "".
func TestBadShards(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shards []string
		want   error
	}{
		{"empty list", nil, nil},
		{"empty name", []string{"shard0", ""}, maglev.ErrEmptyName},
		{"duplicate", []string{"shard0", "shard1", "shard0"}, maglev.ErrDuplicateName},
		{"too many", shardNames(maglev.DefaultSize + 1), maglev.ErrTooManyBackends},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := redismaglev.NewConsistentHash(tc.shards).(*redismaglev.Hash)
			for _, k := range keys("k", 100) {
				if got := h.Get(k); got != "" {
					t.Fatalf("Get(%q) = %q, want \"\"", k, got)
				}
			}
			if err := h.Err(); !errors.Is(err, tc.want) || (err != nil && !strings.HasPrefix(err.Error(), "redismaglev: ")) {
				t.Errorf("Err = %v, want %v with the prefix \"redismaglev: \"", err, tc.want)
			}
			if tc.want != nil && h.Table() != nil {
				t.Error("a Hash over bad shards has a table")
			}
		})
	}
}

// TestGetAllocs checks that Get does not allocate, with shards and without,
// and with weights, a seed (which takes Lookup's path for other hashers)
// and a table size other than the default.
func TestGetAllocs(t *testing.T) {
	ks := keys("user", 64)
	weighted, err := redismaglev.NewConsistentHashFunc(redismaglev.Options{
		Weights: map[string]uint32{"shard0": 3, "shard1": 0}, TableSize: 10007, Seed: 0x5eed,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, hash := range []struct {
		name string
		new  func([]string) redis.ConsistentHash
	}{{"NewConsistentHash", redismaglev.NewConsistentHash}, {"weighted", weighted}} {
		for _, shards := range [][]string{shardNames(4), shardNames(64), nil, {"", "x"}, {"shard1"}} {
			h := hash.new(shards)
			i := 0
			var sink string
			if n := testing.AllocsPerRun(1000, func() {
				sink = h.Get(ks[i%len(ks)])
				i++
			}); n != 0 {
				t.Errorf("%s, %d shards: Get makes %v allocations, want 0", hash.name, len(shards), n)
			}
			none := len(shards) == 0 || shards[0] == "" || (hash.name == "weighted" && shards[0] == "shard1")
			if none != (sink == "") {
				t.Errorf("%s, %d shards: Get returned %q", hash.name, len(shards), sink)
			}
		}
	}
}
