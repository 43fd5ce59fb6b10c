package ring

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/maglevlb/maglev"
	"github.com/zeebo/xxh3"
)

// slowPoint is a point of the plain spec: a position and its owner's name.
type slowPoint struct {
	pos  uint64
	name string
	j    int
}

// slowRing is the spec written out plainly, independent of New: every point
// hashed from a string concatenation, sorted by a comparator over position,
// name and j.
func slowRing(backends []string, vnodes int, h maglev.Hasher) []slowPoint {
	if h == nil {
		h = maglev.XXH3()
	}
	var pts []slowPoint
	for _, name := range backends {
		for j := range vnodes {
			var le [8]byte
			binary.LittleEndian.PutUint64(le[:], uint64(j))
			pts = append(pts, slowPoint{h.HashString(string(le[:]) + name), name, j})
		}
	}
	sortSlow(pts)
	return pts
}

// slowPlaced is slowRing for explicit positions.
func slowPlaced(positions map[string][]uint64) []slowPoint {
	var pts []slowPoint
	for name, ps := range positions {
		for j, p := range ps {
			pts = append(pts, slowPoint{p, name, j})
		}
	}
	sortSlow(pts)
	return pts
}

func sortSlow(pts []slowPoint) {
	sort.Slice(pts, func(a, b int) bool {
		pa, pb := pts[a], pts[b]
		if pa.pos != pb.pos {
			return pa.pos < pb.pos
		}
		if pa.name != pb.name {
			return pa.name < pb.name
		}
		return pa.j < pb.j
	})
}

// slowLookup scans the points in order for the first at or after x,
// wrapping to the first point, as the seed's linear search does.
func slowLookup(pts []slowPoint, x uint64) string {
	for _, p := range pts {
		if p.pos >= x {
			return p.name
		}
	}
	if len(pts) == 0 {
		return ""
	}
	return pts[0].name
}

// pointNames returns the owner name of every point of r, in ring order.
func pointNames(r *Ring) []string {
	bs := r.Backends()
	var out []string
	for _, p := range r.AppendPoints(nil) {
		out = append(out, bs[p.Backend])
	}
	return out
}

// sameAsSlow reports whether r's points are exactly pts, in order.
func sameAsSlow(r *Ring, pts []slowPoint) bool {
	got := r.AppendPoints(nil)
	if len(got) != len(pts) {
		return false
	}
	bs := r.Backends()
	for k, p := range got {
		if p.Pos != pts[k].pos || bs[p.Backend] != pts[k].name {
			return false
		}
	}
	return true
}

func mustNew(t testing.TB, backends []string, vnodes int, h maglev.Hasher) *Ring {
	t.Helper()
	r, err := New(backends, vnodes, h)
	if err != nil {
		t.Fatalf("New(%d backends, %d vnodes): %v", len(backends), vnodes, err)
	}
	return r
}

