package maglev

import (
	"iter"
	"math"
	"slices"

	"github.com/zeebo/xxh3"
)

// A Table is an immutable Maglev lookup table: M slots, each owned by one
// backend. Build one with New. A Table is safe for concurrent use by
// multiple goroutines; to change membership, build a new Table and publish
// it, for example with [sync/atomic.Pointer].
//
// The zero Table is an empty table of size 0: it has no backends, every
// Lookup returns "" and every index method -1, as for any table with no
// backends; its Hasher is XXH3. A nil *Table is the zero Table to every
// method, as receiver and as the other table of Diff and Changes.
//
// A Table from Without has its base's backends, in the same order, with
// those out of service at weight 0: they own no slot, and their indexes
// stay those of the base.
type Table struct {
	backends []string // sorted, distinct
	slots16  []uint16 // backend index per slot, when len(backends) ≤ maxSmall
	slots32  []uint32 // backend index per slot, when len(backends) > maxSmall
	weights  []uint32 // per backend, for NewWeighted's tables; nil means all 1
	m        uint32
	kind     hasherKind // which built-in hasher h is, for direct calls
	seed     uint64     // h's seed, when kind is kindXXH3Seed
	h        Hasher
	base     *Table  // for a table from Without: the table it was computed from; else nil
	out      []uint8 // for a table from Without: per backend of base, 1 if out of service
}

// newTable returns a table of m slots, with none filled, over sorted
// names with their weights (nil for New's), hashed with h (nil: XXH3).
func newTable(sorted []string, weights []uint32, m int, h Hasher) *Table {
	if h == nil {
		h = xxh3Hasher{}
	}
	kind, seed := classify(h)
	return &Table{backends: sorted, weights: weights, m: uint32(m), kind: kind, seed: seed, h: h}
}

// Size returns M, the number of slots.
func (t *Table) Size() int {
	if t == nil {
		return 0
	}
	return int(t.m)
}

// NumBackends returns the number of backends, len(Backends()) without the
// copy. (Size is the number of slots.)
func (t *Table) NumBackends() int { return len(t.names()) }

// Hasher returns the table's hasher (XXH3 for the zero Table).
func (t *Table) Hasher() Hasher {
	if t == nil || t.h == nil {
		return xxh3Hasher{}
	}
	return t.h
}

// Backends returns a copy of the backend names in table order: sorted by
// byte order, so that backend index i names Backends()[i].
func (t *Table) Backends() []string { return slices.Clone(t.names()) }

// names returns the backend names, sorted; none for a nil t.
func (t *Table) names() []string {
	if t == nil {
		return nil
	}
	return t.backends
}

// Backend returns the name of backend i, the i-th of Backends, without
// copying the list: the name for an index that a LookupIndex method or
// Candidates gave. It panics if i is not in [0, NumBackends()), as indexing
// Backends() would. It is O(1) and does not allocate.
func (t *Table) Backend(i int) string { return t.names()[i] }

// Weights returns the backends' weights in table order: those given to
// NewWeighted, or all 1 for a table built by New; for a table from
// Without, the base's with 0 for the backends out of service.
func (t *Table) Weights() []uint32 {
	if t != nil && t.weights != nil {
		return slices.Clone(t.weights)
	}
	w := make([]uint32, t.NumBackends())
	for i := range w {
		w[i] = 1
	}
	return w
}

// Index returns the index of the named backend, or -1 if the table has no
// such backend. It is O(log n) and does not allocate.
func (t *Table) Index(name string) int {
	if t == nil {
		return -1
	}
	// slices.BinarySearch written out: calling it, with the nil check,
	// would keep Index from being inlined.
	b := t.backends
	i, j := 0, len(b)
	for i < j {
		h := int(uint(i+j) >> 1)
		if b[h] < name {
			i = h + 1
		} else {
			j = h
		}
	}
	if i < len(b) && b[i] == name {
		return i
	}
	return -1
}

// Counts returns the number of slots each backend owns, in table order. It
// is O(M) and allocates the result.
func (t *Table) Counts() []int {
	counts := make([]int, t.NumBackends())
	if t == nil {
		return counts
	}
	for _, i := range t.slots16 {
		counts[i]++
	}
	for _, i := range t.slots32 {
		counts[i]++
	}
	return counts
}

// Lookup returns the backend that owns key: the owner of slot H(key) mod M.
// It returns "" if the table has no backends. Lookup is O(1) and does not
// allocate.
func (t *Table) Lookup(key string) string {
	// The common case, the default hasher and 2-byte slots, inline; the
	// rest (a nil t included) in lookupOther. Reducing by len(slots),
	// which is M, lets the compiler drop the slot read's bounds check.
	if t == nil || t.kind != kindXXH3 || t.slots16 == nil {
		return t.lookupOther(key)
	}
	h := xxh3.HashString(key)
	slots := t.slots16
	return t.backends[slots[h%uint64(len(slots))]]
}

