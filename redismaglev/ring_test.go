package redismaglev_test

import (
	"context"
	"errors"
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
	mu    sync.Mutex
	calls [][]string // each sorted
}

func (h *hashCalls) newConsistentHash(shards []string) redis.ConsistentHash {
	s := slices.Sorted(slices.Values(shards))
	h.mu.Lock()
	h.calls = append(h.calls, s)
	h.mu.Unlock()
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
