package maglev

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	farm "github.com/dgryski/go-farm"
	"github.com/zeebo/xxh3"
)

// slowTable is the spec written out plainly, independent of the package's
// Generator and Fill: it sorts the names, builds each key by string
// concatenation, computes every preference with % and fills round-robin. It
// returns each slot's owner name ("" for an empty backend list).
func slowTable(backends []string, m int, h Hasher) []string {
	if h == nil {
		h = XXH3()
	}
	names := slices.Clone(backends)
	slices.Sort(names)
	owner := make([]string, m)
	if len(names) == 0 {
		return owner
	}
	offset := make([]uint64, len(names))
	skip := make([]uint64, len(names))
	for i, name := range names {
		offset[i] = h.HashString(name+"|offset") % uint64(m)
		skip[i] = h.HashString(name+"|skip")%uint64(m-1) + 1
	}
	next := make([]uint64, len(names)) // how far each backend has walked
	filled := 0
	for filled < m {
		for i, name := range names {
			if filled == m {
				break
			}
			for {
				slot := (offset[i] + next[i]*skip[i]) % uint64(m)
				next[i]++
				if owner[slot] == "" {
					owner[slot] = name
					filled++
					break
				}
			}
		}
	}
	return owner
}

// owners returns every slot's owner name.
func owners(t *Table) []string {
	out := make([]string, t.Size())
	for s := range out {
		out[s] = t.LookupHash(uint64(s))
	}
	return out
}

