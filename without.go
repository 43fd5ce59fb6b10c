package maglev

// This file is part of the compatibility surface: which backend takes a
// freed slot is pinned per built-in hasher by TestGoldenWithout; changing
// the rule below moves keys of every fleet that routes around a failure.

import (
	"fmt"
	"math/bits"
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
// The result has the base's backends, in the same order (Len, Backends and
// Index are the base's), with weight 0 and no slot for those out of
// service (Weights, Counts); Lookup, Candidates and Bounded never pick
// them. If every backend is out of service or drained, the result is an
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
		t.slots16 = reassign(base.slots16, base, weights, out, live)
	} else {
		t.slots32 = reassign(base.slots32, base, weights, out, live)
	}
	return t
}

// A contender is a backend in service that may take freed slots.
type contender struct {
	offset uint64 // its permutation's Offset
	mul    uint64 // ⌊Skip⁻¹·2^64/M⌋ + 1, which turns slot − Offset into a position
	weight uint64 // its weight, at least 1
	index  uint64 // its index in the table
}

// reassign returns a copy of slots, base's slot array, in which every slot
// of a backend with out[i] ≠ 0 belongs to the contender, among the live
// backends of non-zero weight in weights, that reaches it first (see
// Without).
func reassign[S Slot](slots []S, base *Table, weights []uint32, out []uint8, live int) []S {
	dst := make([]S, len(slots))
	copy(dst, slots)
	var freed []uint32
	for s, o := range dst {
		if out[o] != 0 {
			freed = append(freed, uint32(s))
		}
	}
	if len(freed) == 0 {
		return dst
	}
	m := uint64(base.m)
	g := Generator{m: base.m, h: base.h}
	cs := make([]contender, 0, live)
	for i, w := range weights {
		if w == 0 {
			continue
		}
		p := g.Permutation(base.backends[i])
		mul, _ := bits.Div64(uint64(inverse(p.Skip, base.m)), 0, m)
		cs = append(cs, contender{offset: uint64(p.Offset), mul: mul + 1, weight: uint64(w), index: uint64(i)})
	}
	for _, s := range freed {
		dst[s] = S(firstToReach(cs, uint64(s)+m, m))
	}
	return dst
}

// firstToReach returns the index of the contender with the smallest
// position j of slot s (given as s + M) over its weight, the lower index on
// a tie.
//
// With d = s + M − Offset in [1, 2M), j = d·Skip⁻¹ mod M. As in nearest,
// the low 64 bits of d·mul are j·2^64/M + d·θ for some θ in (0, 1], and
// d·θ·M < 2M² < 2^49, so the high 64 bits of that times M are j exactly:
// two multiplications, no division. j < 2^24 and weights < 2^32, so the
// products j·w fit 64 bits.
func firstToReach(cs []contender, s, m uint64) uint64 {
	bestJ, bestW, best := m, uint64(1), uint64(0) // j = M loses to any real position
	for _, c := range cs {
		j, _ := bits.Mul64((s-c.offset)*c.mul, m)
		if j*bestW < bestJ*c.weight {
			bestJ, bestW, best = j, c.weight, c.index
		}
	}
	return best
}
