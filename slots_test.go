package maglev

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// backendsOf returns t's backends with their weights, in table order.
func backendsOf(t *Table) []Backend {
	names, weights := t.Backends(), t.Weights()
	bs := make([]Backend, len(names))
	for i := range bs {
		bs[i] = Backend{Name: names[i], Weight: weights[i]}
	}
	return bs
}

// sameTable fails the test unless got equals want slot for slot, by name,
// with the same backends, weights, hasher answers and candidates.
func sameTable(t *testing.T, what string, got, want *Table) {
	t.Helper()
	if d := got.Diff(want); d != 0 {
		t.Errorf("%s: %d slots differ", what, d)
	}
	if got.Size() != want.Size() {
		t.Errorf("%s: size %d, want %d", what, got.Size(), want.Size())
	}
	if !slices.Equal(got.Backends(), want.Backends()) {
		t.Errorf("%s: backends differ", what)
	}
	if !slices.Equal(got.Weights(), want.Weights()) {
		t.Errorf("%s: weights %v, want %v", what, got.Weights(), want.Weights())
	}
	if !slices.Equal(got.AppendSlots(nil), want.AppendSlots(nil)) {
		t.Errorf("%s: slot arrays differ", what)
	}
	if (got.slots16 == nil) != (want.slots16 == nil) || (got.slots32 == nil) != (want.slots32 == nil) {
		t.Errorf("%s: slot width differs: 2-byte %v, 4-byte %v; want %v, %v", what,
			got.slots16 != nil, got.slots32 != nil, want.slots16 != nil, want.slots32 != nil)
	}
	if got.kind != want.kind || got.seed != want.seed {
		t.Errorf("%s: hasher kind %d seed %d, want %d %d", what, got.kind, got.seed, want.kind, want.seed)
	}
	for k := range 200 {
		key := fmt.Sprintf("key-%d", k)
		if g, w := got.Lookup(key), want.Lookup(key); g != w {
			t.Fatalf("%s: Lookup(%q) = %q, want %q", what, key, g, w)
		}
		if g, w := got.LookupBytes([]byte(key)), want.LookupBytes([]byte(key)); g != w {
			t.Fatalf("%s: LookupBytes(%q) = %q, want %q", what, key, g, w)
		}
		if g, w := got.LookupIndex(key), want.LookupIndex(key); g != w {
			t.Fatalf("%s: LookupIndex(%q) = %d, want %d", what, key, g, w)
		}
		if k%20 == 0 {
			g, w := slices.Collect(got.Candidates(key)), slices.Collect(want.Candidates(key))
			if !slices.Equal(g, w) {
				t.Fatalf("%s: Candidates(%q) = %v, want %v", what, key, g, w)
			}
		}
	}
}

// names returns n backend names, name-0 .. name-(n-1).
func manyNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("name-%d", i)
	}
	return names
}

// TestNewFromSlotsRoundTrip rebuilds tables of every kind from their own
// slot arrays: unweighted and weighted, with drained backends, empty, with
// 2-byte and 4-byte slots and with each kind of hasher.
func TestNewFromSlotsRoundTrip(t *testing.T) {
	mustNew := func(bs []string, m int, h Hasher) *Table {
		tab, err := New(bs, m, h)
		if err != nil {
			t.Fatal(err)
		}
		return tab
	}
	tables := []struct {
		name string
		tab  *Table
	}{
		{"a-e/M=13", mustNew([]string{"e", "a", "c", "b", "d"}, 13, nil)},
		{"one/M=7", mustNew([]string{"only"}, 7, nil)},
		{"empty/M=7", mustNew(nil, 7, nil)},
		{"100/M=65537/farm", mustNew(manyNames(100), DefaultSize, Farm())},
		{"100/M=65537/xxh3-seed", mustNew(manyNames(100), DefaultSize, XXH3Seed(42))},
		{"100/M=65537/fnv1a", mustNew(manyNames(100), DefaultSize, FNV1a())},
		{"weighted/M=65537", mustWeighted(t, weighted(1, 2, 0, 5, 3), DefaultSize, nil)},
		{"drained/M=13", mustWeighted(t, weighted(0, 0, 0), 13, nil)},
		// More than 65,535 backends: 4-byte slots.
		{"65536/M=65537", mustNew(manyNames(1<<16), DefaultSize, nil)},
	}
	r := rand.New(rand.NewPCG(1, 2))
	big := make([]Backend, 1<<16)
	for i := range big {
		big[i] = Backend{Name: fmt.Sprintf("w-%d", i), Weight: uint32(r.IntN(3))}
	}
	tables = append(tables, struct {
		name string
		tab  *Table
	}{"weighted-65536/M=65537", mustWeighted(t, big, DefaultSize, nil)})

	for _, c := range tables {
		t.Run(c.name, func(t *testing.T) {
			got, err := NewFromSlots(backendsOf(c.tab), c.tab.AppendSlots(nil), c.tab.Hasher())
			if err != nil {
				t.Fatal(err)
			}
			sameTable(t, c.name, got, c.tab)
		})
	}
	if tab := tables[len(tables)-2].tab; tab.slots32 == nil {
		t.Error("a table of 65,536 backends has no 4-byte slots: the test misses that path")
	}
}

