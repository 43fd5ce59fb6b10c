package ring

import (
	"math"
	"math/bits"
)

// Arcs. The points at sorted positions p_0 ≤ p_1 ≤ … ≤ p_{P-1} cut the
// hash space [0, 2^64) into arcs: point k > 0 owns (p_{k-1}, p_k], and
// point 0 owns the wrap-around arc (p_{P-1}, 2^64) ∪ [0, p_0]. A point that
// ties with the one before it owns an empty arc. Arc lengths are counted
// exactly, in integers, and rounded to float64 once.

// Shares returns each backend's exact share of the 2^64 hash values, in
// Backends order: the total length of its points' arcs over 2^64, rounded
// once to float64. The shares sum to 1 up to that rounding (within
// Len()·2^-53). A ring with no backends returns an empty slice. Shares is
// O(P) for P points and allocates only the result.
func (r *Ring) Shares() []float64 {
	counts, full := r.arcs()
	shares := make([]float64, len(counts))
	for i, c := range counts {
		shares[i] = fraction(0, c)
	}
	if full >= 0 {
		shares[full] = 1
	}
	return shares
}

// arcs returns how many hash values each backend owns, modulo 2^64, and the
// index of the backend that owns all 2^64 of them (whose count wraps to 0),
// or -1 if none does.
func (r *Ring) arcs() (counts []uint64, full int) {
	counts = make([]uint64, len(r.backends))
	if len(r.pos) == 0 {
		return counts, -1
	}
	last := r.pos[len(r.pos)-1]
	prev := last
	for k, p := range r.pos {
		// p - prev is the arc length p_k - p_{k-1}; for k = 0 it is
		// p_0 - p_{P-1} + 2^64, the wrap-around arc, modulo 2^64.
		counts[r.idx[k]] += p - prev
		prev = p
	}
	// The counts sum to 2^64, so at most one of them is 2^64. It wraps to
	// 0, and then so are all the others: the owner of hash 0 owns all.
	for _, c := range counts {
		if c != 0 {
			return counts, -1
		}
	}
	return counts, int(r.idx[0])
}

// Diff returns the exact fraction of the 2^64 hash values whose owner, by
// name, differs between r and other, rounded once to float64: how much of
// the key space moves when other replaces r. Diff is symmetric, 0 for rings
// with the same arcs, and 1 between an empty and a non-empty ring. It
// compares owners of hash values only, not hashers.
//
// Diff merges the two sorted point lists: O(P + Q) for P and Q points, and
// O(n) memory for n backends.
func (r *Ring) Diff(other *Ring) float64 {
	return fraction(r.diffCount(other))
}

// diffCount returns the number of hash values whose owner differs between
// r and other as a 128-bit integer hi·2^64 + lo (at most 2^64).
func (r *Ring) diffCount(other *Ring) (hi, lo uint64) {
	if len(r.pos) == 0 || len(other.pos) == 0 {
		if len(r.pos) == len(other.pos) {
			return 0, 0
		}
		return 1, 0
	}
	// remap[b] is the index in r of other's backend b, or -1.
	remap := make([]int32, len(other.backends))
	for b, a := 0, 0; b < len(other.backends); b++ {
		for a < len(r.backends) && r.backends[a] < other.backends[b] {
			a++
		}
		remap[b] = -1
		if a < len(r.backends) && r.backends[a] == other.backends[b] {
			remap[b] = int32(a)
		}
	}
	// Walk the hash space in segments [start, end] on which both owners are
	// fixed. i and j are the next points at or after start in r and other:
	// the owners of the segment, or of the wrap-around arc (point 0) past
	// the last point. Each segment ends at the nearer of the two points.
	p, q := r.pos, other.pos
	var start uint64
	i, j := 0, 0
	for {
		end := uint64(math.MaxUint64)
		if i < len(p) {
			end = p[i]
		}
		if j < len(q) {
			end = min(end, q[j])
		}
		a, b := 0, 0
		if i < len(p) {
			a = i
		}
		if j < len(q) {
			b = j
		}
		if int32(r.idx[a]) != remap[other.idx[b]] {
			// end - start + 1 values; start ≤ end always.
			var c uint64
			lo, c = bits.Add64(lo, end-start, 0)
			hi += c
			lo, c = bits.Add64(lo, 1, 0)
			hi += c
		}
		if end == math.MaxUint64 {
			return hi, lo
		}
		start = end + 1
		for i < len(p) && p[i] == end {
			i++
		}
		for j < len(q) && q[j] == end {
			j++
		}
	}
}

// fraction returns (hi·2^64 + lo) / 2^64, with hi·2^64 + lo ≤ 2^64,
// rounded once.
func fraction(hi, lo uint64) float64 {
	if hi != 0 {
		return 1
	}
	return math.Ldexp(float64(lo), -64)
}
