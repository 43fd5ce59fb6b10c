package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"

	"github.com/maglevlb/maglev"
	"github.com/zeebo/xxh3"
)

const (
	// DefaultVnodes is the number of points per backend this package
	// recommends, chosen from measured balance: with 256 points the most
	// loaded of 1,000 backends carries about 1.2 times the mean share, of
	// 100 backends 1.15 times.
	//
	// A backend's share is the sum of vnodes arcs, so the shares' spread
	// (standard deviation over mean) is 1/√vnodes, whatever the backend
	// count N, and the most loaded of N backends sits about 3 spreads above
	// the mean at N = 1,000: 1 + 3.2/√vnodes, which is 1.2 at 256. The
	// measurement, by TestBalance with its -balance flag: backends
	// "10.<s>.<i/256>.<i%256>:80" for name sets s = 0..19, XXH3, exact
	// shares (Shares); the peak share over the mean share 1/N, and the
	// spread, each the median over the 20 sets:
	//
	//	vnodes  peak/mean N=10  N=100  N=1000   spread at N=1000
	//	     5            1.91   2.51    2.95   44.8%
	//	    50            1.23   1.39    1.51   14.1%
	//	   100            1.15   1.28    1.35    9.9%
	//	   160            1.13   1.23    1.27    7.8%
	//	   256            1.09   1.15    1.21    6.2%
	//	   500            1.07   1.11    1.15    4.5%
	//	  1000            1.05   1.08    1.11    3.2%
	//
	// The seed's 5 points leave the busiest of 1,000 backends with three
	// times its share. Maglev at its recommended table size (M > 100·N)
	// keeps every backend within about 1% of the mean; to keep the busiest
	// of 1,000 backends within 3%, a ring would need (3.2/0.03)² ≈ 11,000
	// points per backend. 256 points take 3 KiB per backend, 12 bytes a
	// point.
	DefaultVnodes = 256

	// MaxPoints is the largest number of points a ring may have: 2^24, so
	// that a ring takes at most 192 MiB (12 bytes a point) and point counts
	// fit comfortably in an int on 32-bit platforms. New rejects a backend
	// count times vnodes above it.
	MaxPoints = 1 << 24
)

// Errors. Every error New and NewWithPositions return has text starting
// with "ring: " and wraps one sentinel for errors.Is: ErrVnodes or
// ErrTooManyPoints below, or, for bad names, maglev.ErrEmptyName or
// maglev.ErrDuplicateName, the same sentinels the maglev package returns,
// so that one check serves both packages.
var (
	// ErrVnodes means the number of points per backend is out of range:
	// below 1 or above MaxPoints.
	ErrVnodes = errors.New("ring: vnodes out of range")

	// ErrNoPositions means a backend given to NewWithPositions has no
	// positions: a backend with no point could never be looked up.
	ErrNoPositions = errors.New("ring: backend has no positions")

	// ErrTooManyPoints means the ring would have more than MaxPoints
	// points.
	ErrTooManyPoints = errors.New("ring: more than MaxPoints points")
)

// nameError is an error with this package's text that wraps one of the
// maglev package's name sentinels.
type nameError struct {
	msg string
	err error
}

func (e *nameError) Error() string { return e.msg }
func (e *nameError) Unwrap() error { return e.err }

// A Ring is an immutable consistent-hash ring: a sorted circle of points,
// each owned by one backend. Build one with New, or with NewWithPositions
// to place the points by hand. A Ring is safe for concurrent use by
// multiple goroutines; to change membership, build a new Ring and publish
// it, for example with atomic.Pointer.
type Ring struct {
	pos      []uint64 // point positions, ascending; ties by backend name, then j
	idx      []uint32 // backend index of each point, parallel to pos
	backends []string // sorted, distinct
	vnodes   int      // points per backend, or 0 if placed by NewWithPositions
	xxh3     bool     // h is maglev.XXH3(), called directly on lookups
	h        maglev.Hasher

	backOnce sync.Once // builds back, on the first Candidates
	back     []uint32  // per point, see backDistances
}