func mustPlace(t testing.TB, positions map[string][]uint64) *Ring {
	t.Helper()
	r, err := NewWithPositions(positions, nil)
	if err != nil {
		t.Fatalf("NewWithPositions(%v): %v", positions, err)
	}
	return r
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// builtins are maglev's built-in hashers, by the names the golden tests use.
var builtins = []struct {
	name string
	h    maglev.Hasher
}{
	{"xxh3", maglev.XXH3()},
	{"xxh3-seed", maglev.XXH3Seed(0x9e3779b97f4a7c15)},
	{"farm", maglev.Farm()},
	{"fnv1a", maglev.FNV1a()},
}

// TestSeed is the seed's single_hash_per_server test, as written: A at 100,
// B at 200, C at 300.
func TestSeed(t *testing.T) {
	r := mustPlace(t, map[string][]uint64{"A": {100}, "B": {200}, "C": {300}})
	for _, c := range []struct {
		hash uint64
		want string
	}{
		{0, "A"}, {10, "A"}, {100, "A"},
		{120, "B"}, {200, "B"},
		{220, "C"}, {300, "C"},
		{320, "A"},
		{math.MaxUint64, "A"}, // wraps, like 320
	} {
		if got := r.LookupHash(c.hash); got != c.want {
			t.Errorf("LookupHash(%d) = %q, want %q", c.hash, got, c.want)
		}
	}
}

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

// probes returns hash values worth asking a ring about: the ends of the
// hash space, every position and its neighbours, and random values.
func probes(r *rand.Rand, pts []slowPoint) []uint64 {
	xs := []uint64{0, 1, math.MaxUint64 - 1, math.MaxUint64}
	for _, p := range pts {
		xs = append(xs, p.pos-1, p.pos, p.pos+1)
	}
	for range 50 {
		xs = append(xs, r.Uint64())
	}
	return xs
}

// TestProperties checks, over random rings, that New places exactly the
// plain spec's points, that the binary search agrees with a linear scan for
// every probe, that Lookup and LookupBytes hash with the ring's hasher, and
// that the caller's order of backends does not matter.
func TestProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	hashers := []maglev.Hasher{nil, maglev.XXH3Seed(7), maglev.Farm(), maglev.FNV1a()}
	for iter := range 300 {
		n := r.IntN(40)
		vnodes := 1 + r.IntN(30)
		h := hashers[iter%len(hashers)]
		bs := randomBackends(r, n)
		ring := mustNew(t, bs, vnodes, h)
		slow := slowRing(bs, vnodes, h)
		if !sameAsSlow(ring, slow) {
			t.Fatalf("iter %d (N=%d vnodes=%d): points differ from the plain spec", iter, n, vnodes)
		}
		if ring.Len() != n || ring.NumPoints() != n*vnodes || ring.Vnodes() != vnodes {
			t.Fatalf("iter %d: Len, NumPoints, Vnodes = %d, %d, %d; want %d, %d, %d",
				iter, ring.Len(), ring.NumPoints(), ring.Vnodes(), n, n*vnodes, vnodes)
		}
		for _, x := range probes(r, slow) {
			if got, want := ring.LookupHash(x), slowLookup(slow, x); got != want {
				t.Fatalf("iter %d: LookupHash(%#x) = %q, linear scan %q", iter, x, got, want)
			}
		}
		hh := ring.Hasher()
		for k := range 20 {
			key := fmt.Sprint("key-", k)
			want := slowLookup(slow, hh.HashString(key))
			if got := ring.Lookup(key); got != want {
				t.Fatalf("iter %d: Lookup(%q) = %q, want %q", iter, key, got, want)
			}
			if got := ring.LookupBytes([]byte(key)); got != want {
				t.Fatalf("iter %d: LookupBytes(%q) = %q, want %q", iter, key, got, want)
			}
		}
		shuffled := slices.Clone(bs)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		other := mustNew(t, shuffled, vnodes, h)
		if !slices.Equal(ring.AppendPoints(nil), other.AppendPoints(nil)) || ring.Diff(other) != 0 {
			t.Fatalf("iter %d: shuffling the backends changed the ring", iter)
		}
	}
}

// TestTies places points on a few positions, so that most positions are
// shared, and checks the order (position, then name, then j) and lookups
// around every position against the linear scan. The positions are small
// numbers in half the rings (one radix digit varies) and random 64-bit
// values or the ends of the hash space in the others (all digits vary).
func TestTies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 400 {
		choices := []uint64{0, 1, 2, 3, 4, 5, 6, 7}
		if iter%2 == 1 {
			choices = []uint64{0, math.MaxUint64, r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}
		}
		positions := map[string][]uint64{}
		for _, name := range randomBackends(r, 1+r.IntN(6)) {
			ps := make([]uint64, 1+r.IntN(5))
			for k := range ps {
				ps[k] = choices[r.IntN(len(choices))]
			}
			positions[name] = ps
		}
		ring := mustPlace(t, positions)
		slow := slowPlaced(positions)
		if !sameAsSlow(ring, slow) {
			t.Fatalf("iter %d: points %v, want %v", iter, ring.AppendPoints(nil), slow)
		}
		for _, x := range probes(r, slow) {
			if got, want := ring.LookupHash(x), slowLookup(slow, x); got != want {
				t.Fatalf("iter %d: LookupHash(%d) = %q, linear scan %q", iter, x, got, want)
			}
		}
	}
	// On a tie the smaller name wins, whichever backend lists it first.
	r2 := mustPlace(t, map[string][]uint64{"b": {100}, "a": {300, 100}})
	if got := pointNames(r2); !slices.Equal(got, []string{"a", "b", "a"}) {
		t.Errorf("tie order = %v, want [a b a]", got)
	}
	if got := r2.LookupHash(100); got != "a" {
		t.Errorf("LookupHash(100) = %q, want a (smaller name on a tie)", got)
	}
}

// TestLowerBound checks both lower-bound loops against sort.Search on
// sorted arrays of every length from 1 to 70, full of ties, for every
// probe in range and one past each end.
func TestLowerBound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 70; n++ {
		pos := make([]uint64, n)
		for i := range pos {
			pos[i] = 1 + r.Uint64N(40)
		}
		slices.Sort(pos)
		for x := uint64(0); x <= 42; x++ {
			want := sort.Search(n, func(i int) bool { return pos[i] >= x })
			if a, b := lowerBoundBranchless(pos, x), lowerBoundBranchy(pos, x); a != want || b != want {
				t.Fatalf("n=%d x=%d: branchless %d, branchy %d, want %d (pos %v)", n, x, a, b, want, pos)
			}
		}
	}
}

