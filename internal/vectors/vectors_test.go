package vectors

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	farm "github.com/dgryski/go-farm"
	"github.com/zeebo/xxh3"
)

// dir is where the committed vector files are, from this folder.
const dir = "../../testdata/vectors"

// load reads and decodes the committed file of hasher id, strictly.
func load(t *testing.T, id string) (*File, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s.json: %v", id, err)
	}
	return &f, data
}

// TestUpToDate checks that the committed files are exactly what the code
// makes today, so that they cannot drift from it. If it fails after a
// deliberate change to the generator, run go generate ./internal/vectors;
// if it fails after a change to the maglev or ring packages, that change
// moves tables or rings that deployed fleets compute.
func TestUpToDate(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine whole-file check; run without -race (see norace_test.go)")
	}
	for _, h := range Hashers {
		f, err := Build(h)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		old, got := load(t, h.ID)
		if bytes.Equal(got, want) {
			continue
		}
		t.Errorf("testdata/vectors/%s.json is not what the code makes (go generate ./internal/vectors rewrites it)", h.ID)
		// Name the first differing tables and rings, to say what moved.
		for i := range min(len(old.Tables), len(f.Tables)) {
			if !reflect.DeepEqual(old.Tables[i], f.Tables[i]) {
				t.Errorf("%s: table %s differs", h.ID, f.Tables[i].ID)
			}
		}
		for i := range min(len(old.Rings), len(f.Rings)) {
			if !reflect.DeepEqual(old.Rings[i], f.Rings[i]) {
				t.Errorf("%s: ring %s differs", h.ID, f.Rings[i].ID)
			}
		}
	}
}

// TestMarshal checks that the files' layout decodes to what was encoded.
func TestMarshal(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine whole-file check; run without -race (see norace_test.go)")
	}
	f, err := Build(Hashers[0])
	if err != nil {
		t.Fatal(err)
	}
	data, err := Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var back File
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, f) {
		t.Error("Marshal's output decodes to a different File")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	enc := json.NewEncoder(&raw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(compact.Bytes(), bytes.TrimSpace(raw.Bytes())) {
		t.Error("Marshal's output is not the JSON encoding of the File, reindented")
	}
}

// TestText checks the printable form of names and keys.
func TestText(t *testing.T) {
	for in, want := range map[string]string{
		"":             "",
		"10.0.0.1:80":  "10.0.0.1:80",
		"a\x00b":       `a\x00b`,
		"\n":           `\x0a`,
		"\xff\xfe":     `\xff\xfe`,
		"\xc3\x28":     `\xc3(`,
		"\u00e9":       "\u00e9",
		`a\b`:          `a\\b`,
		"\u200b":       `\xe2\x80\x8b`, // not printable
		"a|skip\x7f":   `a|skip\x7f`,
		"\xed\xa0\x80": `\xed\xa0\x80`, // a UTF-16 surrogate is not UTF-8
	} {
		if got := Text([]byte(in)); got != want {
			t.Errorf("Text(%q) = %s, want %s", in, got, want)
		}
	}
}

// plainHash is each hasher of the files, called straight from the library
// that defines it (FNV-1a from hash/fnv), not through package maglev.
func plainHash(t *testing.T, id string) func([]byte) uint64 {
	switch id {
	case "xxh3":
		return xxh3.Hash
	case "xxh3-seed":
		return func(b []byte) uint64 { return xxh3.HashSeed(b, xxh3Seed) }
	case "farm":
		return farm.Fingerprint64
	case "fnv1a":
		return func(b []byte) uint64 {
			h := fnv.New64a()
			h.Write(b)
			return h.Sum64()
		}
	}
	t.Fatalf("unknown hasher %q", id)
	return nil
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("hex %q: %v", s, err)
	}
	return b
}

// TestSpec checks every value in the committed files with a second
// implementation of docs/spec.md that reads nothing but the files: the
// check an implementer in another language makes. It shares no code with
// packages maglev and ring.
func TestSpec(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine whole-file check; run without -race (see norace_test.go)")
	}
	for _, h := range Hashers {
		t.Run(h.ID, func(t *testing.T) {
			f, _ := load(t, h.ID)
			if f.Format != Format || f.Hasher.ID != h.ID {
				t.Fatalf("format %q, hasher %q", f.Format, f.Hasher.ID)
			}
			checkFile(t, f, plainHash(t, h.ID))
		})
	}
}