// New builds the ring of vnodes points per backend, hashing with h (nil
// means maglev.XXH3()). Point j (0 ≤ j < vnodes) of the backend called name
// is at H(le64(j) + name): the hash of the 8-byte little-endian encoding of
// j followed by the bytes of name. The ring depends only on the set of
// backend names, vnodes and h: not on the order of backends, nor on the
// platform.
//
// An empty backend list gives a valid, empty ring whose Lookup returns "".
// New returns an error wrapping ErrVnodes if vnodes is not in 1..MaxPoints,
// ErrTooManyPoints if len(backends)·vnodes exceeds MaxPoints, and
// maglev.ErrEmptyName or maglev.ErrDuplicateName for bad names.
//
// New hashes every point and radix-sorts them: O(P) time for P =
// len(backends)·vnodes points, and 12 bytes a point (24 while building).
func New(backends []string, vnodes int, h maglev.Hasher) (*Ring, error) {
	if vnodes < 1 || vnodes > MaxPoints {
		return nil, fmt.Errorf("%w: %d, want 1..%d", ErrVnodes, vnodes, MaxPoints)
	}
	if len(backends) > MaxPoints/vnodes {
		return nil, fmt.Errorf("%w: %d backends × %d vnodes", ErrTooManyPoints, len(backends), vnodes)
	}
	names := slices.Clone(backends)
	slices.Sort(names)
	if err := checkNames(names); err != nil {
		return nil, err
	}
	r := newRing(names, h)
	r.vnodes = vnodes
	r.place(func(int) int { return vnodes })
	return r, nil
}

// NewWeighted builds the ring for weighted backends, hashing with h (nil
// means maglev.XXH3()): vnodes points per unit of weight, so backend i gets
// vnodes·w_i points, in exact proportion to its weight, and with every
// weight 1 the ring is New's. Point j of a backend is where New places it,
// at H(le64(j) + name), so a backend whose weight changes keeps its first
// points, and one joining or leaving moves no other backend's points.
// Give weights in their smallest ratio (divide them by their greatest
// common divisor across every membership they will have): weights 100 and
// 200 cost 100 times the points of 1 and 2 for the same shares. Backends of
// weight 0 get no points and are left out: they are not among Backends,
// and Lookup and Candidates never name them. The ring depends only on the
// set of backends, their weights, vnodes and h.
//
// Errors are New's, with ErrTooManyPoints when vnodes·Σw exceeds
// MaxPoints. NewWeighted takes O(P) time for P points, as New.
func NewWeighted(backends []maglev.Backend, vnodes int, h maglev.Hasher) (*Ring, error) {
	if vnodes < 1 || vnodes > MaxPoints {
		return nil, fmt.Errorf("%w: %d, want 1..%d", ErrVnodes, vnodes, MaxPoints)
	}
	// Every name is checked, those of weight 0 included, as maglev.NewWeighted
	// checks them; then the weight-0 backends are left out.
	all := slices.Clone(backends)
	slices.SortFunc(all, func(a, b maglev.Backend) int { return strings.Compare(a.Name, b.Name) })
	names := make([]string, len(all))
	for i, b := range all {
		names[i] = b.Name
	}
	if err := checkNames(names); err != nil {
		return nil, err
	}
	live := all[:0]
	names = names[:0]
	total := uint64(0)
	for _, b := range all {
		if b.Weight > 0 {
			live = append(live, b)
			names = append(names, b.Name)
			// Each term is below 2^24 · 2^32 and there are fewer than 2^24 of
			// them before the sum passes MaxPoints: no overflow.
			if total += uint64(vnodes) * uint64(b.Weight); total > MaxPoints {
				return nil, fmt.Errorf("%w: vnodes %d times the weights", ErrTooManyPoints, vnodes)
			}
		}
	}
	r := newRing(names, h)
	r.vnodes = vnodes
	r.place(func(i int) int { return vnodes * int(live[i].Weight) })
	return r, nil
}

// place puts points(i) points for each backend i of r at New's positions,
// point j of backend name at H(le64(j) + name), and sorts them.
func (r *Ring) place(points func(i int) int) {
	total, longest := 0, 0
	for i, name := range r.backends {
		total += points(i)
		longest = max(longest, len(name))
	}
	if total == 0 {
		return
	}
	buf := make([]byte, 8+longest)
	pos := make([]uint64, 0, total)
	idx := make([]uint32, 0, total)
	for i, name := range r.backends {
		key := buf[:8+copy(buf[8:], name)]
		for j := range points(i) {
			binary.LittleEndian.PutUint64(key, uint64(j))
			pos = append(pos, r.hash(key))
			idx = append(idx, uint32(i))
		}
	}
	r.pos, r.idx = sortPoints(pos, idx)
}