func mustNew(t testing.TB, backends []string, m int, h Hasher) *Table {
	t.Helper()
	tab, err := New(backends, m, h)
	if err != nil {
		t.Fatalf("New(%d backends, %d): %v", len(backends), m, err)
	}
	return tab
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// builtins are the built-in hashers, by the names the golden tests use.
var builtins = []struct {
	name string
	h    Hasher
}{
	{"xxh3", XXH3()},
	{"xxh3-seed", XXH3Seed(0x9e3779b97f4a7c15)},
	{"farm", Farm()},
	{"fnv1a", FNV1a()},
}

// TestWorkedExample checks the seed's worked example, M = 7 with backends
// x (offset 2, skip 3), y (5, 2) and z (0, 1), through the public pieces.
func TestWorkedExample(t *testing.T) {
	perms := []Permutation{{2, 3}, {5, 2}, {0, 1}}
	wantSeq := [][]int{{2, 5, 1, 4, 0, 3, 6}, {5, 0, 2, 4, 6, 1, 3}, {0, 1, 2, 3, 4, 5, 6}}
	for i, p := range perms {
		var got []int
		s := p.Offset
		for j := range 7 {
			if at := (int(p.Offset) + j*int(p.Skip)) % 7; at != int(s) {
				t.Fatalf("perm %d: preference %d is %d, Next walk gives %d", i, j, at, s)
			}
			got = append(got, int(s))
			s = p.Next(s, 7)
		}
		if !slices.Equal(got, wantSeq[i]) {
			t.Errorf("perm %d sequence = %v, want %v", i, got, wantSeq[i])
		}
	}
	table := make([]uint16, 7)
	cursors := make([]uint32, 3)
	if err := Fill(table, perms, cursors); err != nil {
		t.Fatal(err)
	}
	if want := []uint16{2, 0, 0, 2, 1, 1, 0}; !slices.Equal(table, want) {
		t.Errorf("Fill = %v, want %v (z x x z y y x)", table, want)
	}
	// Where each backend would look next: x stopped after 6 (next 2),
	// y after 4 (next 6), z after 3 (next 4).
	if want := []uint32{2, 6, 4}; !slices.Equal(cursors, want) {
		t.Errorf("cursors = %v, want %v", cursors, want)
	}
}

// goldenSmall pins full tables for M = 13 and backends a..e. The values
// were produced by testdata/ref/maglev_ref.c, an independent C program that
// uses the reference xxHash (libxxhash 0.8.1) and FarmHash libraries (see
// testdata/ref/README.md for the commands); slowTable agrees (see
// TestGoldenSource).
var goldenSmall = map[string]string{
	"xxh3":      "e a c c a b d d e b a b c",
	"xxh3-seed": "a d d e b c c e a a c b b",
	"farm":      "a d c d a b e c c e b a b",
	"fnv1a":     "a c b b a c e c b d e d a",
}

// goldenLarge pins the SHA-256 of the slot array (each owner index as a
// little-endian uint32, see AppendSlots) for M = 65537 and the 100 backends
// 10.0.0.1:80 .. 10.0.0.100:80. The values were produced by
// testdata/ref/maglev_ref.c piped into sha256sum (testdata/ref/README.md);
// slowTable agrees (see TestGoldenSource).
var goldenLarge = map[string]string{
	"xxh3":      "177d8df218e2e5cb604c27db3629720a83f02af53c78dad7c59575a932ec1869",
	"xxh3-seed": "8416fe8db569bd903a385e9287a9b092e4a60c38551bfbb55f902d0afe21451e",
	"farm":      "cdac7f17df3c0a868f2180d877a54132c947c3ec78ba0190de79005a74a4cb93",
	"fnv1a":     "246d95288ac71e4bdeba765fed2dcce2d5d91263bcca6555cd34af6b88eb804f",
}

func largeBackends() []string {
	b := make([]string, 100)
	for i := range b {
		b[i] = fmt.Sprintf("10.0.0.%d:80", i+1)
	}
	return b
}

func slotsSHA256(slots []uint32) string {
	buf := make([]byte, 0, 4*len(slots))
	for _, s := range slots {
		buf = binary.LittleEndian.AppendUint32(buf, s)
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}

// TestGolden pins tables byte for byte. If it fails, the change alters
// tables that deployed fleets compute: that is a breaking change.
func TestGolden(t *testing.T) {
	for _, b := range builtins {
		t.Run(b.name, func(t *testing.T) {
			small := mustNew(t, []string{"e", "c", "a", "d", "b"}, 13, b.h)
			if got := strings.Join(owners(small), " "); got != goldenSmall[b.name] {
				t.Errorf("M=13 table = %q, want %q", got, goldenSmall[b.name])
			}
			large := mustNew(t, largeBackends(), DefaultSize, b.h)
			if got := slotsSHA256(large.AppendSlots(nil)); got != goldenLarge[b.name] {
				t.Errorf("M=65537 SHA-256 = %s, want %s", got, goldenLarge[b.name])
			}
		})
	}
}

// TestGoldenSource checks that the golden values are the plain spec's.
func TestGoldenSource(t *testing.T) {
	for _, b := range builtins {
		small := slowTable([]string{"a", "b", "c", "d", "e"}, 13, b.h)
		if got := strings.Join(small, " "); got != goldenSmall[b.name] {
			t.Errorf("%s: slowTable M=13 = %q, golden %q", b.name, got, goldenSmall[b.name])
		}
		bs := largeBackends()
		slices.Sort(bs)
		slow := slowTable(bs, DefaultSize, b.h)
		idx := make([]uint32, len(slow))
		for s, name := range slow {
			i, _ := slices.BinarySearch(bs, name)
			idx[s] = uint32(i)
		}
		if got := slotsSHA256(idx); got != goldenLarge[b.name] {
			t.Errorf("%s: slowTable M=65537 SHA-256 = %s, golden %s", b.name, got, goldenLarge[b.name])
		}
	}
}

// TestHashers checks each built-in hasher against the library it wraps,
// through both methods.
func TestHashers(t *testing.T) {
	inputs := []string{"", "a", "abc", "10.0.0.1:80|offset", strings.Repeat("x", 17), strings.Repeat("y", 129), strings.Repeat("z", 241), strings.Repeat("w", 1025)}
	std := fnv.New64a()
	for _, in := range inputs {
		b := []byte(in)
		std.Reset()
		std.Write(b)
		seed := uint64(0x9e3779b97f4a7c15)
		for _, c := range []struct {
			name string
			h    Hasher
			want uint64
		}{
			{"xxh3", XXH3(), xxh3.Hash(b)},
			{"xxh3-seed", XXH3Seed(seed), xxh3.HashSeed(b, seed)},
			{"xxh3-seed0", XXH3Seed(0), xxh3.Hash(b)},
			{"farm", Farm(), farm.Fingerprint64(b)},
			{"fnv1a", FNV1a(), std.Sum64()},
			{"func", HashFunc(farm.Fingerprint64), farm.Fingerprint64(b)},
		} {
			if got := c.h.Hash(b); got != c.want {
				t.Errorf("%s.Hash(%.10q) = %#x, want %#x", c.name, in, got, c.want)
			}
			if got := c.h.HashString(in); got != c.want {
				t.Errorf("%s.HashString(%.10q) = %#x, want %#x", c.name, in, got, c.want)
			}
		}
	}
	// Spot values from the hash functions' own published test vectors.
	if got := FNV1a().HashString("a"); got != 0xaf63dc4c8601ec8c {
		t.Errorf("FNV1a(a) = %#x, want 0xaf63dc4c8601ec8c", got)
	}
	if got := XXH3().HashString(""); got != 0x2d06800538d394c2 {
		t.Errorf("XXH3('') = %#x, want 0x2d06800538d394c2", got)
	}
}

// TestDefaultHasher checks that a nil Hasher means XXH3 with seed 0.
func TestDefaultHasher(t *testing.T) {
	bs := names("b", 20)
	a, b := mustNew(t, bs, 1009, nil), mustNew(t, bs, 1009, XXH3())
	if d := a.Diff(b); d != 0 {
		t.Errorf("nil hasher and XXH3 tables differ in %d slots", d)
	}
	if a.Hasher() == nil {
		t.Error("Hasher() = nil for a nil-hasher table")
	}
	if a.LookupHash(xxh3.HashString("k")) != a.Lookup("k") {
		t.Error("Lookup does not hash with XXH3")
	}
}

var smallPrimes = []int{2, 3, 5, 7, 11, 13, 17, 31, 61, 127, 251, 509, 1009, 2003, 4099}

// randomName returns a random name of 1..12 bytes, any byte values.
func randomName(r *rand.Rand) string {
	b := make([]byte, 1+r.IntN(12))
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return string(b)
}

// randomBackends returns n distinct random names.
func randomBackends(r *rand.Rand, n int) []string {
	seen := make(map[string]bool, n)
	out := make([]string, 0, n)
	for len(out) < n {
		if s := randomName(r); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// TestProperties checks, over random backend sets and sizes, that New
// matches the plain spec slot for slot, that every slot is owned, that the
// counts differ by at most one (the first M mod N backends own one more),
// and that the caller's order does not matter.
func TestProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	hashers := []Hasher{nil, XXH3Seed(7), Farm(), FNV1a()}
	for iter := range 300 {
		m := smallPrimes[r.IntN(len(smallPrimes))]
		n := r.IntN(min(m, 300) + 1)
		h := hashers[iter%len(hashers)]
		bs := randomBackends(r, n)
		tab := mustNew(t, bs, m, h)

		if got, want := owners(tab), slowTable(bs, m, h); !slices.Equal(got, want) {
			t.Fatalf("iter %d (M=%d N=%d): New differs from the plain spec", iter, m, n)
		}
		if n == 0 {
			continue
		}
		counts := tab.Counts()
		total := 0
		for i, c := range counts {
			want := m / n
			if i < m%n {
				want++
			}
			if c != want {
				t.Fatalf("iter %d (M=%d N=%d): backend %d owns %d slots, want %d", iter, m, n, i, c, want)
			}
			total += c
		}
		if total != m {
			t.Fatalf("iter %d: counts sum to %d, want %d", iter, total, m)
		}
		shuffled := slices.Clone(bs)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if d := tab.Diff(mustNew(t, shuffled, m, h)); d != 0 {
			t.Fatalf("iter %d: shuffling the backends changed %d slots", iter, d)
		}
		g, _ := NewGenerator(m, h)
		for _, name := range bs {
			p := g.Permutation(name)
			if p.Offset >= uint32(m) || p.Skip < 1 || p.Skip > uint32(m-1) {
				t.Fatalf("M=%d: Permutation(%q) = %+v out of range", m, name, p)
			}
		}
	}
}

// TestSkipRange checks skip ∈ 1..M-1 where a wrong stride range (H mod M,
// or H mod (M-1) without the +1) would often give 0.
func TestSkipRange(t *testing.T) {
	for _, m := range []int{2, 3, 5, 7} {
		for _, b := range builtins {
			g, err := NewGenerator(m, b.h)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[uint32]bool{}
			for i := range 2000 {
				p := g.Permutation(fmt.Sprint(i))
				if p.Skip == 0 || p.Skip >= uint32(m) || p.Offset >= uint32(m) {
					t.Fatalf("M=%d %s: %+v out of range", m, b.name, p)
				}
				seen[p.Skip] = true
			}
			if len(seen) != m-1 {
				t.Errorf("M=%d %s: %d distinct skips over 2000 names, want all %d", m, b.name, len(seen), m-1)
			}
		}
	}
}

// TestChurn measures, as the seed did, how many of M = 65537 slots change
// when a sixth backend joins five, and when one of six leaves. The ideal is
// 1/6 (16.7%); the seed measured 16.8%.
func TestChurn(t *testing.T) {
	for _, b := range builtins {
		for _, prefix := range []string{"backend-", "10.1.0.", "node"} {
			six := names(prefix, 6)
			t6 := mustNew(t, six, DefaultSize, b.h)
			for drop := range six {
				five := slices.Delete(slices.Clone(six), drop, drop+1)
				t5 := mustNew(t, five, DefaultSize, b.h)
				frac := float64(t5.Diff(t6)) / DefaultSize
				if frac < 0.155 || frac > 0.18 {
					t.Errorf("%s %s: 5↔6 backends (dropping %s) changed %.2f%% of slots, want 15.5%%–18%%",
						b.name, prefix, six[drop], 100*frac)
				}
			}
		}
	}
}

// TestChurnOnlyToNewcomer checks Maglev's minimal disruption in its weaker
// form: adding a backend moves slots mostly to the newcomer.
func TestChurnOnlyToNewcomer(t *testing.T) {
	before := mustNew(t, names("n", 50), DefaultSize, nil)
	after := mustNew(t, names("n", 51), DefaultSize, nil)
	newcomer := after.Index("n50")
	moved, toNewcomer := 0, 0
	for _, owner := range before.Changes(after) {
		moved++
		if owner == newcomer {
			toNewcomer++
		}
	}
	if want := after.Counts()[newcomer]; toNewcomer != want {
		t.Fatalf("newcomer owns %d slots but %d changed slots went to it", want, toNewcomer)
	}
	if excess := moved - toNewcomer; float64(excess) > 0.02*DefaultSize {
		t.Errorf("%d slots moved between surviving backends, want under 2%% of M", excess)
	}
}

// TestDiff checks Diff and Changes against a comparison by name.
func TestDiff(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pool := randomBackends(r, 60)
	for iter := range 100 {
		m := smallPrimes[3+r.IntN(len(smallPrimes)-3)]
		a := pool[:r.IntN(min(m, 60)+1)]
		lo := r.IntN(10)
		b := pool[lo : lo+r.IntN(min(m, 50)+1)]
		ta, tb := mustNew(t, a, m, nil), mustNew(t, b, m, nil)
		oa, ob := owners(ta), owners(tb)
		want := 0
		var wantSlots []int
		for s := range oa {
			if oa[s] != ob[s] {
				want++
				wantSlots = append(wantSlots, s)
			}
		}
		if got := ta.Diff(tb); got != want {
			t.Fatalf("iter %d: Diff = %d, want %d", iter, got, want)
		}
		if got := tb.Diff(ta); got != want {
			t.Fatalf("iter %d: Diff is not symmetric: %d and %d", iter, got, want)
		}
		var gotSlots []int
		for s, owner := range ta.Changes(tb) {
			gotSlots = append(gotSlots, s)
			if owner != tb.LookupHashIndex(uint64(s)) {
				t.Fatalf("iter %d: Changes yields owner %d for slot %d, want %d", iter, owner, s, tb.LookupHashIndex(uint64(s)))
			}
		}
		if !slices.Equal(gotSlots, wantSlots) {
			t.Fatalf("iter %d: Changes slots = %v, want %v", iter, gotSlots, wantSlots)
		}
		if ta.Diff(ta) != 0 {
			t.Fatal("Diff with itself is not 0")
		}
	}
}

// TestDiffAgreesWithChanges: for every pair among tables of three sizes,
// with and without backends, weighted, from Without, and the zero Table,
// Diff counts exactly the slots Changes yields.
func TestDiffAgreesWithChanges(t *testing.T) {
	var tables []*Table
	for _, m := range []int{7, 11, 13} {
		full := mustNew(t, names("b", 5), m, nil)
		tables = append(tables,
			full,
			mustNew(t, names("b", 4), m, nil),
			mustNew(t, []string{"b1", "b3", "x"}, m, nil),
			mustNew(t, nil, m, nil),
			mustWeighted(t, []Backend{{"b0", 2}, {"b1", 1}, {"b2", 0}}, m, nil),
			mustWithout(t, full, "b2"),
			mustWithout(t, full, names("b", 5)...),
		)
	}
	tables = append(tables, &Table{})
	for i, a := range tables {
		for j, b := range tables {
			n := 0
			for range a.Changes(b) {
				n++
			}
			if d := a.Diff(b); d != n {
				t.Errorf("tables %d (M=%d) and %d (M=%d): Diff %d, Changes yields %d", i, a.Size(), j, b.Size(), d, n)
			}
		}
	}
}

// TestZeroValues: the zero Table is an empty table, whose every method
// answers as an empty table's does; the zero Generator's Permutation
// panics with a maglev: message.
func TestZeroValues(t *testing.T) {
	var z Table
	if z.Lookup("x") != "" || z.LookupBytes([]byte("x")) != "" || z.LookupHash(1) != "" ||
		z.LookupIndex("x") != -1 || z.LookupBytesIndex([]byte("x")) != -1 || z.LookupHashIndex(1) != -1 {
		t.Error("the zero Table routes a key")
	}
	if z.Size() != 0 || z.NumBackends() != 0 || len(z.Backends()) != 0 || len(z.Counts()) != 0 || len(z.Weights()) != 0 ||
		z.Index("x") != -1 || len(z.AppendSlots(nil)) != 0 || z.Hasher() == nil {
		t.Error("the zero Table is not empty")
	}
	for range z.Candidates("x") {
		t.Error("the zero Table has candidates")
	}
	if _, err := z.Without("x"); !errors.Is(err, ErrUnknownBackend) {
		t.Errorf("zero Table Without: %v", err)
	}
	empty := mustNew(t, nil, 7, nil)
	if z.Diff(&z) != 0 || z.Diff(empty) != 7 || empty.Diff(&z) != 0 {
		t.Errorf("zero Table Diff: %d, %d, %d", z.Diff(&z), z.Diff(empty), empty.Diff(&z))
	}
	_ = z.Digest()
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.HasPrefix(fmt.Sprint(r), "maglev: ") {
				t.Errorf("zero Generator: recovered %v, want a maglev: panic", r)
			}
		}()
		var g Generator
		g.Permutation("x")
	}()
}

func TestDiffSizes(t *testing.T) {
	a := mustNew(t, names("b", 3), 7, nil)
	b := mustNew(t, names("b", 3), 11, nil)
	if a.Diff(b) != 11 || b.Diff(a) != 7 {
		t.Errorf("Diff of sizes 7 and 11 = %d, %d; want 11 and 7 (the other's size)", a.Diff(b), b.Diff(a))
	}
	var slots []int
	for s, owner := range a.Changes(b) {
		if owner != b.LookupHashIndex(uint64(s)) {
			t.Errorf("slot %d: owner %d, want %d", s, owner, b.LookupHashIndex(uint64(s)))
		}
		slots = append(slots, s)
	}
	if len(slots) != 11 {
		t.Errorf("Changes across sizes yielded %d slots, want all 11", len(slots))
	}
	// Stopping early is honoured.
	count := 0
	for range a.Changes(b) {
		count++
		break
	}
	if count != 1 {
		t.Errorf("break after one change ran %d iterations", count)
	}
}

func TestEmptyTable(t *testing.T) {
	e := mustNew(t, nil, 7, nil)
	if e.Lookup("k") != "" || e.LookupBytes([]byte("k")) != "" || e.LookupHash(3) != "" {
		t.Error("empty table Lookup did not return \"\"")
	}
	if e.LookupIndex("k") != -1 || e.LookupHashIndex(3) != -1 || e.LookupHashIndex(uint64(6)) != -1 || e.LookupHash(uint64(0)) != "" {
		t.Error("empty table index lookups did not return -1")
	}
	if e.Size() != 7 || e.NumBackends() != 0 || len(e.Backends()) != 0 || len(e.Counts()) != 0 {
		t.Error("empty table reports backends")
	}
	if got := e.AppendSlots(nil); len(got) != 7 || slices.ContainsFunc(got, func(v uint32) bool { return v != noBackend }) {
		t.Errorf("AppendSlots = %v, want 7 × noBackend", got)
	}
	full := mustNew(t, names("b", 3), 7, nil)
	if e.Diff(full) != 7 || full.Diff(e) != 7 || e.Diff(mustNew(t, []string{}, 7, nil)) != 0 {
		t.Error("Diff with an empty table is not M, or empty vs empty is not 0")
	}
	for s, owner := range full.Changes(e) {
		if owner != -1 {
			t.Errorf("slot %d: owner %d in an empty table, want -1", s, owner)
		}
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		backends []string
		m        int
		want     error
	}{
		{names("b", 2), 0, ErrSize},
		{names("b", 2), 1, ErrSize},
		{names("b", 2), -7, ErrSize},
		{names("b", 2), 65536, ErrSize},
		{names("b", 2), 15, ErrSize},
		{names("b", 2), MaxSize + 1, ErrSize},
		{names("b", 2), 1 << 40 & (1<<31 - 1), ErrSize},
		{names("b", 8), 7, ErrTooManyBackends},
		{[]string{"a", "", "b"}, 7, ErrEmptyName},
		{[]string{"a", "b", "a"}, 7, ErrDuplicateName},
	} {
		tab, err := New(c.backends, c.m, nil)
		if !errors.Is(err, c.want) || tab != nil {
			t.Errorf("New(%v, %d) = %v, %v; want %v", c.backends, c.m, tab, err, c.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), "maglev: ") {
			t.Errorf("error %q lacks the maglev: prefix", err)
		}
	}
	if _, err := NewGenerator(9, nil); !errors.Is(err, ErrSize) {
		t.Errorf("NewGenerator(9) = %v, want ErrSize", err)
	}
}

func TestFillErrors(t *testing.T) {
	ok := []Permutation{{0, 1}, {1, 2}}
	for _, c := range []struct {
		name    string
		size    int
		perms   []Permutation
		cursors int
		want    error
	}{
		{"composite", 9, ok, 2, ErrSize},
		{"no perms", 7, nil, 2, ErrNoBackends},
		{"more perms than slots", 2, []Permutation{{0, 1}, {1, 1}, {0, 1}}, 3, ErrTooManyBackends},
		{"skip 0", 7, []Permutation{{0, 0}}, 1, ErrPermutation},
		{"skip M", 7, []Permutation{{0, 7}}, 1, ErrPermutation},
		{"offset M", 7, []Permutation{{7, 1}}, 1, ErrPermutation},
		{"short cursors", 7, ok, 1, ErrShortBuffer},
	} {
		err := Fill(make([]uint32, c.size), c.perms, make([]uint32, c.cursors))
		if !errors.Is(err, c.want) || !strings.HasPrefix(err.Error(), "maglev: ") {
			t.Errorf("%s: Fill = %v, want %v", c.name, err, c.want)
		}
	}
	// uint16 slots hold at most 65,535 backends (0xFFFF marks empty
	// slots), whatever the table's size; the error names that limit, not
	// the slots.
	perms := make([]Permutation, 1<<16)
	for i := range perms {
		perms[i] = Permutation{uint32(i), 1}
	}
	for _, c := range []struct {
		n    int
		want string
	}{
		{1<<16 - 1, ""},
		{1 << 16, "maglev: too many backends: 65536 permutations, but a uint16 slot names at most 65535 backends (its largest value marks empty slots while filling)"},
	} {
		err := Fill(make([]uint16, DefaultSize), perms[:c.n], make([]uint32, c.n))
		if c.want == "" {
			if err != nil {
				t.Errorf("Fill of %d backends into %d uint16 slots: %v", c.n, DefaultSize, err)
			}
			continue
		}
		if !errors.Is(err, ErrTooManyBackends) || err.Error() != c.want {
			t.Errorf("Fill of %d backends into %d uint16 slots = %v, want ErrTooManyBackends: %q", c.n, DefaultSize, err, c.want)
		}
	}
	// With uint32 slots the same permutations fill the table.
	if err := Fill(make([]uint32, DefaultSize), perms, make([]uint32, len(perms))); err != nil {
		t.Errorf("Fill of 65,536 backends into uint32 slots: %v", err)
	}
}

// TestRefFill checks that refFill, the frozen fill the benchmarks compare
// with, builds New's tables, and that fillByTurns fills as fill does, so
// that the comparisons are like for like.
func TestRefFill(t *testing.T) {
	for _, c := range []struct{ n, m int }{{1, 7}, {5, 13}, {100, 1009}, {1000, DefaultSize}} {
		bs := benchBackends(c.n)
		if d := refNew(bs, c.m).Diff(mustNew(t, bs, c.m, nil)); d != 0 {
			t.Errorf("N=%d M=%d: refNew and New differ in %d slots", c.n, c.m, d)
		}
		g, _ := NewGenerator(c.m, nil)
		perms := g.permutations(nil, bs)
		want, got := make([]uint16, c.m), make([]uint16, c.m)
		wantCursors, gotCursors := make([]uint32, c.n), make([]uint32, c.n)
		fill(want, perms, wantCursors)
		fillByTurns(got, perms, gotCursors)
		if !slices.Equal(got, want) || !slices.Equal(gotCursors, wantCursors) {
			t.Errorf("N=%d M=%d: fillByTurns and fill differ", c.n, c.m)
		}
	}
}

// TestFillEndgame checks that the table and the cursors do not depend on
// when the fill's endgame starts: never, for the last slot only, at the
// usual point and around it, or from the first turn (as far as the
// endgame's list allows). Fills of both slot widths, unweighted and
// weighted, are compared with refFill and the weighted spec; the
// unweighted ones through each of fillEqual's fills, every bitmap size
// class (each takes any M up to its own bound) and the table-probing fill.
func TestFillEndgame(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine fills at every endgame point: skipped under the race detector (norace_test.go)")
	}
	type fills struct {
		name string
		max  int // largest M
		f16  func([]uint16, []Permutation, []uint32, int)
		f32  func([]uint32, []Permutation, []uint32, int)
	}
	unweighted := []fills{
		{"fillEqual", MaxSize, fillEqual[uint16], fillEqual[uint32]},
		{"fillMarked2K", 64 << 8, fillMarked2K[uint16], fillMarked2K[uint32]},
		{"fillMarked16K", 64 << 11, fillMarked16K[uint16], fillMarked16K[uint32]},
		{"fillMarked128K", bitmapMax, fillMarked128K[uint16], fillMarked128K[uint32]},
		{"fillProbed", MaxSize, fillProbed[uint16], fillProbed[uint32]},
	}
	r := rand.New(rand.NewPCG(11, 12))
	for iter := range 120 {
		m := smallPrimes[r.IntN(len(smallPrimes))]
		if iter%10 == 0 {
			m = DefaultSize
		}
		n := 1 + r.IntN(min(m, 200))
		names := randomBackends(r, n)
		slices.Sort(names)
		g, _ := NewGenerator(m, nil)
		perms := g.permutations(nil, names)
		want := make([]uint16, m)
		wantCursors := make([]uint32, n)
		refFill(want, perms, wantCursors)
		ws := randomWeights(r, n)
		bs := make([]Backend, n)
		for i := range bs {
			bs[i] = Backend{names[i], ws[i]}
		}
		wantWeighted := slowWeighted(bs, m, nil)
		for _, end := range []int{0, 1, isqrt(m) / 4, isqrt(m), endgameAt(m), 4 * isqrt(m), m} {
			for _, f := range unweighted {
				if m > f.max {
					continue
				}
				t16, t32 := make([]uint16, m), make([]uint32, m)
				c16, c32 := make([]uint32, n), make([]uint32, n)
				f.f16(t16, perms, c16, end)
				f.f32(t32, perms, c32, end)
				for s := range want {
					if t16[s] != want[s] || t32[s] != uint32(want[s]) {
						t.Fatalf("%s, M=%d N=%d end %d: slot %d is %d (uint16), %d (uint32), want %d", f.name, m, n, end, s, t16[s], t32[s], want[s])
					}
				}
				if !slices.Equal(c16, wantCursors) || !slices.Equal(c32, wantCursors) {
					t.Fatalf("%s, M=%d N=%d end %d: cursors differ from refFill's", f.name, m, n, end)
				}
			}
			if slices.Max(ws) == 0 {
				continue
			}
			tw := make([]uint16, m)
			fillWithEndgame(tw, perms, ws, make([]uint32, n), end)
			for s, i := range tw {
				if names[i] != wantWeighted[s] {
					t.Fatalf("M=%d N=%d end %d weights %v: slot %d owned by %q, want %q", m, n, end, ws, s, names[i], wantWeighted[s])
				}
			}
		}
	}
}

