package maglev

import (
	"fmt"
	"math"
	"math/bits"
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
