// Package vectors builds the language-neutral test vectors in
// testdata/vectors: one JSON file per built-in hasher, giving for chosen
// backend sets and table sizes every backend's offset and skip, the tables
// (in full for small M, as a SHA-256 for large M), the owners of 100 keys
// and their candidate orders, weighted tables, some tables with backends
// out of service (Without), and the ring's points and candidate orders.
// docs/spec.md defines every field. Parse and ReadFile
// read a file back, checking its ranges, lengths and names before anything
// is computed from it.
//
// The files are written by the vectorgen command (go generate in this
// folder) from the maglev and ring packages' public API, and this
// package's tests check them two ways: the committed files must be exactly
// what Build makes from the code today, and an implementation of the spec
// written from docs/spec.md alone, reading nothing but the files, must
// reproduce every value in them.
package vectors

//go:generate go run ./vectorgen -dir ../../testdata/vectors

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/ring"
)

// Format names the layout of the files; it changes only if a field changes
// meaning or goes away.
const Format = "maglev-test-vectors/1"

// A Hasher is one of the package's built-in hashers, by the ID the files
// and the golden tests use.
type Hasher struct {
	ID          string
	Description string
	Seed        string // hex, for a seeded hasher
	H           maglev.Hasher
}

// xxh3Seed is the seed of the seeded XXH3 vectors, as in the golden tests.
const xxh3Seed = 0x9e3779b97f4a7c15

// Hashers lists the built-in hashers, one vector file each (ID + ".json").
var Hashers = []Hasher{
	{ID: "xxh3", Description: "XXH3 64-bit, seed 0 (XXH3_64bits); the default", H: maglev.XXH3()},
	{ID: "xxh3-seed", Description: "XXH3 64-bit with a seed (XXH3_64bits_withSeed)", Seed: fmt.Sprintf("%016x", uint64(xxh3Seed)), H: maglev.XXH3Seed(xxh3Seed)},
	{ID: "farm", Description: "FarmHash Fingerprint64 (util::Fingerprint64)", H: maglev.Farm()},
	{ID: "fnv1a", Description: "FNV-1a 64-bit (offset basis 14695981039346656037, prime 1099511628211)", H: maglev.FNV1a()},
}

// File is one vector file: everything for one hasher.
type File struct {
	Format string     `json:"format"`
	Spec   string     `json:"spec"`
	Hasher HasherInfo `json:"hasher"`
	Sets   []Set      `json:"sets"`
	Keys   []Key      `json:"keys"`
	Tables []Table    `json:"tables"`
	Rings  []Ring     `json:"rings"`
}

// HasherInfo names the file's hasher.
type HasherInfo struct {
	ID          string `json:"id"`
	Description string `json:"description"`
	Seed        string `json:"seed,omitempty"`
}

// A Set is a list of backend names, in the order an implementation is given
// them (which is not the table's order).
type Set struct {
	ID    string `json:"id"`
	Names []Name `json:"names"`
}

// A Name is a backend name: its bytes in hex (the name itself), a printable
// form for reading, and the two hashes of its permutation.
type Name struct {
	Hex        string `json:"hex"`
	Text       string `json:"text"`
	OffsetHash string `json:"offset_hash"` // H(name + "|offset")
	SkipHash   string `json:"skip_hash"`   // H(name + "|skip")
}

// A Key is a lookup key and its hash.
type Key struct {
	Hex  string `json:"hex"`
	Text string `json:"text"`
	Hash string `json:"hash"` // H(key)
}

// A Table is one Maglev table: a set, a size, and weights or none.
type Table struct {
	ID       string    `json:"id"`
	Set      string    `json:"set"`
	M        int       `json:"m"`
	Weighted bool      `json:"weighted"`
	Weights  string    `json:"weights,omitempty"` // the weight rule's name, for reading
	Backends []Backend `json:"backends"`          // in table order
	// Slots is the whole table for M ≤ smallM; FirstSlots is its first
	// headSlots entries otherwise. An entry is a backend index, or -1.
	Slots       []int  `json:"slots,omitempty"`
	FirstSlots  []int  `json:"first_slots,omitempty"`
	SlotsSHA256 string `json:"slots_sha256"`
	// Removals are the table with some of its backends out of service
	// (Without), for the tables removalCases names; none for the others.
	Removals []Removal `json:"removals,omitempty"`
	Lookups  []Lookup  `json:"lookups"`
	// CandidateOrders is every candidate of the first fullKeys keys, and
	// CandidatesSHA256 the SHA-256 of every candidate of every key (see
	// OrdersSHA256).
	CandidateOrders  []CandidateOrder `json:"candidate_orders"`
	CandidatesSHA256 string           `json:"candidates_sha256"`
}

