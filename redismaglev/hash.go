package redismaglev

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/maglevlb/maglev"
	"github.com/redis/go-redis/v9"
)

var _ redis.ConsistentHash = (*Hash)(nil)

// ErrInvalidConfig is wrapped by the error NewConsistentHashFunc returns
// for bad Options: a *ConfigError naming the field. An error about a bad
// TableSize also wraps maglev.ErrSize, one about
// Weights maglev.ErrEmptyName.
var ErrInvalidConfig = errors.New("redismaglev: invalid config")

// A ConfigError reports the Options field that is wrong, and why. Its
// message starts with "redismaglev: invalid config: " and names the field;
// errors.Is matches it with ErrInvalidConfig and with its reason. (Every
// package of the project reports a bad config with a ConfigError of its
// own of this shape; see docs/conventions.md.)
type ConfigError struct {
	Field string // the Options field: "TableSize", "Weights"
	Err   error  // the reason
}

// Error returns "redismaglev: invalid config: FIELD: REASON", where a
// reason from package maglev loses its "maglev: " prefix.
func (e *ConfigError) Error() string {
	return ErrInvalidConfig.Error() + ": " + e.Field + ": " + strings.TrimPrefix(e.Err.Error(), "maglev: ")
}

// Unwrap returns ErrInvalidConfig and the reason, for errors.Is and
// errors.As.
func (e *ConfigError) Unwrap() []error { return []error{ErrInvalidConfig, e.Err} }

// Hash is the consistent hash NewConsistentHash returns: the Maglev table
// of a Ring's live shards. A Hash is immutable and safe for concurrent use
// by multiple goroutines.
type Hash struct {
	table *maglev.Table // nil if the shards were bad
	err   error         // why table is nil
}

// Options are the parameters of the tables a consistent hash made by
// NewConsistentHashFunc builds. The zero Options are NewConsistentHash's.
// Clients of a fleet that must send each key to the same shard need the
// same Options as well as the same shard names.
type Options struct {
	// Weights are shards' weights, by shard name (a key of
	// RingOptions.Addrs): a shard's share of the keys, relative to the
	// others', so that a shard of weight 2 owns twice the slots of one of
	// weight 1. A shard not in Weights weighs 1. Weight 0 drains a shard:
	// the Ring still pings it and counts it live, and the table lists it,
	// but no key goes to it. Names the Ring does not have are ignored, so
	// Weights may name shards that a later Ring.SetAddrs adds.
	Weights map[string]uint32

	// TableSize is the table's size M, a prime no larger than
	// maglev.MaxSize; 0 means maglev.DefaultSize (65,537). A shard owns
	// its weight's share of the M slots within about 2 slots, so a larger
	// M follows the weights more closely, for a larger table and a slower
	// build (O(M log M)).
	TableSize int

	// Seed seeds the XXH3 hash of shard names and keys: the tables hash
	// with maglev.XXH3Seed(Seed). 0 means maglev.XXH3, the default.
	Seed uint64
}

// NewConsistentHash returns the Maglev table of the shards,
// maglev.New(shards, maglev.DefaultSize, nil), as a redis.ConsistentHash
// for redis.RingOptions.NewConsistentHash. Its concrete type is *[Hash].
// The table depends only on the set of shard names, not on their order
// (the Ring lists them in map order). For weights, another table size or
// a seed, use NewConsistentHashFunc.
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
	return build(shards, nil, maglev.DefaultSize, 0)
}

// NewConsistentHashFunc returns a function for
// redis.RingOptions.NewConsistentHash that builds the Maglev table of the
// Ring's live shards with the options: maglev.NewWeighted of the shards
// with their Weights (1 for a shard not in Weights), TableSize slots and
// maglev.XXH3Seed(Seed). With no Weights, or the shards' weights all
// equal and not 0, the table is maglev.New's, slot for slot. The table depends only on the set
// of shard names, their weights and the options, not on the order of the
// shards or of anything else. The function is safe for concurrent use;
// it returns a *[Hash], as
// NewConsistentHash does, and fails and panics in no more cases: shards
// maglev.NewWeighted rejects give a Hash without a table, and so does a
// list whose every shard is drained, whose Err wraps maglev.ErrNoBackends.
//
// NewConsistentHashFunc copies opts.Weights: changing the map afterwards
// changes nothing, so the weights are fixed for the function's life, and
// a Ring's NewConsistentHash cannot be replaced: to change the weights,
// make a new Ring.
//
// For bad options NewConsistentHashFunc returns a *ConfigError, whose
// text starts with "redismaglev: invalid config: " and which errors.Is
// matches with ErrInvalidConfig and with the reason: maglev.ErrSize or
// maglev.ErrSize for a bad TableSize, maglev.ErrEmptyName for a weight
// given to the name "", which no usable shard has. It is O(√M + w) for w weights; each table the returned
// function builds costs what NewConsistentHash's does, plus at most
// O(M log n) for the weights.
func NewConsistentHashFunc(opts Options) (func(shards []string) redis.ConsistentHash, error) {
	size := opts.TableSize
	if size == 0 {
		size = maglev.DefaultSize
	}
	if err := maglev.CheckSize(size); err != nil {
		return nil, &ConfigError{Field: "TableSize", Err: err}
	}
	if _, ok := opts.Weights[""]; ok {
		return nil, &ConfigError{Field: "Weights", Err: fmt.Errorf("a weight for the name \"\": %w", maglev.ErrEmptyName)}
	}
	weights := maps.Clone(opts.Weights)
	seed := opts.Seed
	return func(shards []string) redis.ConsistentHash {
		return build(shards, weights, size, seed)
	}, nil
}

// build returns the Hash of the shards with their weights (1 for a shard
// not in weights), size slots and XXH3 seeded with seed, or a Hash
// without a table and the reason.
func build(shards []string, weights map[string]uint32, size int, seed uint64) *Hash {
	backends := make([]maglev.Backend, len(shards))
	for i, name := range shards {
		w, ok := weights[name]
		if !ok {
			w = 1
		}
		backends[i] = maglev.Backend{Name: name, Weight: w}
	}
	t, err := maglev.NewWeighted(backends, size, maglev.XXH3Seed(seed))
	if err != nil {
		return &Hash{err: fmt.Errorf("redismaglev: %w", err)}
	}
	if len(backends) > 0 && !slices.ContainsFunc(backends, func(b maglev.Backend) bool { return b.Weight > 0 }) {
		return &Hash{err: fmt.Errorf("redismaglev: every live shard's weight is 0: %w", maglev.ErrNoBackends)}
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

// Table returns the Maglev table, or nil if the shards were bad. Its
// backends are the shard names, the keys of RingOptions.Addrs, and its
// Weights theirs. Table is O(1).
func (h *Hash) Table() *maglev.Table { return h.table }

// Err returns nil, or why the Hash has no table: an error whose text
// starts with "redismaglev: " and which errors.Is matches against
// maglev.ErrEmptyName, maglev.ErrDuplicateName or
// maglev.ErrTooManyBackends for names maglev.NewWeighted rejects, or
// maglev.ErrNoBackends when every live shard has weight 0. Err is O(1).
func (h *Hash) Err() error { return h.err }
