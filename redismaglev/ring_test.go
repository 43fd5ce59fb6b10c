package redismaglev_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/internal/servertest"
	"github.com/maglevlb/maglev/redismaglev"
	"github.com/redis/go-redis/v9"
)

// The Ring tests start their own servers (see servers_test.go), go through
// a real redis.Ring, and check what each server holds with a client of its
// own.

// opTimeout bounds one batch of commands.
const opTimeout = 30 * time.Second

// newRing returns a Ring over the servers, named shard0, shard1, ... in
// order, with the given hash (nil: the Ring's default), closed when the
// test ends.
func newRing(t *testing.T, servers []*servertest.Proc, hash func([]string) redis.ConsistentHash, heartbeat time.Duration) *redis.Ring {
	t.Helper()
	r := redis.NewRing(&redis.RingOptions{
		Addrs:              shardAddrs(servers),
		NewConsistentHash:  hash,
		HeartbeatFrequency: heartbeat,
		DialTimeout:        time.Second,
	})
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// shardAddrs names the servers shard0, shard1, ... in order.
func shardAddrs(servers []*servertest.Proc) map[string]string {
	m := make(map[string]string, len(servers))
	for i, s := range servers {
		m[shardNames(len(servers))[i]] = s.Addr
	}
	return m
}

// setAll stores each key (its value the key itself) through r, in one
// pipeline.
func setAll(t *testing.T, r redis.Cmdable, ks []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range ks {
			p.Set(ctx, k, k, 0)
		}
		return nil
	}); err != nil {
		t.Fatalf("SET: %v", err)
	}
}

// getAll reads keys through r, in one pipeline, and returns the hits,
// checking each value. A miss is redis.Nil; any other error fails the test.
func getAll(t *testing.T, r redis.Cmdable, ks []string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cmds, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range ks {
			p.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("GET: %v", err)
	}
	hits := make(map[string]bool, len(ks))
	for i, c := range cmds {
		v, err := c.(*redis.StringCmd).Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			t.Fatalf("GET %q: %v", ks[i], err)
		case v != ks[i]:
			t.Fatalf("%q holds %q", ks[i], v)
		default:
			hits[ks[i]] = true
		}
	}
	return hits
}

// onServer returns the keys that the server at addr holds, read with a
// client of its own.
func onServer(t *testing.T, addr string, ks []string) map[string]bool {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	hits := getAll(t, c, ks)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return hits
}

// flushAll empties every server.
func flushAll(t *testing.T, servers []*servertest.Proc) {
	t.Helper()
	for _, s := range servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		err := errors.Join(c.FlushAll(context.Background()).Err(), c.Close())
		if err != nil {
			t.Fatalf("FLUSHALL on %s: %v", s.Addr, err)
		}
	}
}

// checkPlacement checks that each key is on the server of the shard want
// names for it, and on no other.
func checkPlacement(t *testing.T, servers []*servertest.Proc, ks []string, want func(key string) string) {
	t.Helper()
	addrs := shardAddrs(servers)
	holders := map[string][]string{}
	for name, addr := range addrs {
		for k := range onServer(t, addr, ks) {
			holders[k] = append(holders[k], name)
		}
	}
	for _, k := range ks {
		if w := want(k); len(holders[k]) != 1 || holders[k][0] != w {
			t.Fatalf("%q is on %q, want on %s only", k, holders[k], w)
		}
	}
}

