package maglev

// This file is part of the compatibility surface: which backend takes a
// freed slot is pinned per built-in hasher by TestGoldenWithout; changing
// the rule below moves keys of every fleet that routes around a failure.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"
)

// Without returns the table in which the named backends of t are out of
// service, for routing around a failure without a rebuild: every slot whose
// owner stays in service keeps its owner, so only the keys of the failed
// backends move, about 1/N of them for one of N equal backends, where
// building a new table for the others moves several times more (see
// docs/peers.md).
//
// Each freed slot goes to the backend in service whose permutation (see
// Generator) reaches it first: the one for which the slot's position
// j = (slot − Offset)·Skip⁻¹ mod M is smallest. In a weighted table the
// backend with the smallest j/w wins, compared exactly as j_a·w_b < j_b·w_a
// in 64-bit integers, so that freed slots spread in proportion to the
// weights in expectation (to within about the largest weight's share of
// the total). Equal positions, or equal ratios, go to the lower index.
// Backends of weight 0 (drained) never take a slot. docs/spec.md gives the
// rule in full.
//
// The result depends only on the table t was computed from (the base: t
// itself unless t came from Without) and the set of backends out of
// service: the order of names does not matter, and t.Without(a).Without(b)
// equals t.Without(a, b) slot for slot. To bring backends back, call
// Without on the base with the smaller set; base.Without() is base itself.
// The result has the base's backends, in the same order
// ([Table.NumBackends], [Table.Backends] and [Table.Index] are the base's),
// with weight 0 and no slot for those out of service ([Table.Weights],
// [Table.Counts]); Lookup, Candidates and a
// [github.com/maglevlb/maglev/bounded.Picker] never pick them. If every backend is out of service or drained, the result is an
// empty table, as from NewWeighted with every weight 0: Lookup returns "".
// The result keeps a reference to the base. For a table from NewFromSlots,
// the permutations are those New gives its names with its hasher.
//
// Without with no names returns t. A name that is not a backend of t is an
// error wrapping ErrUnknownBackend; a name given twice, or one already out
// of service in t, an error wrapping ErrDuplicateName.
//
// Without takes O(M + n + F·n') time, for F freed slots and n' backends
// left in service: about M/n·n' computed positions for one of n equal
// backends, so a small fraction of New's time; removing a large share of
// the backends costs more than a rebuild. It allocates the new table (2 or
// 4 bytes a slot), the freed slots' list and O(n) more. Like every method
// of Table, it is safe for concurrent use, and it does not change t.
func (t *Table) Without(names ...string) (*Table, error) {
	if len(names) == 0 {
		return t, nil
	}
	if t == nil {
		t = new(Table) // the zero Table, which has no backend to name
	}
	base := t
	if t.base != nil {
		base = t.base
	}
	// out[i] is 1 for a backend out of service in t, 2 for one named here.
	out := make([]uint8, len(base.backends))
	copy(out, t.out)
	for _, name := range names {
		i := base.Index(name)
		switch {
		case i < 0:
			return nil, fmt.Errorf("%w: %q", ErrUnknownBackend, name)
		case out[i] == 1:
			return nil, fmt.Errorf("%w: %q is already out of service", ErrDuplicateName, name)
		case out[i] == 2:
			return nil, fmt.Errorf("%w: %q named twice", ErrDuplicateName, name)
		}
		out[i] = 2
	}
	return without(base, out), nil
}

// without returns the table of base, which did not come from Without, in
// which the backends i with out[i] ≠ 0 are out of service. It keeps out.
func without(base *Table, out []uint8) *Table {
	n := len(base.backends)
	weights := make([]uint32, n)
	live := 0
	for i := range out {
		if out[i] != 0 {
			out[i] = 1
			continue
		}
		if weights[i] = base.weight(i); weights[i] > 0 {
			live++
		}
	}
	t := &Table{backends: base.backends, weights: weights, m: base.m, kind: base.kind, seed: base.seed, h: base.h, base: base, out: out}
	if live == 0 {
		return t // nobody left to own a slot
	}
	if base.slots16 != nil {
		t.slots16 = reassign(base.slots16, base, weights, out)
	} else {
		t.slots32 = reassign(base.slots32, base, weights, out)
	}
	return t
}

// reassign returns a copy of slots, base's slot array, in which every slot
// of a backend i with out[i] ≠ 0 belongs to the backend, among those of
// non-zero weight in weights, whose permutation reaches it first (see
// Without).
//
// It visits each backend in service once, in index order, and computes the
// position of every freed slot in its permutation, keeping per freed slot
// the best so far: the freed slots' computations are independent of one
// another, so the processor overlaps them, where a loop over the backends
// for one slot would wait on each comparison.
func reassign[S Slot](slots []S, base *Table, weights []uint32, out []uint8) []S {
	dst := slices.Clone(slots)
	freed := freedSlots(slots, out)
	if len(freed) == 0 {
		return dst
	}
	m := base.m
	g := Generator{m: m, h: base.h}
	if base.weights == nil {
		// Equal weights: the smallest position<<32 | index wins.
		best := make([]uint64, len(freed))
		for f := range best {
			best[f] = math.MaxUint64
		}
		for i, w := range weights {
			if w > 0 {
				offset, mul := positioner(&g, base.backends[i], m)
				reachEqual(best, freed, offset, mul, uint64(m), uint64(i))
			}
		}
		for f, s := range freed {
			dst[s] = S(uint32(best[f]))
		}
		return dst
	}
	best := make([]reach, len(freed))
	for f := range best {
		best[f] = reach{j: uint64(m), w: 1} // loses to any real position
	}
	for i, w := range weights {
		if w > 0 {
			offset, mul := positioner(&g, base.backends[i], m)
			reachWeighted(best, freed, offset, mul, uint64(m), uint64(w), uint32(i))
		}
	}
	for f, s := range freed {
		dst[s] = S(best[f].i)
	}
	return dst
}

