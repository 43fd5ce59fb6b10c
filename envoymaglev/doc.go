// Package envoymaglev computes the Maglev table Envoy computes, slot for
// slot, so that a Go process and an Envoy fleet send every request key to
// the same host:
//
//	import "github.com/maglevlb/maglev/envoymaglev"
//
// New takes the cluster's hosts, each the key Envoy hashes for it (its
// "ip:port" address, its hostname, or its hash_key metadata) with its
// load-balancing weight, and Envoy's table_size, and returns a
// *maglev.Table of the root package: Lookup(v) is the host Envoy's Maglev
// picks for a request whose single header hash policy reads the value v,
// and the table serves everything else the root package offers
// (Candidates, Diff, AppendSlots, bounded.Picker). The build reproduces
// Envoy's own, including its double-precision weight arithmetic, which
// maglev.NewWeighted deliberately does not share; docs/envoy.md in the
// repository describes both sides' configuration and the proof.
//
// # Costs
//
// New takes O(M log M + n log n) time in expectation for M slots and n
// hosts (a few milliseconds at M = 65,537), and O(M log n) more when the
// weights differ; it allocates 4 bytes a slot while building and the
// table's 2 or 4 bytes a slot. Lookup is O(1): one XXH64 of the key and
// one array read, with no allocation.
//
// # Concurrency
//
// New is safe to call from several goroutines. The Table it returns is
// immutable and safe for concurrent use by multiple goroutines; to follow
// membership changes, build a new one and publish it with
// sync/atomic.Pointer, as the root package describes.
package envoymaglev