// TestNewFromSlotsOrder checks that the order of the given backends does not
// matter: slots name backends by their index in the list as given.
func TestNewFromSlotsOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 3, 50, 1<<16 + 3} {
		var want *Table
		var err error
		if n < 1000 {
			want, err = NewWeighted(weighted(randomWeights(r, n)...), 1009, FNV1a())
		} else {
			want, err = New(manyNames(n), 100003, FNV1a())
		}
		if err != nil {
			t.Fatal(err)
		}
		bs := backendsOf(want)
		slots := want.AppendSlots(nil)
		for range 3 {
			// Shuffle the backends, then rewrite the slots' indices to
			// the shuffled positions.
			perm := r.Perm(n)
			shuffled := make([]Backend, n)
			pos := make([]uint32, n) // pos[old] = new
			for newI, old := range perm {
				shuffled[newI] = bs[old]
				pos[old] = uint32(newI)
			}
			moved := make([]uint32, len(slots))
			for s, j := range slots {
				moved[s] = j // noBackend, for a table of drained backends
				if j != noBackend {
					moved[s] = pos[j]
				}
			}
			got, err := NewFromSlots(shuffled, moved, FNV1a())
			if err != nil {
				t.Fatal(err)
			}
			sameTable(t, fmt.Sprintf("n=%d shuffled", n), got, want)
		}
	}
}