// NewWithPositions builds a ring whose points are at the given positions,
// for tests and for callers that place points themselves: backend name owns
// one point at each of positions[name], and its j-th position is its point
// j, which orders equal positions of one backend. h (nil means XXH3) hashes
// keys for Lookup and LookupBytes; LookupHash does not use it.
//
// NewWithPositions returns an error wrapping maglev.ErrEmptyName for an
// empty name, ErrNoPositions for a backend with no positions, and
// ErrTooManyPoints for more than MaxPoints positions in all. It takes
// O(P) time for P positions and does not retain the map or its slices.
func NewWithPositions(positions map[string][]uint64, h maglev.Hasher) (*Ring, error) {
	names := make([]string, 0, len(positions))
	for name := range positions {
		names = append(names, name)
	}
	slices.Sort(names)
	if err := checkNames(names); err != nil {
		return nil, err
	}
	total := 0
	for _, name := range names {
		switch n := len(positions[name]); {
		case n == 0:
			return nil, fmt.Errorf("%w: %q", ErrNoPositions, name)
		case n > MaxPoints-total:
			return nil, fmt.Errorf("%w: more than %d positions", ErrTooManyPoints, MaxPoints)
		default:
			total += n
		}
	}
	r := newRing(names, h)
	pos := make([]uint64, 0, total)
	idx := make([]uint32, 0, total)
	for i, name := range names {
		pos = append(pos, positions[name]...)
		for range positions[name] {
			idx = append(idx, uint32(i))
		}
	}
	r.pos, r.idx = sortPoints(pos, idx)
	return r, nil
}

// checkNames reports whether sorted names are non-empty and distinct.
func checkNames(sorted []string) error {
	if len(sorted) > 0 && sorted[0] == "" {
		return &nameError{"ring: empty backend name", maglev.ErrEmptyName}
	}
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return &nameError{fmt.Sprintf("ring: duplicate backend name: %q", sorted[i]), maglev.ErrDuplicateName}
		}
	}
	return nil
}

func newRing(sorted []string, h maglev.Hasher) *Ring {
	if h == nil {
		h = maglev.XXH3()
	}
	// Comparing interfaces is safe even if h's dynamic type is not
	// comparable: values of different dynamic types are simply unequal.
	return &Ring{backends: sorted, xxh3: h == maglev.XXH3(), h: h}
}

// sortPoints sorts points, given as parallel slices of positions and
// backend indices in the order (backend name, j), by position. The sort is
// stable, so equal positions stay ordered by name, then j. It is a
// least-significant-digit radix sort of eight 8-bit digits, skipping any
// digit all points share: O(P) time and P points of scratch. It returns the
// sorted slices, which are either its arguments or the scratch.
func sortPoints(pos []uint64, idx []uint32) ([]uint64, []uint32) {
	n := len(pos)
	if n < 2 {
		return pos, idx
	}
	var counts [8][256]int // counts[d][b]: points whose digit d is b
	for _, p := range pos {
		for d := range counts {
			counts[d][byte(p>>(8*d))]++
		}
	}
	tmpPos, tmpIdx := make([]uint64, n), make([]uint32, n)
	for d := range counts {
		c := &counts[d]
		shift := 8 * d
		if c[byte(pos[0]>>shift)] == n {
			continue
		}
		sum := 0
		for b, k := range c {
			c[b], sum = sum, sum+k
		}
		for k, p := range pos {
			b := byte(p >> shift)
			tmpPos[c[b]] = p
			tmpIdx[c[b]] = idx[k]
			c[b]++
		}
		pos, tmpPos = tmpPos, pos
		idx, tmpIdx = tmpIdx, idx
	}
	return pos, idx
}

// Len returns the number of backends.
func (r *Ring) Len() int { return len(r.backends) }

// NumPoints returns the number of points on the ring.
func (r *Ring) NumPoints() int { return len(r.pos) }

