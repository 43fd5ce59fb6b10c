package maglev

import (
	"slices"
	"strings"
)

// New builds the Maglev table of m slots for the given backends, hashing
// with h (nil means XXH3). The table depends only on the set of backend
// names, m and h: not on the order of backends, nor on the platform.
//
// Backends are sorted by byte order; backend i of the table is the i-th name
// in that order. Each backend's preference sequence is its Permutation (see
// NewGenerator); backends then take turns in sorted order, each claiming the
// next empty slot of its sequence, until all m slots are owned. Slot counts
// differ by at most one: the first m mod n backends own one slot more.
//
// An empty backend list gives a valid, empty table whose Lookup returns "".
// New returns an error wrapping ErrSize for a bad m,
// ErrTooManyBackends if there are more backends than slots, and
// ErrEmptyName or ErrDuplicateName for bad names.
//
// New takes O(m log m + n log n) time in expectation and O(m + n) memory:
// 2 bytes a slot for up to 65,535 backends, 4 bytes a slot beyond that.
func New(backends []string, m int, h Hasher) (*Table, error) {
	if err := checkCounts(len(backends), m); err != nil {
		return nil, err
	}
	names := slices.Clone(backends)
	slices.Sort(names)
	if err := checkNames(names); err != nil {
		return nil, err
	}
	return build(names, nil, m, h), nil
}

// A Backend is a backend name with a weight, for NewWeighted. Weight 0
// means drained: the backend owns no slots but is still a known backend.
type Backend struct {
	Name   string
	Weight uint32
}

// NewWeighted builds the Maglev table of m slots for weighted backends,
// hashing with h (nil means XXH3). Names, offsets and skips are as in New;
// only the order of turns changes, by Envoy's turn rule computed exactly,
// in integers:
//
// Let W be the largest weight. Turns happen in rounds k = 1, 2, 3, ...; in
// each round the backends go in sorted order, and backend i, with weight
// w_i > 0 and a counter t_i starting at 0, takes a turn iff k·w_i ≥ t_i,
// and then adds W to t_i. A turn claims a slot exactly as in New; filling
// stops when all m slots are owned.
//
// A backend of the heaviest weight takes a turn every round, and every
// backend with a non-zero weight takes one in round 1, so it owns at least
// one slot. With N' non-drained backends and total weight Σw, backend i
// owns (m − N')·w_i/Σw + 1 slots, give or take 1 + (N' − 2)·w_i/Σw: each
// count is a rounded share plus one, and the others' rounding falls on i
// in proportion to its weight. That is under 2 slots unless one backend
// holds more than 1/(N' − 2) of the total weight, and at most N' − 1 slots
// for a backend holding nearly all of it. The count is within about 2
// slots of the proportional share m·w_i/Σw unless its weight is more than
// about 3 times the mean; at extreme skews the at-least-one-slot rule takes
// slots from the heaviest backends.
//
// The rule is Envoy's, the arithmetic is not. Envoy divides each weight by
// Σw in double precision and compares the rounded k·(w_i/Σw) with a target
// that adds up rounded W/Σw. Rounding matters where the two sides are equal
// in exact arithmetic, k·w_i = t_i, which small integer weights make
// frequent: there Envoy's product can fall just below its target, its
// backend waits a round where this rule takes the turn, and every later
// turn shifts. Measured on Envoy's own permutations at m = 65,537 with 100
// backends of random weights, most tables differ in some slots (37 in 40
// for weights 1..100, in at most 0.22% of the slots; at most 0.35% for
// weights 1..3), and a few percent with some tens of slots a backend; none
// when Σw is a power of two, where every double is exact. Integers make
// each decision exact, the same on every platform, and reproducible from
// the spec in any language. Envoy also derives offsets and skips
// differently (XXH64 of the name, seeds 0 and 1), so its tables are not
// NewWeighted's in any case: package github.com/maglevlb/maglev/envoymaglev
// computes Envoy's own.
//
// With all weights equal the table is identical, slot for slot, to New's.
// Weight-0 backends take no turns; they appear in Backends with a count of
// 0. If every weight is 0 the table is empty: Lookup returns "". Errors are
// as for New.
//
// Turns follow that rule exactly, but are scheduled without visiting
// backends that are not due: by a round scan when the weights are mild, and
// by a priority queue keyed by (next round, index) under skew. NewWeighted
// takes at most O(m log n) time beyond New's fill, whatever the skew, and
// O(m + n) memory.
func NewWeighted(backends []Backend, m int, h Hasher) (*Table, error) {
	if err := checkCounts(len(backends), m); err != nil {
		return nil, err
	}
	_, names, weights, err := sortBackends(backends)
	if err != nil {
		return nil, err
	}
	return build(names, weights, m, h), nil
}

// sortBackends returns the indexes of backends in name order, and their
// names and weights in that order; or the error checkNames gives for the
// names.
func sortBackends(backends []Backend) (order []int32, names []string, weights []uint32, err error) {
	order = make([]int32, len(backends))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return strings.Compare(backends[a].Name, backends[b].Name) })
	names = make([]string, len(backends))
	weights = make([]uint32, len(backends))
	for i, j := range order {
		names[i], weights[i] = backends[j].Name, backends[j].Weight
	}
	if err := checkNames(names); err != nil {
		return nil, nil, nil, err
	}
	return order, names, weights, nil
}

// build makes the table of m slots for sorted, checked names, hashed with
// h (nil means XXH3). weights are the backends' weights, or nil for New's
// equal turns.
func build(names []string, weights []uint32, m int, h Hasher) *Table {
	t := newTable(names, weights, m, h)
	turns := weights
	if len(weights) > 0 {
		hi := slices.Max(weights)
		if hi == 0 {
			return t // every backend drained
		}
		if slices.Min(weights) == hi {
			turns = nil // every backend turns every round: New's fill
		}
	}
	if len(names) == 0 {
		return t
	}
	g := Generator{m: uint32(m), h: t.h}
	perms := g.permutations(make([]Permutation, 0, len(names)), names)
	cursors := make([]uint32, len(names))
	if len(names) <= maxSmall {
		t.slots16 = make([]uint16, m)
		fillWeighted(t.slots16, perms, turns, cursors)
	} else {
		t.slots32 = make([]uint32, m)
		fillWeighted(t.slots32, perms, turns, cursors)
	}
	return t
}

// SizeFor returns a prime table size suited to n backends: DefaultSize when
// n ≤ 655, else the smallest prime above 100·n, as the Maglev paper
// recommends (M > 100·N keeps every backend's share within about 1% of the
// mean), while there is one no larger than MaxSize, and MaxSize beyond
// that; New accepts MaxSize for up to MaxSize backends. SizeFor is
// O(√M log M) and does not allocate.
//
// Call it once, with the most backends planned for, and keep the size:
// tables of different sizes share no slots, so a membership change that
// also changed M would move nearly every key (docs/peers.md).
func SizeFor(n int) int {
	if n <= DefaultSize/100 {
		return DefaultSize
	}
	if n > MaxSize/100 {
		return MaxSize
	}
	m := 100*n + 1
	for !isPrime(m) { // ends at MaxSize, a prime, at the latest
		m++
	}
	return m
}