// TestIsqrt checks the endgame's square root at perfect squares and their
// neighbours, up to beyond MaxSize.
func TestIsqrt(t *testing.T) {
	for r := 0; r <= 1<<13; r++ {
		for _, n := range []int{r * r, r*r + 2*r} { // the first and last n with ⌊√n⌋ = r
			if got := isqrt(n); got != r {
				t.Fatalf("isqrt(%d) = %d, want %d", n, got, r)
			}
		}
	}
}

// TestNearest checks the endgame's fixed-point search against the plain
// step count (e−c)·s⁻¹ mod M computed with %, up to the largest table
// size, and for small tables against a walk along the sequence.
func TestNearest(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, m := range []int{2, 3, 7, 13, 1009, DefaultSize, 655373, 1<<24 - 3, MaxSize} {
		for range 300 {
			c, s := uint32(r.IntN(m)), uint32(1+r.IntN(m-1))
			inv := inverse(s, uint32(m))
			if uint64(inv)*uint64(s)%uint64(m) != 1 {
				t.Fatalf("M=%d: inverse(%d) = %d", m, s, inv)
			}
			empties := make([]uint32, 1+r.IntN(min(m, 2048)))
			for j := range empties {
				empties[j] = uint32(r.IntN(m))
			}
			if r.IntN(4) == 0 {
				empties[r.IntN(len(empties))] = c // the cursor's own slot: 0 steps
			}
			steps := func(e uint32) uint64 { return uint64(e+uint32(m)-c) % uint64(m) * uint64(inv) % uint64(m) }
			want := empties[0]
			for _, e := range empties {
				if steps(e) < steps(want) {
					want = e
				}
			}
			if got := empties[nearest(empties, c, s, uint32(m))]; got != want {
				t.Fatalf("M=%d c=%d s=%d: nearest picks slot %d (%d steps), want %d (%d steps)", m, c, s, got, steps(got), want, steps(want))
			}
			if m > DefaultSize {
				continue
			}
			x := c
			for k := uint64(0); k < steps(want); k++ {
				x = Permutation{Skip: s}.Next(x, uint32(m))
			}
			if x != want {
				t.Fatalf("M=%d c=%d s=%d: %d steps lead to %d, not %d", m, c, s, steps(want), x, want)
			}
		}
	}
}

