// Package maglev implements Maglev consistent hashing, the lookup table of
// Google's Maglev load balancer (Eisenbud et al., "Maglev: A Fast and
// Reliable Software Network Load Balancer", NSDI 2016).
//
// A [Table] has a prime number M of slots (65,537 by default), each owned by
// one backend. Routing a key is one hash and one array index: the owner of
// slot H(key) mod M. [New] fills the table so that backends own equal shares
// (slot counts differ by at most one) and a membership change moves few
// slots: going from 5 backends to 6 moves about 1/6 of them.
//
// # Determinism
//
// A table depends only on the set of backend names, M and the [Hasher]:
// never on the order the names are given in, the platform, its word size or
// byte order, or this package's release. Every machine that knows the same
// backend list computes the same table with no coordination. Golden tests pin
// the tables of every built-in hasher; a change to any table's layout is a
// breaking change and needs a new major version.
//
// # How a table is built
//
// Backends are sorted by byte order. Each backend's [Permutation] is its
// preference sequence: an offset and a skip derived from hashes of its name,
// visiting every slot once because M is prime. [Fill] then lets backends take
// turns, round-robin in sorted order, each claiming the next empty slot of
// its sequence. [Generator] and [Fill] are exposed, allocation-free, for
// callers that bring their own permutations.
//
// # Weights
//
// [NewWeighted] gives backends shares in proportion to integer weights, by
// the turn rule Envoy uses; weight 0 drains a backend without forgetting
// it, and equal weights give exactly New's table.
//
// # Failures
//
// [Table.Without] takes failed backends out of service without a rebuild:
// every other slot keeps its owner, and each freed slot goes to the
// backend whose sequence reaches it first, so only the failed backends'
// keys move. The result depends only on the table and the set removed.
//
// # Hot keys
//
// [Table.Candidates] lists a key's backends in preference order: its
// Lookup backend first, then later choices in proportion to slot counts,
// each backend once. It serves replica placement (a key's first k
// candidates) and fallback past unhealthy backends without a rebuild. The
// order is pinned per hasher like tables. The companion package
// github.com/maglevlb/maglev/bounded builds consistent hashing with bounded
// loads on it: a request goes to the first candidate holding fewer than
// factor × its share of the requests in flight, so a hot key spills over
// instead of sinking its backend. It is a package of its own because what
// it keeps (the requests in flight in one process, and a lock to publish
// tables) is mutable state, where everything here is an immutable value
// that every process computes alike, or a function computing one.
//
// # Routing
//
// A key is routed by one method per input and result: [Table.Lookup],
// [Table.LookupBytes] and [Table.LookupHash] (for callers that hash keys
// themselves, with [Table.Hasher]) return the backend's name;
// [Table.LookupIndex], [Table.LookupBytesIndex] and [Table.LookupHashIndex]
// its index in [Table.Backends]. The one "no backend" answer is "" for a
// name and -1 for an index (0xFFFFFFFF in the 32-bit slots of
// [Table.AppendSlots]). A data plane holding the slot array computes
// LookupHashIndex itself: the owner of slot h mod M. [Table.NumBackends]
// counts backends; [Table.Size] is M, the number of slots.
//
// # Zero values
//
// The zero [Table] is an empty table of size 0: Lookup returns "" and the
// index methods -1. A nil *Table is the zero Table to every method: the
// old table of the first swap below, nil, diffs as an empty one. The zero
// [Generator] has no size: its Permutation panics with a message that says
// so; make one with [NewGenerator].
//
// # Costs
//
// Building takes O(M log M) expected time and O(M + N) memory (no N×M
// permutation matrix): 2 bytes a slot for up to 65,535 backends, 4 beyond.
// [Table.Lookup] is O(1) and does not allocate. [Table.Diff] and
// [Table.Changes] compare two tables in O(M).
//
// # Concurrency
//
// A Table is immutable and safe for concurrent use by multiple goroutines,
// and so is a [github.com/maglevlb/maglev/ring.Ring], the companion
// package's ring. To change membership, build a new Table (or ring) off the
// request path and publish it with [sync/atomic.Pointer]:
//
//	var current atomic.Pointer[maglev.Table]
//	current.Store(t)                       // at start
//	backend := current.Load().Lookup(key)  // per request, no lock
//	old := current.Swap(next)              // on a membership change
//	log.Printf("moved %d slots", old.Diff(next))
//
// Readers never see a half-built table, and a lookup returns a backend of
// the table it loaded: of the old set or of the new one.
package maglev
