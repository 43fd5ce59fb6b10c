package maglev

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"
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
// not prime or too large (ErrSize), if perms is empty (ErrNoBackends), if
// there are more permutations than slots or than S can name: 65,535 for
// uint16 slots, whose largest value marks empty slots while filling
// (ErrTooManyBackends), if a permutation is out of range (ErrPermutation),
// or if cursors is too short (ErrShortBuffer).
//
// Fill does not allocate: besides cursors, its only scratch space is on the
// goroutine's stack: for M up to 2^20, a bitmap of the slots taken so far
// (2 KiB for M ≤ 2^14, 16 KiB up to 2^17, 128 KiB up to 2^20), and a list
// of at most 2048 empty slots (8 KiB) for the last turns. It takes
// O(M log M) time in expectation.
func Fill[S Slot](table []S, perms []Permutation, cursors []uint32) error {
	m := len(table)
	if err := CheckSize(m); err != nil {
		return err
	}
	switch n := len(perms); {
	case n == 0:
		return fmt.Errorf("%w: no permutations", ErrNoBackends)
	case n > m:
		return fmt.Errorf("%w: %d permutations, %d slots", ErrTooManyBackends, n, m)
	case uint64(n) > uint64(^S(0)):
		return fmt.Errorf("%w: %d permutations, but a %T slot names at most %d backends (its largest value marks empty slots while filling)",
			ErrTooManyBackends, n, S(0), ^S(0))
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
	fillEqual(table, perms, cursors, endgameAt(len(table)))
}

// fillEqual is fill with the endgame starting once end slots are left
// empty (see filler). Up to bitmapMax slots it marks the taken slots in a
// bitmap on the stack, probes the bitmap and writes each slot of the table
// once, when the slot is claimed (fillMarked); beyond that it probes the
// table itself, with empty slots marked by the largest S (fillProbed).
// Each size class of bitmap has its own function, so that a fill makes a
// stack frame, and zeroes a bitmap, no larger than its M needs: 2 KiB for
// M ≤ 2^14, 16 KiB up to 2^17, 128 KiB up to 2^20. The three are kept
// out of line (go:noinline) for the same reason: inlined into fillEqual,
// they would make one frame of all three.
func fillEqual[S Slot](table []S, perms []Permutation, cursors []uint32, end int) {
	switch m := len(table); {
	case m <= 64<<8:
		fillMarked2K(table, perms, cursors, end)
	case m <= 64<<11:
		fillMarked16K(table, perms, cursors, end)
	case m <= bitmapMax:
		fillMarked128K(table, perms, cursors, end)
	default:
		fillProbed(table, perms, cursors, end)
	}
}

// bitmapMax is the largest M whose bitmap fillEqual keeps on the stack:
// 2^20 bits, 128 KiB, the most the compiler places on the stack for one
// variable.
const bitmapMax = 1 << 20

//go:noinline
func fillMarked2K[S Slot](table []S, perms []Permutation, cursors []uint32, end int) {
	var taken [1 << 8]uint64
	fillMarked(table, perms, cursors, taken[:], end)
}

//go:noinline
func fillMarked16K[S Slot](table []S, perms []Permutation, cursors []uint32, end int) {
	var taken [1 << 11]uint64
	fillMarked(table, perms, cursors, taken[:], end)
}

//go:noinline
func fillMarked128K[S Slot](table []S, perms []Permutation, cursors []uint32, end int) {
	var taken [1 << 14]uint64
	fillMarked(table, perms, cursors, taken[:], end)
}

// fillMarked is fillEqual with taken, all zero and at least ⌈M/64⌉ words,
// as the bitmap of taken slots: bit s%64 of taken[s/64] is set once slot
// s is claimed. A turn checks its cursor's bit and, if it is set, probes
// the bitmap four positions a step (probeMarked); it then sets the bit of
// the slot it claims and writes the slot, the only write the table gets,
// so the table needs no marking of empty slots. Once end slots are left,
// the endgame lists them from the bitmap and takes the last turns as
// filler.turn does.
//
// The bitmap is 1/16 of a table of 2-byte slots: 8 KiB at M = 65537,
// which stays in L1, 80 KiB at 655373, which stays in L2 while the
// 1.3 MiB slot array does not. Probing it takes more instructions per
// position than probing the slots (a shift and a mask to pick the bit),
// but its loads return sooner. Measured at N = 1000 (thread CPU time;
// docs/notes/fill.md, "The bitmap"), the fill takes 0.72–0.76× refFill's
// time at M = 65537 and 0.64–0.68× at 655373, where probing the table
// took 0.83–0.88× and 0.93–0.99×.
func fillMarked[S Slot](table []S, perms []Permutation, cursors []uint32, taken []uint64, end int) {
	taken = taken[:(len(table)+63)/64]
	for i, p := range perms {
		cursors[i] = p.Offset
	}
	left, i := len(table), 0
	end = min(end, endgameMax)
	if left > end {
		left, i = markedTurns(table, perms, cursors, taken, end)
	}
	if left == 0 {
		return
	}
	// The endgame, from backend i on.
	var f filler[S]
	f.table, f.perms, f.cursors = table, perms, cursors
	f.left, f.end = left, end
	listFree(&f.empties, taken, len(table))
	f.listed = true
	for {
		for ; i < len(perms); i++ {
			if f.turn(i) {
				return
			}
		}
		i = 0
	}
}

// markedTurns takes fillMarked's turns before the endgame, from backend 0
// on, until end slots are left empty, with end < M. It returns end and the
// backend whose turn is next (len(perms) if backend 0's). Like fillProbed's
// loop, it is a range loop over perms, so that perms[i] and cursors[i]
// need no bounds checks and a round needs no wrap of i.
func markedTurns[S Slot](table []S, perms []Permutation, cursors []uint32, taken []uint64, end int) (left, next int) {
	m := uint32(len(table))
	table = table[:len(table):len(table)]
	cursors = cursors[:len(perms):len(perms)]
	left = len(table)
	for {
		for i := range perms {
			s := perms[i].Skip
			c := cursors[i]
			if isTaken(taken, c) != 0 {
				c = probeMarked(taken, wrap(c+s, m), s, m)
			}
			taken[c>>6] |= 1 << (c & 63)
			table[c] = S(i)
			cursors[i] = wrap(c+s, m)
			if left--; left == end {
				return left, i + 1
			}
		}
	}
}

// isTaken returns 1 if slot c is taken in the bitmap taken, else 0.
func isTaken(taken []uint64, c uint32) uint32 {
	return uint32(taken[c>>6]>>(c&63)) & 1
}

// probeMarked is probe on the bitmap taken: it returns the first slot of
// the sequence c, c+s, c+2s, ... (mod m) whose bit is clear, checking four
// positions a step. The positions are reduced from c by adding multiples
// of s less m (wrapAdd), a step's four bits are summed into a nibble, so
// that one branch decides four probes, and the free position is picked by
// conditional moves.
func probeMarked(taken []uint64, c, s, m uint32) uint32 {
	s2 := wrap(s+s, m)
	s3 := wrap(s2+s, m)
	d1, d2, d3, d4 := s-m, s2-m, s3-m, wrap(s3+s, m)-m
	for {
		c1, c2, c3 := wrapAdd(c, d1, m), wrapAdd(c, d2, m), wrapAdd(c, d3, m)
		t := isTaken(taken, c) + isTaken(taken, c1)*2 + isTaken(taken, c2)*4 + isTaken(taken, c3)*8
		if t != 15 {
			x := c3
			if t&4 == 0 {
				x = c2
			}
			if t&2 == 0 {
				x = c1
			}
			if t&1 == 0 {
				x = c
			}
			return x
		}
		c = wrapAdd(c, d4, m)
	}
}

// wrapAdd returns (c + k) mod m for c < m and d = k − m (mod 2^32), k < m:
// wrap(c+k, m) with the subtraction of m done once, ahead, for a k that
// several positions share.
func wrapAdd(c, d, m uint32) uint32 {
	y := c + d
	return y + m&uint32(int32(y)>>31)
}

// listFree writes the slots whose bit in taken is clear, below m, to dst,
// in slot order. There must be at most len(dst).
func listFree(dst *[endgameMax]uint32, taken []uint64, m int) {
	n := 0
	for w, x := range taken {
		for x = ^x; x != 0; x &= x - 1 {
			s := w*64 + bits.TrailingZeros64(x)
			if s >= m {
				return
			}
			dst[n] = uint32(s)
			n++
		}
	}
}

// fillProbed is fillEqual for tables too large for a bitmap on the stack:
// it marks empty slots with the largest S and probes the table itself. It
// takes the turns before the endgame in a copy of filler.turn's probing
// branch that keeps the filler's state in local variables, which the
// compiler can keep in registers, and leaves the endgame's turns to
// filler.turn. Measured, taking every turn by filler.turn instead costs
// 13–17% more CPU time for Fill and New at N = 10 to 1000, M = 65537 and
// 655373 (BenchmarkFillTurns; docs/notes/fill.md).
//
// The copy is a range loop over perms, so that perms[i] and cursors[i]
// need no bounds checks and a round needs no wrap of i, with end in a
// register; the filler is made only when the endgame comes. Measured at
// M = 65537, that takes 1–4% less CPU time than the loop it replaced, a
// loop over a filler's fields, and moves by under 1% with where the
// linker places it, against 2–3% for that loop (docs/notes/fill.md,
// "Where the code lands").
func fillProbed[S Slot](table []S, perms []Permutation, cursors []uint32, end int) {
	empty := ^S(0)
	for i := range table {
		table[i] = empty
	}
	// Capacities cut to the lengths: the filler, made after the loop, then
	// needs no value the loop would have to keep.
	table = table[:len(table):len(table)]
	cursors = cursors[:len(perms):len(perms)]
	for i, p := range perms {
		cursors[i] = p.Offset
	}
	m := uint32(len(table))
	left := len(table)
	end = min(end, endgameMax)
	i := 0
	if left > end {
	turns:
		for {
			for i = range perms {
				s := perms[i].Skip
				c := cursors[i]
				if table[c] != empty {
					c = probe(table, wrap(c+s, m), s)
				}
				table[c] = S(i)
				cursors[i] = wrap(c+s, m)
				if left--; left == end {
					i++
					break turns
				}
			}
		}
	}
	if left == 0 {
		return
	}
	// The endgame, from backend i on.
	var f filler[S]
	f.table, f.perms, f.cursors = table, perms, cursors
	f.left, f.end = left, end
	for {
		for ; i < len(perms); i++ {
			if f.turn(i) {
				return
			}
		}
		i = 0
	}
}

// fillWeighted is fill with weighted turns (see NewWeighted); nil weights
// means equal weights, which is fill itself. Its two schedules take the
// same turns in the same order, and it picks the one expected to be
// cheaper (weightedSchedule): scanning every backend every round costs n
// checks a round for about M·W/Σw rounds (W the largest weight), which is
// small unless the weights are skewed; the queue costs at most O(log n) a
// turn for M turns whatever the skew (a sort of a short bucket for
// backends due within calendarLen rounds, a heap operation for the
// others). Measured (BenchmarkWeightedSchedule; docs/notes/weighted.md),
// the queue takes 1.3–2.1× the scan's CPU time on weights 1–3, 1–10 and
// 1–100 at N = 100 and 1000, M = 65537 and 655373; near the threshold,
// the scan is between 1.2× slower and 1.3× faster than the queue,
// depending on the weights' spread.
func fillWeighted[S Slot](table []S, perms []Permutation, weights, cursors []uint32) {
	fillWithEndgame(table, perms, weights, cursors, endgameAt(len(table)))
}

// fillWithEndgame is fillWeighted with the endgame starting once end slots
// are left empty (see filler): the entry point for tests, which vary end.
func fillWithEndgame[S Slot](table []S, perms []Permutation, weights, cursors []uint32, end int) {
	if weights == nil {
		fillEqual(table, perms, cursors, end)
		return
	}
	if maxWeight, scan := weightedSchedule(len(table), weights); scan {
		fillWeightedScan(table, perms, weights, cursors, maxWeight, end)
	} else {
		fillWeightedQueue(table, perms, weights, cursors, maxWeight, end)
	}
}

// weightedSchedule returns the largest of weights, not all 0, and whether
// fillWeighted takes the round scan for them with m slots rather than the
// queue: while the scan's n checks a round, over the rounds the heaviest
// backend needs, are at most 2·m·⌈log₂(n+1)⌉. It takes O(n) time.
func weightedSchedule(m int, weights []uint32) (maxWeight uint64, scan bool) {
	var sum uint64
	for _, w := range weights {
		maxWeight = max(maxWeight, uint64(w))
		sum += uint64(w)
	}
	mm, n := uint64(m), uint64(len(weights))
	rounds := mm*maxWeight/sum + 2 // rounds needed, give or take one
	return maxWeight, n*rounds <= 2*mm*uint64(bits.Len64(n))
}

// A filler takes the turns of one fill. A turn claims, for its backend,
// the first empty slot at or after the backend's cursor in its sequence.
// While empty slots are plentiful a turn finds it by probing the sequence
// (probe); once at most end are left, a turn computes it instead from the
// list of empty slots (nearest): the last few empty slots, which take a
// probed turn about M/E probes each, would otherwise take half of all
// probes. Both give the same slot, so neither the table nor the cursors
// depend on end; only the speed does. end is at most endgameMax: endgameAt
// in production, anything from 0 (no endgame) up in tests.
type filler[S Slot] struct {
	table   []S
	perms   []Permutation
	cursors []uint32
	left    int  // empty slots
	end     int  // left at which the endgame starts
	listed  bool // whether empties lists the empty slots: the endgame has started
	empties [endgameMax]uint32
}

// endgameMax is the most empty slots the endgame lists. The list lives in
// the filler, on the stack (8 KiB), so that Fill does not allocate.
const endgameMax = 2048

// endgameAt returns how many empty slots are left when the endgame of a fill
// of m slots starts: 1.5·√m, at most endgameMax. A probed turn with E slots
// empty costs about M/E probes, an endgame turn E multiply-adds and one
// modular inverse: the two costs meet near E = √M. Measured, 1.5·√M is a
// little faster than √M, 2·√M about the same, 3·√M slower. It takes
// constant time.
func endgameAt(m int) int {
	return min(3*isqrt(m)/2, endgameMax)
}

// isqrt returns ⌊√n⌋ for 0 ≤ n < 2^32.
func isqrt(n int) int {
	r := uint64(0)
	for b := uint64(1) << 15; b > 0; b >>= 1 {
		if (r+b)*(r+b) <= uint64(n) {
			r += b
		}
	}
	return int(r)
}

// reset prepares f to fill table: every slot empty, every cursor at its
// backend's Offset, the endgame to start once end slots are left empty
// (at most endgameMax; a larger end counts as endgameMax). It takes
// O(M + N) time.
func (f *filler[S]) reset(table []S, perms []Permutation, cursors []uint32, end int) {
	empty := ^S(0)
	for i := range table {
		table[i] = empty
	}
	for i, p := range perms {
		cursors[i] = p.Offset
	}
	f.table, f.perms, f.cursors = table, perms, cursors
	f.left = len(table)
	f.end = min(end, endgameMax)
	f.listed = false
}

// turn lets backend i take one turn: it claims the first empty slot at or
// after cursors[i] in the backend's sequence and moves the cursor past it.
// turn reports whether that was the last empty slot.
func (f *filler[S]) turn(i int) bool {
	s := f.perms[i].Skip
	m := uint32(len(f.table))
	c := f.cursors[i]
	if f.left > f.end {
		if f.table[c] != ^S(0) {
			c = probe(f.table, wrap(c+s, m), s)
		}
	} else {
		if !f.listed {
			listEmpty(&f.empties, f.table)
			f.listed = true
		}
		// f.left slots are empty, the first f.left of f.empties.
		empties := f.empties[:f.left]
		j := nearest(empties, c, s, m)
		c = empties[j]
		empties[j] = empties[f.left-1]
	}
	f.table[c] = S(i)
	f.cursors[i] = wrap(c+s, m)
	f.left--
	return f.left == 0
}

// wrap returns x mod m for x < 2m, without a branch: which way a branch
// would go depends on the skip and is a coin toss for the predictor.
func wrap(x, m uint32) uint32 {
	y := x - m
	return y + m&uint32(int32(y)>>31)
}

// probe returns the first empty slot of the sequence c, c+s, c+2s, ...
// (mod M = len(table)), which must hold one. It checks four positions a
// step, computed independently of one another, so that their loads
// overlap and one branch decides four probes.
func probe[S Slot](table []S, c, s uint32) uint32 {
	m := uint32(len(table))
	s2 := wrap(s+s, m)
	s3 := wrap(s2+s, m)
	s4 := wrap(s3+s, m)
	for {
		a, b, d, e := table[c], table[wrap(c+s, m)], table[wrap(c+s2, m)], table[wrap(c+s3, m)]
		var j int
		if unsafe.Sizeof(a) == 2 {
			j = firstEmpty16(uint16(a), uint16(b), uint16(d), uint16(e))
		} else {
			j = firstEmpty(a, b, d, e)
		}
		if j < 4 {
			steps := [4]uint32{0, s, s2, s3}
			return wrap(c+steps[j&3], m)
		}
		c = wrap(c+s4, m)
	}
}

// firstEmpty returns the position (0 to 3) of the first empty slot among
// a, b, c and d, or 4 if none is empty, without a branch.
func firstEmpty[S Slot](a, b, c, d S) int {
	empty := ^S(0)
	return bits.TrailingZeros32(b2u(a == empty) | b2u(b == empty)<<1 | b2u(c == empty)<<2 | b2u(d == empty)<<3 | 16)
}

// firstEmpty16 is firstEmpty for 2-byte slots. It packs them into four
// 16-bit lanes, zero where a slot is empty (0xFFFF); the lowest lane the
// zero-lane test flags is the first zero lane.
func firstEmpty16(a, b, c, d uint16) int {
	const lo, hi = 0x0001_0001_0001_0001, 0x8000_8000_8000_8000
	w := ^(uint64(a) | uint64(b)<<16 | uint64(c)<<32 | uint64(d)<<48)
	return bits.TrailingZeros64((w-lo)&^w&hi) >> 4
}

// b2u returns 1 for true and 0 for false.
func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// listEmpty writes the empty slots of table to dst, in slot order. There
// must be at most len(dst).
func listEmpty[S Slot](dst *[endgameMax]uint32, table []S) {
	empty := ^S(0)
	n := 0
	for s, v := range table {
		if v == empty {
			dst[n] = uint32(s)
			n++
		}
	}
}

// nearest returns the index in empties of the slot that comes first in the
// sequence c, c+s, c+2s, ... (mod m), for a prime m, c < m and 0 < s < m.
//
// Slot e comes k = (e−c)·s⁻¹ mod m steps after c. With w = ⌊s⁻¹·2^64/m⌋+1
// and d = e−c+m in [1, 2m), the low 64 bits of d·w are k·2^64/m + d·θ for
// some θ in (0, 1]: k's position as a 64-bit fraction of m, off by less
// than 2m < 2^26, while consecutive k lie 2^64/m > 2^39 apart. So the upper
// 32 bits of d·w order the empty slots by k, and the lower 32 can carry
// the slot's index: one multiply-add and a min per empty slot, no division.
// Two running minimums halve the chain of compares the loop waits on.
func nearest(empties []uint32, c, s, m uint32) int {
	w, _ := bits.Div64(uint64(inverse(s, m)), 0, uint64(m))
	w++
	base := uint64(m-c) * w // d·w = e·w + (m−c)·w
	const high = math.MaxUint64 &^ math.MaxUint32
	b0, b1 := uint64(math.MaxUint64), uint64(math.MaxUint64)
	j := 0
	for ; j+2 <= len(empties); j += 2 {
		b0 = min(b0, (uint64(empties[j])*w+base)&high|uint64(j))
		b1 = min(b1, (uint64(empties[j+1])*w+base)&high|uint64(j+1))
	}
	if j < len(empties) {
		b0 = min(b0, (uint64(empties[j])*w+base)&high|uint64(j))
	}
	return int(uint32(min(b0, b1)))
}

// inverse returns s⁻¹ mod m for a prime m and 0 < s < m, by the extended
// Euclidean algorithm.
func inverse(s, m uint32) uint32 {
	r0, r1 := m, s
	t0, t1 := int32(0), int32(1) // r ≡ t·s (mod m); |t| ≤ m
	for r1 != 0 {
		q := r0 / r1
		r0, r1 = r1, r0-q*r1
		t0, t1 = t1, t0-int32(q)*t1
	}
	if t0 < 0 {
		t0 += int32(m)
	}
	return uint32(t0)
}

// fillWeightedScan is the weighted schedule as NewWeighted states it:
// every round visits every backend in index order. The endgame starts once
// end slots are left empty (see filler).
func fillWeightedScan[S Slot](table []S, perms []Permutation, weights, cursors []uint32, maxWeight uint64, end int) {
	var f filler[S]
	f.reset(table, perms, cursors, end)
	t := make([]uint64, len(perms)) // t_i
	for k := uint64(1); ; k++ {
		for i := range perms {
			if w := uint64(weights[i]); w == 0 || k*w < t[i] {
				continue
			}
			t[i] += maxWeight
			if f.turn(i) {
				return
			}
		}
	}
}

// never is a heap key that sorts after every real one.
const never = math.MaxUint64

// fillWeightedQueue takes turns in order of (round, backend index): the
// scan's order, without visiting backends that are not due. A backend due
// within the next calendarLen rounds waits in that round's bucket, a list
// threaded through link; one due later waits in a binary heap of packed
// keys round<<32 | index. At the start of a round its bucket and the heap
// entries due then become the round's list, sorted by index: a bucket
// holds few backends, and often already in order, since each round's
// turns go in index order. The endgame starts once end slots are left
// empty (see filler).
func fillWeightedQueue[S Slot](table []S, perms []Permutation, weights, cursors []uint32, maxWeight uint64, end int) {
	var f filler[S]
	f.reset(table, perms, cursors, end)
	// turned[i] is t_i / W: how many turns backend i has taken.
	turned := make([]uint32, len(perms))
	link := make([]int32, len(perms))
	var first, last [calendarLen]int32 // bucket lists, -1 when empty
	for b := range first {
		first[b] = -1
	}
	// Every backend not drained is due in round 1.
	cur := make([]uint32, 0, len(perms))
	for i := range perms {
		if weights[i] > 0 {
			cur = append(cur, uint32(i))
		}
	}
	// The heap is heap[:n], and the sentinel follows the last entry.
	heap := make([]uint64, len(perms)+1)
	heap[0] = never
	n := 0
	m := uint64(len(table))
	for round := uint64(1); ; round++ {
		if round > 1 {
			cur = cur[:0]
			b := round % calendarLen
			for i := first[b]; i >= 0; i = link[i] {
				cur = append(cur, uint32(i))
			}
			first[b] = -1
			for heap[0]>>32 == round {
				cur = append(cur, uint32(heap[0]))
				n--
				heap[0], heap[n] = heap[n], never
				siftDown(heap, n)
			}
			if !slices.IsSorted(cur) {
				slices.Sort(cur)
			}
		}
		for _, i := range cur {
			if f.turn(int(i)) {
				return
			}
			// The next round k > round with k·w_i ≥ t_i = turned·W.
			// No round beyond M is ever reached: the heaviest backend
			// claims a slot every round.
			turned[i]++
			w := uint64(weights[i])
			k := max(round+1, (uint64(turned[i])*maxWeight+w-1)/w)
			switch {
			case k-round < calendarLen:
				b := k % calendarLen
				link[i] = -1
				if first[b] < 0 {
					first[b] = int32(i)
				} else {
					link[last[b]] = int32(i)
				}
				last[b] = int32(i)
			case k <= m:
				heap[n] = k<<32 | uint64(i)
				n++
				heap[n] = never
				siftUp(heap, n-1)
			}
		}
	}
}

// calendarLen is how many rounds ahead fillWeightedQueue keeps buckets
// for. The bucket heads live on the stack (4 KiB).
const calendarLen = 512

// siftUp restores the min-heap order of h after h[p] shrank.
func siftUp(h []uint64, p int) {
	x := h[p]
	for p > 0 {
		q := (p - 1) / 2
		if h[q] <= x {
			break
		}
		h[p] = h[q]
		p = q
	}
	h[p] = x
}

// siftDown restores the min-heap order of h[:n] after h[0] grew, in
// O(log n) steps. h[n] must hold the sentinel ^uint64(0), so that every
// node has two children to compare and no step checks for a missing right
// child. The smaller child is picked by a compare and a conditional jump
// (go1.26 on amd64 emits no CMOV for it). The heap holds only backends due
// more than calendarLen rounds ahead.
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