// lookupOther is Lookup for a table with a hasher other than the default,
// or with 4-byte slots or none, or nil.
func (t *Table) lookupOther(key string) string {
	if t.empty() {
		return "" // also the zero Table's answer, which has no hasher to call
	}
	return t.LookupHash(t.keyHash(key))
}

// LookupBytes is Lookup for a key held in a byte slice.
func (t *Table) LookupBytes(key []byte) string {
	if t == nil || t.kind != kindXXH3 || t.slots16 == nil {
		return t.lookupBytesOther(key)
	}
	h := xxh3.Hash(key)
	slots := t.slots16
	return t.backends[slots[h%uint64(len(slots))]]
}

// lookupBytesOther is lookupOther for a key held in a byte slice.
func (t *Table) lookupBytesOther(key []byte) string {
	if t.empty() {
		return ""
	}
	return t.LookupHash(t.keyHashBytes(key))
}

// LookupHash returns the owner of slot h mod M, for callers that hash keys
// themselves (with the table's Hasher, for Lookup's answers). It returns ""
// if the table has no backends. It is O(1) and does not allocate.
func (t *Table) LookupHash(h uint64) string {
	if i := t.LookupHashIndex(h); i >= 0 {
		return t.backends[i]
	}
	return ""
}

// LookupIndex is Lookup returning the backend's index (see Backends)
// instead of its name, or -1 if the table has no backends.
func (t *Table) LookupIndex(key string) int {
	if t == nil || t.kind != kindXXH3 || t.slots16 == nil {
		return t.lookupIndexOther(key)
	}
	h := xxh3.HashString(key)
	slots := t.slots16
	return int(slots[h%uint64(len(slots))])
}

// lookupIndexOther is lookupOther for LookupIndex.
func (t *Table) lookupIndexOther(key string) int {
	if t.empty() {
		return -1
	}
	return t.LookupHashIndex(t.keyHash(key))
}

// LookupBytesIndex is LookupBytes returning the backend's index, or -1 if
// the table has no backends.
func (t *Table) LookupBytesIndex(key []byte) int {
	if t == nil || t.kind != kindXXH3 || t.slots16 == nil {
		return t.lookupBytesIndexOther(key)
	}
	h := xxh3.Hash(key)
	slots := t.slots16
	return int(slots[h%uint64(len(slots))])
}

// lookupBytesIndexOther is lookupOther for LookupBytesIndex.
func (t *Table) lookupBytesIndexOther(key []byte) int {
	if t.empty() {
		return -1
	}
	return t.LookupHashIndex(t.keyHashBytes(key))
}

// LookupHashIndex is LookupHash returning the backend's index, or -1 if the
// table has no backends.
//
// A data plane that holds the slot array (see AppendSlots) computes the
// same thing per packet: the owner of slot h mod M. For a slot s below M,
// LookupHashIndex(uint64(s)) is s's owner and LookupHash(uint64(s)) its
// name.
func (t *Table) LookupHashIndex(h uint64) int {
	if t == nil {
		return -1
	}
	if s := t.slots16; s != nil {
		return int(s[h%uint64(len(s))])
	}
	if s := t.slots32; s != nil {
		return int(s[h%uint64(len(s))])
	}
	return -1
}

// AppendSlots appends the owner index of every slot, in slot order, to dst
// and returns the extended slice: the whole table as a data plane (an eBPF
// array map, say) holds it. A table with no backends appends M copies of
// -1, the index methods' "no backend", in 32 bits: 0xFFFFFFFF
// (math.MaxUint32; int32(v) == -1). AppendSlots is O(M) and allocates only
// to grow dst.
func (t *Table) AppendSlots(dst []uint32) []uint32 {
	if t == nil {
		return dst
	}
	dst = slices.Grow(dst, int(t.m))
	switch {
	case t.slots16 != nil:
		for _, i := range t.slots16 {
			dst = append(dst, uint32(i))
		}
	case t.slots32 != nil:
		dst = append(dst, t.slots32...)
	default:
		for range t.m {
			dst = append(dst, noBackend)
		}
	}
	return dst
}