// TestBigRing checks a ring of more than bigRing points, where search takes
// the branchy loop, against the linear scan.
func TestBigRing(t *testing.T) {
	bs := names("10.0.0.", 70)
	const vnodes = bigRing/70 + 100
	ring := mustNew(t, bs, vnodes, nil)
	if ring.NumPoints() <= bigRing {
		t.Fatalf("%d points, want more than %d", ring.NumPoints(), bigRing)
	}
	slow := slowRing(bs, vnodes, nil)
	if !sameAsSlow(ring, slow) {
		t.Fatal("points differ from the plain spec")
	}
	r := rand.New(rand.NewPCG(1, 2))
	xs := []uint64{0, math.MaxUint64, slow[0].pos, slow[len(slow)-1].pos, slow[len(slow)-1].pos + 1}
	for range 100 {
		p := slow[r.IntN(len(slow))].pos
		xs = append(xs, p-1, p, p+1, r.Uint64())
	}
	for _, x := range xs {
		if got, want := ring.LookupHash(x), slowLookup(slow, x); got != want {
			t.Fatalf("LookupHash(%#x) = %q, linear scan %q", x, got, want)
		}
	}
}

// slowDiffCount is Diff by another route: cut the hash space at every
// position of either ring and ask both linear scans for the owner of each
// piece, summing the lengths of the pieces where they differ in a big.Int.
func slowDiffCount(a, b []slowPoint) *big.Int {
	var cuts []uint64
	for _, p := range a {
		cuts = append(cuts, p.pos)
	}
	for _, p := range b {
		cuts = append(cuts, p.pos)
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	sum := new(big.Int)
	start := new(big.Int)
	piece := func(end uint64) { // [start, end]
		if slowLookup(a, end) != slowLookup(b, end) {
			e := new(big.Int).SetUint64(end)
			sum.Add(sum, e.Sub(e, start).Add(e, big.NewInt(1)))
		}
		start.SetUint64(end).Add(start, big.NewInt(1))
	}
	for _, c := range cuts {
		piece(c)
	}
	if start.Cmp(new(big.Int).Lsh(big.NewInt(1), 64)) < 0 {
		piece(math.MaxUint64)
	}
	return sum
}

// count128 returns hi·2^64 + lo as a big.Int.
func count128(hi, lo uint64) *big.Int {
	n := new(big.Int).SetUint64(hi)
	return n.Lsh(n, 64).Add(n, new(big.Int).SetUint64(lo))
}

// TestDiffHand checks Diff on hand-placed rings whose differing arcs are
// known, including the wrap-around arc.
func TestDiffHand(t *testing.T) {
	const top = math.MaxUint64
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	minus := func(n int64) *big.Int { return new(big.Int).Sub(two64, big.NewInt(n)) }
	for _, c := range []struct {
		name string
		a, b map[string][]uint64
		want *big.Int
	}{
		{"same", map[string][]uint64{"a": {100}, "b": {200}}, map[string][]uint64{"a": {100}, "b": {200}}, big.NewInt(0)},
		// (200, 250] goes from c to b.
		{"move b", map[string][]uint64{"a": {100}, "b": {200}, "c": {300}}, map[string][]uint64{"a": {100}, "b": {250}, "c": {300}}, big.NewInt(50)},
		// (100, 150] goes from b to a.
		{"move a", map[string][]uint64{"a": {100}, "b": {200}}, map[string][]uint64{"a": {150}, "b": {200}}, big.NewInt(50)},
		// c takes (2^64-100, 2^64-50] from a's wrap-around arc.
		{"near the top", map[string][]uint64{"a": {100}, "b": {top - 99}}, map[string][]uint64{"a": {100}, "b": {top - 99}, "c": {top - 49}}, big.NewInt(50)},
		// c at 50 becomes point 0 and takes [0, 50] and (200, 2^64): all
		// but (50, 200], 150 values.
		{"new first point", map[string][]uint64{"a": {100}, "b": {200}}, map[string][]uint64{"a": {100}, "b": {200}, "c": {50}}, minus(150)},
		// b at 5 takes [0, 5] and (20, 2^64) from a: all but (5, 20].
		{"wrap to b", map[string][]uint64{"a": {10}, "b": {20}}, map[string][]uint64{"a": {10}, "b": {5, 20}}, minus(15)},
		// A point at the very top owns (prev, 2^64-1], and wraps nothing.
		{"point at top", map[string][]uint64{"a": {10}, "b": {20}}, map[string][]uint64{"a": {10}, "b": {20}, "c": {top}}, minus(21)},
		// c at 0 becomes point 0: it owns [0, 0] and wraps (20, 2^64).
		{"point at 0", map[string][]uint64{"a": {10}, "b": {20}}, map[string][]uint64{"a": {10}, "b": {20}, "c": {0}}, minus(20)},
		// b's tie at 100 loses to a, so it owns nothing.
		{"tie", map[string][]uint64{"a": {100}}, map[string][]uint64{"a": {100}, "b": {100}}, big.NewInt(0)},
		// Renamed backends differ everywhere.
		{"renamed", map[string][]uint64{"a": {100}, "b": {200}}, map[string][]uint64{"x": {100}, "y": {200}}, two64},
		{"to empty", map[string][]uint64{"a": {100}}, map[string][]uint64{}, two64},
		{"both empty", map[string][]uint64{}, map[string][]uint64{}, big.NewInt(0)},
	} {
		ra, rb := mustPlace(t, c.a), mustPlace(t, c.b)
		for _, dir := range []struct{ x, y *Ring }{{ra, rb}, {rb, ra}} {
			if got := count128(dir.x.diffCount(dir.y)); got.Cmp(c.want) != 0 {
				t.Errorf("%s: diff count = %v, want %v", c.name, got, c.want)
			}
			want, _ := new(big.Float).Quo(new(big.Float).SetInt(c.want), new(big.Float).SetInt(two64)).Float64()
			if got := dir.x.Diff(dir.y); got != want {
				t.Errorf("%s: Diff = %v, want %v", c.name, got, want)
			}
		}
		if got := slowDiffCount(slowPlaced(c.a), slowPlaced(c.b)); got.Cmp(c.want) != 0 {
			t.Errorf("%s: slowDiffCount = %v, want %v (the test's reference is wrong)", c.name, got, c.want)
		}
	}
	if d := mustPlace(t, map[string][]uint64{"a": {100}, "b": {200}, "c": {300}}).Diff(
		mustPlace(t, map[string][]uint64{"a": {100}, "b": {250}, "c": {300}})); d != 50.0/(1<<64) {
		t.Errorf("Diff = %v, want exactly 50/2^64", d)
	}
}

// TestDiffRandom checks the merge against slowDiffCount on random rings
// with many ties and points near both ends of the hash space.
func TestDiffRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pool := randomBackends(r, 8)
	randomPositions := func() map[string][]uint64 {
		m := map[string][]uint64{}
		for _, name := range pool[:r.IntN(len(pool)+1)] {
			if r.IntN(3) == 0 {
				continue
			}
			ps := make([]uint64, 1+r.IntN(4))
			for k := range ps {
				switch r.IntN(3) {
				case 0:
					ps[k] = r.Uint64N(20)
				case 1:
					ps[k] = math.MaxUint64 - r.Uint64N(20)
				default:
					ps[k] = r.Uint64()
				}
			}
			m[name] = ps
		}
		return m
	}
	for iter := range 500 {
		a, b := randomPositions(), randomPositions()
		ra, rb := mustPlace(t, a), mustPlace(t, b)
		want := slowDiffCount(slowPlaced(a), slowPlaced(b))
		if got := count128(ra.diffCount(rb)); got.Cmp(want) != 0 {
			t.Fatalf("iter %d: diff count = %v, want %v\na = %v\nb = %v", iter, got, want, a, b)
		}
		if ra.Diff(rb) != rb.Diff(ra) {
			t.Fatalf("iter %d: Diff is not symmetric", iter)
		}
		if ra.Diff(ra) != 0 {
			t.Fatalf("iter %d: Diff with itself is not 0", iter)
		}
	}
}

