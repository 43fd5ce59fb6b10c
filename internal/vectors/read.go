package vectors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/ring"
)

// The errors Parse and ReadFile return wrap one of these, so that callers
// can match them with errors.Is. The text after the sentinel's names the
// file and the field, as a path: "xxh3.json: tables[3] (a-e/M=13):
// backends[2].skip: ...".
var (
	// ErrSyntax means the data is not a vector file: not JSON, a member of
	// the wrong type, more data after the file's object, another format,
	// or a hex field that is not lowercase hex of its length.
	ErrSyntax = errors.New("vectors: not a vector file")

	// ErrSize means a table's m is not a size the maglev package accepts:
	// the error also wraps maglev.ErrSize or
	// maglev.ErrTooManyBackends. A composite m would make a plain fill of
	// the table loop forever.
	ErrSize = errors.New("vectors: unsupported table size")

	// ErrRange means a number is outside its range: an offset not below m,
	// a skip outside 1..m-1, an index that names no name, key, backend or
	// point, a count outside 0..m, or vnodes outside what package ring
	// accepts (the error then also wraps ring.ErrVnodes or
	// ring.ErrTooManyPoints).
	ErrRange = errors.New("vectors: value out of range")

	// ErrMismatch means fields that must agree do not: a list's length and
	// what it must hold (backends and the set's names, slots and m, lookups
	// and keys, points and num_points), counts and slots, an ID and the
	// fields it is made of, a lookup and the slot or point it gives, a
	// key's candidates in two places, a removal and its table (a slot
	// moved that was not freed, a removed or drained backend owning slots,
	// a freed slot that no removed backend owned).
	ErrMismatch = errors.New("vectors: fields disagree")

	// ErrName means an ID or a name is empty, repeated, or names nothing:
	// the hasher's, a set's, a table's or a ring's ID, a backend name
	// (the error then also wraps maglev.ErrEmptyName or
	// maglev.ErrDuplicateName), a table's or ring's set, a weight rule.
	ErrName = errors.New("vectors: empty, repeated or unknown name")
)

// ReadFile reads the vector file at path and checks it as Parse does;
// errors name the file by path.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse decodes a vector file and checks, before any hashing or filling,
// that everything an implementation computes from is in range and
// consistent: every m a supported table size (maglev.CheckSize), every
// offset below m and every skip in 1..m-1, every index naming something,
// every length and count agreeing with the others, and every removal
// with its table (docs/spec.md, section 11). So a damaged file fails here at once, with an error naming
// the field, and never makes a check of the values loop or index out of
// range. It does not check the values themselves (hashes, slots, points,
// candidates), which takes an implementation of the spec. Members the
// format does not define are ignored, as the spec asks of readers. name is
// the file's name for errors.
//
// Parse is O(size of data).
func Parse(name string, data []byte) (*File, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var f File
	if err := dec.Decode(&f); err != nil {
		// Say where: the decoder's errors give a byte offset at most.
		var off int64 = -1
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			off = syn.Offset
		case errors.As(err, &typ):
			off = typ.Offset
		}
		if off >= 0 && off <= int64(len(data)) {
			return nil, fmt.Errorf("%w: %s: line %d: %v", ErrSyntax, name, 1+bytes.Count(data[:off], []byte("\n")), err)
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrSyntax, name, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: %s: data after the file's object", ErrSyntax, name)
	}
	c := checker{file: name, keys: len(f.Keys), sets: make(map[string]int)}
	if err := c.check(&f); err != nil {
		return nil, err
	}
	return &f, nil
}

// A checker checks one decoded file.
type checker struct {
	file string
	keys int            // len(File.Keys)
	sets map[string]int // set ID to its number of names
	seen []bool         // scratch for checkCandidates, all false between calls
}

// fail returns an error wrapping kind, naming the file and the field at
// path.
func (c *checker) fail(kind error, path, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s: %s", kind, c.file, path, fmt.Sprintf(format, args...))
}

