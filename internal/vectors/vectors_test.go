package vectors

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math/big"
	"math/bits"
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

// load reads the committed file of hasher id through Parse, so that a
// damaged file fails here, at once, before any check computes from it; and
// strictly: a member File does not have is an error too.
func load(t *testing.T, id string) (*File, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(id+".json", data)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(new(File)); err != nil {
		t.Fatalf("%s.json: %v", id, err)
	}
	return f, data
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
	var cov coverage
	for _, tab := range f.Tables {
		checkWeights(t, tab)
		checkTable(t, tab, sets[tab.Set], H, hashes, &cov)
	}
	for _, r := range f.Rings {
		checkRing(t, r, sets[r.Set], H, hashes, &cov)
	}
	// The explicit full candidate orders must show every part of the
	// order at work.
	for what, ok := range map[string]bool{
		"the sweep after 16 backends were yielded":                    cov.sweepAfter16,
		"the sweep after all 64 probes":                               cov.sweepAfter64,
		"the sweep passing over a drained backend":                    cov.sweepDrained,
		"a ring walk passing an owner met before":                     cov.ringRepeat,
		"a ring walk wrapping past the last point":                    cov.ringWrap,
		"a table key whose candidates are more than 8":                cov.longTable,
		"a ring key whose candidates are more than 8":                 cov.longRing,
		"a table with no candidates (no backend owns slots)":          cov.emptyTable,
		"a freed slot won on equal positions (to the lower index)":    cov.tieEqual,
		"a freed slot won on equal j·w products of different weights": cov.tieWeighted,
		"a removal comparing j·w products of 2^32 or more":            cov.wideProduct,
		"a removal taking out a drained backend":                      cov.removedDrained,
		"a removal leaving no backend in service (an empty table)":    cov.removedAll,
	} {
		if !ok {
			t.Errorf("no full candidate order or removal shows %s", what)
		}
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
	// Removals of one backend, of several and of all but one, in small and
	// large tables, weighted and not.
	removing := []string{"a-e/M=13", "a-e/M=13/weights=1-2-3", "hosts-100/M=65537", "hosts-100/M=65537/weights=mod5"}
	for _, tab := range f.Tables {
		if !slices.Contains(removing, tab.ID) {
			continue
		}
		removing = slices.DeleteFunc(removing, func(id string) bool { return id == tab.ID })
		sizes := make(map[int]bool)
		for _, r := range tab.Removals {
			sizes[len(r.Removed)] = true
		}
		if n := len(tab.Backends); !sizes[1] || !sizes[n-1] || len(sizes) < 3 {
			t.Errorf("%s: removals of %v backends, want 1, several and %d", tab.ID, slices.Sorted(maps.Keys(sizes)), n-1)
		}
	}
	if len(removing) > 0 {
		t.Errorf("no tables %v, with removals", removing)
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

func checkTable(t *testing.T, tab Table, names [][]byte, H func([]byte) uint64, hashes []uint64, cov *coverage) {
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
	checkRemovals(t, tab, owner, offset, skip, weight, cov)
	if len(tab.Lookups) != len(hashes) {
		t.Errorf("%s: %d lookups, want %d", tab.ID, len(tab.Lookups), len(hashes))
	}
	orders := make([][]int, len(hashes))
	live := make([]bool, len(order)) // a non-zero weight
	for i := range live {
		live[i] = !tab.Weighted || weight[i] > 0
		if live[i] != (counts[i] > 0) {
			t.Errorf("%s: backend %d has weight %d and owns %d slots", tab.ID, i, weight[i], counts[i])
		}
	}
	var runs []orderRun
	for i, h := range hashes {
		var run orderRun
		orders[i], run = tableCandidates(owner, live, h)
		runs = append(runs, run)
	}
	for i, l := range tab.Lookups {
		s := hashes[i] % m
		if l.Key != i || uint64(l.Slot) != s || l.Backend != owner[s] {
			t.Errorf("%s: lookup %d = key %d slot %d backend %d, want key %d slot %d backend %d", tab.ID, i, l.Key, l.Slot, l.Backend, i, s, owner[s])
		}
		if want := orders[i][:min(8, len(orders[i]))]; !slices.Equal(l.Candidates, want) || l.Candidates == nil {
			t.Errorf("%s: lookup %d: candidates %v, want %v", tab.ID, i, l.Candidates, want)
		}
	}
	if checkOrders(t, tab.ID, tab.CandidateOrders, tab.CandidatesSHA256, orders) {
		for _, o := range tab.CandidateOrders {
			run := runs[o.Key]
			cov.sweepAfter16 = cov.sweepAfter16 || run.probed < 64 && run.swept > 0
			cov.sweepAfter64 = cov.sweepAfter64 || run.probed == 64 && run.swept > 0
			cov.sweepDrained = cov.sweepDrained || run.passedDrained
			cov.longTable = cov.longTable || len(o.Candidates) > 8
			cov.emptyTable = cov.emptyTable || len(o.Candidates) == 0
		}
	}
}

// coverage records what the files' explicit full candidate orders and
// their removals show.
type coverage struct {
	sweepAfter16, sweepAfter64, sweepDrained bool
	ringRepeat, ringWrap                     bool
	longTable, longRing, emptyTable          bool
	// A freed slot won on a tie of equal positions, or of equal j·w
	// products between different weights; a product of 2^32 or more; a
	// drained backend removed; a removal that leaves no backend.
	tieEqual, tieWeighted, wideProduct, removedDrained, removedAll bool
}

// checkRemovals checks a table's removals with the rule of docs/spec.md
// section 12, written out plainly from the table's slot owners, offsets,
// skips and weights (1 in an unweighted table): for every slot of a removed
// backend, every backend left in service with a non-zero weight, in
// backend order, the slot's position j in its permutation from the inverse
// of its skip mod M (math/big), the smallest j/w winning, compared as
// 128-bit products j·w' < j'·w, the earlier backend keeping the slot on
// equal products.
func checkRemovals(t *testing.T, tab Table, owner []int, offset, skip, weight []uint64, cov *coverage) {
	t.Helper()
	m := uint64(tab.M)
	n := len(offset)
	for _, r := range tab.Removals {
		id := fmt.Sprintf("%s without %v", tab.ID, r.Removed)
		gone := make([]bool, n)
		for _, i := range r.Removed {
			gone[i] = true
			cov.removedDrained = cov.removedDrained || weight[i] == 0
		}
		inv := make([]uint64, n)
		live := false
		for i := range n {
			if !gone[i] && weight[i] > 0 {
				live = true
				x := new(big.Int).ModInverse(new(big.Int).SetUint64(skip[i]), new(big.Int).SetUint64(m))
				inv[i] = x.Uint64()
			}
		}
		cov.removedAll = cov.removedAll || !live
		after := slices.Clone(owner)
		freed := []Freed{}
		numFreed := 0
		for s, o := range owner {
			if o < 0 || !gone[o] {
				continue
			}
			// tie: the best so far won a tie of equal positions (1) or of
			// equal products of different weights (2), or none (0).
			best, bestJ, tie := -1, uint64(0), 0
			for i := range n {
				if gone[i] || weight[i] == 0 {
					continue
				}
				j := (uint64(s) + m - offset[i]) % m * inv[i] % m
				if (offset[i]+j*skip[i])%m != uint64(s) {
					t.Fatalf("%s: slot %d: position %d of backend %d is slot %d", id, s, j, i, (offset[i]+j*skip[i])%m)
				}
				if best < 0 {
					best, bestJ = i, j
					continue
				}
				// j/weight[i] against bestJ/weight[best], exactly.
				ahi, alo := bits.Mul64(j, weight[best])
				bhi, blo := bits.Mul64(bestJ, weight[i])
				cov.wideProduct = cov.wideProduct || ahi > 0 || alo>>32 > 0 || bhi > 0 || blo>>32 > 0
				switch {
				case ahi < bhi || ahi == bhi && alo < blo:
					best, bestJ, tie = i, j, 0
				case ahi == bhi && alo == blo && weight[i] == weight[best]:
					tie = 1
				case ahi == bhi && alo == blo:
					tie = 2
				}
			}
			cov.tieEqual = cov.tieEqual || tie == 1
			cov.tieWeighted = cov.tieWeighted || tie == 2
			after[s] = best
			numFreed++
			if len(freed) < headFreed {
				freed = append(freed, Freed{Slot: s, Backend: best})
			}
		}
		counts := make([]int, n)
		buf := make([]byte, 0, 4*m)
		for _, o := range after {
			if o >= 0 {
				counts[o]++
			}
			buf = binary.LittleEndian.AppendUint32(buf, uint32(o))
		}
		sum := sha256.Sum256(buf)
		if got := hex.EncodeToString(sum[:]); got != r.SlotsSHA256 {
			t.Errorf("%s: slots SHA-256 %s, file %s", id, got, r.SlotsSHA256)
		}
		if !slices.Equal(counts, r.Counts) {
			t.Errorf("%s: counts %v, file %v", id, counts, r.Counts)
		}
		switch {
		case tab.M <= smallM:
			if !slices.Equal(after, r.Slots) || r.FirstSlots != nil {
				t.Errorf("%s: slots %v, file %v", id, after, r.Slots)
			}
		case !slices.Equal(after[:headSlots], r.FirstSlots) || r.Slots != nil:
			t.Errorf("%s: first slots %v, file %v", id, after[:headSlots], r.FirstSlots)
		}
		if numFreed != r.NumFreed || !slices.Equal(freed, r.Freed) {
			t.Errorf("%s: %d freed slots, the first %v; file %d, %v", id, numFreed, freed, r.NumFreed, r.Freed)
		}
	}
}

// An orderRun says how a table's candidate order was made: how many probes
// it took, how many candidates the sweep gave, and whether the sweep
// passed over a drained backend not yet given.
type orderRun struct {
	probed, swept int
	passedDrained bool
}

// tableCandidates is the candidate order of docs/spec.md for key hash h in
// the table whose slots owner has, live[i] telling whether backend i has a
// non-zero weight: the owner of h mod M, then the owners of up to 64 slots
// drawn by SplitMix64 until 16 backends are given, then the rest of the
// live backends in index order after the first. Written out plainly, with
// the probe's slot ⌊z·M/2^64⌋ computed by math/big.
func tableCandidates(owner []int, live []bool, h uint64) ([]int, orderRun) {
	var run orderRun
	m := uint64(len(owner))
	first := owner[h%m]
	if first < 0 {
		return []int{}, run
	}
	out := []int{first}
	given := map[int]bool{first: true}
	bigM := new(big.Int).SetUint64(m)
	for j := uint64(1); j <= 64 && len(out) < 16; j++ {
		run.probed++
		z := h + j*0x9e3779b97f4a7c15
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		prod := new(big.Int).Mul(new(big.Int).SetUint64(z), bigM)
		s := prod.Rsh(prod, 64).Uint64()
		if o := owner[s]; !given[o] {
			given[o] = true
			out = append(out, o)
		}
	}
	n := len(live)
	for d := 1; d < n; d++ {
		i := (first + d) % n
		switch {
		case given[i]:
		case !live[i]:
			run.passedDrained = true
		default:
			given[i] = true
			out = append(out, i)
			run.swept++
		}
	}
	return out, run
}

// checkOrders checks a table's or ring's explicit full candidate orders and
// the SHA-256 of all of them against orders, every key's candidates as the
// plain implementation gives them. It reports whether the explicit orders
// are right.
func checkOrders(t *testing.T, id string, explicit []CandidateOrder, sum string, orders [][]int) bool {
	t.Helper()
	ok := len(explicit) == 4
	if !ok {
		t.Errorf("%s: %d full candidate orders, want 4", id, len(explicit))
	}
	for k, o := range explicit[:min(len(explicit), len(orders))] {
		if o.Key != k || !slices.Equal(o.Candidates, orders[k]) || o.Candidates == nil {
			t.Errorf("%s: full candidates of key %d (entry %d) %v, want key %d's %v", id, o.Key, k, o.Candidates, k, orders[k])
			ok = false
		}
	}
	var buf []byte
	for _, o := range orders {
		for _, i := range o {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(i))
		}
		buf = binary.LittleEndian.AppendUint32(buf, 0xffffffff)
	}
	if got := sha256.Sum256(buf); hex.EncodeToString(got[:]) != sum {
		t.Errorf("%s: SHA-256 of every key's candidates %x, file %s", id, got, sum)
	}
	return ok
}

func checkRing(t *testing.T, r Ring, names [][]byte, H func([]byte) uint64, hashes []uint64, cov *coverage) {
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
	orders := make([][]int, len(hashes))
	repeats := make([]bool, len(hashes))
	wraps := make([]bool, len(hashes))
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
		// The candidates: the distinct owners met walking the points
		// clockwise from the key's, wrapping past the end.
		orders[i] = []int{}
		met := make([]bool, len(order))
		for d := 0; d < len(pts) && len(orders[i]) < len(order); d++ {
			k := (want.Point + d) % len(pts)
			wraps[i] = wraps[i] || k < want.Point
			if b := pts[k].backend; met[b] {
				repeats[i] = true
			} else {
				met[b] = true
				orders[i] = append(orders[i], b)
			}
		}
		if l.Key != want.Key || l.Point != want.Point || l.Backend != want.Backend {
			t.Errorf("%s: lookup %d = key %d point %d backend %d, want %+v", r.ID, i, l.Key, l.Point, l.Backend, want)
		}
		if want := orders[i][:min(8, len(orders[i]))]; !slices.Equal(l.Candidates, want) || l.Candidates == nil {
			t.Errorf("%s: lookup %d: candidates %v, want %v", r.ID, i, l.Candidates, want)
		}
	}
	if len(r.Lookups) != len(hashes) {
		t.Errorf("%s: %d lookups, want %d", r.ID, len(r.Lookups), len(hashes))
	}
	if checkOrders(t, r.ID, r.CandidateOrders, r.CandidatesSHA256, orders) {
		for _, o := range r.CandidateOrders {
			cov.ringRepeat = cov.ringRepeat || repeats[o.Key]
			cov.ringWrap = cov.ringWrap || wraps[o.Key]
			cov.longRing = cov.longRing || len(o.Candidates) > 8
		}
	}
}