// TestRingKeysOnTheirShard sets keys through a Ring with
// NewConsistentHash and checks that each key is on the shard
// maglev.New(shards, DefaultSize, nil).Lookup names, keys with a hash tag
// on the shard of their tag.
func TestRingKeysOnTheirShard(t *testing.T) {
	servers := startRedis(t, 4)
	r := newRing(t, servers, redismaglev.NewConsistentHash, 0)
	table, err := maglev.New(shardNames(4), maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	ks := keys("owner", 2000)
	setAll(t, r, ks)
	checkPlacement(t, servers, ks, table.Lookup)
	perShard := map[string]int{}
	for _, k := range ks {
		perShard[table.Lookup(k)]++
	}
	for _, name := range shardNames(4) {
		// 2000 keys over 4 shards: 500 expected, standard deviation 19.
		if n := perShard[name]; n < 400 || n > 600 {
			t.Errorf("%s holds %d of 2000 keys, want about 500", name, n)
		}
	}

	tagged := []string{"{user:42}:cart", "{user:42}:profile", "{user:42}", "{user:7}:cart", "{user:7}:profile"}
	setAll(t, r, tagged)
	checkPlacement(t, servers, tagged, func(k string) string {
		if k[:9] == "{user:42}" {
			return table.Lookup("user:42")
		}
		return table.Lookup("user:7")
	})
}

// TestRingScaleOut stores 10,000 keys on a Ring of four shards, adds a
// fifth with SetAddrs, and reads the same keys back: with
// NewConsistentHash and with the Ring's default, rendezvous hashing. Both
// keep the keys the fifth shard does not take, 4/5 of them (standard
// deviation 0.004 over 10,000 keys, so bounds of ±0.05 cannot fail by
// chance), and each rate must be exactly the one its hash predicts key by
// key.
func TestRingScaleOut(t *testing.T) {
	servers := startRedis(t, 5)
	ks := keys("scale", 10000)
	rates := map[string]float64{}
	for _, tc := range []struct {
		name string
		hash func([]string) redis.ConsistentHash
	}{
		{"maglev", redismaglev.NewConsistentHash},
		{"default", defaultConsistentHash(t)},
	} {
		flushAll(t, servers)
		r := newRing(t, servers[:4], tc.hash, 0)
		setAll(t, r, ks)
		r.SetAddrs(shardAddrs(servers))
		if n := r.Len(); n != 5 {
			t.Fatalf("%s: the Ring has %d live shards after SetAddrs, want 5", tc.name, n)
		}
		hits := getAll(t, r, ks)
		before, after := tc.hash(shardNames(4)), tc.hash(shardNames(5))
		for _, k := range ks {
			if stays := before.Get(k) == after.Get(k); hits[k] != stays {
				t.Fatalf("%s: %q hit = %v, but its shard stays = %v", tc.name, k, hits[k], stays)
			}
		}
		rates[tc.name] = float64(len(hits)) / float64(len(ks))
	}
	t.Logf("hit rate after 4 -> 5 shards, %d keys: maglev %.4f, Ring's default %.4f", len(ks), rates["maglev"], rates["default"])
	for name, rate := range rates {
		if rate < 0.75 || rate > 0.85 {
			t.Errorf("%s: hit rate %.4f, want 0.80 ± 0.05", name, rate)
		}
	}
}

// hashCalls records the shard lists a Ring builds its hash from.
type hashCalls struct {
	new   func([]string) redis.ConsistentHash // nil: redismaglev.NewConsistentHash
	mu    sync.Mutex
	calls [][]string // each sorted
}

func (h *hashCalls) newConsistentHash(shards []string) redis.ConsistentHash {
	s := slices.Sorted(slices.Values(shards))
	h.mu.Lock()
	h.calls = append(h.calls, s)
	h.mu.Unlock()
	if h.new != nil {
		return h.new(shards)
	}
	return redismaglev.NewConsistentHash(shards)
}

func (h *hashCalls) last() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.calls) == 0 {
		return nil
	}
	return h.calls[len(h.calls)-1]
}

// waitLen waits for the Ring to count n live shards.
func waitLen(t *testing.T, r *redis.Ring, n int) {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for r.Len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the Ring has %d live shards, want %d", r.Len(), n)
		}
		time.Sleep(pollInterval)
	}
}

// TestRingShardDown kills one of three shards: the Ring's heartbeat finds
// it down and rebuilds the hash from the other two, so its keys miss and
// the others' hit (but for Maglev's excess disruption, predicted key by
// key). A server restarted on its address brings the shard back, and the
// keys of the other shards stay where they were.
func TestRingShardDown(t *testing.T) {
	servers := startRedis(t, 3)
	var rec hashCalls
	r := newRing(t, servers, rec.newConsistentHash, 20*time.Millisecond)
	names := shardNames(3)
	if got := rec.last(); !slices.Equal(got, names) {
		t.Fatalf("the Ring built its hash from %q, want %q", got, names)
	}
	ks := keys("down", 3000)
	setAll(t, r, ks)
	before := redismaglev.NewConsistentHash(names)
	checkPlacement(t, servers, ks, before.Get)

	dead := servers[1]
	dead.Stop()
	waitLen(t, r, 2)
	live := []string{names[0], names[2]}
	if got := rec.last(); !slices.Equal(got, live) {
		t.Fatalf("with %s down the Ring built its hash from %q, want %q", names[1], got, live)
	}
	after := redismaglev.NewConsistentHash(live)
	hits := getAll(t, r, ks)
	movedOthers := 0
	for _, k := range ks {
		stays := before.Get(k) == after.Get(k)
		if before.Get(k) != names[1] && !stays {
			movedOthers++
		}
		if hits[k] != stays {
			t.Fatalf("%q (on %s) hit = %v with %s down, but its shard stays = %v", k, before.Get(k), hits[k], names[1], stays)
		}
	}
	if movedOthers > len(ks)/100 {
		t.Errorf("%d keys of live shards moved, want under 1%%", movedOthers)
	}

	startOne(t, redisPath(t), portOf(t, dead.Addr))
	waitLen(t, r, 3)
	if got := rec.last(); !slices.Equal(got, names) {
		t.Fatalf("with %s back the Ring built its hash from %q, want %q", names[1], got, names)
	}
	hits = getAll(t, r, ks)
	for _, k := range ks {
		if want := before.Get(k) != names[1]; hits[k] != want {
			t.Fatalf("%q (on %s) hit = %v with %s back, want %v", k, before.Get(k), hits[k], names[1], want)
		}
	}
}