// failWrap is fail for an error that also wraps err.
func (c *checker) failWrap(kind error, path string, err error) error {
	return fmt.Errorf("%w: %s: %s: %w", kind, c.file, path, err)
}

// hexOf checks that s is lowercase hex of n digits (any even number if n
// is 0).
func hexOf(s string, n int) bool {
	if n == 0 && len(s)%2 != 0 || n > 0 && len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && (s[i] < 'a' || s[i] > 'f') {
			return false
		}
	}
	return true
}

// weightRules are the weight rules' names, as docs/spec.md defines them.
var weightRules = []string{mod5.id, oneTwo.id, pow2.id, heavy.id, equal.id, zero.id}

func (c *checker) check(f *File) error {
	if f.Format != Format {
		return c.fail(ErrSyntax, "format", "%q, want %q", f.Format, Format)
	}
	if f.Hasher.ID == "" {
		return c.fail(ErrName, "hasher.id", "empty")
	}
	if f.Hasher.Seed != "" && !hexOf(f.Hasher.Seed, 16) {
		return c.fail(ErrSyntax, "hasher.seed", "%q is not 16 hex digits", f.Hasher.Seed)
	}
	for i, s := range f.Sets {
		if err := c.checkSet(fmt.Sprintf("sets[%d]", i), s); err != nil {
			return err
		}
	}
	for i, k := range f.Keys {
		path := fmt.Sprintf("keys[%d]", i)
		if !hexOf(k.Hex, 0) {
			return c.fail(ErrSyntax, path+".hex", "%.40q is not hex", k.Hex)
		}
		if !hexOf(k.Hash, 16) {
			return c.fail(ErrSyntax, path+".hash", "%q is not 16 hex digits", k.Hash)
		}
	}
	ids := make(map[string]string) // table and ring IDs, to the first's path
	for i := range f.Tables {
		t := &f.Tables[i]
		path := fmt.Sprintf("tables[%d] (%s)", i, t.ID)
		if err := c.checkID(ids, path, t.ID); err != nil {
			return err
		}
		if err := c.checkTable(path, t); err != nil {
			return err
		}
	}
	for i := range f.Rings {
		r := &f.Rings[i]
		path := fmt.Sprintf("rings[%d] (%s)", i, r.ID)
		if err := c.checkID(ids, path, r.ID); err != nil {
			return err
		}
		if err := c.checkRing(path, r); err != nil {
			return err
		}
	}
	return nil
}

func (c *checker) checkID(ids map[string]string, path, id string) error {
	if id == "" {
		return c.fail(ErrName, path+".id", "empty")
	}
	if first, dup := ids[id]; dup {
		return c.fail(ErrName, path+".id", "%q is %s's too", id, first)
	}
	ids[id] = path
	return nil
}

func (c *checker) checkSet(path string, s Set) error {
	if s.ID == "" {
		return c.fail(ErrName, path+".id", "empty")
	}
	if _, dup := c.sets[s.ID]; dup {
		return c.fail(ErrName, path+".id", "%q is repeated", s.ID)
	}
	seen := make(map[string]int, len(s.Names))
	for i, n := range s.Names {
		at := fmt.Sprintf("%s (%s).names[%d]", path, s.ID, i)
		switch {
		case !hexOf(n.Hex, 0):
			return c.fail(ErrSyntax, at+".hex", "%.40q is not hex", n.Hex)
		case n.Hex == "":
			return c.failWrap(ErrName, at+".hex", maglev.ErrEmptyName)
		case !hexOf(n.OffsetHash, 16):
			return c.fail(ErrSyntax, at+".offset_hash", "%q is not 16 hex digits", n.OffsetHash)
		case !hexOf(n.SkipHash, 16):
			return c.fail(ErrSyntax, at+".skip_hash", "%q is not 16 hex digits", n.SkipHash)
		}
		if j, dup := seen[n.Hex]; dup {
			return c.failWrap(ErrName, at+".hex", fmt.Errorf("%w: names[%d]'s too", maglev.ErrDuplicateName, j))
		}
		seen[n.Hex] = i
	}
	c.sets[s.ID] = len(s.Names)
	return nil
}

