// Package bounded places requests on a maglev.Table's backends with
// bounded loads: each request goes where the table sends its key unless
// that backend already holds more than its share of the requests in
// flight, and then to the key's next candidate.
//
// It is a package of its own because it is a different kind of thing from
// the tables: a [maglev.Table] is an immutable value, computed from the
// backend set, M and the hasher alone, the same in every process; a
// [Picker] is mutable state (the requests in flight in one process), with
// a lock for publishing tables. The tables stay values; the counting lives
// here, beside them, and reads them only through maglev's API.
package bounded

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/maglevlb/maglev"
)

// ErrBalanceFactor means a balance factor passed to New is not 0 (off) or
// a finite number of at least 1.
var ErrBalanceFactor = errors.New("bounded: balance factor must be 0 (off) or a finite number ≥ 1")

// A Picker picks backends from a maglev.Table with bounded loads: consistent
// hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam, SODA
// 2018). Its bound is the one Envoy's hash_balance_factor sets (a factor
// F here is hash_balance_factor F×100 there); where a full backend's key
// goes next differs: Envoy probes hosts in a pseudo-random order seeded by
// the hash, a Picker follows the key's Candidates. The two agree on every
// key whose first choice has room, not on where a spilled key lands. It counts the requests in
// flight on each backend, and sends a key to the first of its Candidates
// that has room: whose in-flight count is below its capacity
//
//	ceil(factor × L × w_i / Σw)
//
// where L is the number of requests in flight through the Picker,
// counting the one being placed, w_i the backend's weight (1 for a table
// built by New) and Σw the table's total weight. A hot key thus fills its
// own backend up to factor times that backend's fair share of the load,
// then spills to its second choice, and so on; keys whose backends have
// room go exactly where Lookup sends them. With factor 0, bounded loads are
// off: every request goes where Lookup sends it, and nothing is counted.
//
// Capacities are computed in float64, as math.Ceil(s_i × L) with s_i =
// factor × w_i / Σw rounded once when the table is published.
//
// The guarantee: Acquire assigns a request to backend i only by raising
// i's in-flight count from c to c+1, in one atomic step, where c is below
// i's capacity at an L read during that Acquire; so at the moment a
// request is assigned, its backend holds at most its capacity, that is at
// most factor × L × w_i/Σw + 1 requests (the +1 is the ceiling's). The
// capacities of a table's backends add up to at least factor × L ≥ L,
// more than the requests that hold them, so sequential Acquires always
// find room. Concurrent ones, whose
// counts move while they look, can find every candidate full: an Acquire
// that finds no room in two passes over the candidates takes the key's
// first candidate regardless, and counts it in Stats.Forced.
//
// A Picker is safe for concurrent use by multiple goroutines. Acquire and
// Release take no lock and do not allocate; Update and With take a lock
// that only other Updates and Withs wait for. In-flight counts are kept per
// backend name, so a backend that stays in the table across an Update
// keeps its count: a lease taken before the swap is released into the
// count the new table sees, and no request is lost or counted twice. A
// backend that leaves keeps its count while leases on it are outstanding,
// and the first Update (or With) that finds it at zero forgets it; L counts
// every lease not yet released, on any table. (An Acquire on a table that
// has since been replaced can still place a request on a forgotten count;
// should the backend return, its new count starts without that request.)
//
// A caller that keeps its own snapshot of the table (with health, URLs or
// connections beside it) should keep b.With(t) in the same snapshot: each
// Acquire then places the request on exactly the table the caller routes
// by, with no second table to reconcile.
type Picker struct {
	factor float64
	state  atomic.Pointer[state]
	c      *counts // shared by every Picker made from this one by With
}

// counts are the counts a Picker shares with those With makes.
type counts struct {
	_       [64]byte     // keeps total off the cache lines of other objects that Acquire reads
	total   atomic.Int64 // L: leases not yet released
	_       [56]byte
	spilled atomic.Uint64    // Stats.Spilled
	forced  atomic.Uint64    // Stats.Forced
	mu      sync.Mutex       // serializes bind
	gen     uint64           // bind's count, under mu
	byName  map[string]*load // counts of the latest table's backends, and of departed ones still in flight
}

// state is one published table with its backends' counts.
type state struct {
	table *maglev.Table
	off   *maglev.Table // table, when bounded loads are off and it has slot owners: Acquire is Lookup
	loads []*load       // by table index
	share []float64     // by table index: factor × w_i / Σw
}

// A load is one backend's counts, alone on its cache line so that
// goroutines counting different backends do not contend.
type load struct {
	inflight atomic.Int64
	spilled  atomic.Uint64 // requests it was the first candidate of, placed elsewhere
	total    *atomic.Int64 // L, in the counts this load belongs to
	seen     uint64        // the last bind whose table has this backend, under counts.mu
	_        [32]byte
}