func checkFile(t *testing.T, f *File, H func([]byte) uint64) {
	keys := make([][]byte, len(f.Keys))
	hashes := make([]uint64, len(f.Keys))
	for i, k := range f.Keys {
		keys[i] = unhex(t, k.Hex)
		hashes[i] = H(keys[i])
		if Hex64(hashes[i]) != k.Hash {
			t.Errorf("key %d: H = %016x, file %s", i, hashes[i], k.Hash)
		}
		if k.Text != Text(keys[i]) {
			t.Errorf("key %d: text %q, want %q", i, k.Text, Text(keys[i]))
		}
	}
	if len(keys) != 100 {
		t.Errorf("%d keys, want 100", len(keys))
	}
	sets := make(map[string][][]byte)
	for _, s := range f.Sets {
		var names [][]byte
		for i, n := range s.Names {
			name := unhex(t, n.Hex)
			names = append(names, name)
			if got := Hex64(H(append(slices.Clip(name), "|offset"...))); got != n.OffsetHash {
				t.Errorf("set %s name %d: offset hash %s, file %s", s.ID, i, got, n.OffsetHash)
			}
			if got := Hex64(H(append(slices.Clip(name), "|skip"...))); got != n.SkipHash {
				t.Errorf("set %s name %d: skip hash %s, file %s", s.ID, i, got, n.SkipHash)
			}
		}
		sets[s.ID] = names
	}
	for _, tab := range f.Tables {
		checkWeights(t, tab)
		checkTable(t, tab, sets[tab.Set], H, hashes)
	}
	for _, r := range f.Rings {
		checkRing(t, r, sets[r.Set], H, hashes)
	}
	// What the files must cover, whatever the generator does.
	ids := make(map[string]bool)
	for _, tab := range f.Tables {
		ids[tab.ID] = true
	}
	for _, r := range f.Rings {
		ids[r.ID] = true
	}
	for _, id := range []string{
		"xyz/M=7", "a-e/M=13", "hostile-10/M=13", "hosts-100/M=65537", "random-100/M=65537",
		"hosts-7/M=7/weights=mod5", "hosts-100/M=65537/weights=mod5", "hosts-100/M=655373",
		"hosts-100/M=65537/weights=pow2", "random-100/M=65537/weights=heavy", "xyz/M=7/weights=zero",
		"empty/M=7", "a-e/vnodes=3", "hostile-10/vnodes=3", "hosts-100/vnodes=256", "hosts-100/vnodes=100",
	} {
		if !ids[id] {
			t.Errorf("no case %s", id)
		}
	}
	for id, n := range map[string]int{"xyz": 3, "hostile-10": 10, "hosts-100": 100, "random-100": 100} {
		if len(sets[id]) != n {
			t.Errorf("set %s has %d names, want %d", id, len(sets[id]), n)
		}
	}
}

// ruleWeight is the weight rule of docs/spec.md: the weight of the set's
// k-th name.
func ruleWeight(rule string, k int) (uint32, bool) {
	switch rule {
	case "mod5":
		return uint32(k % 5), true
	case "1-2-3":
		return uint32(1 + k%3), true
	case "pow2":
		return 1 << (k % 32), true
	case "heavy":
		if k == 0 {
			return 1_000_000, true
		}
		return 1, true
	case "equal":
		return 7, true
	case "zero":
		return 0, true
	}
	return 0, false
}

// checkWeights checks a weighted table's weights against its rule, as
// docs/spec.md defines the rules.
func checkWeights(t *testing.T, tab Table) {
	t.Helper()
	if tab.Weighted != (tab.Weights != "") {
		t.Errorf("%s: weighted %v with rule %q", tab.ID, tab.Weighted, tab.Weights)
	}
	if !tab.Weighted {
		return
	}
	for i, b := range tab.Backends {
		if w, ok := ruleWeight(tab.Weights, b.Name); !ok || w != b.Weight {
			t.Errorf("%s: backend %d (name %d) has weight %d, rule %q gives %d", tab.ID, i, b.Name, b.Weight, tab.Weights, w)
		}
	}
}

// sortedOrder returns the indices of names in byte order.
func sortedOrder(names [][]byte) []int {
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(names[a], names[b]) })
	return order
}