// checkTable checks a table. The order matters only for which error a
// file with several faults gives: m first, since everything else is
// measured against it.
func (c *checker) checkTable(path string, t *Table) error {
	n, ok := c.sets[t.Set]
	if !ok {
		return c.fail(ErrName, path+".set", "%q names no set", t.Set)
	}
	if err := maglev.CheckSize(t.M); err != nil {
		return c.failWrap(ErrSize, path+".m", err)
	}
	if n > t.M {
		return c.failWrap(ErrSize, path+".m", fmt.Errorf("%w: set %s has %d names, m is %d", maglev.ErrTooManyBackends, t.Set, n, t.M))
	}
	if t.Weighted != (t.Weights != "") {
		return c.fail(ErrMismatch, path+".weights", "%q with weighted %v", t.Weights, t.Weighted)
	}
	if t.Weighted && !slices.Contains(weightRules, t.Weights) {
		return c.fail(ErrName, path+".weights", "%q is no weight rule (docs/spec.md: %v)", t.Weights, weightRules)
	}
	if want := TableID(t.Set, t.M, t.Weights); t.ID != want {
		return c.fail(ErrMismatch, path+".id", "%q, but set, m and weights make %q", t.ID, want)
	}
	if len(t.Backends) != n {
		return c.fail(ErrMismatch, path+".backends", "%d backends, set %s has %d names", len(t.Backends), t.Set, n)
	}
	m := t.M
	named := make([]int, n) // 1 + the backend each name is, or 0
	live, sum := false, 0
	for i, b := range t.Backends {
		at := fmt.Sprintf("%s.backends[%d]", path, i)
		switch {
		case b.Name < 0 || b.Name >= n:
			return c.fail(ErrRange, at+".name", "%d, want 0..%d (set %s)", b.Name, n-1, t.Set)
		case named[b.Name] != 0:
			return c.fail(ErrMismatch, at+".name", "%d is backends[%d]'s too", b.Name, named[b.Name]-1)
		case !t.Weighted && b.Weight != 1:
			return c.fail(ErrMismatch, at+".weight", "%d in an unweighted table, want 1", b.Weight)
		case int64(b.Offset) >= int64(m):
			return c.fail(ErrRange, at+".offset", "%d, want 0..%d (m %d)", b.Offset, m-1, m)
		case b.Skip < 1 || int64(b.Skip) >= int64(m):
			return c.fail(ErrRange, at+".skip", "%d, want 1..%d (m %d)", b.Skip, m-1, m)
		case b.Count < 0 || b.Count > m:
			return c.fail(ErrRange, at+".count", "%d, want 0..%d (m %d)", b.Count, m, m)
		case b.Weight == 0 && b.Count != 0:
			return c.fail(ErrMismatch, at+".count", "%d slots with weight 0", b.Count)
		}
		named[b.Name] = i + 1
		live = live || b.Weight > 0
		sum += b.Count
	}
	total := 0 // no backend with a weight: an empty table
	if live {
		total = m
	}
	if sum != total {
		return c.fail(ErrMismatch, path+".backends", "counts add up to %d, want %d", sum, total)
	}
	// The slots shown: all of them for a small m, the first headSlots
	// otherwise.
	shown, field, want := t.Slots, "slots", m
	switch {
	case m > smallM:
		shown, field, want = t.FirstSlots, "first_slots", headSlots
		if t.Slots != nil {
			return c.fail(ErrMismatch, path+".slots", "given for m %d > %d (want first_slots)", m, smallM)
		}
	case t.FirstSlots != nil:
		return c.fail(ErrMismatch, path+".first_slots", "given for m %d ≤ %d (want slots)", m, smallM)
	}
	if len(shown) != want {
		return c.fail(ErrMismatch, path+"."+field, "%d entries, want %d (m %d)", len(shown), want, m)
	}
	counts := make([]int, n)
	for s, o := range shown {
		if o < -1 || o >= n {
			return c.fail(ErrRange, fmt.Sprintf("%s.%s[%d]", path, field, s), "%d, want -1..%d", o, n-1)
		}
		if o >= 0 {
			counts[o]++
		}
	}
	if field == "slots" {
		for i, b := range t.Backends {
			if counts[i] != b.Count {
				return c.fail(ErrMismatch, fmt.Sprintf("%s.backends[%d].count", path, i), "%d, slots give it %d", b.Count, counts[i])
			}
		}
	}
	if !hexOf(t.SlotsSHA256, 64) {
		return c.fail(ErrSyntax, path+".slots_sha256", "%q is not 64 hex digits", t.SlotsSHA256)
	}
	for k := range t.Removals {
		if err := c.checkRemoval(fmt.Sprintf("%s.removals[%d]", path, k), t, &t.Removals[k], shown); err != nil {
			return err
		}
	}
	if len(t.Lookups) != c.keys {
		return c.fail(ErrMismatch, path+".lookups", "%d lookups, %d keys", len(t.Lookups), c.keys)
	}
	heads := make([][]int, len(t.Lookups))
	for k, l := range t.Lookups {
		at := fmt.Sprintf("%s.lookups[%d]", path, k)
		switch {
		case l.Key != k:
			return c.fail(ErrMismatch, at+".key", "%d, want %d (one lookup per key, in key order)", l.Key, k)
		case l.Slot < 0 || l.Slot >= m:
			return c.fail(ErrRange, at+".slot", "%d, want 0..%d (m %d)", l.Slot, m-1, m)
		case l.Backend < -1 || l.Backend >= n:
			return c.fail(ErrRange, at+".backend", "%d, want -1..%d", l.Backend, n-1)
		case l.Slot < len(shown) && shown[l.Slot] != l.Backend:
			return c.fail(ErrMismatch, at+".backend", "%d, but %s[%d] is %d", l.Backend, field, l.Slot, shown[l.Slot])
		}
		if err := c.checkCandidates(at, l.Candidates, l.Backend, n, headCandidates); err != nil {
			return err
		}
		heads[k] = l.Candidates
	}
	return c.checkOrders(path, t.CandidateOrders, t.CandidatesSHA256, heads, n)
}

