package redismaglev

import (
	"github.com/maglevlb/maglev"
	"github.com/redis/go-redis/v9"
)

var _ redis.ConsistentHash = (*Hash)(nil)

// Hash is the consistent hash NewConsistentHash returns: the Maglev table
// of a Ring's live shards. A Hash is immutable and safe for concurrent use
// by multiple goroutines.
type Hash struct {
	table *maglev.Table // nil if the shard names were bad
	err   error         // why table is nil
}

// NewConsistentHash returns the Maglev table of the shards,
// maglev.New(shards, maglev.DefaultSize, nil), as a redis.ConsistentHash
// for redis.RingOptions.NewConsistentHash. Its concrete type is *[Hash].
// The table depends only on the set of shard names, not on their order
// (the Ring lists them in map order).
//
// NewConsistentHash never fails and never panics: if maglev.New rejects
// the shards (an empty name, which a RingOptions.Addrs key "" gives, a
// name listed twice, or more than maglev.DefaultSize shards), it returns a
// Hash without a table, whose Get returns "" for every key, so that the
// Ring fails every keyed command ("redis: all ring shards are down")
// instead of sending keys where other clients would not; [Hash.Err] says
// why. An empty list gives a Hash whose Get returns "" (the Ring asks
// nothing of it then).
//
// NewConsistentHash takes O(M log M + n log n) time for M =
// maglev.DefaultSize, 1 to 2 ms for up to 64 shards, and allocates
// 128 KiB for the table (rendezvous hashing, the Ring's default, takes
// microseconds). The Ring calls it when a shard is added, removed, goes
// down or comes back, holding the lock its commands take to choose a
// shard: those commands wait for the build.
func NewConsistentHash(shards []string) redis.ConsistentHash {
	t, err := maglev.New(shards, maglev.DefaultSize, nil)
	if err != nil {
		return &Hash{err: err}
	}
	return &Hash{table: t}
}

// Get returns the name of the shard that owns key: Table().Lookup(key), or
// "" for a Hash without a table or without shards. The Ring passes Get the
// key's hash tag when it has one ("{user:42}:cart" gives "user:42"), so
// keys with the same tag share a shard. Get is O(1), whatever the number
// of shards, and does not allocate.
func (h *Hash) Get(key string) string {
	if h.table == nil {
		return ""
	}
	return h.table.Lookup(key)
}

// Table returns the Maglev table, or nil if the shard names were bad. Its
// backends are the shard names, the keys of RingOptions.Addrs. Table is
// O(1).
func (h *Hash) Table() *maglev.Table { return h.table }

// Err returns nil, or why the Hash has no table: an error of maglev.New,
// which errors.Is matches against maglev.ErrEmptyName,
// maglev.ErrDuplicateName or maglev.ErrTooManyBackends. Err is O(1).
func (h *Hash) Err() error { return h.err }