// TestLookupPaths checks every lookup against the spec, the owner of slot
// H(key) mod M, on each path the lookups take: the default hasher with
// 2-byte slots, the other hashers, 4-byte slots, and a drained table.
func TestLookupPaths(t *testing.T) {
	wide := 70000
	if testing.Short() {
		wide = 0
	}
	tables := map[string]*Table{
		"xxh3/wide":  mustNew(t, names("b", wide), 70001, nil),
		"xxh3/empty": mustWeighted(t, weighted(0, 0), 1009, nil),
	}
	for _, b := range builtins {
		tables[b.name] = mustNew(t, names("b", 1000), DefaultSize, b.h)
	}
	r := rand.New(rand.NewPCG(15, 16))
	for name, tab := range tables {
		for range 2000 {
			key := randomName(r)
			h := tab.Hasher().HashString(key)
			s := int(h % uint64(tab.Size()))
			want, wantIndex := "", -1
			if tab.NumBackends() > 0 && !tab.empty() {
				want, wantIndex = tab.LookupHash(uint64(s)), tab.LookupHashIndex(uint64(s))
			}
			if got := tab.Lookup(key); got != want {
				t.Fatalf("%s: Lookup(%q) = %q, want %q", name, key, got, want)
			}
			if got := tab.LookupBytes([]byte(key)); got != want {
				t.Fatalf("%s: LookupBytes(%q) = %q, want %q", name, key, got, want)
			}
			if got := tab.LookupIndex(key); got != wantIndex {
				t.Fatalf("%s: LookupIndex(%q) = %d, want %d", name, key, got, wantIndex)
			}
			if got := tab.LookupHash(h); got != want || tab.LookupHash(h%uint64(tab.Size())) != want {
				t.Fatalf("%s: LookupHash disagrees for %q", name, key)
			}
			if got := tab.LookupBytesIndex([]byte(key)); got != wantIndex {
				t.Fatalf("%s: LookupBytesIndex(%q) = %d, want %d", name, key, got, wantIndex)
			}
		}
	}
}