func checkTable(t *testing.T, tab Table, names [][]byte, H func([]byte) uint64, hashes []uint64) {
	t.Helper()
	m := uint64(tab.M)
	order := sortedOrder(names)
	if len(tab.Backends) != len(order) {
		t.Fatalf("%s: %d backends, set has %d names", tab.ID, len(tab.Backends), len(order))
	}
	offset := make([]uint64, len(order))
	skip := make([]uint64, len(order))
	weight := make([]uint64, len(order))
	var maxW uint64
	for i, k := range order {
		b := tab.Backends[i]
		name := names[k]
		offset[i] = H(append(slices.Clip(name), "|offset"...)) % m
		skip[i] = H(append(slices.Clip(name), "|skip"...))%(m-1) + 1
		if b.Name != k || uint64(b.Offset) != offset[i] || uint64(b.Skip) != skip[i] {
			t.Errorf("%s: backend %d = name %d offset %d skip %d, want name %d offset %d skip %d",
				tab.ID, i, b.Name, b.Offset, b.Skip, k, offset[i], skip[i])
		}
		weight[i] = uint64(b.Weight)
		if !tab.Weighted && b.Weight != 1 {
			t.Errorf("%s: unweighted backend %d has weight %d", tab.ID, i, b.Weight)
		}
		maxW = max(maxW, weight[i])
	}
	// The fill: round-robin, or the weighted rule's rounds.
	owner := make([]int, m)
	for s := range owner {
		owner[s] = -1
	}
	next := make([]uint64, len(order)) // preferences looked at
	turnsT := make([]uint64, len(order))
	filled := uint64(0)
	turn := func(i int) {
		for {
			s := (offset[i] + next[i]*skip[i]) % m
			next[i]++
			if owner[s] < 0 {
				owner[s] = i
				filled++
				return
			}
		}
	}
	if len(order) > 0 && (!tab.Weighted || maxW > 0) {
		for k := uint64(1); filled < m; k++ {
			for i := range order {
				if filled == m {
					break
				}
				if tab.Weighted {
					if weight[i] == 0 || k*weight[i] < turnsT[i] {
						continue
					}
					turnsT[i] += maxW
				}
				turn(i)
			}
		}
	}
	counts := make([]int, len(order))
	buf := make([]byte, 0, 4*m)
	for _, o := range owner {
		if o >= 0 {
			counts[o]++
		}
		buf = binary.LittleEndian.AppendUint32(buf, uint32(o))
	}
	for i, b := range tab.Backends {
		if b.Count != counts[i] {
			t.Errorf("%s: backend %d owns %d slots, file %d", tab.ID, i, counts[i], b.Count)
		}
	}
	sum := sha256.Sum256(buf)
	if got := hex.EncodeToString(sum[:]); got != tab.SlotsSHA256 {
		t.Errorf("%s: slots SHA-256 %s, file %s", tab.ID, got, tab.SlotsSHA256)
	}
	switch {
	case tab.M <= smallM:
		if !slices.Equal(owner, tab.Slots) || tab.FirstSlots != nil {
			t.Errorf("%s: slots %v, file %v", tab.ID, owner, tab.Slots)
		}
	case !slices.Equal(owner[:headSlots], tab.FirstSlots) || tab.Slots != nil:
		t.Errorf("%s: first slots %v, file %v", tab.ID, owner[:headSlots], tab.FirstSlots)
	}
	if len(tab.Lookups) != len(hashes) {
		t.Errorf("%s: %d lookups, want %d", tab.ID, len(tab.Lookups), len(hashes))
	}
	for i, l := range tab.Lookups {
		s := hashes[i] % m
		if l.Key != i || uint64(l.Slot) != s || l.Backend != owner[s] {
			t.Errorf("%s: lookup %d = %+v, want key %d slot %d backend %d", tab.ID, i, l, i, s, owner[s])
		}
	}
}

func checkRing(t *testing.T, r Ring, names [][]byte, H func([]byte) uint64, hashes []uint64) {
	t.Helper()
	order := sortedOrder(names)
	if !slices.Equal(order, r.Order) {
		t.Errorf("%s: order %v, want %v", r.ID, r.Order, order)
	}
	type point struct {
		pos     uint64
		backend int
		j       int
	}
	var pts []point
	for i, k := range order {
		for j := range r.Vnodes {
			in := binary.LittleEndian.AppendUint64(nil, uint64(j))
			pts = append(pts, point{H(append(in, names[k]...)), i, j})
		}
	}
	// By position; ties by backend (names are sorted), then j.
	slices.SortFunc(pts, func(a, b point) int {
		if a.pos != b.pos {
			if a.pos < b.pos {
				return -1
			}
			return 1
		}
		if a.backend != b.backend {
			return a.backend - b.backend
		}
		return a.j - b.j
	})
	buf := make([]byte, 0, 12*len(pts))
	var listed []Point
	for _, p := range pts {
		buf = binary.LittleEndian.AppendUint64(buf, p.pos)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(p.backend))
		listed = append(listed, Point{Pos: fmt.Sprintf("%016x", p.pos), Backend: p.backend, J: p.j})
	}
	sum := sha256.Sum256(buf)
	if got := hex.EncodeToString(sum[:]); got != r.PointsSHA256 || r.NumPoints != len(pts) {
		t.Errorf("%s: %d points, SHA-256 %s; file %d, %s", r.ID, len(pts), got, r.NumPoints, r.PointsSHA256)
	}
	if r.Vnodes <= smallVnodes {
		if !slices.Equal(listed, r.Points) && len(listed)+len(r.Points) > 0 {
			t.Errorf("%s: points differ", r.ID)
		}
	} else if n := min(headPoints, len(listed)); !slices.Equal(listed[:n], r.FirstPoints) {
		t.Errorf("%s: first points differ", r.ID)
	}
	for i, l := range r.Lookups {
		want := RingLookup{Key: i, Point: -1, Backend: -1}
		if len(pts) > 0 {
			want.Point = 0 // wrap past the end
			for k, p := range pts {
				if p.pos >= hashes[i] {
					want.Point = k
					break
				}
			}
			want.Backend = pts[want.Point].backend
		}
		if l != want {
			t.Errorf("%s: lookup %d = %+v, want %+v", r.ID, i, l, want)
		}
	}
	if len(r.Lookups) != len(hashes) {
		t.Errorf("%s: %d lookups, want %d", r.ID, len(r.Lookups), len(hashes))
	}
}
