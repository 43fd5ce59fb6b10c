package redismaglev_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/redismaglev"
	"github.com/redis/go-redis/v9"
)

// mustHashFunc returns NewConsistentHashFunc(opts), failing the test on an
// error.
func mustHashFunc(t testing.TB, opts redismaglev.Options) func([]string) redis.ConsistentHash {
	t.Helper()
	f, err := redismaglev.NewConsistentHashFunc(opts)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// reference returns maglev.NewWeighted's table for the shards with the
// options: the weight in Weights, or 1.
func reference(t testing.TB, shards []string, opts redismaglev.Options) *maglev.Table {
	t.Helper()
	bs := make([]maglev.Backend, len(shards))
	for i, name := range shards {
		w, ok := opts.Weights[name]
		if !ok {
			w = 1
		}
		bs[i] = maglev.Backend{Name: name, Weight: w}
	}
	size := opts.TableSize
	if size == 0 {
		size = maglev.DefaultSize
	}
	tab, err := maglev.NewWeighted(bs, size, maglev.XXH3Seed(opts.Seed))
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// tableOf returns a hash's table, failing the test if it has none.
func tableOf(t testing.TB, h redis.ConsistentHash) *maglev.Table {
	t.Helper()
	mh := h.(*redismaglev.Hash)
	if mh.Err() != nil || mh.Table() == nil {
		t.Fatalf("no table: %v", mh.Err())
	}
	return mh.Table()
}

// sameTable fails the test unless got has want's backends, weights, size
// and slots, slot for slot.
func sameTable(t testing.TB, what string, got, want *maglev.Table) {
	t.Helper()
	switch {
	case !slices.Equal(got.Backends(), want.Backends()):
		t.Fatalf("%s: backends %q, want %q", what, got.Backends(), want.Backends())
	case !slices.Equal(got.Weights(), want.Weights()):
		t.Fatalf("%s: weights %v, want %v", what, got.Weights(), want.Weights())
	case got.Size() != want.Size():
		t.Fatalf("%s: size %d, want %d", what, got.Size(), want.Size())
	case !slices.Equal(got.AppendSlots(nil), want.AppendSlots(nil)):
		t.Fatalf("%s: slots differ from maglev.NewWeighted's in %d places", what, got.Diff(want))
	}
}

// checkShares checks maglev.NewWeighted's documented shares on a table:
// a drained shard owns no slot, every other at least one, and shard i
// owns (M − N')·w_i/Σw + 1 slots within 1 + (N' − 2)·w_i/Σw, N' being
// the number of shards not drained.
func checkShares(t testing.TB, tab *maglev.Table) {
	t.Helper()
	counts, ws := tab.Counts(), tab.Weights()
	var sum float64
	active := 0
	for _, w := range ws {
		sum += float64(w)
		if w > 0 {
			active++
		}
	}
	for i, c := range counts {
		if ws[i] == 0 {
			if c != 0 {
				t.Fatalf("drained %s owns %d slots", tab.Backend(i), c)
			}
			continue
		}
		share := float64(ws[i]) / sum
		want := float64(tab.Size()-active)*share + 1
		bound := 1 + float64(active-2)*share + 1e-9
		if d := float64(c) - want; c < 1 || d > bound || d < -bound {
			t.Fatalf("%s (weight %d of %v) owns %d slots, want %.2f ± %.2f", tab.Backend(i), ws[i], ws, c, want, bound)
		}
	}
}

// TestZeroOptions checks that the zero Options give NewConsistentHash's
// table, maglev.New's, slot for slot, and that weights all equal do too.
func TestZeroOptions(t *testing.T) {
	names := shardNames(5)
	want, err := maglev.New(names, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	equal := map[string]uint32{}
	for _, n := range names {
		equal[n] = 7
	}
	for name, f := range map[string]func([]string) redis.ConsistentHash{
		"NewConsistentHash":  redismaglev.NewConsistentHash,
		"zero Options":       mustHashFunc(t, redismaglev.Options{}),
		"equal weights":      mustHashFunc(t, redismaglev.Options{Weights: equal}),
		"explicit TableSize": mustHashFunc(t, redismaglev.Options{TableSize: maglev.DefaultSize}),
		"weight 1 given":     mustHashFunc(t, redismaglev.Options{Weights: map[string]uint32{"shard1": 1, "shard3": 1}}),
	} {
		if got := tableOf(t, f(names)); !slices.Equal(got.AppendSlots(nil), want.AppendSlots(nil)) || got.Size() != want.Size() {
			t.Errorf("%s: table differs from maglev.New's in %d slots", name, got.Diff(want))
		}
	}
}

// TestHashFuncIsNewWeighted checks, over random shard names, weights
// (drained shards and shards not in Weights included), seeds and table
// sizes from a fixed source, that the function's table is
// maglev.NewWeighted's with maglev.XXH3Seed(seed), slot for slot, in any
// order of the shards, and that Get follows it.
func TestHashFuncIsNewWeighted(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 13, 251, 10007, maglev.DefaultSize, 131071}
	for iter := range 25 {
		shards := shardNames(1 + r.IntN(12))
		opts := redismaglev.Options{TableSize: sizes[r.IntN(len(sizes))], Weights: map[string]uint32{}}
		if r.IntN(3) > 0 {
			opts.Seed = r.Uint64()
		}
		for _, name := range shards {
			if r.IntN(4) > 0 { // else the shard weighs 1 by default
				opts.Weights[name] = uint32(r.IntN(5))
			}
		}
		opts.Weights["not-a-shard"] = 9 // ignored
		if !slices.ContainsFunc(shards, func(n string) bool { w, ok := opts.Weights[n]; return !ok || w > 0 }) {
			opts.Weights[shards[0]] = 1
		}
		want := reference(t, shards, opts)
		f := mustHashFunc(t, opts)
		what := fmt.Sprintf("iter %d (%d shards, %+v)", iter, len(shards), opts)
		var h redis.ConsistentHash
		for range 2 {
			shuffled := slices.Clone(shards)
			r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			h = f(shuffled)
			sameTable(t, what, tableOf(t, h), want)
			checkShares(t, tableOf(t, h))
		}
		for _, k := range keys("k", 200) {
			if got := h.Get(k); got != want.Lookup(k) {
				t.Fatalf("%s: Get(%q) = %q, want %q", what, k, got, want.Lookup(k))
			}
		}
	}
}

// TestWeightsCopied checks that changing the Weights map after
// NewConsistentHashFunc changes nothing.
func TestWeightsCopied(t *testing.T) {
	weights := map[string]uint32{"shard0": 3, "shard1": 1}
	opts := redismaglev.Options{Weights: weights}
	want := reference(t, shardNames(3), opts)
	f := mustHashFunc(t, opts)
	weights["shard0"], weights["shard2"] = 0, 5
	sameTable(t, "after changing the map", tableOf(t, f(shardNames(3))), want)
}

// TestSeed checks that Options.Seed changes the table, and only as
// maglev.XXH3Seed does: the same seed gives the same table every time, the
// slot counts (which depend on the weights only) stay, and about
// 1 − Σ share² of the slots change owner.
func TestSeed(t *testing.T) {
	shards := shardNames(3)
	weights := map[string]uint32{"shard2": 2}
	zero := tableOf(t, mustHashFunc(t, redismaglev.Options{Weights: weights})(shards))
	for _, seed := range []uint64{1, 0x5eed, 1 << 63} {
		opts := redismaglev.Options{Weights: weights, Seed: seed}
		a := tableOf(t, mustHashFunc(t, opts)(shards))
		b := tableOf(t, mustHashFunc(t, opts)([]string{shards[2], shards[0], shards[1]}))
		sameTable(t, fmt.Sprintf("seed %#x", seed), a, reference(t, shards, opts))
		sameTable(t, fmt.Sprintf("seed %#x, again", seed), b, a)
		if !slices.Equal(a.Counts(), zero.Counts()) {
			t.Errorf("seed %#x: counts %v, want the unseeded table's %v", seed, a.Counts(), zero.Counts())
		}
		// Two independent tables of shares 1/4, 1/4, 1/2 agree on a slot
		// with probability 3/8, so about 5/8 of the 65,537 slots differ
		// (standard deviation 124).
		if d, want := a.Diff(zero), 5*a.Size()/8; d < want-2000 || d > want+2000 {
			t.Errorf("seed %#x: %d slots differ from the unseeded table, want about %d", seed, d, want)
		}
	}
}

// TestBadOptions checks that bad Options give a *ConfigError naming the
// field, which errors.Is matches with ErrInvalidConfig and the reason, and
// that shard lists the function cannot build a table for give a Hash
// whose Get returns "" and whose Err says why.
func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  redismaglev.Options
		field string
		want  error
	}{
		{"size not prime", redismaglev.Options{TableSize: 65536}, "TableSize", maglev.ErrSize},
		{"size 1", redismaglev.Options{TableSize: 1}, "TableSize", maglev.ErrSize},
		{"size negative", redismaglev.Options{TableSize: -7}, "TableSize", maglev.ErrSize},
		{"size too large", redismaglev.Options{TableSize: maglev.MaxSize + 2}, "TableSize", maglev.ErrSize},
		{"weight for \"\"", redismaglev.Options{Weights: map[string]uint32{"shard0": 1, "": 1}}, "Weights", maglev.ErrEmptyName},
		{"weight 0 for \"\"", redismaglev.Options{Weights: map[string]uint32{"": 0}}, "Weights", maglev.ErrEmptyName},
	} {
		f, err := redismaglev.NewConsistentHashFunc(tc.opts)
		var ce *redismaglev.ConfigError
		if f != nil || !errors.Is(err, tc.want) || !errors.Is(err, redismaglev.ErrInvalidConfig) || !errors.As(err, &ce) {
			t.Errorf("%s: NewConsistentHashFunc = %v, %v; want nil and a *ConfigError that matches ErrInvalidConfig and %v", tc.name, f != nil, err, tc.want)
			continue
		}
		if prefix := "redismaglev: invalid config: " + tc.field + ": "; ce.Field != tc.field || !strings.HasPrefix(err.Error(), prefix) || strings.Contains(err.Error(), ": maglev: table") {
			t.Errorf("%s: error %q (Field %q), want it to start %q", tc.name, err, ce.Field, prefix)
		}
	}

	f := mustHashFunc(t, redismaglev.Options{Weights: map[string]uint32{"shard0": 0, "shard1": 0, "shard2": 2}, TableSize: 13})
	for _, tc := range []struct {
		name   string
		shards []string
		want   error
	}{
		{"every live shard drained", []string{"shard1", "shard0"}, maglev.ErrNoBackends},
		{"one shard, drained", []string{"shard0"}, maglev.ErrNoBackends},
		{"empty name", []string{"shard2", ""}, maglev.ErrEmptyName},
		{"duplicate", []string{"shard2", "shard3", "shard2"}, maglev.ErrDuplicateName},
		{"too many", shardNames(14), maglev.ErrTooManyBackends},
	} {
		h := f(tc.shards).(*redismaglev.Hash)
		if err := h.Err(); !errors.Is(err, tc.want) || !strings.HasPrefix(err.Error(), "redismaglev: ") {
			t.Errorf("%s: Err = %v, want an error starting \"redismaglev: \" that matches %v", tc.name, err, tc.want)
		}
		if h.Table() != nil {
			t.Errorf("%s: the Hash has a table", tc.name)
		}
		for _, k := range keys("k", 100) {
			if got := h.Get(k); got != "" {
				t.Fatalf("%s: Get(%q) = %q, want \"\"", tc.name, k, got)
			}
		}
	}
	// No live shard at all is the Ring's state, not an error.
	if h := f(nil).(*redismaglev.Hash); h.Err() != nil || h.Get("k") != "" {
		t.Errorf("no shards: Err = %v, Get = %q; want nil and \"\"", h.Err(), h.Get("k"))
	}
}

