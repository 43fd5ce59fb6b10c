// Package memcachemaglev is Maglev consistent hashing for memcached
// clients built on github.com/bradfitz/gomemcache. A Go service gets it by
// adding one import:
//
//	import "github.com/maglevlb/maglev/memcachemaglev"
//
// and building its client on a [Selector] instead of memcache.New:
//
//	sel, err := memcachemaglev.New("10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211")
//	if err != nil {
//		return err
//	}
//	mc := memcache.NewFromSelector(sel)
//
// By default a key's server is its owner in maglev.New(servers,
// maglev.DefaultSize, nil): every client with the same server list picks
// the same server for a key, in any order of the list. memcache.New picks
// by crc32(key) modulo the number of servers, so adding a fifth server to
// four moves about 80% of the keys (each a miss until it is set again);
// with a Selector about 20% move, those the new server takes. Removing a
// server moves its keys and a sliver of the others (Maglev's small excess
// disruption, under 1% of the keys), where the modulo moves about three
// quarters.
//
// # Weights, seed and table size
//
// A server listed twice weighs twice as much, as with memcache.New: the
// table is then maglev.NewWeighted's, each distinct server weighing the
// number of times it is listed ([Weigh]). [NewWeighted] takes [Server]
// values with explicit weights, where weight 0 drains a server (it stays
// known, but owns no slots), and [Options]: the table size M and a seed
// for XXH3 (maglev.XXH3Seed). Weights are shares; the table for the same
// servers, weights, size and seed is the same on every machine, in any
// order of the list.
//
// # Concurrency
//
// A Selector is safe for concurrent use by multiple goroutines.
// [Selector.SetServers] and [Selector.SetWeighted] build a new table off
// the request path and publish it with sync/atomic, so picks never wait
// for it and see either the old servers or the new ones.
//
// # Costs
//
// [Selector.PickServer] is O(1): one XXH3 hash of the key and one table
// read, no lock and no allocation, whatever the number of servers.
// [Selector.Each] does not allocate either. SetServers resolves each
// address and builds a table of M slots (65,537 by default): 1 to 2 ms and
// 128 KiB for up to 64 servers, on the caller's goroutine.
package memcachemaglev
