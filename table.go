package maglev

import (
	"fmt"
	"iter"
	"math"
	"math/bits"
	"slices"

	"github.com/zeebo/xxh3"
)

// Slot is the type of a table slot, which holds a backend index: uint16 for
// up to 65,535 backends, uint32 for more. The largest value of the type is
// reserved to mark empty slots while filling.
type Slot interface{ ~uint16 | ~uint32 }

// Fill fills table round-robin from the backends' permutations: backend i
// is perms[i]. Backends take turns in index order; on its turn a backend
// walks on through its sequence from where it stopped last time and claims
// the first empty slot, writing its index there. Filling stops when every
// slot is owned, so slot counts differ by at most one.
//
// The table's length is M and must be a prime no larger than MaxSize.
// cursors is scratch space of at least len(perms) entries: on return,
// cursors[i] is the slot where backend i would look on its next turn.
//
// Fill returns an error, and leaves table in an unspecified state, if M is
// not prime (ErrNotPrime) or too large (ErrTooLarge), if perms is empty or
// longer than the table or than S can index (ErrTooManyBackends), if a
// permutation is out of range (ErrPermutation), or if cursors is too short
// (ErrShortBuffer).
//
// Fill does not allocate. It takes O(M log M) time in expectation.
func Fill[S Slot](table []S, perms []Permutation, cursors []uint32) error {
	m := len(table)
	if err := checkSize(m); err != nil {
		return err
	}
	switch n := len(perms); {
	case n == 0, n > m, uint64(n) > uint64(^S(0)):
		return fmt.Errorf("%w: %d permutations, %d slots", ErrTooManyBackends, n, m)
	case len(cursors) < n:
		return fmt.Errorf("%w: %d cursors for %d permutations", ErrShortBuffer, len(cursors), n)
	}
	if err := checkPermutations(perms, uint32(m)); err != nil {
		return err
	}
	fill(table, perms, cursors)
	return nil
}

// fill is Fill without the checks: table's length is a prime M ≤ MaxSize,
// 1 ≤ len(perms) ≤ M, len(perms) < the largest S, every permutation is
// valid, and len(cursors) ≥ len(perms). Each backend's walk then visits all
// M slots before repeating, so every turn finds an empty slot.
func fill[S Slot](table []S, perms []Permutation, cursors []uint32) {
	start(table, perms, cursors)
	left := len(table)
	for {
		for i, p := range perms {
			claim(table, p, cursors, i)
			if left--; left == 0 {
				return
			}
		}
	}
}

// start empties table and puts every backend's cursor at its Offset.
func start[S Slot](table []S, perms []Permutation, cursors []uint32) {
	empty := ^S(0)
	for i := range table {
		table[i] = empty
	}
	for i, p := range perms {
		cursors[i] = p.Offset
	}
}

// fillWeighted is fill with weighted turns (see NewWeighted); nil weights
// means equal weights, which is fill itself. It picks whichever of two
// exact schedules is cheaper: scanning every backend every round costs n
// checks a round for about M·W/Σw rounds, which is small unless the
// weights are skewed; the priority queue costs O(log n) a turn for M turns
// whatever the skew.
func fillWeighted[S Slot](table []S, perms []Permutation, weights, cursors []uint32) {
	if weights == nil {
		fill(table, perms, cursors)
		return
	}
	var maxWeight, sum uint64
	for _, w := range weights {
		maxWeight = max(maxWeight, uint64(w))
		sum += uint64(w)
	}
	m, n := uint64(len(table)), uint64(len(perms))
	rounds := m*maxWeight/sum + 2 // rounds needed, give or take one
	if n*rounds <= 2*m*uint64(bits.Len64(n)) {
		fillWeightedScan(table, perms, weights, cursors, maxWeight)
	} else {
		fillWeightedQueue(table, perms, weights, cursors, maxWeight)
	}
}

// claim lets backend i take one turn: it walks on from cursors[i] to the
// first empty slot, claims it, and moves its cursor past it.
func claim[S Slot](table []S, p Permutation, cursors []uint32, i int) {
	empty := ^S(0)
	m := uint32(len(table))
	c := cursors[i]
	for table[c] != empty {
		if c += p.Skip; c >= m {
			c -= m
		}
	}
	table[c] = S(i)
	if c += p.Skip; c >= m {
		c -= m
	}
	cursors[i] = c
}