// New returns a bounded-load picker over table t with the given
// balance factor: 0 turns bounded loads off (every pick is Lookup's), and
// otherwise the factor must be at least 1; Envoy's users commonly set 1.25.
// A nil t is an empty table: every Acquire returns a lease with Index -1
// until Update publishes one with backends. New returns an error
// wrapping ErrBalanceFactor for a factor that is NaN, infinite, negative,
// or in (0, 1). It is O(N) and allocates O(N).
func New(t *maglev.Table, factor float64) (*Picker, error) {
	if factor != 0 && !(factor >= 1 && factor <= math.MaxFloat64) {
		return nil, fmt.Errorf("%w: %v", ErrBalanceFactor, factor)
	}
	b := &Picker{factor: factor, c: &counts{byName: map[string]*load{}}}
	b.Update(t)
	return b, nil
}

// Factor returns the balance factor; 0 means bounded loads are off.
func (b *Picker) Factor() float64 { return b.factor }

// Table returns the table Acquire picks from: the last one published.
func (b *Picker) Table() *maglev.Table { return b.state.Load().table }

// Update is for a caller that shares one Picker and keeps no snapshot of
// its own: it swaps the table in place. A caller that keeps its table in a
// snapshot with other state (health, URLs, connections), as httpmaglev and
// grpcmaglev do, uses With instead, so that each snapshot's picks are on
// exactly its table. Both share the same counts.
//
// Update publishes t (nil for an empty table) as the table later Acquires
// pick from. Backends of t that were in the previous table keep their
// in-flight counts; leases taken from the previous table stay valid and
// are released into those counts. Update is O(N) for N backends, old and
// new, allocates O(N), and is safe to call concurrently with Acquire,
// Release and other Updates.
func (b *Picker) Update(t *maglev.Table) {
	b.c.mu.Lock()
	defer b.c.mu.Unlock()
	b.state.Store(b.c.bind(b.factor, t))
}

// With returns a Picker that picks from t (nil for an empty table) and
// shares b's counts: a backend's in-flight count, L, the spill counters
// and Stats are one for b, for the Picker With returns and for any other
// made from either, so a request is counted once whichever of them placed
// it. b itself keeps its table, but With, like Update, makes t the newest
// one: the first Update or With that finds a backend absent from its table
// with nothing in flight forgets that backend's count, and b's table then
// counts as replaced (an Acquire through b on that backend falls under the
// caveat in Picker's doc). With is O(N), allocates O(N), and is safe to
// call concurrently with Acquire, Release and Update.
func (b *Picker) With(t *maglev.Table) *Picker {
	b.c.mu.Lock()
	defer b.c.mu.Unlock()
	nb := &Picker{factor: b.factor, c: b.c}
	nb.state.Store(b.c.bind(b.factor, t))
	return nb
}

// bind returns t's state with the counts of its backends, creating those
// not yet counted, and forgets departed backends with nothing in flight.
// It is O(N) for N backends, old and new: each count records the last
// bind that found its backend, so that finding the departed ones is one
// pass. c.mu must be held.
func (c *counts) bind(factor float64, t *maglev.Table) *state {
	st := &state{table: t}
	c.gen++
	if t != nil {
		if factor == 0 && t.LookupHashIndex(0) >= 0 { // every slot has an owner, or none has
			st.off = t
		}
		names, weights := t.Backends(), t.Weights()
		st.loads = make([]*load, len(names))
		st.share = make([]float64, len(names))
		var sum float64
		for _, w := range weights {
			sum += float64(w)
		}
		for i, name := range names {
			l := c.byName[name]
			if l == nil {
				l = &load{total: &c.total}
				c.byName[name] = l
			}
			l.seen = c.gen
			st.loads[i] = l
			if sum > 0 {
				st.share[i] = factor * float64(weights[i]) / sum
			}
		}
	}
	for name, l := range c.byName {
		if l.seen != c.gen && l.inflight.Load() == 0 {
			delete(c.byName, name)
		}
	}
	return st
}

// A Lease is one request placed by a Picker: where it goes, and the count
// it holds until Release. The zero Lease holds nothing, and its Release
// does nothing. A Lease is a small value; copying it copies the right to
// release it, which must be used exactly once.
type Lease struct {
	// Four fields of a word each, no more: the compiler keeps a struct that
	// small in registers. With the name and L's address as two more fields
	// it went through memory, and Acquire cost 15 ns where Lookup costs 6
	// (BenchmarkAcquireOff).
	Table   *maglev.Table // the table Index refers to; nil if there was no backend
	Index   int           // the backend's index in Table (see maglev.Table.Backends), or -1
	Spilled bool          // the key's first candidate was full: Index is a later one

	load *load // nil for a lease that counts nothing
}

// Backend returns the name of the lease's backend, or "" if it has none.
func (l Lease) Backend() string {
	if l.Table == nil || l.Index < 0 {
		return ""
	}
	return l.Table.Backend(l.Index)
}

// Release ends the lease's request: it lowers its backend's in-flight
// count, and L. Call it exactly once per lease that Acquire returned, from
// any goroutine (a gRPC picker's Done callback, say): a second Release
// would undercount. Release is O(1), takes no lock and does not allocate.
func (l Lease) Release() {
	if l.load == nil {
		return
	}
	l.load.inflight.Add(-1)
	l.load.total.Add(-1)
}

