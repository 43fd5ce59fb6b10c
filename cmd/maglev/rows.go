package main

import (
	"encoding/binary"
	"fmt"
	"math/big"

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
	for _, v := range c.vnodes {
		algs = append(algs, algorithm{
			name: fmt.Sprintf("ring vnodes=%d", v), kind: "ring", vnodes: v,
			build: func(backends []maglev.Backend) (lookuper, error) {
				if weighted {
					return weightedRing(backends, v, g, c.h)
				}
				return ring.New(names(backends), v, c.h)
			},
		})
	}
	return algs
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
		r := tableRouter{t: t, index: make([]int32, t.Len())}
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

// weightedRing builds a ring where each backend has vnodes·w/g points,
// placed where ring.New places them: point j of backend name at
// H(le64(j) + name). Drained backends have no points.
func weightedRing(backends []maglev.Backend, vnodes int, g uint32, h maglev.Hasher) (lookuper, error) {
	if vnodes > ring.MaxPoints { // and vnodes·w cannot overflow below
		return nil, fmt.Errorf("%w: vnodes %d", ring.ErrTooManyPoints, vnodes)
	}
	positions := make(map[string][]uint64, len(backends))
	total := 0
	for _, b := range backends {
		if b.Weight == 0 {
			continue
		}
		n := uint64(vnodes) * uint64(b.Weight/g)
		if total += int(min(n, ring.MaxPoints+1)); total > ring.MaxPoints {
			return nil, fmt.Errorf("%w: vnodes %d times the weights", ring.ErrTooManyPoints, vnodes)
		}
		pos := make([]uint64, n)
		buf := append(make([]byte, 8, 8+len(b.Name)), b.Name...)
		for j := range pos {
			binary.LittleEndian.PutUint64(buf, uint64(j))
			pos[j] = h.Hash(buf)
		}
		positions[b.Name] = pos
	}
	return ring.NewWithPositions(positions, h)
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

// nextPrime returns the smallest prime at or above n.
func nextPrime(n int) int {
	for !big.NewInt(int64(n)).ProbablyPrime(0) { // exact below 2^64
		n++
	}
	return n
}