// checkRemoval checks removal r of table t, whose shown slots (slots or
// first_slots) are base: the removed backends name backends of t, in
// increasing order; the counts are one per backend, none for a removed or
// drained backend, and add up to m (0 if no backend is left in service);
// the shown slots are as many as t's, and every one whose owner in t was
// not removed keeps it; num_freed is what the removed backends owned; and
// freed lists the first of those slots, each a slot of a removed backend
// where t shows it, now owned by a backend left in service.
func (c *checker) checkRemoval(path string, t *Table, r *Removal, base []int) error {
	n, m := len(t.Backends), t.M
	if len(r.Removed) == 0 {
		return c.fail(ErrMismatch, path+".removed", "empty (a removal takes out at least one backend)")
	}
	gone := make([]bool, n)
	for k, i := range r.Removed {
		at := fmt.Sprintf("%s.removed[%d]", path, k)
		switch {
		case i < 0 || i >= n:
			return c.fail(ErrRange, at, "%d, want 0..%d", i, n-1)
		case k > 0 && i <= r.Removed[k-1]:
			return c.fail(ErrMismatch, at, "%d after %d: not in increasing order", i, r.Removed[k-1])
		}
		gone[i] = true
	}
	if len(r.Counts) != n {
		return c.fail(ErrMismatch, path+".counts", "%d counts, %d backends", len(r.Counts), n)
	}
	live, sum, freed := false, 0, 0
	for i, b := range t.Backends {
		at := fmt.Sprintf("%s.counts[%d]", path, i)
		switch k := r.Counts[i]; {
		case k < 0 || k > m:
			return c.fail(ErrRange, at, "%d, want 0..%d (m %d)", k, m, m)
		case gone[i] && k != 0:
			return c.fail(ErrMismatch, at, "%d slots for a removed backend", k)
		case b.Weight == 0 && k != 0:
			return c.fail(ErrMismatch, at, "%d slots with weight 0", k)
		}
		live = live || !gone[i] && b.Weight > 0
		sum += r.Counts[i]
		if gone[i] {
			freed += b.Count
		}
	}
	total := 0
	if live {
		total = m
	}
	if sum != total {
		return c.fail(ErrMismatch, path+".counts", "add up to %d, want %d", sum, total)
	}
	shown, field := r.Slots, "slots"
	switch {
	case m > smallM:
		shown, field = r.FirstSlots, "first_slots"
		if r.Slots != nil {
			return c.fail(ErrMismatch, path+".slots", "given for m %d > %d (want first_slots)", m, smallM)
		}
	case r.FirstSlots != nil:
		return c.fail(ErrMismatch, path+".first_slots", "given for m %d ≤ %d (want slots)", m, smallM)
	}
	if len(shown) != len(base) {
		return c.fail(ErrMismatch, path+"."+field, "%d entries, want %d (m %d)", len(shown), len(base), m)
	}
	counts := make([]int, n)
	for s, o := range shown {
		at := fmt.Sprintf("%s.%s[%d]", path, field, s)
		switch was := base[s]; {
		case o < -1 || o >= n:
			return c.fail(ErrRange, at, "%d, want -1..%d", o, n-1)
		case o >= 0 && gone[o]:
			return c.fail(ErrMismatch, at, "%d, a removed backend", o)
		case was >= 0 && !gone[was] && o != was:
			return c.fail(ErrMismatch, at, "%d, but the table gives it to %d, which was not removed", o, was)
		}
		if o >= 0 {
			counts[o]++
		}
	}
	if field == "slots" && !slices.Equal(counts, r.Counts) {
		return c.fail(ErrMismatch, path+".counts", "%v, slots give %v", r.Counts, counts)
	}
	if !hexOf(r.SlotsSHA256, 64) {
		return c.fail(ErrSyntax, path+".slots_sha256", "%q is not 64 hex digits", r.SlotsSHA256)
	}
	if r.NumFreed != freed {
		return c.fail(ErrMismatch, path+".num_freed", "%d, but the removed backends own %d slots", r.NumFreed, freed)
	}
	if want := min(headFreed, freed); len(r.Freed) != want {
		return c.fail(ErrMismatch, path+".freed", "%d entries, want %d", len(r.Freed), want)
	}
	for k, f := range r.Freed {
		at := fmt.Sprintf("%s.freed[%d]", path, k)
		switch {
		case f.Slot < 0 || f.Slot >= m:
			return c.fail(ErrRange, at+".slot", "%d, want 0..%d (m %d)", f.Slot, m-1, m)
		case k > 0 && f.Slot <= r.Freed[k-1].Slot:
			return c.fail(ErrMismatch, at+".slot", "%d after %d: not in increasing order", f.Slot, r.Freed[k-1].Slot)
		case f.Slot < len(base) && (base[f.Slot] < 0 || !gone[base[f.Slot]]):
			return c.fail(ErrMismatch, at+".slot", "%d, but the table gives it to %d, which was not removed", f.Slot, base[f.Slot])
		case f.Backend < -1 || f.Backend >= n:
			return c.fail(ErrRange, at+".backend", "%d, want -1..%d", f.Backend, n-1)
		case (f.Backend == -1) == live:
			return c.fail(ErrMismatch, at+".backend", "%d, with backends left in service %v", f.Backend, live)
		case f.Backend >= 0 && (gone[f.Backend] || r.Counts[f.Backend] == 0):
			return c.fail(ErrMismatch, at+".backend", "%d, which owns no slot afterwards", f.Backend)
		case f.Slot < len(shown) && shown[f.Slot] != f.Backend:
			return c.fail(ErrMismatch, at+".backend", "%d, but %s[%d] is %d", f.Backend, field, f.Slot, shown[f.Slot])
		}
	}
	return nil
}