// Acquire places a request for key: it picks the first of the key's
// Candidates (hashed with the table's Hasher) whose in-flight count is
// below its capacity, counts the request there, and returns the lease.
// Release the lease when the request ends. With no backend to pick (an
// empty table, or every backend drained) it returns a lease with Index -1,
// which need not be released. Acquire is O(k) for the k candidates it
// looks at, takes no lock and does not allocate.
//
// With factor 0 Acquire is Lookup: it returns LookupIndex(key)'s backend
// and counts nothing (the lease's Release does nothing), so it costs what
// Lookup costs.
func (b *Picker) Acquire(key string) Lease {
	// Small enough to inline, so that a caller makes one call, as for Lookup.
	return b.state.Load().acquireKey(b, key)
}

// acquireKey is Acquire on st.
func (st *state) acquireKey(b *Picker, key string) Lease {
	if t := st.off; t != nil {
		return Lease{Table: t, Index: t.LookupIndex(key)}
	}
	if st.table == nil || st.table.LookupHashIndex(0) < 0 {
		return Lease{Index: -1}
	}
	return b.acquire(st, st.table.Hasher().HashString(key))
}

// AcquireBytes is Acquire for a key held in a byte slice.
func (b *Picker) AcquireBytes(key []byte) Lease {
	st := b.state.Load()
	if t := st.off; t != nil {
		return Lease{Table: t, Index: t.LookupBytesIndex(key)}
	}
	if st.table == nil || st.table.LookupHashIndex(0) < 0 {
		return Lease{Index: -1}
	}
	return b.acquire(st, st.table.Hasher().Hash(key))
}

// AcquireHash is Acquire for a key hash h, for callers that hash keys
// themselves (with the table's Hasher, for Acquire's answers).
func (b *Picker) AcquireHash(h uint64) Lease {
	return b.state.Load().acquireHash(b, h)
}

// acquireHash is AcquireHash on st.
func (st *state) acquireHash(b *Picker, h uint64) Lease {
	if t := st.off; t != nil {
		i := t.LookupHashIndex(h)
		return Lease{Table: t, Index: i}
	}
	if st.table == nil || st.table.LookupHashIndex(0) < 0 {
		return Lease{Index: -1}
	}
	return b.acquire(st, h)
}

// acquire places key hash h on st's table, which has slot owners, with
// bounded loads on.
func (b *Picker) acquire(st *state, h uint64) Lease {
	t := st.table
	c := b.c
	total := c.total.Add(1)
	first := -1
	for range 2 {
		for i := range t.CandidatesHash(h) {
			if first < 0 {
				first = i
			}
			l := st.loads[i]
			for {
				n := l.inflight.Load()
				if float64(n) >= math.Ceil(st.share[i]*float64(total)) {
					break // full
				}
				if l.inflight.CompareAndSwap(n, n+1) {
					if i != first {
						st.loads[first].spilled.Add(1)
						c.spilled.Add(1)
					}
					return b.lease(st, i, i != first)
				}
			}
			total = c.total.Load() // the freshest L for the next candidate
		}
	}
	st.loads[first].inflight.Add(1)
	c.forced.Add(1)
	return b.lease(st, first, false)
}

func (b *Picker) lease(st *state, i int, spilled bool) Lease {
	return Lease{Table: st.table, Index: i, Spilled: spilled, load: st.loads[i]}
}

// Stats are a Picker's counters, for observability.
type Stats struct {
	InFlight int64  // leases not yet released: L, less the next request (0 with factor 0, which counts nothing)
	Spilled  uint64 // requests placed on a later candidate because the first was full
	Forced   uint64 // requests placed on a full first candidate because every candidate was full
}

// Stats returns the counters. It is O(1) and does not allocate; under
// concurrent use each counter is read atomically, but not all at once.
func (b *Picker) Stats() Stats {
	return Stats{InFlight: b.c.total.Load(), Spilled: b.c.spilled.Load(), Forced: b.c.forced.Load()}
}

// A Load is one backend's counters, from Picker.Loads.
type Load struct {
	Backend  string
	InFlight int64  // requests holding a lease on it (0 with factor 0, which counts nothing)
	Capacity int64  // its capacity at the current L, for one more request; 0 when bounded loads are off
	Spilled  uint64 // requests whose first candidate it was, placed on a later one because it was full
}

// Loads appends the counters of the current table's backends, in table
// order, to dst and returns the extended slice. Spilled counts since the
// backend's name last entered the Picker's tables. Loads is O(N) and
// allocates only to grow dst.
func (b *Picker) Loads(dst []Load) []Load {
	st := b.state.Load()
	if st.table == nil {
		return dst
	}
	next := float64(b.c.total.Load() + 1)
	for i, l := range st.loads {
		name := st.table.Backend(i)
		bl := Load{Backend: name, InFlight: l.inflight.Load(), Spilled: l.spilled.Load()}
		if b.factor != 0 {
			bl.Capacity = int64(math.Ceil(st.share[i] * next))
		}
		dst = append(dst, bl)
	}
	return dst
}
