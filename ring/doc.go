// Package ring implements the classic consistent-hash ring with virtual
// nodes (Karger et al., "Consistent Hashing and Random Trees", STOC 1997),
// on the same hashers as the maglev package, so that the two can be
// compared fairly.
//
// Each backend owns vnodes points on a circle of 2^64 positions: point j of
// the backend called name is at H(le64(j) + name), the hash of j's 8-byte
// little-endian encoding followed by the name. A key is routed to the owner
// of the first point at or after H(key), wrapping past the end. Equal
// positions are ordered by backend name, then j, so the first of them wins.
//
// # Ring or Maglev
//
// Adding a backend to a ring moves keys only to the newcomer, and removing
// one moves only its own keys: the ideal disruption, exactly. A Maglev
// table moves slightly more. In exchange, Maglev balances load to within
// about 1% and routes with one array index, while a ring's shares spread by
// about 1/√vnodes around the mean (see [DefaultVnodes]) and its lookup is a
// binary search over all points.
//
// # Determinism
//
// A ring depends only on the set of backend names, vnodes and the
// [maglev.Hasher]: never on the order the names are given in, the platform,
// its word size or byte order. TestGolden pins the points of every built-in
// hasher; changing them is a breaking change.
//
// # Costs
//
// [New] and [NewWeighted] take O(P) time for P points (N·vnodes, or
// vnodes·Σw): they hash every point and radix-sort the positions. The ring
// keeps 12 bytes a point (24 while building). [Ring.Lookup] is O(log P)
// and does not allocate: the ring is a sorted array of positions, with a
// parallel array of backend indices, binary-searched without
// data-dependent branches up to 2^16 points and with ordinary branches
// above (where cache misses dominate and speculation helps). [Ring.Diff]
// and [Ring.Shares] are exact and O(P).
// [Ring.Candidates], a key's distinct backends clockwise from its point
// (the classic replica order, pinned per hasher like the points), adds 4
// bytes a point, built in O(P) on its first call, and then allocates
// nothing.
//
// # Concurrency
//
// A Ring is immutable (the lazily built distances of Candidates aside,
// which sync.Once guards) and safe for concurrent use by multiple
// goroutines.
// To change membership, build a new Ring off the request path and publish it
// with [sync/atomic.Pointer].
package ring