// TestAddBackend checks the ring's minimal disruption exactly: when a
// backend joins, the keys that move are exactly those the newcomer now
// owns, so Diff equals its share; and when it leaves, only its keys move.
// Sampled keys confirm it: every moved key moved to the newcomer.
func TestAddBackend(t *testing.T) {
	for _, b := range builtins {
		before := mustNew(t, names("10.0.0.", 50), 100, b.h)
		after := mustNew(t, names("10.0.0.", 51), 100, b.h)
		newcomer := "10.0.0.50"
		i := slices.Index(after.Backends(), newcomer)
		hi, lo := before.diffCount(after)
		counts, _ := after.arcs()
		if hi != 0 || lo != counts[i] {
			t.Fatalf("%s: %d·2^64+%d hash values moved, newcomer owns %d", b.name, hi, lo, counts[i])
		}
		share := after.Shares()[i]
		if d := before.Diff(after); d != share || after.Diff(before) != share {
			t.Errorf("%s: Diff = %v, newcomer's share %v", b.name, d, share)
		}
		const keys = 20000
		moved := 0
		for k := range keys {
			key := fmt.Sprint("client-", k)
			was, is := before.Lookup(key), after.Lookup(key)
			if was != is {
				moved++
				if is != newcomer {
					t.Fatalf("%s: key %q moved from %s to %s, not to the newcomer", b.name, key, was, is)
				}
			}
		}
		// The moved count is binomial(keys, share): allow 5 standard
		// deviations.
		mean := keys * share
		if sd := math.Sqrt(mean * (1 - share)); math.Abs(float64(moved)-mean) > 5*sd {
			t.Errorf("%s: %d of %d sampled keys moved, Diff predicts %.0f ± %.0f", b.name, moved, keys, mean, sd)
		}
	}
}

