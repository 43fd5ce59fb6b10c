package main

import (
	"fmt"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/bounded"
)

// This file is the bounded-loads row: a Maglev table behind
// bounded.New, through which the requests are simulated with a
// sliding window of C requests in flight.
//
// The simulation, exactly: requests are issued one at a time in key-stream
// order, and none ends by itself. Request i (from 0) is released just
// before request i+C is placed, when it arrives. So every Acquire from
// request C−1 on sees L = C, counting the request being placed, and
// request i < C sees L = i+1; after each Acquire, min(i+1, C) requests are
// in flight. Each request holds its backend for the same C arrivals, so a
// backend's share of the requests is also its average share of the
// requests in flight.

// maxInflight is the largest -inflight: the window keeps a lease per
// request in flight, for each of the row's three routers.
const maxInflight = 1 << 20

// boundedAlgorithm returns the bounded-loads row over a Maglev table of m
// slots with balance factor factor and inflight requests in flight.
func (c *compareConfig) boundedAlgorithm(m int, factor float64, inflight int) algorithm {
	weighted := c.weighted
	return algorithm{
		name: boundedName(factor, inflight), kind: "bounded", m: m,
		factor: factor, inflight: inflight,
		build: func(backends []maglev.Backend) (lookuper, error) {
			var t *maglev.Table
			var err error
			if weighted {
				t, err = maglev.NewWeighted(backends, m, c.h)
			} else {
				t, err = maglev.New(names(backends), m, c.h)
			}
			if err != nil {
				return nil, err
			}
			return newBoundedSim(t, factor, inflight)
		},
		fail: func(l lookuper, name string) (lookuper, error) {
			t, err := l.(*boundedSim).t.Without(name)
			if err != nil {
				return nil, err
			}
			return newBoundedSim(t, factor, inflight)
		},
		router: func(l lookuper, index map[string]int32) router {
			// A simulation of its own, so that the lookups timed on l
			// leave this one's counts alone.
			t := l.(*boundedSim).t
			sim, err := newBoundedSim(t, factor, inflight)
			if err != nil { // check accepted factor: cannot happen
				panic(err)
			}
			r := &boundedRouter{sim: sim, index: make([]int32, t.NumBackends())}
			for i, name := range t.Backends() {
				r.index[i] = index[name]
			}
			return r
		},
	}
}

// boundedName is the bounded row's name: its balance factor F and its C
// requests in flight.
func boundedName(factor float64, inflight int) string {
	return fmt.Sprintf("bounded F=%v C=%d", factor, inflight)
}

// A boundedSim is a Bounded over one table with a sliding window of c
// requests in flight.
type boundedSim struct {
	t       *maglev.Table
	b       *bounded.Picker
	c       int
	window  []bounded.Lease // the leases in flight; once full, oldest at next
	next    int
	spilled int64 // requests placed past their key's first candidate
}

// newBoundedSim returns a simulation over t with no request in flight.
func newBoundedSim(t *maglev.Table, factor float64, c int) (*boundedSim, error) {
	b, err := bounded.New(t, factor)
	if err != nil {
		return nil, err
	}
	return &boundedSim{t: t, b: b, c: c}, nil
}

// pick issues the next request, for key hash h, and returns its lease.
func (s *boundedSim) pick(h uint64) bounded.Lease {
	s.release()
	return s.hold(s.b.AcquireHash(h))
}

// release releases the oldest request if c are in flight, before the next
// one is placed.
func (s *boundedSim) release() {
	if len(s.window) == s.c {
		s.window[s.next].Release()
	}
}

// hold keeps l, the request just placed, in the window, and returns it.
func (s *boundedSim) hold(l bounded.Lease) bounded.Lease {
	if len(s.window) < s.c {
		s.window = append(s.window, l)
	} else {
		s.window[s.next] = l
		if s.next++; s.next == s.c {
			s.next = 0
		}
	}
	if l.Spilled {
		s.spilled++
	}
	return l
}

// Lookup issues a request for key and returns its backend: the pick,
// hashing included, which compare times.
func (s *boundedSim) Lookup(key string) string {
	s.release()
	return s.hold(s.b.Acquire(key)).Backend()
}

// LookupHash issues a request for key hash h and returns its backend.
func (s *boundedSim) LookupHash(h uint64) string { return s.pick(h).Backend() }

// A boundedRouter sends the requests through a simulation.
type boundedRouter struct {
	sim   *boundedSim
	index []int32 // table's backend index to compared backend index
}

func (r *boundedRouter) route(dst []int32, hashes []uint64) {
	for i, h := range hashes {
		dst[i] = r.index[r.sim.pick(h).Index]
	}
}

// spilled returns how many of the requests routed so far were placed past
// their key's first candidate.
func (r *boundedRouter) spilled() int64 { return r.sim.spilled }