// fillWeightedScan is the weighted schedule as NewWeighted states it:
// every round visits every backend in index order.
func fillWeightedScan[S Slot](table []S, perms []Permutation, weights, cursors []uint32, maxWeight uint64) {
	start(table, perms, cursors)
	t := make([]uint64, len(perms)) // t_i
	left := len(table)
	for k := uint64(1); ; k++ {
		for i, p := range perms {
			if w := uint64(weights[i]); w == 0 || k*w < t[i] {
				continue
			}
			t[i] += maxWeight
			claim(table, p, cursors, i)
			if left--; left == 0 {
				return
			}
		}
	}
}

// never is a heap key that sorts after every real one.
const never = math.MaxUint64

// fillWeightedQueue takes turns in order of (round, backend index) from a
// binary heap of packed keys round<<32 | index, one entry per backend that
// can still turn: the scan's order, without visiting backends that are not
// due.
func fillWeightedQueue[S Slot](table []S, perms []Permutation, weights, cursors []uint32, maxWeight uint64) {
	start(table, perms, cursors)
	// turned[i] is t_i / W: how many turns backend i has taken. Every
	// backend due in round 1 starts in the heap, already in heap order,
	// and the sentinel follows the last.
	turned := make([]uint32, len(perms))
	heap := make([]uint64, 0, len(perms)+1)
	for i := range perms {
		if weights[i] > 0 {
			heap = append(heap, 1<<32|uint64(i))
		}
	}
	n := len(heap)
	heap = append(heap, never)
	m := uint64(len(table))
	left := len(table)
	for {
		round, i := heap[0]>>32, uint32(heap[0])
		claim(table, perms[i], cursors, int(i))
		if left--; left == 0 {
			return
		}
		// The next round k > round with k·w_i ≥ t_i = turned·W. No
		// round beyond M is ever reached: the heaviest backend claims a
		// slot every round.
		turned[i]++
		w := uint64(weights[i])
		next := max(round+1, (uint64(turned[i])*maxWeight+w-1)/w)
		if next > m {
			heap[0] = never // sinks, and is never popped
		} else {
			heap[0] = next<<32 | uint64(i)
		}
		siftDown(heap, n)
	}
}

// siftDown restores the min-heap order of h[:n] after h[0] grew. h[n] must
// hold the sentinel ^uint64(0), so that every node has two children to
// compare. The smaller child is picked without a branch: which one it is
// is a coin toss that a branch would mispredict half the time.
func siftDown(h []uint64, n int) {
	x := h[0]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j, c := l, h[l]
		if d := h[l+1]; d < c {
			j, c = l+1, d
		}
		if x <= c {
			break
		}
		h[i] = c
		i = j
	}
	h[i] = x
}

// A Table is an immutable Maglev lookup table: M slots, each owned by one
// backend. Build one with New. A Table is safe for concurrent use by
// multiple goroutines; to change membership, build a new Table and publish
// it, for example with atomic.Pointer.
type Table struct {
	backends []string // sorted, distinct
	slots16  []uint16 // backend index per slot, when len(backends) ≤ maxSmall
	slots32  []uint32 // backend index per slot, when len(backends) > maxSmall
	weights  []uint32 // per backend, for NewWeighted's tables; nil means all 1
	m        uint32
	kind     hasherKind // which built-in hasher h is, for direct calls
	seed     uint64     // h's seed, when kind is kindXXH3Seed
	h        Hasher
}

func newTable(sorted []string, m int, h Hasher) *Table {
	kind, seed := classify(h)
	return &Table{backends: sorted, m: uint32(m), kind: kind, seed: seed, h: h}
}

// Size returns M, the number of slots.
func (t *Table) Size() int { return int(t.m) }

// Len returns the number of backends.
func (t *Table) Len() int { return len(t.backends) }

// Hasher returns the table's hasher.
func (t *Table) Hasher() Hasher { return t.h }

// Backends returns a copy of the backend names in table order: sorted by
// byte order, so that backend index i names Backends()[i].
func (t *Table) Backends() []string { return slices.Clone(t.backends) }