// TestSlotWidth checks the storage: 2 bytes a slot up to 65,535 backends,
// 4 bytes beyond, with identical tables either way.
func TestSlotWidth(t *testing.T) {
	small := mustNew(t, names("b", 10), 13, nil)
	if small.slots16 == nil || small.slots32 != nil {
		t.Error("10 backends are not stored in 2-byte slots")
	}
	if testing.Short() {
		t.Skip("large table skipped in short mode")
	}
	const m = 70001 // prime, above 65,535 backends
	bs := names("b", 70000)
	big := mustNew(t, bs, m, nil)
	if big.slots32 == nil || big.slots16 != nil {
		t.Fatal("70,000 backends are not stored in 4-byte slots")
	}
	if got, want := owners(big), slowTable(bs, m, nil); !slices.Equal(got, want) {
		t.Error("4-byte table differs from the plain spec")
	}
	// The same permutations through uint16 and uint32 fills agree.
	g, _ := NewGenerator(DefaultSize, nil)
	perms := g.permutations(nil, names("b", 100))
	t16, t32 := make([]uint16, DefaultSize), make([]uint32, DefaultSize)
	c := make([]uint32, 100)
	if Fill(t16, perms, c) != nil || Fill(t32, perms, c) != nil {
		t.Fatal("Fill failed")
	}
	for s := range t16 {
		if uint32(t16[s]) != t32[s] {
			t.Fatalf("slot %d: uint16 fill %d, uint32 fill %d", s, t16[s], t32[s])
		}
	}
}

