package ring

import "iter"

// Candidates returns an iterator over the indices (see Backends) of the
// backends in key's preference order, the classic replica order of a
// ring: the distinct owners of the points met walking the ring clockwise
// from the point Lookup picks, wrapping past the end, each backend once, in
// the order first met (points with equal positions in ring order, see
// AppendPoints). The first candidate is Lookup's backend, and every
// backend appears; an empty ring yields nothing. This order is part of the
// package's compatibility surface, pinned per hasher by
// TestGoldenCandidates.
//
// The first call on a ring computes, in O(P) time for P points, 4 bytes a
// point kept with the ring: for each point, how many points back the
// previous point of the same owner lies. After that, ranging over the
// iterator does not allocate, and the first k candidates cost the points
// walked to meet k distinct owners, which is about k·P/N for k much less
// than N backends of equal shares (N·ln N·P/N for all of them), plus the
// O(log P) search.
func (r *Ring) Candidates(key string) iter.Seq[int] {
	return r.CandidatesHash(r.hashString(key))
}

// CandidatesBytes is Candidates for a key held in a byte slice.
func (r *Ring) CandidatesBytes(key []byte) iter.Seq[int] {
	return r.CandidatesHash(r.hash(key))
}

// CandidatesHash is Candidates for hash value x, for callers that hash keys
// themselves (with the ring's Hasher, for Candidates' answers). Its first
// candidate is LookupHash(x)'s backend.
func (r *Ring) CandidatesHash(x uint64) iter.Seq[int] {
	return func(yield func(int) bool) { r.candidates(x, yield) }
}

// candidates calls yield with each distinct owner met walking from x's
// point, until yield returns false or every backend has been met. The
// owner of the point at walk offset d is new iff the previous point with
// the same owner lies more than d points back: before the walk's start.
func (r *Ring) candidates(x uint64, yield func(int) bool) {
	p := len(r.pos)
	if p == 0 {
		return
	}
	back := r.backDistances()
	k := search(r.pos, x)
	left := len(r.backends)
	for d := uint32(0); ; d++ {
		if back[k] > d {
			if !yield(int(r.idx[k])) {
				return
			}
			if left--; left == 0 {
				return
			}
		}
		if k++; k == p {
			k = 0
		}
	}
}

// backDistances returns, building it on first use, the distance back of
// every point k: the least e ≥ 1 such that point (k − e) mod P has the same
// owner as point k, which is P for a backend's only point.
func (r *Ring) backDistances() []uint32 {
	r.backOnce.Do(func() {
		p := len(r.pos)
		back := make([]uint32, p)
		last := make([]int, len(r.backends)) // last point of each owner, less P
		for k, i := range r.idx {
			last[i] = k - p
		}
		for k, i := range r.idx {
			back[k] = uint32(k - last[i])
			last[i] = k
		}
		r.back = back
	})
	return r.back
}