// Vnodes returns the number of points per backend the ring was built with
// (per unit of weight, for NewWeighted), or 0 for a ring built by
// NewWithPositions.
func (r *Ring) Vnodes() int { return r.vnodes }

// Hasher returns the ring's hasher.
func (r *Ring) Hasher() maglev.Hasher { return r.h }

// Backends returns a copy of the backend names in ring order: sorted by
// byte order, so that backend index i (see Point and Shares) names
// Backends()[i].
func (r *Ring) Backends() []string { return slices.Clone(r.backends) }

// A Point is one point on a ring: its position and the index, in Backends
// order, of the backend that owns it.
type Point struct {
	Pos     uint64
	Backend int
}

// AppendPoints appends the ring's points in ring order (ascending position;
// equal positions by backend name, then j) to dst and returns the extended
// slice. It is O(P) and allocates only to grow dst.
func (r *Ring) AppendPoints(dst []Point) []Point {
	dst = slices.Grow(dst, len(r.pos))
	for k, p := range r.pos {
		dst = append(dst, Point{Pos: p, Backend: int(r.idx[k])})
	}
	return dst
}

// Lookup returns the backend that owns key: the owner of the first point
// whose position is at least H(key), or of the first point on the ring if
// there is none. It returns "" if the ring has no backends. Lookup is
// O(log P) for P points and does not allocate.
func (r *Ring) Lookup(key string) string {
	return r.LookupHash(r.hashString(key))
}

// LookupBytes is Lookup for a key held in a byte slice.
func (r *Ring) LookupBytes(key []byte) string {
	return r.LookupHash(r.hash(key))
}

// LookupHash returns the owner of hash value x, for callers that hash keys
// themselves (with the ring's Hasher, for Lookup's answers): the backend of
// the first point whose position is ≥ x, wrapping to the first point past
// the end. It returns "" if the ring has no backends. LookupHash is
// O(log P) for P points and does not allocate.
func (r *Ring) LookupHash(x uint64) string {
	if len(r.pos) == 0 {
		return ""
	}
	return r.backends[r.idx[search(r.pos, x)]]
}

// search returns the index of the point that owns x: the first index whose
// position is ≥ x, or 0 if every position is below x. pos must be sorted
// and not empty.
func search(pos []uint64, x uint64) int {
	var i int
	if len(pos) <= bigRing {
		i = lowerBoundBranchless(pos, x)
	} else {
		i = lowerBoundBranchy(pos, x)
	}
	if i == len(pos) {
		i = 0
	}
	return i
}

// bigRing is the point count above which search switches from the
// branchless to the branchy lower bound: 2^16 points, 512 KiB of positions,
// about where they stop fitting in a core's L2 cache. Below it the branchless
// loop is about twice as fast, since random keys make every branch a coin
// toss; above it cache misses dominate, and the branchy loop is faster
// because the CPU speculates down the predicted side and so starts the next
// miss early, where the branchless loop waits for each load in turn.
// BenchmarkSearch measures both.
const bigRing = 1 << 16

// lowerBoundBranchless returns the first index whose position is ≥ x, or
// len(pos) if there is none. pos must be sorted and not empty. It halves
// the candidate range [base, base+n] with no data-dependent branch: the
// comparison's borrow (SUB, SBB on amd64) masks the step.
func lowerBoundBranchless(pos []uint64, x uint64) int {
	base, n := 0, len(pos)
	for n > 1 {
		half := n >> 1
		_, below := bits.Sub64(pos[base+half-1], x, 0) // 1 if pos < x
		base += half & -int(below)
		n -= half
	}
	_, below := bits.Sub64(pos[base], x, 0)
	return base + int(below)
}

// lowerBoundBranchy is lowerBoundBranchless as a textbook binary search.
func lowerBoundBranchy(pos []uint64, x uint64) int {
	lo, hi := 0, len(pos)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if pos[mid] < x {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// hashString hashes key with the ring's hasher, calling XXH3 directly
// rather than through the interface.
func (r *Ring) hashString(key string) uint64 {
	if r.xxh3 {
		return xxh3.HashString(key)
	}
	return r.h.HashString(key)
}

// hash is hashString for a byte slice.
func (r *Ring) hash(key []byte) uint64 {
	if r.xxh3 {
		return xxh3.Hash(key)
	}
	return r.h.Hash(key)
}
