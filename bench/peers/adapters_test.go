package peers

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
	cilmaglev "github.com/cilium/cilium/pkg/maglev"
	jump "github.com/dgryski/go-jump"
	rendezvous "github.com/dgryski/go-rendezvous"
	"github.com/golang/groupcache/consistenthash"
	kkdai "github.com/kkdai/maglev"
	"github.com/serialx/hashring"
	"github.com/stathat/consistent"
	"github.com/zeebo/xxh3"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/ring"
)

// Each peer is used at its documented defaults:
const (
	// kkdaiM is the table size of github.com/kkdai/maglev: the package's
	// own constant bigM, the paper's M. NewMaglev has no default M (its
	// README example uses 13, far too small for any real N).
	kkdaiM = 65537
	// groupcacheReplicas is groupcache's own default (defaultReplicas in
	// its http.go, used by HTTPPool when Replicas is 0). consistenthash.New
	// itself has no default; a nil hash means crc32.ChecksumIEEE.
	groupcacheReplicas = 50
)

// A peer is one consistent-hash package under test.
type peer struct {
	impl string // the impl= label in benchmark names and the report
	// prepare turns the backend names into the peer's input, untimed (for
	// most peers, the names themselves), and returns a function that
	// builds the peer's structure from it; the structure is what a lookup
	// needs and what stays reachable.
	prepare func(tb testing.TB, names []string) (build func() any)
	// lookup returns the backend name a key goes to in structure s, hashing
	// the key as the peer does. It is for the untimed load and churn
	// measurements; benchLookup times the same call without the closure.
	lookup func(s any) func(key string) string
	// benchLookup times lookups of keys in s (lookupKeys of them, a power
	// of two), in turn, with direct calls.
	// It is nil for a peer without a lookup function of its own (Cilium).
	benchLookup func(b *testing.B, s any, keys []string)
}

// maglevPeer is this library's table of m slots, as the peer impl.
func maglevPeer(impl string, m int) peer {
	return peer{
		impl: impl,
		prepare: func(tb testing.TB, names []string) func() any {
			return func() any {
				t, err := maglev.New(names, m, nil)
				if err != nil {
					tb.Fatal(err)
				}
				return t
			}
		},
		lookup: func(s any) func(string) string { return s.(*maglev.Table).Lookup },
		benchLookup: func(b *testing.B, s any, keys []string) {
			t := s.(*maglev.Table)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sinkName = t.Lookup(keys[i&(lookupKeys-1)])
				i++
			}
		},
	}
}

// peers lists every peer in report order: ours first.
var peers = []peer{
	maglevPeer("maglevlb", maglev.DefaultSize),
	// The paper's rule for the table size, M > 100·N, for N = 1000:
	// M = SizeFor(1000) = 100,003, fixed for every N (a table size
	// follows the largest N planned for, never the N of the moment: a
	// join that changed M would move nearly every key).
	maglevPeer("maglevlb-M100003", maglev.SizeFor(1000)),
	{
		impl: "maglevlb-ring",
		prepare: func(tb testing.TB, names []string) func() any {
			return func() any {
				r, err := ring.New(names, ring.DefaultVnodes, nil)
				if err != nil {
					tb.Fatal(err)
				}
				return r
			}
		},
		lookup: func(s any) func(string) string { return s.(*ring.Ring).Lookup },
		benchLookup: func(b *testing.B, s any, keys []string) {
			r := s.(*ring.Ring)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sinkName = r.Lookup(keys[i&(lookupKeys-1)])
				i++
			}
		},
	},
	{
		impl: "cilium",
		prepare: func(tb testing.TB, names []string) func() any {
			ciliumInit(tb)
			backends := ciliumBackends(names)
			// Cilium keeps its N×M permutation matrix in a package-level
			// buffer that only grows. Build once so that what follows sees
			// the steady state of a running agent, which reuses the buffer.
			sinkCilium = cilmaglev.GetLookupTable(backends, cilmaglev.DefaultTableSize)
			return func() any {
				return &ciliumTable{names, cilmaglev.GetLookupTable(backends, cilmaglev.DefaultTableSize)}
			}
		},
		lookup: func(s any) func(string) string { return s.(*ciliumTable).lookup },
	},
	{
		impl: "kkdai",
		prepare: func(tb testing.TB, names []string) func() any {
			return func() any {
				m, err := kkdai.NewMaglev(names, kkdaiM)
				if err != nil {
					tb.Fatal(err)
				}
				return m
			}
		},
		lookup: func(s any) func(string) string {
			m := s.(*kkdai.Maglev)
			return func(k string) string {
				name, err := m.Get(k)
				if err != nil {
					panic(err)
				}
				return name
			}
		},
		benchLookup: func(b *testing.B, s any, keys []string) {
			m := s.(*kkdai.Maglev)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sinkName, _ = m.Get(keys[i&(lookupKeys-1)])
				i++
			}
		},
	},
	{
		impl: "groupcache",
		prepare: func(tb testing.TB, names []string) func() any {
			return func() any {
				m := consistenthash.New(groupcacheReplicas, nil)
				m.Add(names...)
				return m
			}
		},
		lookup: func(s any) func(string) string { return s.(*consistenthash.Map).Get },
		benchLookup: func(b *testing.B, s any, keys []string) {
			m := s.(*consistenthash.Map)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sinkName = m.Get(keys[i&(lookupKeys-1)])
				i++
			}
		},
	},
	{
		impl: "serialx",
		prepare: func(tb testing.TB, names []string) func() any {
			return func() any { return hashring.New(names) }
		},
		lookup: func(s any) func(string) string {
			r := s.(*hashring.HashRing)
			return func(k string) string {
				name, ok := r.GetNode(k)
				if !ok {
					panic("serialx: GetNode failed on key " + k)
				}
				return name
			}
		},
		benchLookup: func(b *testing.B, s any, keys []string) {
			r := s.(*hashring.HashRing)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sinkName, _ = r.GetNode(keys[i&(lookupKeys-1)])
				i++
			}
		},
	},
	{
		impl: "stathat",
		prepare: func(tb testing.TB, names []string) func() any {
			return func() any {
				c := consistent.New()
				c.Set(names)
				return c
			}
		},
		lookup: func(s any) func(string) string {
			c := s.(*consistent.Consistent)
			return func(k string) string {
				name, err := c.Get(k)
				if err != nil {
					panic(err)
				}
				return name
			}
		},
		benchLookup: func(b *testing.B, s any, keys []string) {
			c := s.(*consistent.Consistent)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sinkName, _ = c.Get(keys[i&(lookupKeys-1)])
				i++
			}
		},
	},
	{
		impl: "rendezvous",
		prepare: func(tb testing.TB, names []string) func() any {
			return func() any { return rendezvous.New(names, xxhash.Sum64String) }
		},
		lookup: func(s any) func(string) string { return s.(*rendezvous.Rendezvous).Lookup },
		benchLookup: func(b *testing.B, s any, keys []string) {
			r := s.(*rendezvous.Rendezvous)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sinkName = r.Lookup(keys[i&(lookupKeys-1)])
				i++
			}
		},
	},
	{
		impl: "jump",
		prepare: func(tb testing.TB, names []string) func() any {
			return func() any { return &jumpNames{slices.Clone(names)} }
		},
		lookup: func(s any) func(string) string { return s.(*jumpNames).lookup },
		benchLookup: func(b *testing.B, s any, keys []string) {
			j := s.(*jumpNames)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sinkName = j.lookup(keys[i&(lookupKeys-1)])
				i++
			}
		},
	},
}