// A Backend is backend i of a table: which name of the set it is, and its
// weight, permutation and slot count.
type Backend struct {
	Name   int    `json:"name"` // index into the set's names
	Weight uint32 `json:"weight"`
	Offset uint32 `json:"offset"`
	Skip   uint32 `json:"skip"`
	Count  int    `json:"count"` // slots owned
}

// A Removal is a table with some of its backends out of service:
// maglev.Table.Without, docs/spec.md section 12.
type Removal struct {
	Removed []int `json:"removed"` // backend indices, ascending
	Counts  []int `json:"counts"`  // slots each backend owns afterwards
	// Slots and FirstSlots are the slots afterwards, as in a Table.
	Slots       []int  `json:"slots,omitempty"`
	FirstSlots  []int  `json:"first_slots,omitempty"`
	SlotsSHA256 string `json:"slots_sha256"`
	NumFreed    int    `json:"num_freed"` // slots the removed backends owned
	// Freed is the first headFreed of those slots (all if fewer), in slot
	// order, with their owners afterwards.
	Freed []Freed `json:"freed"`
}

// A Freed is a slot that a removed backend owned, and its owner afterwards.
type Freed struct {
	Slot    int `json:"slot"`
	Backend int `json:"backend"` // or -1
}

// A Lookup is where a key goes in a table.
type Lookup struct {
	Key     int `json:"key"`     // index into the file's keys
	Slot    int `json:"slot"`    // H(key) mod M
	Backend int `json:"backend"` // the slot's owner, or -1
	// Candidates is the key's first headCandidates candidates (all of
	// them if it has fewer), backend indices in preference order.
	Candidates []int `json:"candidates"`
}

// A CandidateOrder is every candidate of a key, in preference order.
type CandidateOrder struct {
	Key        int   `json:"key"` // index into the file's keys
	Candidates []int `json:"candidates"`
}

// A Ring is one consistent-hash ring: a set and a number of points per
// backend.
type Ring struct {
	ID     string `json:"id"`
	Set    string `json:"set"`
	Vnodes int    `json:"vnodes"`
	Order  []int  `json:"order"` // ring backend i is the set's name Order[i]
	// Points is every point, in ring order, for vnodes ≤ smallVnodes;
	// FirstPoints its first headPoints otherwise.
	Points       []Point      `json:"points,omitempty"`
	FirstPoints  []Point      `json:"first_points,omitempty"`
	NumPoints    int          `json:"num_points"`
	PointsSHA256 string       `json:"points_sha256"`
	Lookups      []RingLookup `json:"lookups"`
	// CandidateOrders and CandidatesSHA256 are as in a Table.
	CandidateOrders  []CandidateOrder `json:"candidate_orders"`
	CandidatesSHA256 string           `json:"candidates_sha256"`
}

// A Point is one point of a ring.
type Point struct {
	Pos     string `json:"pos"`     // H(le64(j) + name), hex
	Backend int    `json:"backend"` // ring backend index
	J       int    `json:"j"`
}

// A RingLookup is where a key goes on a ring.
type RingLookup struct {
	Key        int   `json:"key"`
	Point      int   `json:"point"`      // index in ring order, or -1
	Backend    int   `json:"backend"`    // or -1
	Candidates []int `json:"candidates"` // as in a Lookup
}

const (
	smallM      = 13 // tables up to this size are written out in full
	headSlots   = 32
	smallVnodes = 3 // rings up to this many points a backend in full
	headPoints  = 16
	// Every lookup gives the key's first headCandidates candidates, and
	// each table and ring every candidate of its first fullKeys keys.
	headCandidates = 8
	fullKeys       = 4
	headFreed      = 8 // each removal gives its first headFreed freed slots
)

// Hex64 is how the files write a 64-bit value: 16 lowercase hex digits.
func Hex64(x uint64) string { return fmt.Sprintf("%016x", x) }