// TestGolden pins the rings of every built-in hasher. If it fails, the
// change alters rings that deployed fleets compute: a breaking change.
//
// goldenSmall is the owner of each point, in ring order, for backends a..e
// with 3 vnodes; goldenLarge is the SHA-256 of the point list (each point
// as its position, little-endian uint64, then its backend index,
// little-endian uint32) for the 100 backends 10.0.0.1:80 .. 10.0.0.100:80
// with 100 vnodes. Both were produced by slowRing (the plain spec above,
// not New) when the test was written; TestGoldenSource re-derives them. The
// fnv1a values were also reproduced by an independent Python script (FNV-1a
// over struct.pack('<Q', j) + name, points sorted as tuples).
var (
	goldenSmall = map[string]string{
		"xxh3":      "c c d a e c b e d b a a e d b",
		"xxh3-seed": "e d c a e b d a c e b b c d a",
		"farm":      "b e b a a e c e a d b d c d c",
		"fnv1a":     "e d c b a d e a b c e d a c b",
	}
	goldenLarge = map[string]string{
		"xxh3":      "6c0f1afd85e93da7522126efa0f7721bfb8f54eeeb02373ccd834c00c68c0fe7",
		"xxh3-seed": "53f0622b57f5d3e32de33eb9bd11cf04ab5c7e6e5c3c00bbc971e0b5ae963923",
		"farm":      "dc5d40fbcc26c372747fd6d2dcec69eeaf091b36d8230d658467a62df933ac43",
		"fnv1a":     "233b48f856276dc06eeddff83747b5f81914155a64c5d048e32ca18c76293dd5",
	}
)

func largeBackends() []string {
	b := make([]string, 100)
	for i := range b {
		b[i] = fmt.Sprintf("10.0.0.%d:80", i+1)
	}
	return b
}

func pointsSHA256(pts []Point) string {
	buf := make([]byte, 0, 12*len(pts))
	for _, p := range pts {
		buf = binary.LittleEndian.AppendUint64(buf, p.Pos)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(p.Backend))
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}

func TestGolden(t *testing.T) {
	for _, b := range builtins {
		t.Run(b.name, func(t *testing.T) {
			small := mustNew(t, []string{"e", "c", "a", "d", "b"}, 3, b.h)
			if got := strings.Join(pointNames(small), " "); got != goldenSmall[b.name] {
				t.Errorf("small ring = %q, want %q", got, goldenSmall[b.name])
			}
			large := mustNew(t, largeBackends(), 100, b.h)
			if got := pointsSHA256(large.AppendPoints(nil)); got != goldenLarge[b.name] {
				t.Errorf("large ring SHA-256 = %s, want %s", got, goldenLarge[b.name])
			}
		})
	}
}

// TestGoldenSource checks that the golden values are the plain spec's.
func TestGoldenSource(t *testing.T) {
	for _, b := range builtins {
		var small []string
		for _, p := range slowRing([]string{"a", "b", "c", "d", "e"}, 3, b.h) {
			small = append(small, p.name)
		}
		if got := strings.Join(small, " "); got != goldenSmall[b.name] {
			t.Errorf("%s: slowRing small = %q, golden %q", b.name, got, goldenSmall[b.name])
		}
		bs := largeBackends()
		sorted := slices.Sorted(slices.Values(bs))
		var pts []Point
		for _, p := range slowRing(bs, 100, b.h) {
			i, _ := slices.BinarySearch(sorted, p.name)
			pts = append(pts, Point{p.pos, i})
		}
		if got := pointsSHA256(pts); got != goldenLarge[b.name] {
			t.Errorf("%s: slowRing large SHA-256 = %s, golden %s", b.name, got, goldenLarge[b.name])
		}
	}
	// One position by hand, straight from the xxh3 library: point 1 of "a"
	// hashes the bytes 01 00 00 00 00 00 00 00 'a'.
	r := mustNew(t, []string{"a"}, 2, nil)
	want := xxh3.Hash([]byte{1, 0, 0, 0, 0, 0, 0, 0, 'a'})
	if pts := r.AppendPoints(nil); pts[0].Pos != want && pts[1].Pos != want {
		t.Errorf("points of a = %v, want one at %#x", pts, want)
	}
}

// TestDefaultHasher checks that a nil Hasher means XXH3 with seed 0.
func TestDefaultHasher(t *testing.T) {
	bs := names("b", 20)
	a, b := mustNew(t, bs, 10, nil), mustNew(t, bs, 10, maglev.XXH3())
	if !slices.Equal(a.AppendPoints(nil), b.AppendPoints(nil)) {
		t.Error("nil hasher and XXH3 rings differ")
	}
	if a.Hasher() == nil || !a.xxh3 || mustNew(t, bs, 10, maglev.XXH3Seed(1)).xxh3 {
		t.Error("the XXH3 fast path is not chosen exactly for XXH3")
	}
	if a.LookupHash(xxh3.HashString("k")) != a.Lookup("k") {
		t.Error("Lookup does not hash with XXH3")
	}
	// A hasher of a non-comparable type must not panic the fast-path check.
	f := maglev.HashFunc(xxh3.Hash)
	c := mustNew(t, bs, 10, f)
	if c.xxh3 || !slices.Equal(c.AppendPoints(nil), a.AppendPoints(nil)) {
		t.Error("a HashFunc wrapping xxh3.Hash gives a different ring")
	}
}

