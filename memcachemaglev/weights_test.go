package memcachemaglev_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/memcachemaglev"
)

// mustTable returns maglev.NewWeighted's table, the reference the
// Selector's tables are checked against.
func mustTable(t testing.TB, servers []memcachemaglev.Server, size int, seed uint64) *maglev.Table {
	t.Helper()
	bs := make([]maglev.Backend, len(servers))
	for i, s := range servers {
		bs[i] = maglev.Backend{Name: s.Addr, Weight: s.Weight}
	}
	tab, err := maglev.NewWeighted(bs, size, maglev.XXH3Seed(seed))
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// sameTable fails the test unless got has want's backends, weights, size
// and slots, slot for slot.
func sameTable(t testing.TB, what string, got, want *maglev.Table) {
	t.Helper()
	switch {
	case got == nil:
		t.Fatalf("%s: no table", what)
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
// a drained server owns no slot, every other at least one, and server i
// owns (M − N')·w_i/Σw + 1 slots within 1 + (N' − 2)·w_i/Σw, N' being
// the number of servers not drained.
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

// TestWeigh checks how gomemcache's repeats map to weights: each
// distinct string once, in the order of its first appearance, weighing the
// number of times it is listed.
func TestWeigh(t *testing.T) {
	type S = memcachemaglev.Server
	for _, tc := range []struct {
		list []string
		want []S
	}{
		{nil, []S{}},
		{[]string{"a:1"}, []S{{"a:1", 1}}},
		{[]string{"a:1", "b:1"}, []S{{"a:1", 1}, {"b:1", 1}}},
		{[]string{"a:1", "a:1", "b:1"}, []S{{"a:1", 2}, {"b:1", 1}}},
		{[]string{"b:1", "a:1", "b:1", "c:1", "b:1"}, []S{{"b:1", 3}, {"a:1", 1}, {"c:1", 1}}},
		// Exact strings: no resolution, no trimming; "" is kept for
		// SetServers to reject.
		{[]string{"localhost:1", "127.0.0.1:1", "a:1 ", "", ""}, []S{{"localhost:1", 1}, {"127.0.0.1:1", 1}, {"a:1 ", 1}, {"", 2}}},
	} {
		if got := memcachemaglev.Weigh(tc.list...); !slices.Equal(got, tc.want) {
			t.Errorf("Weigh(%q) = %v, want %v", tc.list, got, tc.want)
		}
	}
}

// TestRepeatsAddWeight checks that SetServers weighs a server listed k
// times k: its table is maglev.NewWeighted's for the distinct strings and
// their counts, in any order of the list, and maglev.New's when nothing
// repeats or everything repeats equally (weights are shares).
func TestRepeatsAddWeight(t *testing.T) {
	list := []string{"10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.1:11211", "/var/run/memcached.sock", "10.0.0.1:11211", "10.0.0.2:11211"}
	want := mustTable(t, []memcachemaglev.Server{
		{Addr: "10.0.0.1:11211", Weight: 3}, {Addr: "10.0.0.2:11211", Weight: 2}, {Addr: "/var/run/memcached.sock", Weight: 1},
	}, maglev.DefaultSize, 0)
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		shuffled := slices.Clone(list)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		s, err := memcachemaglev.New(shuffled...)
		if err != nil {
			t.Fatal(err)
		}
		sameTable(t, fmt.Sprintf("New(%q)", shuffled), s.Table(), want)
	}
	// 3:2:1 of 65,537 slots, in the servers' sorted order.
	if got := want.Counts(); !slices.Equal(got, []int{10923, 32768, 21846}) {
		t.Errorf("3:2:1 counts %v, want [10923 32768 21846] (/var/run/memcached.sock, 10.0.0.1, 10.0.0.2)", got)
	}

	distinct := []string{"10.0.0.1:11211", "10.0.0.2:11211", "/var/run/memcached.sock"}
	plain, err := maglev.New(distinct, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range [][]string{distinct, slices.Concat(distinct, distinct), slices.Concat(distinct, distinct, distinct)} {
		s, err := memcachemaglev.New(l...)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s.Table().AppendSlots(nil), plain.AppendSlots(nil)) {
			t.Errorf("New(%q): table differs from maglev.New's in %d slots", l, s.Table().Diff(plain))
		}
	}
}

// TestWeightedIsNewWeighted checks, over random servers, weights (drained
// ones included), seeds and table sizes from a fixed source, that the
// Selector's table is maglev.NewWeighted's with maglev.XXH3Seed(seed),
// slot for slot, for every order of the servers; that PickServer follows
// it; and that SetServers and SetWeighted keep the Options.
func TestWeightedIsNewWeighted(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 13, 251, 10007, maglev.DefaultSize, 131071}
	for iter := range 25 {
		n := 1 + r.IntN(12)
		servers := make([]memcachemaglev.Server, n)
		for i := range servers {
			servers[i] = memcachemaglev.Server{Addr: fmt.Sprintf("10.0.%d.%d:11211", r.IntN(4), r.IntN(256)), Weight: uint32(r.IntN(5))}
		}
		servers = slices.CompactFunc(slices.SortedFunc(slices.Values(servers), func(a, b memcachemaglev.Server) int {
			return strings.Compare(a.Addr, b.Addr)
		}), func(a, b memcachemaglev.Server) bool { return a.Addr == b.Addr })
		if !slices.ContainsFunc(servers, func(s memcachemaglev.Server) bool { return s.Weight > 0 }) {
			servers[0].Weight = 1
		}
		opts := memcachemaglev.Options{TableSize: sizes[r.IntN(len(sizes))], Seed: r.Uint64()}
		if r.IntN(3) == 0 {
			opts.Seed = 0
		}
		size := opts.TableSize
		if size == 0 {
			size = maglev.DefaultSize
		}
		want := mustTable(t, servers, size, opts.Seed)
		what := fmt.Sprintf("iter %d (%d servers, %+v)", iter, len(servers), opts)
		var s *memcachemaglev.Selector
		for range 2 {
			shuffled := slices.Clone(servers)
			r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			var err error
			if s, err = memcachemaglev.NewWeighted(shuffled, opts); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			sameTable(t, what, s.Table(), want)
			checkShares(t, s.Table())
		}
		for _, k := range keys("k", 200) {
			if a, err := s.PickServer(k); err != nil || a.String() != want.Lookup(k) {
				t.Fatalf("%s: PickServer(%q) = %v, %v; want %s", what, k, a, err, want.Lookup(k))
			}
		}

		// Later sets keep the size and the seed.
		if err := s.SetServers("10.9.0.1:11211", "10.9.0.2:11211", "10.9.0.1:11211"); err != nil {
			t.Fatal(err)
		}
		sameTable(t, what+" then SetServers", s.Table(), mustTable(t, []memcachemaglev.Server{{Addr: "10.9.0.1:11211", Weight: 2}, {Addr: "10.9.0.2:11211", Weight: 1}}, size, opts.Seed))
		if err := s.SetWeighted(servers); err != nil {
			t.Fatal(err)
		}
		sameTable(t, what+" then SetWeighted", s.Table(), want)
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

// TestGolden pins the tables of three Selectors: how a list maps to
// servers and weights, and Options to maglev.NewWeighted's size and
// hasher. The values were computed by this test when weights and Options
// were added, and equal maglev.NewWeighted's, whose own tables the root
// module's TestGolden pins on little- and big-endian machines. Clients
// that share a server list must keep computing the same tables: a change
// here moves deployed keys, a breaking change.
func TestGolden(t *testing.T) {
	small, err := memcachemaglev.NewWeighted([]memcachemaglev.Server{
		{Addr: "10.0.0.3:11211", Weight: 1}, {Addr: "10.0.0.1:11211", Weight: 2},
		{Addr: "/var/run/memcached.sock", Weight: 0}, {Addr: "10.0.0.2:11211", Weight: 3},
	}, memcachemaglev.Options{TableSize: 13, Seed: 0x5eed})
	if err != nil {
		t.Fatal(err)
	}
	var owners []string
	for slot := range small.Table().Size() {
		owners = append(owners, strings.TrimSuffix(strings.TrimPrefix(small.Table().LookupHash(uint64(slot)), "10.0.0."), ":11211"))
	}
	if got, want := strings.Join(owners, " "), goldenSmall; got != want {
		t.Errorf("13 slots, 1:2:3:0, seed 0x5eed: owners\n%s, want\n%s", got, want)
	}
	checkShares(t, small.Table())

	repeats, err := memcachemaglev.New("10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.1:11211", "/var/run/memcached.sock")
	if err != nil {
		t.Fatal(err)
	}
	weighted, err := memcachemaglev.NewWeighted([]memcachemaglev.Server{
		{Addr: "10.0.0.1:11211", Weight: 1}, {Addr: "10.0.0.2:11211", Weight: 2},
		{Addr: "10.0.0.3:11211", Weight: 3}, {Addr: "/var/run/memcached.sock", Weight: 0},
	}, memcachemaglev.Options{TableSize: 10007, Seed: 0x5eed})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tab  *maglev.Table
		want string
	}{
		{"repeats, default Options", repeats.Table(), goldenRepeats},
		{"1:2:3:0, M=10007, seed 0x5eed", weighted.Table(), goldenWeighted},
	} {
		if got := slotsSHA256(tc.tab); got != tc.want {
			t.Errorf("%s: SHA-256 %s, want %s", tc.name, got, tc.want)
		}
	}
}

const (
	// goldenSmall: each slot's owner, 10.0.0.N:11211 as N. The counts,
	// 6, 5 and 2 slots for weights 3, 2 and 1, are within NewWeighted's
	// bounds (checkShares); the drained socket owns none.
	goldenSmall    = "1 3 2 1 1 1 2 2 1 2 2 3 2"
	goldenRepeats  = "e29efb763e42e9f8601dcdf865101b11973483937de1445042aefaaa5a39238a"
	goldenWeighted = "e57812a3111d904f760fbf5b6e0aa9f3a2295d65781cfa99315f20c1fdad1d5e"
)

// TestSeed checks that Options.Seed changes the table, and only as
// maglev.XXH3Seed does: the same seed gives the same table every time, the
// slot counts (which depend on the weights only) stay, and a key's server
// changes for about 1 − Σ share² of the keys.
func TestSeed(t *testing.T) {
	servers := []memcachemaglev.Server{{Addr: "10.0.0.1:11211", Weight: 1}, {Addr: "10.0.0.2:11211", Weight: 1}, {Addr: "10.0.0.3:11211", Weight: 2}}
	tables := map[uint64]*maglev.Table{}
	for _, seed := range []uint64{0, 1, 0x5eed, 1 << 63} {
		want := mustTable(t, servers, maglev.DefaultSize, seed)
		reversed := slices.Clone(servers)
		slices.Reverse(reversed)
		for _, list := range [][]memcachemaglev.Server{servers, reversed} {
			s, err := memcachemaglev.NewWeighted(list, memcachemaglev.Options{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			sameTable(t, fmt.Sprintf("seed %#x", seed), s.Table(), want)
		}
		tables[seed] = want
	}
	zero := tables[0]
	for seed, tab := range tables {
		if seed == 0 {
			continue
		}
		if !slices.Equal(tab.Counts(), zero.Counts()) {
			t.Errorf("seed %#x: counts %v, want the unseeded table's %v", seed, tab.Counts(), zero.Counts())
		}
		// Two independent tables of shares 1/4, 1/4, 1/2 agree on a slot
		// with probability 3/8, so about 5/8 of the 65,537 slots differ
		// (standard deviation 124).
		if d, want := tab.Diff(zero), 5*tab.Size()/8; d < want-2000 || d > want+2000 {
			t.Errorf("seed %#x: %d slots differ from the unseeded table, want about %d", seed, d, want)
		}
	}
}

// TestBadWeighted checks each kind of bad weighted list and bad Options:
// the error's prefix, what errors.Is matches, a *ConfigError naming the
// field for bad Options only, and that SetWeighted keeps the previous
// servers.
func TestBadWeighted(t *testing.T) {
	type S = memcachemaglev.Server
	good := []S{{"10.0.0.1:11211", 1}, {"10.0.0.2:11211", 2}}
	many := make([]S, 14)
	for i := range many {
		many[i] = S{fmt.Sprintf("10.0.0.%d:11211", i+1), 1}
	}
	for _, tc := range []struct {
		name    string
		servers []S
		opts    memcachemaglev.Options
		want    error
		options bool // the Options are bad: NewWeighted fails with a *ConfigError, SetWeighted cannot
	}{
		{"empty list", nil, memcachemaglev.Options{}, maglev.ErrNoBackends, false},
		{"all drained", []S{{"10.0.0.1:11211", 0}, {"10.0.0.2:11211", 0}}, memcachemaglev.Options{}, maglev.ErrNoBackends, false},
		{"empty Addr", []S{{"10.0.0.1:11211", 1}, {"", 1}}, memcachemaglev.Options{}, maglev.ErrEmptyName, false},
		{"empty drained Addr", []S{{"10.0.0.1:11211", 1}, {"", 0}}, memcachemaglev.Options{}, maglev.ErrEmptyName, false},
		{"duplicate", []S{{"10.0.0.1:11211", 1}, {"10.0.0.2:11211", 1}, {"10.0.0.1:11211", 2}}, memcachemaglev.Options{}, maglev.ErrDuplicateName, false},
		{"no port", []S{{"10.0.0.1:11211", 1}, {"127.0.0.1", 1}}, memcachemaglev.Options{}, memcachemaglev.ErrResolve, false},
		{"drained, no port", []S{{"10.0.0.1:11211", 1}, {"127.0.0.1", 0}}, memcachemaglev.Options{}, memcachemaglev.ErrResolve, false},
		{"too many", many, memcachemaglev.Options{TableSize: 13}, maglev.ErrTooManyBackends, false},
		{"size not prime", good, memcachemaglev.Options{TableSize: 65536}, maglev.ErrSize, true},
		{"size 1", good, memcachemaglev.Options{TableSize: 1}, maglev.ErrSize, true},
		{"size negative", good, memcachemaglev.Options{TableSize: -7}, maglev.ErrSize, true},
		{"size too large", good, memcachemaglev.Options{TableSize: maglev.MaxSize + 2}, maglev.ErrSize, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := memcachemaglev.NewWeighted(tc.servers, tc.opts)
			if err == nil || s != nil {
				t.Fatalf("NewWeighted = %v, %v; want nil and an error", s, err)
			}
			if !strings.HasPrefix(err.Error(), "memcachemaglev: ") || !errors.Is(err, tc.want) {
				t.Errorf("NewWeighted: error %q, want one starting \"memcachemaglev: \" that matches %v", err, tc.want)
			}
			var ce *memcachemaglev.ConfigError
			if isConfig := errors.As(err, &ce); isConfig != tc.options || errors.Is(err, memcachemaglev.ErrInvalidConfig) != tc.options {
				t.Errorf("NewWeighted: error %q is a *ConfigError: %v, matches ErrInvalidConfig: %v; want %v", err, isConfig, errors.Is(err, memcachemaglev.ErrInvalidConfig), tc.options)
			}
			if tc.options {
				if ce.Field != "TableSize" || !strings.HasPrefix(err.Error(), "memcachemaglev: invalid config: TableSize: unsupported table size: ") {
					t.Errorf("NewWeighted: error %q names field %q, want TableSize", err, ce.Field)
				}
				return
			}
			s, err = memcachemaglev.NewWeighted(good, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			before := s.Table()
			err = s.SetWeighted(tc.servers)
			if err == nil {
				t.Fatal("SetWeighted succeeded")
			}
			if !strings.HasPrefix(err.Error(), "memcachemaglev: ") || !errors.Is(err, tc.want) {
				t.Errorf("SetWeighted: error %q, want one starting \"memcachemaglev: \" that matches %v", err, tc.want)
			}
			if s.Table() != before {
				t.Error("a failed SetWeighted changed the table")
			}
		})
	}
}

// TestDrained checks that a drained server stays known (in the table, with
// no slots, visited by Each) while PickServer never returns it.
func TestDrained(t *testing.T) {
	s, err := memcachemaglev.NewWeighted([]memcachemaglev.Server{
		{Addr: "10.0.0.1:11211", Weight: 1}, {Addr: "10.0.0.2:11211", Weight: 0}, {Addr: "/var/run/memcached.sock", Weight: 1},
	}, memcachemaglev.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tab := s.Table()
	if i := tab.Index("10.0.0.2:11211"); i < 0 || tab.Counts()[i] != 0 || tab.Weights()[i] != 0 {
		t.Fatalf("drained server: index %d, counts %v, weights %v", i, tab.Counts(), tab.Weights())
	}
	var visited []string
	if err := s.Each(func(a net.Addr) error { visited = append(visited, a.String()); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(visited, tab.Backends()) {
		t.Errorf("Each visited %q, want every server, the drained one included: %q", visited, tab.Backends())
	}
	for _, k := range keys("d", 5000) {
		if a, err := s.PickServer(k); err != nil || a.String() == "10.0.0.2:11211" {
			t.Fatalf("PickServer(%q) = %v, %v", k, a, err)
		}
	}
	if err := s.SetServers(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PickServer("k"); err != memcache.ErrNoServers {
		t.Errorf("after SetServers(): PickServer error %v, want memcache.ErrNoServers", err)
	}
}