func TestAccessors(t *testing.T) {
	bs := []string{"c", "a", "b"}
	tab := mustNew(t, bs, 7, nil)
	got := tab.Backends()
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Backends = %v, want sorted", got)
	}
	got[0] = "mutated"
	if tab.Backends()[0] != "a" {
		t.Error("Backends returned the table's own slice")
	}
	if bs[0] != "c" {
		t.Error("New reordered the caller's slice")
	}
	if tab.Index("b") != 1 || tab.Index("zz") != -1 {
		t.Error("Index is wrong")
	}
	slots := tab.AppendSlots([]uint32{99})
	if len(slots) != 8 || slots[0] != 99 {
		t.Fatalf("AppendSlots did not append: %v", slots)
	}
	for s := range 7 {
		if int(slots[s+1]) != tab.LookupHashIndex(uint64(s)) || tab.LookupHash(uint64(s)) != tab.Backends()[slots[s+1]] {
			t.Errorf("slot %d: AppendSlots, LookupHashIndex and LookupHash disagree", s)
		}
	}
	for _, key := range []string{"", "k", "key-123", strings.Repeat("x", 300)} {
		h := xxh3.HashString(key)
		s := int(h % 7)
		if tab.LookupBytesIndex([]byte(key)) != tab.LookupHashIndex(uint64(s)) || tab.Lookup(key) != tab.LookupHash(uint64(s)) || tab.LookupBytes([]byte(key)) != tab.LookupHash(uint64(s)) ||
			tab.LookupIndex(key) != tab.LookupHashIndex(uint64(s)) || tab.LookupHashIndex(h) != tab.LookupHashIndex(uint64(s)) {
			t.Errorf("lookups of %.10q disagree", key)
		}
	}
}

func TestSizeFor(t *testing.T) {
	for _, n := range []int{0, 1, 655, 656, 1000, 10000, 167771, 167772, MaxSize} {
		m := SizeFor(n)
		if !isPrime(m) || m > MaxSize {
			t.Errorf("SizeFor(%d) = %d, not a supported prime", n, m)
		}
		if m < DefaultSize || (m <= 100*n && m != MaxSize) {
			t.Errorf("SizeFor(%d) = %d, want > 100·n and ≥ DefaultSize", n, m)
		}
		if m > DefaultSize && 100*n < MaxSize && isPrimeBetween(100*n+1, m) {
			t.Errorf("SizeFor(%d) = %d is not the smallest prime above 100·n", n, m)
		}
	}
	// 16,777,213 is the largest prime below 2^24: 100·167772 = 16,777,200
	// is below it, so SizeFor must not jump to MaxSize.
	if got := SizeFor(167772); got != 16777213 {
		t.Errorf("SizeFor(167772) = %d, want 16777213", got)
	}
	if got := SizeFor(167773); got != MaxSize {
		t.Errorf("SizeFor(167773) = %d, want MaxSize", got)
	}
	if !isPrime(MaxSize) || isPrime(1<<24) {
		t.Error("MaxSize is not prime")
	}
	for p := 1<<24 + 1; p < MaxSize; p++ {
		if isPrime(p) {
			t.Errorf("%d is a prime below MaxSize above 2^24", p)
		}
	}
}

// TestCheckSize checks that CheckSize accepts exactly the sizes New
// accepts, with New's errors.
func TestCheckSize(t *testing.T) {
	for _, m := range []int{-7, 0, 1, 2, 3, 4, 7, 9, 13, 65536, DefaultSize, 1 << 24, MaxSize - 2, MaxSize, MaxSize + 1, math.MaxInt} {
		err := CheckSize(m)
		_, newErr := New(nil, m, nil)
		if (err == nil) != (newErr == nil) || (err != nil && err.Error() != newErr.Error()) {
			t.Errorf("CheckSize(%d) = %v, New gives %v", m, err, newErr)
		}
		switch {
		case m > MaxSize:
			if !errors.Is(err, ErrSize) {
				t.Errorf("CheckSize(%d) = %v, want ErrSize", m, err)
			}
		case !isPrime(m):
			if !errors.Is(err, ErrSize) {
				t.Errorf("CheckSize(%d) = %v, want ErrSize", m, err)
			}
		case err != nil:
			t.Errorf("CheckSize(%d) = %v, want nil", m, err)
		}
	}
	if n := testing.AllocsPerRun(10, func() { _ = CheckSize(DefaultSize) }); n != 0 {
		t.Errorf("CheckSize allocates %v times", n)
	}
}

// TestBackend checks that Backend(i) names Backends()[i] without
// allocating, and panics out of range.
func TestBackend(t *testing.T) {
	tab := mustNew(t, []string{"c", "a", "b"}, 7, nil)
	for i, name := range tab.Backends() {
		if got := tab.Backend(i); got != name {
			t.Errorf("Backend(%d) = %q, want %q", i, got, name)
		}
	}
	if n := testing.AllocsPerRun(10, func() { _ = tab.Backend(1) }); n != 0 {
		t.Errorf("Backend allocates %v times", n)
	}
	for _, i := range []int{-1, 3} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Backend(%d) did not panic", i)
				}
			}()
			_ = tab.Backend(i)
		}()
	}
}

func isPrimeBetween(lo, hi int) bool {
	for p := lo; p < hi; p++ {
		if isPrime(p) {
			return true
		}
	}
	return false
}