// Sinks keep the compiler from discarding results.
var (
	sinkName  string
	sinkBuilt any
)

// ciliumTable is Cilium's lookup table with the names its backend IDs
// index. Cilium's Go package builds the table; the lookup runs in its BPF
// datapath (a jhash of the packet's 5-tuple, modulo M), so there is no Go
// lookup to time. For load and churn, keys are hashed with XXH3 instead,
// modulo M, like ours.
type ciliumTable struct {
	names []string
	table []int
}

func (c *ciliumTable) lookup(key string) string {
	return c.names[c.table[xxh3.HashString(key)%uint64(len(c.table))]]
}

// jumpNames maps a key to a name with Jump consistent hash (Lamping and
// Veach, 2014), which maps a 64-bit key to a bucket in [0, N): the key is
// hashed with XXH3 first, and the bucket indexes the names. A bucket can
// only join or leave at the end, so names keep their order.
type jumpNames struct{ names []string }

func (j *jumpNames) lookup(key string) string {
	return j.names[jump.Hash(xxh3.HashString(key), len(j.names))]
}

// minimal lists the peers whose every join moves keys only to the newcomer
// and whose every leave moves only the leaver's keys: the rings,
// rendezvous and jump. Maglev tables (ours, Cilium's, kkdai's) move a few
// more, by design.
var minimal = map[string]bool{
	"maglevlb-ring": true, "groupcache": true, "serialx": true, "stathat": true,
	"rendezvous": true, "jump": true,
}

// TestPeers checks every adapter: each key goes to one of the names (assign
// fails otherwise), the same names give the same routing, load and moved
// fractions are in range, and the peers that promise minimal disruption
// keep it exactly.
func TestPeers(t *testing.T) {
	keys := randomKeys()[:20000]
	for _, n := range []int{1, 2, 7, 50} {
		names := backendNames(n + 1)
		for _, p := range peers {
			t.Run(fmt.Sprintf("impl=%s/N=%d", p.impl, n), func(t *testing.T) {
				kept, c := route(t, p, names, n, keys)
				if kept <= 0 {
					t.Errorf("kept %d bytes, want > 0", kept)
				}
				again := assign(t, p.impl, p.lookup(p.prepare(t, names[:n])()), names[:n], keys)
				if !slices.Equal(c.base, again) {
					t.Errorf("two builds for the same names route keys differently")
				}
				if mm := maxMean(c.base, n); mm < 1 || mm > float64(n) {
					t.Errorf("max/mean %v, want in [1, %d]", mm, n)
				}
				fracs := []float64{moved(c.base, c.joined)}
				if n > 1 {
					fracs = append(fracs, moved(c.base, c.left))
				}
				for _, f := range fracs {
					if f < 0 || f > 1 {
						t.Errorf("moved fraction %v, want in [0, 1]", f)
					}
				}
				if fracs[0] == 0 {
					t.Errorf("no key moved to the newcomer")
				}
				if !minimal[p.impl] {
					return
				}
				for i := range keys {
					if c.base[i] != c.joined[i] && c.joined[i] != int32(n) {
						t.Fatalf("on join, key %q moved from %d to %d, not to the newcomer %d", keys[i], c.base[i], c.joined[i], n)
					}
					if n > 1 && c.base[i] != c.left[i] && c.base[i] != int32(n-1) {
						t.Fatalf("on leave, key %q moved from %d, not from the leaver %d", keys[i], c.base[i], n-1)
					}
				}
			})
		}
	}
}