func TestEmpty(t *testing.T) {
	for _, e := range []*Ring{mustNew(t, nil, 1, nil), mustPlace(t, nil)} {
		if e.Lookup("k") != "" || e.LookupBytes([]byte("k")) != "" || e.LookupHash(3) != "" {
			t.Error("empty ring Lookup did not return \"\"")
		}
		if e.Len() != 0 || e.NumPoints() != 0 || len(e.Backends()) != 0 || len(e.Shares()) != 0 || len(e.AppendPoints(nil)) != 0 {
			t.Error("empty ring reports backends or points")
		}
		full := mustNew(t, names("b", 3), 2, nil)
		if e.Diff(full) != 1 || full.Diff(e) != 1 || e.Diff(e) != 0 {
			t.Error("Diff with an empty ring is not 1, or empty vs empty is not 0")
		}
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		backends []string
		vnodes   int
		want     error
	}{
		{names("b", 2), 0, ErrVnodes},
		{names("b", 2), -1, ErrVnodes},
		{nil, 0, ErrVnodes},
		{names("b", 1), MaxPoints + 1, ErrVnodes},
		{names("b", 2), MaxPoints/2 + 1, ErrTooManyPoints},
		{names("b", 1000), MaxPoints/1000 + 1, ErrTooManyPoints},
		{[]string{"a", "", "b"}, 3, maglev.ErrEmptyName},
		{[]string{"a", "b", "a"}, 3, maglev.ErrDuplicateName},
	} {
		r, err := New(c.backends, c.vnodes, nil)
		if !errors.Is(err, c.want) || r != nil {
			t.Errorf("New(%d backends, %d) = %v, %v; want %v", len(c.backends), c.vnodes, r, err, c.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), "ring: ") {
			t.Errorf("error %q lacks the ring: prefix", err)
		}
	}
	_, err := New([]string{"a", "b", "a"}, 3, nil)
	if got, want := err.Error(), `ring: duplicate backend name: "a"`; got != want {
		t.Errorf("duplicate name error = %q, want %q", got, want)
	}
	huge := make([]uint64, MaxPoints/2+1)
	for _, c := range []struct {
		positions map[string][]uint64
		want      error
	}{
		{map[string][]uint64{"a": {1}, "": {2}}, maglev.ErrEmptyName},
		{map[string][]uint64{"a": {1}, "b": {}}, ErrNoPositions},
		{map[string][]uint64{"a": {1}, "b": nil}, ErrNoPositions},
		// Lengths are checked before any position is read, so the 64 MiB
		// array is never touched; the two backends share it.
		{map[string][]uint64{"a": huge, "b": huge}, ErrTooManyPoints},
	} {
		r, err := NewWithPositions(c.positions, nil)
		if !errors.Is(err, c.want) || r != nil || !strings.HasPrefix(err.Error(), "ring: ") {
			t.Errorf("NewWithPositions = %v, %v; want a ring: error wrapping %v", r, err, c.want)
		}
	}
}

