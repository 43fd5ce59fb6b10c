package main

import (
	"fmt"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/ring"
)

// This file says what the rows of compare are: how each algorithm is built,
// and how a stream of requests goes through what it built.

// A lookuper is a built Maglev table or ring.
type lookuper interface {
	Lookup(key string) string
	LookupHash(h uint64) string
}

// An algorithm is one row of the comparison.
type algorithm struct {
	name     string
	kind     string // "maglev", "ring" or "bounded"
	m        int
	vnodes   int
	factor   float64 // a bounded row's balance factor
	inflight int     // a bounded row's requests in flight
	// build builds the table or ring for backends; compare times it and
	// measures the heap that what it returns keeps.
	build func(backends []maglev.Backend) (lookuper, error)
	// router returns the router that requests go through what build
	// built; index maps each backend's name to its index in the compared
	// backends. Nil means a plain lookup per request (lookupRouter). A row
	// whose choice depends on earlier requests, such as a bounded-load
	// picker simulated with requests in flight, gives its own.
	router func(l lookuper, index map[string]int32) router
	// fail returns what build built, l, with the backend called name
	// failed: out of service, but still configured. Nil means a failure
	// is the backend's removal (a ring routes around a failed node by
	// dropping its points, which moves only its keys).
	fail func(l lookuper, name string) (lookuper, error)
}

// A router sends a stream of requests to backends.
type router interface {
	// route sets dst[i] to the index, in the compared backends, of the
	// backend that the request whose key hashes to hashes[i] goes to.
	// Requests come in stream order, over successive calls; a router may
	// keep state from one to the next.
	route(dst []int32, hashes []uint64)
}

// algorithms returns the rows to compare.
func (c *compareConfig) algorithms() []algorithm {
	weighted := c.weighted
	var algs []algorithm
	for _, m := range []int{c.m, nextPrime(10 * c.m)} {
		if m > maglev.MaxSize {
			continue
		}
		algs = append(algs, algorithm{
			name: fmt.Sprintf("maglev M=%d", m), kind: "maglev", m: m,
			build: func(backends []maglev.Backend) (lookuper, error) {
				if weighted {
					return maglev.NewWeighted(backends, m, c.h)
				}
				return maglev.New(names(backends), m, c.h)
			},
			fail: tableWithout,
		})
		if c.bounded && m == c.m {
			// Beside the plain table it bounds.
			algs = append(algs, c.boundedAlgorithm(m, c.factor, c.inflight))
		}
	}
	g := uint32(0)
	for _, w := range c.gcdWeights() {
		g = gcd(g, w)
	}
	g = max(g, 1) // every weight 0: nothing to divide
	for _, v := range c.vnodes {
		algs = append(algs, algorithm{
			name: fmt.Sprintf("ring vnodes=%d", v), kind: "ring", vnodes: v,
			build: func(backends []maglev.Backend) (lookuper, error) {
				if weighted {
					// Weights divided by the gcd over every membership
					// compared, so that each set's rings have the same
					// points per unit of weight.
					scaled := make([]maglev.Backend, len(backends))
					for i, b := range backends {
						scaled[i] = maglev.Backend{Name: b.Name, Weight: b.Weight / g}
					}
					return ring.NewWeighted(scaled, v, c.h)
				}
				return ring.New(names(backends), v, c.h)
			},
		})
	}
	return algs
}

// tableWithout is a Maglev row's failure: the table with the backend out
// of service (maglev.Table.Without), which moves only its keys.
func tableWithout(l lookuper, name string) (lookuper, error) {
	return l.(*maglev.Table).Without(name)
}

// newRouter returns the router of alg for l.
func newRouter(alg algorithm, l lookuper, index map[string]int32) router {
	if alg.router != nil {
		return alg.router(l, index)
	}
	return lookupRouter(l, index)
}

// lookupRouter returns a router that sends each request to the backend l
// looks its hash up to, with no state.
func lookupRouter(l lookuper, index map[string]int32) router {
	if t, ok := l.(*maglev.Table); ok {
		r := tableRouter{t: t, index: make([]int32, t.NumBackends())}
		for i, name := range t.Backends() {
			r.index[i] = index[name]
		}
		return r
	}
	return nameRouter{l: l, index: index}
}

// A tableRouter routes by a Maglev table's backend indices, which saves
// looking each owner's name up.
type tableRouter struct {
	t     *maglev.Table
	index []int32 // table's backend index to compared backend index
}

func (r tableRouter) route(dst []int32, hashes []uint64) {
	for i, h := range hashes {
		dst[i] = r.index[r.t.LookupHashIndex(h)]
	}
}

// A nameRouter routes by the name that LookupHash returns.
type nameRouter struct {
	l     lookuper
	index map[string]int32
}

func (r nameRouter) route(dst []int32, hashes []uint64) {
	for i, h := range hashes {
		dst[i] = r.index[r.l.LookupHash(h)]
	}
}

// names returns the names of backends, in order.
func names(backends []maglev.Backend) []string {
	s := make([]string, len(backends))
	for i, b := range backends {
		s[i] = b.Name
	}
	return s
}

// gcd returns the greatest common divisor of a and b; gcd(0, b) is b.
func gcd(a, b uint32) uint32 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// nextPrime returns the smallest supported table size at or above n, or
// a size above MaxSize when there is none.
func nextPrime(n int) int {
	for n <= maglev.MaxSize && maglev.CheckSize(n) != nil {
		n++
	}
	return n
}