// Text is the printable form of b: printable UTF-8 characters as they are,
// a backslash as two, and every other byte as \xHH.
func Text(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == '\\':
			sb.WriteString(`\\`)
		case r == utf8.RuneError && n == 1, !unicode.IsPrint(r):
			for _, c := range b[:n] {
				fmt.Fprintf(&sb, `\x%02x`, c)
			}
		default:
			sb.Write(b[:n])
		}
		b = b[n:]
	}
	return sb.String()
}

// A namedSet is a backend set as the generator defines it.
type namedSet struct {
	id    string
	names []string
}

// sets are the backend sets, in the order given to New.
func sets() []namedSet {
	hosts := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("10.0.0.%d:80", i+1)
		}
		return out
	}
	return []namedSet{
		{"empty", nil},
		{"xyz", []string{"x", "y", "z"}},
		{"a-e", []string{"e", "c", "a", "d", "b"}},
		{"hosts-7", hosts(7)},
		{"hostile-10", []string{
			"a", "a|offset", "a|skip", "a\x00b", "a\x00c", "\n\x00",
			"\xff\xfe\xfd", "\xc3\x28", "\u00e9", "B",
		}},
		{"hosts-100", hosts(100)},
		{"random-100", randomNames(100)},
	}
}

// nameLengths and keyLengths cycle through the lengths where the hashes
// change code paths (XXH3 at 3, 8, 16, 128 and 240 bytes, FarmHash at 16,
// 32 and 64), on both sides, allowing for the 5- and 7-byte suffixes.
var (
	nameLengths = []int{1, 2, 3, 4, 9, 10, 11, 12, 16, 25, 26, 27, 40, 57, 58, 59, 60, 100, 121, 122, 123, 124, 200, 233, 234, 235, 236, 300}
	keyLengths  = []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 200, 239, 240, 241, 256, 300}
)

// splitmix64 is a fully specified generator, so that the random sets do
// not depend on the Go release's math/rand.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// randomBytes returns n bytes, nine in ten printable ASCII and the rest
// any byte value.
func (s *splitmix64) randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		x := s.next()
		if x%10 == 0 {
			b[i] = byte(x >> 8)
		} else {
			b[i] = byte(0x20 + (x>>8)%95)
		}
	}
	return b
}