// Diff returns the number of slots whose owner, by name, differs between t
// and other: how many slots a data plane holding one table must rewrite to
// hold the other: the number of slots Changes(other) yields. Diff is 0
// for equal tables, and symmetric for tables of one size; it compares
// owners only, not hashers. Tables of different sizes share no slots (a key
// maps to a different slot in each), so for them every slot of other is
// rewritten, and Diff returns other.Size(). Diff is O(M + n) and allocates
// O(n), never per slot. It counts,
// where ring.Ring.Diff returns a fraction, because a table's slots are few
// enough to count exactly: Diff(other)/Size() is the fraction of keys
// that move.
func (t *Table) Diff(other *Table) int {
	if t.Size() != other.Size() {
		return other.Size()
	}
	n := 0
	t.changes(other, func(int, int) bool { n++; return true })
	return n
}

// Changes returns an iterator over the slots a data plane holding t must
// rewrite to hold other: each slot whose owner differs, in slot order, with
// the index of its owner in other (-1 if other has no backends). If the
// sizes differ, it yields every slot of other. Iterating is O(M + n) and
// allocates O(n), never per slot.
func (t *Table) Changes(other *Table) iter.Seq2[int, int] {
	return func(yield func(slot, owner int) bool) {
		if t.Size() != other.Size() {
			for s := range uint32(other.Size()) {
				if !yield(int(s), other.owner(s)) {
					return
				}
			}
			return
		}
		t.changes(other, yield)
	}
}

// changes calls yield for every slot whose owner differs between t and
// other, which have the same size, until yield returns false.
func (t *Table) changes(other *Table, yield func(slot, owner int) bool) {
	if t.empty() || other.empty() {
		if t.empty() == other.empty() {
			return
		}
		for s := range uint32(other.Size()) {
			if !yield(int(s), other.owner(s)) {
				return
			}
		}
		return
	}
	// remap[j] is the index in t of other's backend j, or -1.
	remap := make([]int32, len(other.backends))
	for j, i := 0, 0; j < len(other.backends); j++ {
		for i < len(t.backends) && t.backends[i] < other.backends[j] {
			i++
		}
		remap[j] = -1
		if i < len(t.backends) && t.backends[i] == other.backends[j] {
			remap[j] = int32(i)
		}
	}
	switch {
	case t.slots16 != nil && other.slots16 != nil:
		changedSlots(t.slots16, other.slots16, remap, yield)
	case t.slots16 != nil:
		changedSlots(t.slots16, other.slots32, remap, yield)
	case other.slots16 != nil:
		changedSlots(t.slots32, other.slots16, remap, yield)
	default:
		changedSlots(t.slots32, other.slots32, remap, yield)
	}
}

// changedSlots calls yield(s, b[s]) for every slot s where a's owner is not
// b's owner remapped to a's indices, until yield returns false.
func changedSlots[A, B Slot](a []A, b []B, remap []int32, yield func(slot, owner int) bool) {
	b = b[:len(a)]
	for s, i := range a {
		j := b[s]
		if remap[j] != int32(i) {
			if !yield(s, int(j)) {
				return
			}
		}
	}
}

// noBackend is -1, the index methods' "no backend", as a uint32: what
// AppendSlots writes for a slot with no owner.
const noBackend = math.MaxUint32

// weight returns backend i's weight: 1 for a table built by New.
func (t *Table) weight(i int) uint32 {
	if t.weights == nil {
		return 1
	}
	return t.weights[i]
}

// empty reports whether t has no slots filled: no backends, or all of them
// drained, or t is nil.
func (t *Table) empty() bool { return t == nil || t.slots16 == nil && t.slots32 == nil }

// owner returns the index of the backend owning slot s < M, or -1 for a
// table with no backends.
func (t *Table) owner(s uint32) int {
	if t.slots16 != nil {
		return int(t.slots16[s])
	}
	if t.slots32 != nil {
		return int(t.slots32[s])
	}
	return -1
}

// keyHash hashes key with the table's hasher, calling the built-in XXH3
// variants directly rather than through the interface. It chooses the
// hasher everywhere but in the inlined default-hasher fast paths of Lookup,
// LookupBytes, LookupIndex and LookupBytesIndex, which call xxh3
// themselves to save a call.
func (t *Table) keyHash(key string) uint64 {
	if t != nil {
		switch t.kind {
		case kindXXH3:
			return xxh3.HashString(key)
		case kindXXH3Seed:
			return xxh3.HashStringSeed(key, t.seed)
		}
	}
	return t.Hasher().HashString(key)
}

// keyHashBytes is keyHash for a byte slice.
func (t *Table) keyHashBytes(key []byte) uint64 {
	if t != nil {
		switch t.kind {
		case kindXXH3:
			return xxh3.Hash(key)
		case kindXXH3Seed:
			return xxh3.HashSeed(key, t.seed)
		}
	}
	return t.Hasher().Hash(key)
}