// checkCandidates checks a list of candidates: at most most of them (-1
// for any number), distinct backend indices below n, starting with first
// (none if first is -1). It is O(len(cands)).
func (c *checker) checkCandidates(path string, cands []int, first, n, most int) error {
	path += ".candidates"
	if most >= 0 && len(cands) > most {
		return c.fail(ErrMismatch, path, "%d candidates, want at most %d", len(cands), most)
	}
	if first == -1 && len(cands) > 0 {
		return c.fail(ErrMismatch, path, "%v for no backend, want []", cands)
	}
	if first >= 0 && (len(cands) == 0 || cands[0] != first) {
		return c.fail(ErrMismatch, path, "%v do not start with backend %d", cands, first)
	}
	if len(c.seen) < n {
		c.seen = make([]bool, n)
	}
	seen := c.seen[:n]
	defer func() {
		for _, b := range cands {
			if 0 <= b && b < n {
				seen[b] = false
			}
		}
	}()
	for j, b := range cands {
		if b < 0 || b >= n {
			return c.fail(ErrRange, fmt.Sprintf("%s[%d]", path, j), "%d, want 0..%d", b, n-1)
		}
		if seen[b] {
			return c.fail(ErrMismatch, fmt.Sprintf("%s[%d]", path, j), "backend %d is repeated", b)
		}
		seen[b] = true
	}
	return nil
}