func TestIsPrime(t *testing.T) {
	// Against a sieve up to 200,000.
	const n = 200000
	composite := make([]bool, n)
	for i := 2; i < n; i++ {
		if !composite[i] {
			for j := 2 * i; j < n; j += i {
				composite[j] = true
			}
		}
	}
	for i := -3; i < n; i++ {
		want := i >= 2 && !composite[i]
		if isPrime(i) != want {
			t.Fatalf("isPrime(%d) = %v", i, !want)
		}
	}
}

// TestMaxSize builds a table at the documented maximum.
func TestMaxSize(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("MaxSize table skipped in short mode and under the race detector")
	}
	tab := mustNew(t, names("b", 100), MaxSize, nil)
	counts := tab.Counts()
	for _, c := range counts {
		if c != MaxSize/100 && c != MaxSize/100+1 {
			t.Fatalf("count %d, want %d or %d", c, MaxSize/100, MaxSize/100+1)
		}
	}
	if got := tab.LookupHash(MaxSize - 1); got != tab.LookupHash(uint64(MaxSize-1)) {
		t.Errorf("LookupHash(MaxSize-1) = %q, want the last slot's owner %q", got, tab.LookupHash(uint64(MaxSize-1)))
	}
}

func TestZeroAllocs(t *testing.T) {
	tab := mustNew(t, names("b", 100), DefaultSize, nil)
	farmTab := mustNew(t, names("b", 100), DefaultSize, Farm())
	var nilTab *Table
	key := "0123456789abcdef"
	keyBytes := []byte(key)
	var sink string
	var isink int
	for name, f := range map[string]func(){
		"Lookup":           func() { sink = tab.Lookup(key) },
		"LookupBytes":      func() { sink = tab.LookupBytes(keyBytes) },
		"LookupHash":       func() { sink = tab.LookupHash(12345) },
		"LookupIndex":      func() { isink = tab.LookupIndex(key) },
		"Lookup/farm":      func() { sink = farmTab.Lookup(key) },
		"LookupBytes/farm": func() { sink = farmTab.LookupBytes(keyBytes) },
		"Index":            func() { isink = tab.Index("b42") },
		"Lookup/nil":       func() { sink = nilTab.Lookup(key) },
		"LookupHash/nil":   func() { sink = nilTab.LookupHash(12345) },
		"LookupIndex/nil":  func() { isink = nilTab.LookupIndex(key) },
	} {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s allocates %.1f times per call", name, a)
		}
	}
	g, _ := NewGenerator(DefaultSize, nil)
	bs := names("b", 100)
	perms := g.permutations(make([]Permutation, 0, 100), bs) // warms the buffer
	if a := testing.AllocsPerRun(100, func() { perms = g.permutations(perms[:0], bs) }); a != 0 {
		t.Errorf("Generator.Permutations allocates %.1f times", a)
	}
	slots := make([]uint16, DefaultSize)
	cursors := make([]uint32, 100)
	if a := testing.AllocsPerRun(10, func() { _ = Fill(slots, perms, cursors) }); a != 0 {
		t.Errorf("Fill allocates %.1f times", a)
	}
	_, _ = sink, isink
}

// TestNewAllocBudget checks the memory New allocates: at most 2 bytes a
// slot, 64 bytes a backend and 4 KiB. The Go runtime rounds an allocation
// above 32 KiB up to whole 8 KiB pages, so a slot array of 2·M bytes takes
// more than 2·M (at M = 65537, 2^17+2 bytes take 17 pages, 139,264 bytes);
// that rounding is measured on a bare slice of the same size and added.
func TestNewAllocBudget(t *testing.T) {
	var sink []uint16
	for _, n := range []int{1, 10, 1000, 10000, maxSmall} {
		bs := names("10.0.0.", n)
		for _, m := range []int{16381, DefaultSize, 655373} {
			if n > m {
				continue
			}
			rounding := allocated(func() { sink = make([]uint16, m) }) - uint64(2*m)
			got := allocated(func() { mustNew(t, bs, m, nil) })
			budget := uint64(2*m+64*n+4096) + rounding
			if got > budget {
				t.Errorf("N=%d M=%d: New allocated %d bytes, budget %d (incl. %d of page rounding)", n, m, got, budget, rounding)
			}
		}
	}
	_ = sink
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	f()
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc - before
}

// fuzzPrimes are the table sizes the fuzz targets pick from.
var fuzzPrimes = []int{2, 3, 5, 7, 11, 13, 31, 61, 127, 257, 1009}

// fuzzNames decodes length-prefixed names: a length byte, then that many
// bytes, repeated.
func fuzzNames(data []byte) []string {
	var out []string
	for len(data) > 0 {
		n := min(int(data[0]), len(data)-1)
		out = append(out, string(data[1:1+n]))
		data = data[1+n:]
	}
	return out
}

// fuzzSeedNames encodes names as fuzzNames decodes them.
func fuzzSeedNames(names ...string) []byte {
	var b []byte
	for _, n := range names {
		b = append(b, byte(len(n)))
		b = append(b, n...)
	}
	return b
}

// FuzzNew checks that New never panics or hangs, that its errors are the
// documented ones, and that every table it builds equals the plain spec.
// Seeds, each a tricky case:
func FuzzNew(f *testing.F) {
	f.Add(fuzzSeedNames("x", "y", "z"), uint8(3), uint8(0))                                      // the worked example's names, M=7
	f.Add(fuzzSeedNames("a", "b"), uint8(0), uint8(1))                                           // M=2, N=M
	f.Add(fuzzSeedNames("a"), uint8(0), uint8(2))                                                // M=2, one backend
	f.Add(fuzzSeedNames("a", "b", "c"), uint8(1), uint8(3))                                      // N=M=3
	f.Add(fuzzSeedNames("a|skip", "a|offset", "a|", "a"), uint8(5), uint8(0))                    // names that differ only after a |
	f.Add(fuzzSeedNames("\xff\xfe", "\xc3\x28", "\x00", "\x00\x00"), uint8(4), uint8(1))         // invalid UTF-8 and NUL bytes
	f.Add(fuzzSeedNames(strings.Repeat("L", 255), strings.Repeat("L", 254)), uint8(6), uint8(2)) // long names
	f.Add(fuzzSeedNames("dup", "dup"), uint8(3), uint8(0))                                       // duplicate
	f.Add(fuzzSeedNames("", "a"), uint8(3), uint8(0))                                            // empty name
	f.Add(fuzzSeedNames("a", "b", "c", "d"), uint8(1), uint8(0))                                 // more backends than slots
	f.Fuzz(func(t *testing.T, data []byte, mi, hi uint8) {
		m := fuzzPrimes[int(mi)%len(fuzzPrimes)]
		h := builtins[int(hi)%len(builtins)].h
		bs := fuzzNames(data)
		tab, err := New(bs, m, h)
		if err != nil {
			if !errors.Is(err, ErrEmptyName) && !errors.Is(err, ErrDuplicateName) && !errors.Is(err, ErrTooManyBackends) {
				t.Fatalf("New: unexpected error %v", err)
			}
			return
		}
		if got, want := owners(tab), slowTable(bs, m, h); !slices.Equal(got, want) {
			t.Fatalf("M=%d %q: New %q, plain spec %q", m, bs, got, want)
		}
		for _, c := range tab.Counts() {
			if c != m/len(bs) && c != m/len(bs)+1 {
				t.Fatalf("M=%d N=%d: count %d", m, len(bs), c)
			}
		}
	})
}