// TestNewFromSlotsHasher checks that a nil hasher means XXH3, and that the
// table keeps no reference to the caller's slices.
func TestNewFromSlotsHasher(t *testing.T) {
	want, err := New([]string{"a", "b", "c"}, 13, nil)
	if err != nil {
		t.Fatal(err)
	}
	bs := backendsOf(want)
	slots := want.AppendSlots(nil)
	got, err := NewFromSlots(bs, slots, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameTable(t, "nil hasher", got, want)
	if got.kind != kindXXH3 {
		t.Errorf("nil hasher: kind %d, want the XXH3 fast path", got.kind)
	}
	for i := range slots {
		slots[i] = 0
	}
	bs[0].Name = "changed"
	sameTable(t, "after the caller's slices changed", got, want)
}

// TestNewFromSlotsErrors checks every error NewFromSlots returns: matchable
// with errors.Is, prefixed with the package name, and no table.
func TestNewFromSlotsErrors(t *testing.T) {
	ab := []Backend{{"a", 1}, {"b", 1}}
	cases := []struct {
		name     string
		backends []Backend
		slots    []uint32
		want     error
	}{
		{"no slots", ab, nil, ErrSize},
		{"M=1", ab[:1], []uint32{0}, ErrSize},
		{"M=8", ab, make([]uint32, 8), ErrSize},
		{"M=9", ab, make([]uint32, 9), ErrSize},
		{"M>MaxSize", ab, make([]uint32, MaxSize+1), ErrSize},
		{"more backends than slots", weighted(1, 1, 1, 1), []uint32{0, 1, 2}, ErrTooManyBackends},
		{"empty name", []Backend{{"a", 1}, {"", 1}}, []uint32{0, 1, 0}, ErrEmptyName},
		{"duplicate name", []Backend{{"a", 1}, {"b", 1}, {"a", 2}}, []uint32{0, 1, 2}, ErrDuplicateName},
		{"index out of range", ab, []uint32{0, 1, 2}, ErrSlotOwner},
		{"index far out of range", ab, []uint32{0, 1, 1 << 31}, ErrSlotOwner},
		{"owners after noBackend", ab, []uint32{noBackend, noBackend, 1}, ErrSlotOwner},
		{"noBackend after owners", ab, []uint32{0, noBackend, 1}, ErrSlotOwner},
		{"owner of weight 0", []Backend{{"a", 1}, {"b", 0}}, []uint32{0, 1, 0}, ErrSlotOwner},
		{"owner without backends", nil, []uint32{0, 0, 0}, ErrSlotOwner},
		{"4-byte slots, out of range", bigBackends(1 << 16), append(slices.Repeat([]uint32{0}, DefaultSize-1), 1<<16), ErrSlotOwner},
		{"4-byte slots, weight 0", append(bigBackends(1<<16), Backend{"zero", 0}), append(slices.Repeat([]uint32{0}, DefaultSize-1), 1<<16), ErrSlotOwner},
	}
	for _, c := range cases {
		tab, err := NewFromSlots(c.backends, c.slots, nil)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			continue
		}
		if tab != nil {
			t.Errorf("%s: a table with the error", c.name)
		}
		if !strings.HasPrefix(err.Error(), "maglev: ") {
			t.Errorf("%s: error %q lacks the package prefix", c.name, err)
		}
	}
}

// bigBackends returns n backends of weight 1.
func bigBackends(n int) []Backend {
	bs := make([]Backend, n)
	for i, name := range manyNames(n) {
		bs[i] = Backend{Name: name, Weight: 1}
	}
	return bs
}

// TestNewFromSlotsEdges checks the tables with no slots owned, and a
// backend that owns no slot.
func TestNewFromSlotsEdges(t *testing.T) {
	none := slices.Repeat([]uint32{noBackend}, 7)
	for _, bs := range [][]Backend{nil, {{"a", 0}, {"b", 0}}, {{"a", 1}}} {
		tab, err := NewFromSlots(bs, none, nil)
		if err != nil {
			t.Fatalf("%v: %v", bs, err)
		}
		if tab.Lookup("k") != "" || tab.Size() != 7 || tab.NumBackends() != len(bs) || tab.LookupIndex("k") != -1 {
			t.Errorf("%v: Lookup %q, Size %d, Len %d, want \"\", 7, %d", bs, tab.Lookup("k"), tab.Size(), tab.NumBackends(), len(bs))
		}
		if c := slices.Collect(tab.Candidates("k")); len(c) != 0 {
			t.Errorf("%v: candidates %v, want none", bs, c)
		}
		if !slices.Equal(tab.AppendSlots(nil), none) {
			t.Errorf("%v: AppendSlots %v, want %v", bs, tab.AppendSlots(nil), none)
		}
	}
	empty, _ := New(nil, 7, nil)
	if tab, _ := NewFromSlots(nil, none, nil); tab.Diff(empty) != 0 {
		t.Error("no backends: not New(nil, 7, nil)'s table")
	}
	// b owns no slot: allowed, and it stays a known backend.
	tab, err := NewFromSlots([]Backend{{"b", 1}, {"a", 1}}, []uint32{1, 1, 1, 1, 1, 1, 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := tab.Counts(); !slices.Equal(got, []int{7, 0}) {
		t.Errorf("counts %v, want [7 0]", got)
	}
	if tab.Index("b") != 1 || tab.Lookup("k") != "a" {
		t.Errorf("Index(b) = %d, Lookup = %q; want 1, a", tab.Index("b"), tab.Lookup("k"))
	}
}
