package maglev

// This file is part of the compatibility surface. The candidate order below
// is pinned per built-in hasher by TestGoldenCandidates; changing it moves
// every key's second and later choices (replicas, spill-over targets), which
// is a breaking change, as a change to a table is.

import (
	"iter"
	"math/bits"
)

const (
	// candidateWalk is B, the most distinct backends the first phase of a
	// key's candidate order finds by probing slots (see Candidates).
	candidateWalk = 16

	// candidateProbes is P, the most slots the first phase probes.
	candidateProbes = 4 * candidateWalk

	// golden64 is SplitMix64's increment, 2^64 divided by the golden ratio.
	golden64 = 0x9e3779b97f4a7c15
)

// Candidates returns an iterator over the indices (see Backends) of the
// backends in key's preference order: first the backend Lookup picks, then
// the key's second choice, and so on, each backend that owns a slot exactly
// once. Weight-0 (drained) backends never appear; a table with no slot
// owners yields nothing. The order depends only on the table and the key.
//
// For the key hash h (the table's Hasher applied to key) the order is:
//
//  1. The owner of slot s₀ = h mod M: LookupIndex(key).
//  2. The key's probes: up to 64 slots drawn by SplitMix64 seeded with h.
//     For j = 1, 2, ..., 64 in turn: x_j = h + j·0x9e3779b97f4a7c15 (mod
//     2^64), z_j = mix(x_j) with mix the SplitMix64 finalizer (z ^= z>>30;
//     z *= 0xbf58476d1ce4e5b9; z ^= z>>27; z *= 0x94d049bb133111eb;
//     z ^= z>>31), and slot s_j = ⌊z_j · M / 2^64⌋; the owner of s_j is
//     yielded unless it was yielded before. The probes stop early once 16
//     backends in all have been yielded.
//  3. Every other backend with a non-zero weight, in index order, starting
//     after the first candidate and wrapping around.
//
// Each probe picks a slot uniformly at random, whatever the table's
// layout, so a key's second choice is backend j with probability in
// proportion to j's slot count (for keys first owned by A,
// count_j / (M − count_A)), and so are the later choices of the probes.
// The first k candidates, for k ≤ min(16, N/2) with N slot-owning backends
// of about equal shares, cost O(k) expected: each probe finds a new
// backend with probability at least 1/2. Beyond the probes, each
// candidate costs a scan of up to 16 earlier ones.
//
// Ranging over the iterator does not allocate: Candidates and
// CandidatesHash are inlinable, so the iterator stays on the caller's
// stack. The walk's memory is a fixed 64-byte array on the stack.
func (t *Table) Candidates(key string) iter.Seq[int] {
	return t.CandidatesHash(t.keyHash(key))
}

// CandidatesBytes is Candidates for a key held in a byte slice.
func (t *Table) CandidatesBytes(key []byte) iter.Seq[int] {
	return t.CandidatesHash(t.keyHashBytes(key))
}

// CandidatesHash is Candidates for a key hash h, for callers that hash keys
// themselves (with the table's Hasher, for Candidates' answers). Its first
// candidate is LookupHashIndex(h). It does not allocate.
func (t *Table) CandidatesHash(h uint64) iter.Seq[int] {
	return func(yield func(int) bool) { t.candidates(h, yield) }
}

// mix64 is the SplitMix64 finalizer (Stafford's Mix13), a bijection of
// uint64 that turns SplitMix64's counter into its output.
func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}

// candidates calls yield with each candidate of key hash h in order (see
// Candidates) until yield returns false or the candidates run out.
func (t *Table) candidates(h uint64, yield func(int) bool) {
	if t.empty() {
		return
	}
	m := uint64(t.m)
	first := t.owner(uint32(h % m))
	if !yield(first) {
		return
	}
	// live is an upper bound on the backends that own slots: exact for an
	// unweighted table and for a small weighted one, where counting is
	// cheaper than probing for backends that are not there.
	live := len(t.backends)
	if t.weights != nil && live <= candidateWalk {
		live = 0
		for _, w := range t.weights {
			if w > 0 {
				live++
			}
		}
	}
	if live == 1 {
		return
	}
	var seen [candidateWalk]int32
	seen[0] = int32(first)
	n := 1
	x := h
walk:
	for range candidateProbes {
		x += golden64
		hi, _ := bits.Mul64(mix64(x), m)
		o := int32(t.owner(uint32(hi)))
		for _, x := range seen[:n] {
			if x == o {
				continue walk
			}
		}
		if !yield(int(o)) {
			return
		}
		seen[n] = o
		if n++; n == candidateWalk || n == live {
			break
		}
	}
	if n == live {
		return
	}
	nb := len(t.backends)
	i := first
next:
	for range nb - 1 {
		if i++; i == nb {
			i = 0
		}
		if t.weights != nil && t.weights[i] == 0 {
			continue
		}
		for _, x := range seen[:n] {
			if int(x) == i {
				continue next
			}
		}
		if !yield(i) {
			return
		}
	}
}