// TestShares checks shares on hand-placed rings against arc lengths worked
// out by hand, and on random rings that they sum to 1.
func TestShares(t *testing.T) {
	const two64 float64 = 1 << 64
	for _, c := range []struct {
		positions map[string][]uint64
		want      []float64 // in name order
	}{
		// A owns the wrap-around arc (300, 2^64) ∪ [0, 100].
		{map[string][]uint64{"A": {100}, "B": {200}, "C": {300}}, []float64{(two64 - 200) / two64, 100 / two64, 100 / two64}},
		{map[string][]uint64{"A": {100}}, []float64{1}},
		// b ties with a at 100 and owns nothing; a owns all 2^64 values.
		{map[string][]uint64{"a": {100}, "b": {100}}, []float64{1, 0}},
		{map[string][]uint64{"a": {100, 200}, "b": {100}}, []float64{1, 0}},
		{map[string][]uint64{"a": {0}, "b": {math.MaxUint64}}, []float64{1 / two64, (two64 - 1) / two64}},
	} {
		if got := mustPlace(t, c.positions).Shares(); !slices.Equal(got, c.want) {
			t.Errorf("Shares(%v) = %v, want %v", c.positions, got, c.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 50 {
		ring := mustNew(t, randomBackends(r, 1+r.IntN(200)), 1+r.IntN(50), nil)
		counts, full := ring.arcs()
		var sum uint64
		for _, c := range counts {
			sum += c
		}
		if sum != 0 || full >= 0 {
			t.Fatalf("iter %d: arc counts sum to %d mod 2^64 (full %d), want 0 and no full owner", iter, sum, full)
		}
		total := 0.0
		for _, s := range ring.Shares() {
			total += s
		}
		if math.Abs(total-1) > 1e-12 {
			t.Fatalf("iter %d: shares sum to %v", iter, total)
		}
	}
}

var balance = flag.Bool("balance", false, "print the balance measurement behind DefaultVnodes")

// balanceStats returns, for n backends with vnodes points each, the
// largest share over the mean share 1/n and the standard deviation of the
// shares over the mean, for name set set.
func balanceStats(t testing.TB, set, n, vnodes int) (peak, spread float64) {
	bs := make([]string, n)
	for i := range bs {
		bs[i] = fmt.Sprintf("10.%d.%d.%d:80", set, i/256, i%256)
	}
	shares := mustNew(t, bs, vnodes, nil).Shares()
	mean := 1 / float64(n)
	var sq float64
	for _, s := range shares {
		peak = max(peak, s/mean)
		sq += (s - mean) * (s - mean)
	}
	return peak, math.Sqrt(sq/float64(n)) / mean
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2
}

// TestBalance checks DefaultVnodes against theory: a backend's share is
// the sum of vnodes arcs, so the spread of shares is close to 1/√vnodes.
// With -balance it prints the measurement quoted in DefaultVnodes' doc.
func TestBalance(t *testing.T) {
	if *balance {
		fmt.Println("vnodes  peak/mean N=10  N=100  N=1000   spread N=10  N=100  N=1000")
		for _, v := range []int{5, 10, 20, 50, 100, 128, 160, 200, 256, 500, 1000} {
			var peaks, spreads [3][]float64
			for k, n := range []int{10, 100, 1000} {
				for set := range 20 {
					p, s := balanceStats(t, set, n, v)
					peaks[k] = append(peaks[k], p)
					spreads[k] = append(spreads[k], s)
				}
			}
			fmt.Printf("%6d  %14.2f %6.2f %7.2f   %10.1f%% %5.1f%% %6.1f%%\n", v,
				median(peaks[0]), median(peaks[1]), median(peaks[2]),
				100*median(spreads[0]), 100*median(spreads[1]), 100*median(spreads[2]))
		}
	}
	// At N = 100, the spread of 100 shares has a sampling error of about
	// 1/√(2·100) = 7% of itself; allow 25% either side of 1/√vnodes.
	for set := range 3 {
		_, spread := balanceStats(t, set, 100, DefaultVnodes)
		if want := 1 / math.Sqrt(DefaultVnodes); spread < 0.75*want || spread > 1.25*want {
			t.Errorf("set %d: spread of shares %.3f, want about 1/√%d = %.3f", set, spread, DefaultVnodes, want)
		}
	}
}

func TestAccessors(t *testing.T) {
	bs := []string{"c", "a", "b"}
	r := mustNew(t, bs, 4, nil)
	got := r.Backends()
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Backends = %v, want sorted", got)
	}
	got[0] = "mutated"
	if r.Backends()[0] != "a" || bs[0] != "c" {
		t.Error("Backends returned the ring's own slice, or New reordered the caller's")
	}
	pts := r.AppendPoints([]Point{{Pos: 7, Backend: 9}})
	if len(pts) != 13 || pts[0] != (Point{7, 9}) {
		t.Fatalf("AppendPoints did not append: %v", pts)
	}
	if !slices.IsSortedFunc(pts[1:], func(a, b Point) int { return cmp.Compare(a.Pos, b.Pos) }) {
		t.Error("points are not in ascending order")
	}
	for _, p := range pts[1:] {
		if r.LookupHash(p.Pos) != r.Backends()[p.Backend] {
			t.Errorf("LookupHash(%#x) is not the owner of the point there", p.Pos)
		}
	}
	if placed := mustPlace(t, map[string][]uint64{"x": {1}}); placed.Vnodes() != 0 || placed.Hasher() == nil {
		t.Error("a placed ring reports vnodes, or has no hasher")
	}
}

func TestZeroAllocs(t *testing.T) {
	r := mustNew(t, names("b", 100), 100, nil)
	farm := mustNew(t, names("b", 100), 100, maglev.Farm())
	empty := mustNew(t, nil, 1, nil)
	key := "0123456789abcdef"
	keyBytes := []byte(key)
	var sink string
	for name, f := range map[string]func(){
		"Lookup":           func() { sink = r.Lookup(key) },
		"LookupBytes":      func() { sink = r.LookupBytes(keyBytes) },
		"LookupHash":       func() { sink = r.LookupHash(12345) },
		"Lookup/farm":      func() { sink = farm.Lookup(key) },
		"LookupBytes/farm": func() { sink = farm.LookupBytes(keyBytes) },
		"Lookup/empty":     func() { sink = empty.Lookup(key) },
	} {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s allocates %.1f times per call", name, a)
		}
	}
	_ = sink
}

// TestConcurrent runs lookups from several goroutines; under -race it
// checks that lookups only read.
func TestConcurrent(t *testing.T) {
	r := mustNew(t, names("b", 10), 10, nil)
	want := r.Lookup("k")
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := range 4 {
		wg.Go(func() {
			for k := range 1000 {
				if got := r.Lookup("k"); got != want {
					errs <- fmt.Sprintf("goroutine %d, lookup %d: %q, want %q", g, k, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// fuzzLE encodes xs little-endian, 8 bytes each: a fuzz seed of positions.
func fuzzLE(xs ...uint64) []byte {
	var b []byte
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

// fuzzPositions reads a fuzz input as up to 64 positions, 8 bytes each,
// dealt in turn to five backends a to e.
func fuzzPositions(data []byte) map[string][]uint64 {
	positions := map[string][]uint64{}
	for k := 0; k+8 <= len(data) && k < 8*64; k += 8 {
		name := string(rune('a' + k/8%5))
		positions[name] = append(positions[name], binary.LittleEndian.Uint64(data[k:]))
	}
	return positions
}

// FuzzLookup checks the binary search against the linear scan on rings of
// fuzzed positions. The seeds are tricky rings: one point, ties, points at
// both ends of the hash space.
func FuzzLookup(f *testing.F) {
	f.Add(fuzzLE(100), uint64(100))                          // one point, probe on it
	f.Add(fuzzLE(100, 200, 300), uint64(320))                // the seed's ring, wrapping
	f.Add(fuzzLE(5, 5, 5, 5), uint64(5))                     // all tied
	f.Add(fuzzLE(0, math.MaxUint64), uint64(math.MaxUint64)) // both ends
	f.Add(fuzzLE(math.MaxUint64, math.MaxUint64), uint64(0))
	f.Add(fuzzLE(1, 2, 3, 4, 5, 6, 7), uint64(4))
	f.Fuzz(func(t *testing.T, data []byte, x uint64) {
		positions := fuzzPositions(data)
		r, err := NewWithPositions(positions, nil)
		if err != nil {
			t.Fatal(err)
		}
		slow := slowPlaced(positions)
		for _, y := range []uint64{x, x - 1, x + 1, 0, math.MaxUint64} {
			if got, want := r.LookupHash(y), slowLookup(slow, y); got != want {
				t.Fatalf("LookupHash(%#x) = %q, linear scan %q", y, got, want)
			}
		}
	})
}

// FuzzNew checks New on arbitrary names against the plain spec: the same
// points in the same order, and the same owner for probes around them.
// Names are length-prefixed in data (a length byte, then the bytes). The
// seeds are tricky sets: names that differ only after a byte that looks
// like a j, invalid UTF-8, NUL bytes, duplicates and empty names.
func FuzzNew(f *testing.F) {
	enc := func(names ...string) []byte {
		var b []byte
		for _, n := range names {
			b = append(append(b, byte(len(n))), n...)
		}
		return b
	}
	f.Add(enc("A", "B", "C"), uint8(1), uint64(0))
	f.Add(enc("a", "a\x00", "\x00a"), uint8(3), uint64(1<<63))
	f.Add(enc("\xff\xfe", "\xc3\x28"), uint8(5), uint64(7))
	f.Add(enc("x", "x"), uint8(2), uint64(0)) // duplicate
	f.Add(enc("", "y"), uint8(2), uint64(0))  // empty name
	f.Add(enc("solo"), uint8(0), uint64(0))   // vnodes 0
	f.Fuzz(func(t *testing.T, data []byte, vnodes uint8, x uint64) {
		var names []string
		for len(data) > 0 {
			n := min(int(data[0]), len(data)-1)
			names = append(names, string(data[1:1+n]))
			data = data[1+n:]
		}
		v := int(vnodes % 17)
		r, err := New(names, v, maglev.FNV1a())
		if err != nil {
			if !errors.Is(err, ErrVnodes) && !errors.Is(err, maglev.ErrEmptyName) && !errors.Is(err, maglev.ErrDuplicateName) {
				t.Fatalf("New: unexpected error %v", err)
			}
			return
		}
		pts := slowRing(names, v, maglev.FNV1a())
		if !sameAsSlow(r, pts) {
			t.Fatalf("New(%q, %d) points differ from the plain spec", names, v)
		}
		probes := []uint64{x, 0, math.MaxUint64}
		for _, p := range pts {
			probes = append(probes, p.pos, p.pos-1, p.pos+1)
		}
		for _, y := range probes {
			if got, want := r.LookupHash(y), slowLookup(pts, y); got != want {
				t.Fatalf("LookupHash(%#x) = %q, linear scan %q", y, got, want)
			}
		}
	})
}