// randomNames returns n distinct names with lengths from nameLengths.
func randomNames(n int) []string {
	s := splitmix64(1)
	seen := make(map[string]bool, n)
	out := make([]string, 0, n)
	for i := 0; len(out) < n; i++ {
		name := string(s.randomBytes(nameLengths[i%len(nameLengths)]))
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

// keys returns the 100 lookup keys: the empty key, client addresses like
// the README's, and random bytes with lengths from keyLengths.
func keys() [][]byte {
	out := [][]byte{nil, []byte("198.51.100.7:4242"), []byte("a"), []byte("x|offset")}
	s := splitmix64(2)
	for i := 0; len(out) < 50; i++ {
		x := s.next()
		out = append(out, fmt.Appendf(nil, "198.51.%d.%d:%d", x&0xff, x>>8&0xff, 1024+x>>16%64512))
	}
	for i := 0; len(out) < 100; i++ {
		out = append(out, s.randomBytes(keyLengths[i%len(keyLengths)]))
	}
	return out
}

// A weightRule gives the i-th name of a set (in the set's order) a weight.
type weightRule struct {
	id string
	w  func(i int) uint32
}

var (
	mod5   = weightRule{"mod5", func(i int) uint32 { return uint32(i % 5) }} // the golden tests' rule
	oneTwo = weightRule{"1-2-3", func(i int) uint32 { return uint32(1 + i%3) }}
	pow2   = weightRule{"pow2", func(i int) uint32 { return 1 << (i % 32) }}
	heavy  = weightRule{"heavy", func(i int) uint32 {
		if i == 0 {
			return 1_000_000
		}
		return 1
	}}
	equal = weightRule{"equal", func(int) uint32 { return 7 }}
	zero  = weightRule{"zero", func(int) uint32 { return 0 }}
)

// A tableCase is one table the files give: unweighted if rule is nil.
type tableCase struct {
	set  string
	m    int
	rule *weightRule
}

// tableCases lists the tables: every set at M = 7, 13 and 65537 where it
// fits, unweighted, mod5 and 1-2-3; the heavier weight rules where there
// are enough backends; the golden tests' M = 655373 tables; and the edge
// cases (no backends, every backend drained, equal weights).
func tableCases(all []namedSet) []tableCase {
	var out []tableCase
	for _, m := range []int{7, 13, maglev.DefaultSize} {
		for _, s := range all {
			if len(s.names) > m || (s.id == "empty" && m != 7) {
				continue
			}
			out = append(out, tableCase{s.id, m, nil})
			if len(s.names) == 0 {
				continue
			}
			out = append(out, tableCase{s.id, m, &mod5}, tableCase{s.id, m, &oneTwo})
			if m == maglev.DefaultSize && len(s.names) >= 10 {
				out = append(out, tableCase{s.id, m, &pow2}, tableCase{s.id, m, &heavy})
			}
		}
	}
	return append(out,
		tableCase{"xyz", 7, &zero},
		tableCase{"a-e", 13, &equal},
		tableCase{"hosts-100", maglev.DefaultSize, &equal},
		tableCase{"hosts-100", 655373, nil},
		tableCase{"hosts-100", 655373, &mod5},
	)
}

// allBut is 0..n-1 without keep: every name of a set of n but one.
func allBut(n, keep int) []int {
	var out []int
	for k := range n {
		if k != keep {
			out = append(out, k)
		}
	}
	return out
}

// removalCases gives, by table ID, the tables whose removals the files
// give (Without): each a list of backends to take out of service, as
// indices into the set's names. Each table takes out one backend, several,
// and all but one (the set's last name); among them the golden tests'
// (a-e without c, hosts-100 without 10.0.0.7:80, 10.0.0.42:80 and
// 10.0.0.99:80), a backend of weight 2^31 (pow2), the one backend that
// owns nearly every slot (heavy), drained backends, and every backend in
// service, which leaves an empty table. TestSpec checks that each file
// shows both tie rules at work (a-e/M=13/weights=1-2-3 without a gives
// FarmHash's weighted tie).
var removalCases = map[string][][]int{
	"xyz/M=7":                          {{1}, {0, 1}, {0, 2}},
	"a-e/M=13":                         {{1}, {0, 2}, allBut(5, 4)},
	"a-e/M=13/weights=1-2-3":           {{2}, {0, 1}, allBut(5, 4)},
	"hostile-10/M=13":                  {{5}, {0, 3, 4, 9}, allBut(10, 9)},
	"hosts-7/M=7/weights=mod5":         {{4}, {0, 2, 3}, allBut(7, 6), {1, 2, 3, 4, 6}},
	"hosts-100/M=65537":                {{41}, {6, 41, 98}, allBut(100, 99)},
	"hosts-100/M=65537/weights=mod5":   {{41}, {6, 41, 98}, allBut(100, 99)},
	"hosts-100/M=65537/weights=pow2":   {{31}, {6, 31, 41, 98}, allBut(100, 99)},
	"random-100/M=65537/weights=heavy": {{0}, {0, 10, 20, 30, 40, 50, 60, 70, 80, 90}, allBut(100, 99)},
}

// A ringCase is one ring the files give.
type ringCase struct {
	set    string
	vnodes int
}

// ringCases lists the rings: every set with 3 points a backend and with
// ring.DefaultVnodes, and the golden tests' 100 points for hosts-100.
func ringCases(all []namedSet) []ringCase {
	var out []ringCase
	for _, v := range []int{smallVnodes, ring.DefaultVnodes} {
		for _, s := range all {
			out = append(out, ringCase{s.id, v})
		}
	}
	return append(out, ringCase{"hosts-100", 100})
}

// Build makes the vector file of one hasher from the maglev and ring
// packages.
func Build(h Hasher) (*File, error) {
	all := sets()
	f := &File{
		Format: Format,
		Spec:   "docs/spec.md in github.com/maglevlb/maglev",
		Hasher: HasherInfo{ID: h.ID, Description: h.Description, Seed: h.Seed},
	}
	byID := make(map[string]namedSet)
	for _, s := range all {
		byID[s.id] = s
		set := Set{ID: s.id, Names: []Name{}}
		for _, name := range s.names {
			set.Names = append(set.Names, Name{
				Hex:        hex.EncodeToString([]byte(name)),
				Text:       Text([]byte(name)),
				OffsetHash: Hex64(h.H.HashString(name + "|offset")),
				SkipHash:   Hex64(h.H.HashString(name + "|skip")),
			})
		}
		f.Sets = append(f.Sets, set)
	}
	ks := keys()
	for _, k := range ks {
		f.Keys = append(f.Keys, Key{Hex: hex.EncodeToString(k), Text: Text(k), Hash: Hex64(h.H.Hash(k))})
	}
	for _, c := range tableCases(all) {
		t, err := buildTable(h, byID[c.set], c, ks)
		if err != nil {
			return nil, err
		}
		f.Tables = append(f.Tables, *t)
	}
	for _, c := range ringCases(all) {
		r, err := buildRing(h, byID[c.set], c.vnodes, ks)
		if err != nil {
			return nil, err
		}
		f.Rings = append(f.Rings, *r)
	}
	return f, nil
}

// TableID is a table's ID in the files: "set/M=m", with "/weights=rule"
// for a weighted table.
func TableID(set string, m int, weights string) string {
	id := fmt.Sprintf("%s/M=%d", set, m)
	if weights != "" {
		id += "/weights=" + weights
	}
	return id
}

// RingID is a ring's ID in the files: "set/vnodes=v".
func RingID(set string, vnodes int) string { return fmt.Sprintf("%s/vnodes=%d", set, vnodes) }

func buildTable(h Hasher, s namedSet, c tableCase, ks [][]byte) (*Table, error) {
	var tab *maglev.Table
	var err error
	out := &Table{Set: s.id, M: c.m}
	if c.rule == nil {
		out.ID = TableID(s.id, c.m, "")
		tab, err = maglev.New(s.names, c.m, h.H)
	} else {
		out.ID = TableID(s.id, c.m, c.rule.id)
		out.Weighted, out.Weights = true, c.rule.id
		bs := make([]maglev.Backend, len(s.names))
		for i, name := range s.names {
			bs[i] = maglev.Backend{Name: name, Weight: c.rule.w(i)}
		}
		tab, err = maglev.NewWeighted(bs, c.m, h.H)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", out.ID, err)
	}
	g, err := maglev.NewGenerator(c.m, h.H)
	if err != nil {
		return nil, err
	}
	weights, counts := tab.Weights(), tab.Counts()
	out.Backends = []Backend{}
	for i, name := range tab.Backends() {
		p := g.Permutation(name)
		out.Backends = append(out.Backends, Backend{
			Name:   slices.Index(s.names, name),
			Weight: weights[i],
			Offset: p.Offset,
			Skip:   p.Skip,
			Count:  counts[i],
		})
	}
	slots := tab.AppendSlots(nil)
	ints := make([]int, len(slots))
	for i, v := range slots {
		ints[i] = int(int32(v)) // 0xFFFFFFFF, no backend, is -1
	}
	if c.m <= smallM {
		out.Slots = ints
	} else {
		out.FirstSlots = ints[:headSlots]
	}
	out.SlotsSHA256 = SlotsSHA256(slots)
	for _, removed := range removalCases[out.ID] {
		r, err := buildRemoval(tab, s, removed, slots)
		if err != nil {
			return nil, fmt.Errorf("%s: removing %v: %w", out.ID, removed, err)
		}
		out.Removals = append(out.Removals, *r)
	}
	orders := make([][]int, len(ks))
	for i, k := range ks {
		l := Lookup{Key: i, Slot: int(tab.Hasher().Hash(k) % uint64(tab.Size())), Backend: tab.LookupIndex(string(k))}
		orders[i] = slices.Collect(tab.CandidatesBytes(k))
		if err := checkOrder(orders[i], l.Backend, len(out.Backends)); err != nil {
			return nil, fmt.Errorf("%s: key %d: %w", out.ID, i, err)
		}
		l.Candidates = head(orders[i])
		out.Lookups = append(out.Lookups, l)
	}
	out.CandidateOrders = candidateOrders(orders)
	out.CandidatesSHA256 = OrdersSHA256(orders)
	return out, nil
}

// buildRemoval gives tab without the set's names of the indices removed
// (Without, given the names in that order); base is tab's slot array.
func buildRemoval(tab *maglev.Table, set namedSet, removed []int, base []uint32) (*Removal, error) {
	names := make([]string, len(removed))
	out := &Removal{}
	gone := make([]bool, tab.NumBackends())
	for k, r := range removed {
		names[k] = set.names[r]
		i := tab.Index(names[k])
		gone[i] = true
		out.Removed = append(out.Removed, i)
	}
	slices.Sort(out.Removed)
	w, err := tab.Without(names...)
	if err != nil {
		return nil, err
	}
	out.Counts = w.Counts()
	slots := w.AppendSlots(nil)
	ints := make([]int, len(slots))
	for s, v := range slots {
		ints[s] = int(int32(v)) // 0xFFFFFFFF, no backend, is -1
		if base[s] != math.MaxUint32 && gone[base[s]] {
			out.NumFreed++
			if len(out.Freed) < headFreed {
				out.Freed = append(out.Freed, Freed{Slot: s, Backend: ints[s]})
			}
		} else if v != base[s] {
			return nil, fmt.Errorf("slot %d moved from %d to %d, which was not removed", s, base[s], v)
		}
	}
	if out.Freed == nil {
		out.Freed = []Freed{}
	}
	if len(slots) <= smallM {
		out.Slots = ints
	} else {
		out.FirstSlots = ints[:headSlots]
	}
	out.SlotsSHA256 = SlotsSHA256(slots)
	return out, nil
}

// checkOrder checks that a key's candidates start with its lookup's
// backend (none for -1) and name each of n backends at most once.
func checkOrder(order []int, first, n int) error {
	if len(order) == 0 && first == -1 {
		return nil
	}
	if len(order) == 0 || order[0] != first {
		return fmt.Errorf("candidates %v do not start with the lookup's backend %d", order, first)
	}
	seen := make([]bool, n)
	for _, i := range order {
		if i < 0 || i >= n || seen[i] {
			return fmt.Errorf("candidates %v: backend %d out of range or repeated", order, i)
		}
		seen[i] = true
	}
	return nil
}

// head is the first headCandidates entries of a key's candidates, never
// nil (so that the files give [] for none).
func head(order []int) []int {
	return append([]int{}, order[:min(headCandidates, len(order))]...)
}

// candidateOrders gives every candidate of the first fullKeys keys.
func candidateOrders(orders [][]int) []CandidateOrder {
	out := make([]CandidateOrder, fullKeys)
	for i := range out {
		out[i] = CandidateOrder{Key: i, Candidates: append([]int{}, orders[i]...)}
	}
	return out
}

// OrdersSHA256 is the SHA-256 of every key's candidates, in key order: each
// candidate as 4 bytes, little-endian, and each key's last followed by
// 0xffffffff.
func OrdersSHA256(orders [][]int) string {
	var buf []byte
	for _, o := range orders {
		for _, i := range o {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(i))
		}
		buf = binary.LittleEndian.AppendUint32(buf, 0xffffffff)
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}

// SlotsSHA256 is the SHA-256 of a table's slot array, each slot's owner
// index as 4 bytes, little-endian, 0xffffffff for none (AppendSlots'
// "no backend").
func SlotsSHA256(slots []uint32) string {
	buf := make([]byte, 0, 4*len(slots))
	for _, s := range slots {
		buf = binary.LittleEndian.AppendUint32(buf, s)
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}

// PointsSHA256 is the SHA-256 of a ring's points in ring order, each as its
// position (8 bytes, little-endian) then its backend index (4 bytes,
// little-endian).
func PointsSHA256(pts []ring.Point) string {
	buf := make([]byte, 0, 12*len(pts))
	for _, p := range pts {
		buf = binary.LittleEndian.AppendUint64(buf, p.Pos)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(p.Backend))
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}

func buildRing(h Hasher, s namedSet, vnodes int, ks [][]byte) (*Ring, error) {
	r, err := ring.New(s.names, vnodes, h.H)
	if err != nil {
		return nil, err
	}
	out := &Ring{ID: RingID(s.id, vnodes), Set: s.id, Vnodes: vnodes, Order: []int{}}
	backends := r.Backends()
	// j of each point: which of its backend's hashes gives its position.
	js := make([]map[uint64]int, len(backends))
	key := make([]byte, 8)
	for i, name := range backends {
		out.Order = append(out.Order, slices.Index(s.names, name))
		js[i] = make(map[uint64]int, vnodes)
		for j := range vnodes {
			binary.LittleEndian.PutUint64(key[:8], uint64(j))
			pos := h.H.Hash(append(key[:8], name...))
			if _, dup := js[i][pos]; dup {
				return nil, fmt.Errorf("%s: backend %d has two points at %#x", out.ID, i, pos)
			}
			js[i][pos] = j
		}
	}
	pts := r.AppendPoints(nil)
	all := make([]Point, len(pts))
	for k, p := range pts {
		j, ok := js[p.Backend][p.Pos]
		if !ok {
			return nil, fmt.Errorf("%s: point %d at %#x is none of backend %d's", out.ID, k, p.Pos, p.Backend)
		}
		all[k] = Point{Pos: Hex64(p.Pos), Backend: p.Backend, J: j}
	}
	switch {
	case len(all) == 0:
	case vnodes <= smallVnodes:
		out.Points = all
	default:
		out.FirstPoints = all[:min(headPoints, len(all))]
	}
	out.NumPoints = len(pts)
	out.PointsSHA256 = PointsSHA256(pts)
	orders := make([][]int, len(ks))
	for i, k := range ks {
		l := RingLookup{Key: i, Point: -1, Backend: -1}
		if len(pts) > 0 {
			x := h.H.Hash(k)
			l.Point, _ = slices.BinarySearchFunc(pts, x, func(p ring.Point, x uint64) int {
				if p.Pos < x {
					return -1
				}
				return 1 // the first point at or after x
			})
			if l.Point == len(pts) {
				l.Point = 0
			}
			l.Backend = pts[l.Point].Backend
			if got := r.LookupBytes(k); got != backends[l.Backend] {
				return nil, fmt.Errorf("%s: key %d: Lookup gives %q, the points %q", out.ID, i, got, backends[l.Backend])
			}
		}
		orders[i] = slices.Collect(r.CandidatesBytes(k))
		if err := checkOrder(orders[i], l.Backend, len(backends)); err != nil {
			return nil, fmt.Errorf("%s: key %d: %w", out.ID, i, err)
		}
		l.Candidates = head(orders[i])
		out.Lookups = append(out.Lookups, l)
	}
	out.CandidateOrders = candidateOrders(orders)
	out.CandidatesSHA256 = OrdersSHA256(orders)
	return out, nil
}

// Marshal writes f as the files hold it: JSON, objects one member a line
// and arrays one element a line, except that a scalar, an array of scalars
// and an object of scalars and arrays of scalars each take one line.
func Marshal(f *File) ([]byte, error) {
	var raw bytes.Buffer
	enc := json.NewEncoder(&raw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := format(&out, bytes.TrimSpace(raw.Bytes()), ""); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// format writes the JSON value v to out, indented by indent, as Marshal
// describes.
func format(out *bytes.Buffer, v json.RawMessage, indent string) error {
	if flat(v) {
		return json.Compact(out, v)
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	open, err := dec.Token()
	if err != nil {
		return err
	}
	closing := byte('}')
	if open == json.Delim('[') {
		closing = ']'
	}
	out.WriteString(open.(json.Delim).String() + "\n")
	inner := indent + "  "
	for first := true; dec.More(); first = false {
		if !first {
			out.WriteString(",\n")
		}
		out.WriteString(inner)
		if closing == '}' {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			kb, _ := json.Marshal(k)
			out.Write(kb)
			out.WriteString(": ")
		}
		var elem json.RawMessage
		if err := dec.Decode(&elem); err != nil {
			return err
		}
		if err := format(out, elem, inner); err != nil {
			return err
		}
	}
	out.WriteString("\n" + indent + string(closing))
	return nil
}

// flat reports whether v is a scalar, an array of scalars, or an object
// whose members are scalars and arrays of scalars, which Marshal writes on
// one line.
func flat(v json.RawMessage) bool {
	if len(v) == 0 || (v[0] != '{' && v[0] != '[') {
		return true
	}
	if v[0] == '[' {
		return scalars(v)
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil {
		return false
	}
	for _, e := range m {
		if len(e) == 0 {
			continue
		}
		if e[0] == '{' || e[0] == '[' && !scalars(e) {
			return false
		}
	}
	return true
}

// scalars reports whether the JSON array v holds only scalars.
func scalars(v json.RawMessage) bool {
	var elems []json.RawMessage
	if json.Unmarshal(v, &elems) != nil {
		return false
	}
	for _, e := range elems {
		if len(e) > 0 && (e[0] == '{' || e[0] == '[') {
			return false
		}
	}
	return true
}