// checkOrders checks a table's or ring's candidate_orders against its
// lookups' candidates (heads) and its candidates_sha256.
func (c *checker) checkOrders(path string, orders []CandidateOrder, sum string, heads [][]int, n int) error {
	if want := min(fullKeys, c.keys); len(orders) != want {
		return c.fail(ErrMismatch, path+".candidate_orders", "%d orders, want %d (keys 0 to %d)", len(orders), want, want-1)
	}
	for k, o := range orders {
		at := fmt.Sprintf("%s.candidate_orders[%d]", path, k)
		if o.Key != k {
			return c.fail(ErrMismatch, at+".key", "%d, want %d", o.Key, k)
		}
		first := -1
		if len(heads[k]) > 0 {
			first = heads[k][0]
		}
		if err := c.checkCandidates(at, o.Candidates, first, n, -1); err != nil {
			return err
		}
		if h := o.Candidates[:min(headCandidates, len(o.Candidates))]; !slices.Equal(h, heads[k]) {
			return c.fail(ErrMismatch, at+".candidates", "start %v, lookups[%d].candidates %v", h, k, heads[k])
		}
	}
	if !hexOf(sum, 64) {
		return c.fail(ErrSyntax, path+".candidates_sha256", "%q is not 64 hex digits", sum)
	}
	return nil
}