// TestConcurrentSwap is the service pattern under the race detector: readers
// look up through an atomic.Pointer while a writer rebuilds on membership
// changes and swaps. Every answer must come from a complete table: a
// backend of the table the reader loaded, which is the old or the new set.
func TestConcurrentSwap(t *testing.T) {
	pool := names("10.0.0.", 40)
	var current atomic.Pointer[Table]
	current.Store(mustNew(t, pool[:10], 1009, nil))
	var (
		wg      sync.WaitGroup
		done    atomic.Bool
		lookups atomic.Int64
		bad     atomic.Value
	)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !done.Load() || i < 1000; i++ {
				tab := current.Load()
				key := fmt.Sprintf("client-%d-%d", g, i)
				name := tab.Lookup(key)
				if tab.Index(name) < 0 || name != tab.LookupHash(xxh3.HashString(key)%uint64(tab.Size())) {
					bad.Store(fmt.Sprintf("lookup of %s gave %q, not this table's owner", key, name))
					return
				}
				lookups.Add(1)
			}
		}()
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		lo := r.IntN(30)
		next := mustNew(t, pool[lo:lo+1+r.IntN(10)], 1009, nil)
		old := current.Swap(next)
		if d := old.Diff(next); d < 0 || d > 1009 {
			t.Fatalf("Diff = %d", d)
		}
	}
	done.Store(true)
	wg.Wait()
	if msg := bad.Load(); msg != nil {
		t.Fatal(msg)
	}
	if lookups.Load() < 4000 {
		t.Fatalf("only %d lookups ran", lookups.Load())
	}
}

// mistake names one of the seed's common mistakes, for variantTable.
type mistake int

const (
	noMistake      mistake = iota
	depthFirst             // one backend takes all its slots before the next
	notMovingOn            // a taken slot is offered again instead of the next
	insertionOrder         // backends take turns in the caller's order
	skipZero               // skip = H mod (M-1), which can be 0
	compositeSize          // no primality check on M
)

var errNoProgress = errors.New("fill made no progress within its probe budget")

// variantTable builds a table by the spec, or with one of the seed's
// mistakes. A probe budget turns the mistakes that loop forever into an
// error.
func variantTable(backends []string, m int, mk mistake) ([]string, error) {
	if mk != compositeSize && !isPrime(m) {
		return nil, ErrSize
	}
	names := slices.Clone(backends)
	if mk != insertionOrder {
		slices.Sort(names)
	}
	h := XXH3()
	offset := make([]uint64, len(names))
	skip := make([]uint64, len(names))
	for i, name := range names {
		offset[i] = h.HashString(name+"|offset") % uint64(m)
		skip[i] = h.HashString(name+"|skip")%uint64(m-1) + 1
		if mk == skipZero {
			skip[i]--
		}
	}
	owner := make([]string, m)
	next := make([]uint64, len(names))
	budget := 100 * m * (len(names) + 1)
	// turn lets backend i claim one slot; false if the budget ran out.
	turn := func(i int) bool {
		for ; budget > 0; budget-- {
			slot := (offset[i] + next[i]*skip[i]) % uint64(m)
			if owner[slot] == "" {
				owner[slot] = names[i]
				next[i]++
				return true
			}
			if mk != notMovingOn {
				next[i]++
			}
		}
		return false
	}
	filled := 0
	if mk == depthFirst {
		for i := range names {
			share := m / len(names)
			if i < m%len(names) {
				share++
			}
			for range share {
				if !turn(i) {
					return nil, errNoProgress
				}
			}
		}
		return owner, nil
	}
	for filled < m {
		for i := range names {
			if filled == m {
				break
			}
			if !turn(i) {
				return nil, errNoProgress
			}
			filled++
		}
	}
	return owner, nil
}

// checkSpec runs the checks this file applies to New against a builder,
// and returns the first that fails.
func checkSpec(build func(backends []string, m int) ([]string, error)) error {
	for _, m := range []int{9, 15, 65535} {
		if _, err := build([]string{"a", "b"}, m); err == nil {
			return fmt.Errorf("composite M=%d accepted", m)
		}
	}
	got, err := build([]string{"e", "c", "a", "d", "b"}, 13)
	if err != nil {
		return err
	}
	if strings.Join(got, " ") != goldenSmall["xxh3"] {
		return fmt.Errorf("M=13 table %q, golden %q", strings.Join(got, " "), goldenSmall["xxh3"])
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		m := smallPrimes[2+r.IntN(len(smallPrimes)-2)]
		bs := randomBackends(r, 1+r.IntN(min(m, 40)))
		a, err := build(bs, m)
		if err != nil {
			return err
		}
		counts := map[string]int{}
		for _, o := range a {
			counts[o]++
		}
		if len(counts) != len(bs) || slices.Contains(a, "") {
			return fmt.Errorf("M=%d: %d of %d backends own slots", m, len(counts), len(bs))
		}
		for _, c := range counts {
			if c != m/len(bs) && c != m/len(bs)+1 {
				return fmt.Errorf("M=%d N=%d: a backend owns %d slots", m, len(bs), c)
			}
		}
		slices.Reverse(bs)
		b, err := build(bs, m)
		if err != nil {
			return err
		}
		if !slices.Equal(a, b) {
			return fmt.Errorf("M=%d: the table depends on the backends' order", m)
		}
	}
	return nil
}

// TestSeedMistakes shows that this file's checks catch each of the seed's
// common mistakes, and pass New and the spec.
func TestSeedMistakes(t *testing.T) {
	newOwners := func(bs []string, m int) ([]string, error) {
		tab, err := New(bs, m, nil)
		if err != nil {
			return nil, err
		}
		return owners(tab), nil
	}
	if err := checkSpec(newOwners); err != nil {
		t.Fatalf("New fails the checks: %v", err)
	}
	for mk, name := range map[mistake]string{
		noMistake:      "none",
		depthFirst:     "depth-first fill",
		notMovingOn:    "not moving on",
		insertionOrder: "insertion order",
		skipZero:       "skip 0",
		compositeSize:  "composite M",
	} {
		err := checkSpec(func(bs []string, m int) ([]string, error) { return variantTable(bs, m, mk) })
		if mk == noMistake && err != nil {
			t.Errorf("the spec itself fails the checks: %v", err)
		}
		if mk != noMistake && err == nil {
			t.Errorf("mistake %q passes the checks", name)
		}
	}
}