// TestRingBadShardName checks that a Ring with a shard named "" fails its
// keyed commands with an error instead of panicking or sending keys where
// no other hash would.
func TestRingBadShardName(t *testing.T) {
	servers := startRedis(t, 2)
	r := redis.NewRing(&redis.RingOptions{
		Addrs:             map[string]string{"": servers[0].Addr, "shard1": servers[1].Addr},
		NewConsistentHash: redismaglev.NewConsistentHash,
	})
	defer func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := r.Set(ctx, "k", "v", 0).Err(); err == nil {
		t.Error("SET through a Ring with a shard named \"\" succeeded")
	}
	if err := r.Get(ctx, "k").Err(); err == nil || errors.Is(err, redis.Nil) {
		t.Errorf("GET through a Ring with a shard named \"\": %v, want an error", err)
	}
}

// keyBound returns how far the number of n keys that land on a shard
// owning slots of the m slots may be from its expectation n·slots/m: 5
// standard deviations of that binomial, which a fair hash exceeds with
// probability under 10⁻⁶.
func keyBound(n, slots, m int) float64 {
	p := float64(slots) / float64(m)
	return 5 * math.Sqrt(float64(n)*p*(1-p))
}

// TestRingWeighted sets keys through a real Ring over four shards of
// weights 1, 2, 3 and 0 (drained), with a table of 10,007 slots and a
// seed, and checks the exact slot counts, that each key is on the server
// of the shard the table names and on no other, that each shard's share
// of the keys follows its slots, and that the drained shard, which holds
// no key, is still one of the Ring's live shards. A Ring over the same
// servers without the seed then hits a key exactly where the two tables
// agree. The shards are named shard0 to shard3, so the table and every
// count are the same on every run.
func TestRingWeighted(t *testing.T) {
	servers := startRedis(t, 4)
	names := shardNames(4)
	opts := redismaglev.Options{
		Weights:   map[string]uint32{names[0]: 1, names[1]: 2, names[2]: 3, names[3]: 0},
		TableSize: 10007,
		Seed:      0x5eed,
	}
	var rec hashCalls
	rec.new = mustHashFunc(t, opts)
	r := newRing(t, servers, rec.newConsistentHash, 0)
	if got := rec.last(); !slices.Equal(got, names) {
		t.Fatalf("the Ring built its hash from %q, want %q", got, names)
	}
	if n := r.Len(); n != 4 {
		t.Fatalf("the Ring has %d live shards, want 4 (the drained one included)", n)
	}
	table := tableOf(t, rec.new(names))
	sameTable(t, "the Ring's table", table, reference(t, names, opts))
	// (10007 − 3)·w/6 + 1 for w = 1, 2, 3, rounded by the turns; the
	// drained shard owns none. Counts depend on the weights, their order
	// and M, not on the names or the seed.
	if got, want := table.Counts(), []int{1668, 3336, 5003, 0}; !slices.Equal(got, want) {
		t.Fatalf("slot counts %v, want %v", got, want)
	}
	checkShares(t, table)

	ks := keys("weighted", 6000)
	setAll(t, r, ks)
	checkPlacement(t, servers, ks, table.Lookup)
	perShard := map[string]int{}
	for _, k := range ks {
		perShard[table.Lookup(k)]++
	}
	for i, name := range names {
		n, slots := perShard[name], table.Counts()[i]
		want := float64(len(ks)*slots) / float64(table.Size())
		t.Logf("%s (weight %d, %d slots): %d of %d keys, expected %.0f", name, table.Weights()[i], slots, n, len(ks), want)
		if d := float64(n) - want; math.Abs(d) > keyBound(len(ks), slots, table.Size()) {
			t.Errorf("%s holds %d keys, want %.0f ± %.0f", name, n, want, keyBound(len(ks), slots, table.Size()))
		}
	}

	// The seed moves keys, exactly where the tables disagree.
	noSeed := opts
	noSeed.Seed = 0
	unseeded := mustHashFunc(t, noSeed)
	hits := getAll(t, newRing(t, servers, unseeded, 0), ks)
	other := unseeded(names)
	for _, k := range ks {
		if same := table.Lookup(k) == other.Get(k); hits[k] != same {
			t.Fatalf("%q hit = %v without the seed, but its shard stays = %v", k, hits[k], same)
		}
	}
	// Independent tables of shares 1/6, 2/6, 3/6 agree on a key with
	// probability 1/36 + 4/36 + 9/36 = 0.389.
	rate := float64(len(hits)) / float64(len(ks))
	t.Logf("keys read without the seed: %.4f hit", rate)
	if rate < 0.389-0.05 || rate > 0.389+0.05 {
		t.Errorf("without the seed %.4f of the keys hit, want 0.389 ± 0.05", rate)
	}
}