func (c *checker) checkRing(path string, r *Ring) error {
	n, ok := c.sets[r.Set]
	if !ok {
		return c.fail(ErrName, path+".set", "%q names no set", r.Set)
	}
	if r.Vnodes < 1 || r.Vnodes > ring.MaxPoints {
		return c.failWrap(ErrRange, path+".vnodes", fmt.Errorf("%w: %d, want 1..%d", ring.ErrVnodes, r.Vnodes, ring.MaxPoints))
	}
	if int64(n)*int64(r.Vnodes) > ring.MaxPoints {
		return c.failWrap(ErrRange, path+".vnodes", fmt.Errorf("%w: %d names × %d vnodes", ring.ErrTooManyPoints, n, r.Vnodes))
	}
	if want := RingID(r.Set, r.Vnodes); r.ID != want {
		return c.fail(ErrMismatch, path+".id", "%q, but set and vnodes make %q", r.ID, want)
	}
	if len(r.Order) != n {
		return c.fail(ErrMismatch, path+".order", "%d entries, set %s has %d names", len(r.Order), r.Set, n)
	}
	seen := make([]bool, n)
	for i, k := range r.Order {
		at := fmt.Sprintf("%s.order[%d]", path, i)
		if k < 0 || k >= n {
			return c.fail(ErrRange, at, "%d, want 0..%d (set %s)", k, n-1, r.Set)
		}
		if seen[k] {
			return c.fail(ErrMismatch, at, "%d is repeated", k)
		}
		seen[k] = true
	}
	np := n * r.Vnodes
	if r.NumPoints != np {
		return c.fail(ErrMismatch, path+".num_points", "%d, want %d (%d names × %d vnodes)", r.NumPoints, np, n, r.Vnodes)
	}
	shown, field, want := r.Points, "points", np
	switch {
	case r.Vnodes > smallVnodes:
		shown, field, want = r.FirstPoints, "first_points", min(headPoints, np)
		if r.Points != nil {
			return c.fail(ErrMismatch, path+".points", "given for vnodes %d > %d (want first_points)", r.Vnodes, smallVnodes)
		}
	case r.FirstPoints != nil:
		return c.fail(ErrMismatch, path+".first_points", "given for vnodes %d ≤ %d (want points)", r.Vnodes, smallVnodes)
	}
	if len(shown) != want {
		return c.fail(ErrMismatch, path+"."+field, "%d points, want %d", len(shown), want)
	}
	for i, p := range shown {
		at := fmt.Sprintf("%s.%s[%d]", path, field, i)
		switch {
		case !hexOf(p.Pos, 16):
			return c.fail(ErrSyntax, at+".pos", "%q is not 16 hex digits", p.Pos)
		case i > 0 && p.Pos < shown[i-1].Pos: // same-length lowercase hex sorts as the numbers do
			return c.fail(ErrMismatch, at+".pos", "%s is below the point before (%s): not in ring order", p.Pos, shown[i-1].Pos)
		case p.Backend < 0 || p.Backend >= n:
			return c.fail(ErrRange, at+".backend", "%d, want 0..%d", p.Backend, n-1)
		case p.J < 0 || p.J >= r.Vnodes:
			return c.fail(ErrRange, at+".j", "%d, want 0..%d (vnodes %d)", p.J, r.Vnodes-1, r.Vnodes)
		}
	}
	if !hexOf(r.PointsSHA256, 64) {
		return c.fail(ErrSyntax, path+".points_sha256", "%q is not 64 hex digits", r.PointsSHA256)
	}
	if len(r.Lookups) != c.keys {
		return c.fail(ErrMismatch, path+".lookups", "%d lookups, %d keys", len(r.Lookups), c.keys)
	}
	heads := make([][]int, len(r.Lookups))
	for k, l := range r.Lookups {
		at := fmt.Sprintf("%s.lookups[%d]", path, k)
		switch {
		case l.Key != k:
			return c.fail(ErrMismatch, at+".key", "%d, want %d (one lookup per key, in key order)", l.Key, k)
		case l.Point < -1 || l.Point >= np:
			return c.fail(ErrRange, at+".point", "%d, want -1..%d", l.Point, np-1)
		case l.Backend < -1 || l.Backend >= n:
			return c.fail(ErrRange, at+".backend", "%d, want -1..%d", l.Backend, n-1)
		case (l.Point == -1) != (np == 0):
			return c.fail(ErrMismatch, at+".point", "%d on a ring of %d points", l.Point, np)
		case (l.Backend == -1) != (l.Point == -1):
			return c.fail(ErrMismatch, at+".backend", "%d at point %d", l.Backend, l.Point)
		case l.Point >= 0 && l.Point < len(shown) && shown[l.Point].Backend != l.Backend:
			return c.fail(ErrMismatch, at+".backend", "%d, but %s[%d] is backend %d's", l.Backend, field, l.Point, shown[l.Point].Backend)
		}
		if err := c.checkCandidates(at, l.Candidates, l.Backend, n, headCandidates); err != nil {
			return err
		}
		heads[k] = l.Candidates
	}
	return c.checkOrders(path, r.CandidateOrders, r.CandidatesSHA256, heads, n)
}