// Weights returns the backends' weights in table order: those given to
// NewWeighted, or all 1 for a table built by New.
func (t *Table) Weights() []uint32 {
	if t.weights != nil {
		return slices.Clone(t.weights)
	}
	w := make([]uint32, len(t.backends))
	for i := range w {
		w[i] = 1
	}
	return w
}

// Index returns the index of the named backend, or -1 if the table has no
// such backend. It is O(log n) and does not allocate.
func (t *Table) Index(name string) int {
	if i, ok := slices.BinarySearch(t.backends, name); ok {
		return i
	}
	return -1
}

// Counts returns the number of slots each backend owns, in table order. It
// is O(M) and allocates the result.
func (t *Table) Counts() []int {
	counts := make([]int, len(t.backends))
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
	if t.kind == kindXXH3 {
		return t.LookupHash(xxh3.HashString(key)) // the default, called directly
	}
	return t.LookupHash(t.hashString(key))
}

// LookupBytes is Lookup for a key held in a byte slice.
func (t *Table) LookupBytes(key []byte) string {
	if t.kind == kindXXH3 {
		return t.LookupHash(xxh3.Hash(key))
	}
	return t.LookupHash(t.hash(key))
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
	if t.kind == kindXXH3 {
		return t.LookupHashIndex(xxh3.HashString(key))
	}
	return t.LookupHashIndex(t.hashString(key))
}

// LookupHashIndex is LookupHash returning the backend's index, or -1 if the
// table has no backends.
func (t *Table) LookupHashIndex(h uint64) int {
	return t.owner(uint32(h % uint64(t.m)))
}

// SlotOf returns the slot a key hash selects, h mod M: what a data plane
// holding the slot array (see AppendSlots) computes per packet.
func (t *Table) SlotOf(h uint64) int { return int(h % uint64(t.m)) }

// Owner returns the name of the backend that owns slot, or "" if the table
// has no backends. It panics if slot is not in [0, Size()).
func (t *Table) Owner(slot int) string {
	if i := t.OwnerIndex(slot); i >= 0 {
		return t.backends[i]
	}
	return ""
}

// OwnerIndex returns the index of the backend that owns slot, or -1 if the
// table has no backends. It panics if slot is not in [0, Size()).
func (t *Table) OwnerIndex(slot int) int {
	if slot < 0 || slot >= int(t.m) {
		panic(fmt.Sprintf("maglev: slot %d out of range [0, %d)", slot, t.m))
	}
	return t.owner(uint32(slot))
}

// NoBackend is the value AppendSlots writes for every slot of a table with
// no backends.
const NoBackend = math.MaxUint32

// AppendSlots appends the owner index of every slot, in slot order, to dst
// and returns the extended slice: the whole table as a data plane (an eBPF
// array map, say) holds it. A table with no backends appends M copies of
// NoBackend. AppendSlots is O(M) and allocates only to grow dst.
func (t *Table) AppendSlots(dst []uint32) []uint32 {
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
			dst = append(dst, NoBackend)
		}
	}
	return dst
}

// Diff returns the number of slots whose owner, by name, differs between t
// and other: how many slots a data plane holding one table must rewrite to
// hold the other. Diff is symmetric and 0 for equal tables; it compares
// owners only, not hashers. Tables of different sizes share no slots (a key
// maps to a different slot in each), so for them Diff returns the larger
// Size. Diff is O(M + n) and allocates O(n), never per slot.
func (t *Table) Diff(other *Table) int {
	if t.m != other.m {
		return int(max(t.m, other.m))
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
		if t.m != other.m {
			for s := range other.m {
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
		for s := range other.m {
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

// empty reports whether t has no slots filled: no backends, or all of them
// drained.
func (t *Table) empty() bool { return t.slots16 == nil && t.slots32 == nil }

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

// hashString hashes key with a hasher other than the default (whose calls
// the lookups make themselves), calling seeded XXH3 directly rather than
// through the interface.
func (t *Table) hashString(key string) uint64 {
	if t.kind == kindXXH3Seed {
		return xxh3.HashStringSeed(key, t.seed)
	}
	return t.h.HashString(key)
}

// hash is hashString for a byte slice.
func (t *Table) hash(key []byte) uint64 {
	if t.kind == kindXXH3Seed {
		return xxh3.HashSeed(key, t.seed)
	}
	return t.h.Hash(key)
}