// slotsSHA256 is the SHA-256 of a table's slot array, each owner index as
// 4 bytes, little-endian: as the root module's golden tests hash it.
func slotsSHA256(tab *maglev.Table) string {
	buf := make([]byte, 0, 4*tab.Size())
	for _, s := range tab.AppendSlots(nil) {
		buf = binary.LittleEndian.AppendUint32(buf, s)
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}

// TestGolden pins two tables of the function: how Options map to
// maglev.NewWeighted's weights, size and hasher. The values were computed
// by this test when Options were added, and equal maglev.NewWeighted's,
// whose own tables the root module's TestGolden pins on little- and
// big-endian machines. Clients of a fleet must keep computing the same
// tables: a change here moves deployed keys, a breaking change.
func TestGolden(t *testing.T) {
	opts := redismaglev.Options{Weights: map[string]uint32{"shard0": 1, "shard1": 2, "shard2": 3, "shard3": 0}, TableSize: 13, Seed: 0x5eed}
	small := tableOf(t, mustHashFunc(t, opts)(shardNames(4)))
	var owners []string
	for slot := range small.Size() {
		owners = append(owners, strings.TrimPrefix(small.LookupHash(uint64(slot)), "shard"))
	}
	if got := strings.Join(owners, " "); got != goldenSmall {
		t.Errorf("13 slots, 1:2:3:0, seed 0x5eed: owners\n%s, want\n%s", got, goldenSmall)
	}
	checkShares(t, small)

	opts.TableSize = 10007
	if got := slotsSHA256(tableOf(t, mustHashFunc(t, opts)(shardNames(5)))); got != goldenWeighted {
		t.Errorf("1:2:3:0 and shard4 by default, M=10007, seed 0x5eed: SHA-256 %s, want %s", got, goldenWeighted)
	}
}

const (
	// goldenSmall: each slot's owner, shardN as N. The counts, 3, 5 and 5
	// slots for weights 1, 2 and 3, are within NewWeighted's bounds
	// (checkShares); the drained shard3 owns none.
	goldenSmall    = "2 2 1 2 1 2 1 0 1 0 1 2 0"
	goldenWeighted = "91de60c19945812028b25f419d478c9027f62b1b31634501aaa6b48f1acab28d"
)