// positioner returns the Offset of the permutation of the backend called
// name in a table of m slots, and mul = ⌊Skip⁻¹·2^64/m⌋ + 1, with which
// slot − Offset becomes a position (see reachEqual).
func positioner(g *Generator, name string, m uint32) (offset, mul uint64) {
	p := g.Permutation(name)
	mul, _ = bits.Div64(uint64(inverse(p.Skip, m)), 0, uint64(m))
	return uint64(p.Offset), mul + 1
}

// reachEqual lowers best[f] to j<<32 | i where j is the position of slot
// freed[f] in backend i's permutation, given by offset and mul (see
// positioner), if that is smaller.
//
// With d = slot + m − offset in [1, 2m), j = d·Skip⁻¹ mod m. As in
// nearest, the low 64 bits of d·mul are j·2^64/m + d·θ for some θ in
// (0, 1], and d·θ·m < 2m² < 2^49, so the high 64 bits of that times m are
// j exactly: two multiplications, no division.
func reachEqual(best []uint64, freed []uint32, offset, mul, m, i uint64) {
	freed = freed[:len(best)]
	add := m - offset
	for f, s := range freed {
		j, _ := bits.Mul64((uint64(s)+add)*mul, m)
		best[f] = min(best[f], j<<32|i)
	}
}

// A reach is the best claim so far on a freed slot of a weighted table:
// position j in the permutation of backend i, of weight w.
type reach struct {
	j, w uint64
	i    uint32
}

// reachWeighted is reachEqual for a weighted table: backend i, of weight
// w, takes freed[f] from best[f] if j·best.w < best.j·w, that is j/w is
// smaller. j < 2^24 and weights are below 2^32, so the products fit 64
// bits; on a tie the earlier, lower index keeps the slot.
func reachWeighted(best []reach, freed []uint32, offset, mul, m, w uint64, i uint32) {
	freed = freed[:len(best)]
	add := m - offset
	for f, s := range freed {
		j, _ := bits.Mul64((uint64(s)+add)*mul, m)
		if b := &best[f]; j*b.w < b.j*w {
			*b = reach{j, w, i}
		}
	}
}

// freedSlots returns, in slot order, the slots of slots whose owner i has
// out[i] ≠ 0.
func freedSlots[S Slot](slots []S, out []uint8) []uint32 {
	if s16, ok := any(slots).([]uint16); ok {
		var gone [4]uint16
		k := 0
		for i, o := range out {
			if o != 0 {
				if k == len(gone) {
					k = -1
					break
				}
				gone[k] = uint16(i)
				k++
			}
		}
		if k > 0 {
			return freedSlots16(s16, gone[:k])
		}
	}
	var freed []uint32
	for s, o := range slots {
		if out[o] != 0 {
			freed = append(freed, uint32(s))
		}
	}
	return freed
}

// freedSlots16 returns, in slot order, the slots of slots owned by one of
// gone, 1 to 4 backends. It reads four slots at a time as one 64-bit word
// and tests its four 16-bit lanes against each of gone at once (as
// firstEmpty16 tests for empty lanes), looking at single slots only in a
// word with a match: a quarter of the loads and branches of a loop over
// slots. The word is read in the machine's byte order, so that each lane
// is one slot's value on little- and big-endian machines alike (the
// lanes' order within the word does not matter).
func freedSlots16(slots []uint16, gone []uint16) []uint32 {
	const lo, hi = 0x0001_0001_0001_0001, 0x8000_8000_8000_8000
	var pat [4]uint64
	for k := range pat {
		pat[k] = uint64(gone[min(k, len(gone)-1)]) * lo // repeats the last
	}
	words := len(slots) / 4
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(slots))), 2*len(slots))
	var freed []uint32
	check := func(from, to int) {
		for s := from; s < to; s++ {
			if slices.Contains(gone, slots[s]) {
				freed = append(freed, uint32(s))
			}
		}
	}
	for w := range words {
		x := binary.NativeEndian.Uint64(b[8*w:])
		a, c, d, e := x^pat[0], x^pat[1], x^pat[2], x^pat[3]
		if ((a-lo)&^a|(c-lo)&^c|(d-lo)&^d|(e-lo)&^e)&hi != 0 {
			check(4*w, 4*w+4)
		}
	}
	check(4*words, len(slots))
	return freed
}
