package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/maglevlb/maglev"
)

// A snapshot is the routing state the request path reads: a Maglev table
// over the healthy backends and their URLs. It is immutable once published
// (the lazily built fallbacks aside, which sync.Once guards); a membership
// change publishes a new one.
type snapshot struct {
	table     *maglev.Table
	backends  []*backend // backends[i] is table backend i
	counts    []int      // counts[i] is the number of slots backend i owns
	built     time.Time  // when the table was built
	churn     int        // slots whose owner changed from the previous snapshot
	rebuilds  int64      // snapshots published before this one
	round     int64      // health round that triggered the build; 0 for the first
	fallbacks []fallback // fallbacks[i] routes around backend i, see fallback
}

// A fallback is the table without one backend: where a key goes once that
// backend is dropped, so a retry lands where the key will live from now on.
type fallback struct {
	once     sync.Once
	table    *maglev.Table
	backends []*backend
}

// newSnapshot builds the table over the given healthy backends. It is O(M)
// and allocates the table.
func (p *proxy) newSnapshot(healthy []*backend) (*snapshot, error) {
	table, backends, err := p.build(healthy)
	if err != nil {
		return nil, err
	}
	return &snapshot{
		table:     table,
		backends:  backends,
		counts:    table.Counts(),
		built:     time.Now(),
		fallbacks: make([]fallback, len(backends)),
	}, nil
}

// build returns the table over backends, and the backends in table order.
func (p *proxy) build(backends []*backend) (*maglev.Table, []*backend, error) {
	names := make([]string, len(backends))
	for i, b := range backends {
		names[i] = b.name
	}
	table, err := maglev.New(names, p.cfg.TableSize, p.hasher)
	if err != nil {
		return nil, nil, fmt.Errorf("lbproxy: %w", err)
	}
	ordered := make([]*backend, len(backends))
	for _, b := range backends {
		ordered[table.Index(b.name)] = b
	}
	return table, ordered, nil
}

// fallback returns the table without backend i, and its backends in table
// order, building it on first use (O(M)); the table is empty if i was the
// only backend.
func (s *snapshot) fallback(p *proxy, i int) (*maglev.Table, []*backend) {
	f := &s.fallbacks[i]
	f.once.Do(func() {
		rest := slices.Delete(slices.Clone(s.backends), i, i+1)
		// The names were valid for s.table, so build cannot fail.
		f.table, f.backends, _ = p.build(rest)
	})
	return f.table, f.backends
}

// rebuild builds the table over the healthy backends and publishes it,
// logging the change and its churn: the slots that changed owner, from
// Diff. It runs on the health checker's goroutine, never on the request
// path; requests keep using the previous table until the new one is stored.
func (p *proxy) rebuild(healthy []*backend, round int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.cur.Load()
	s, err := p.newSnapshot(healthy)
	if err != nil {
		return err
	}
	s.churn = old.table.Diff(s.table)
	s.rebuilds = old.rebuilds + 1
	s.round = round
	p.loads.Update(s.table) // before the snapshot: see pick
	p.cur.Store(s)

	was, now := old.table.Backends(), s.table.Backends()
	var change []string
	for _, name := range now {
		if _, ok := slices.BinarySearch(was, name); !ok {
			change = append(change, "+"+name)
		}
	}
	for _, name := range was {
		if _, ok := slices.BinarySearch(now, name); !ok {
			change = append(change, "-"+name)
		}
	}
	m := s.table.Size()
	p.log.Printf("table rebuilt: %d of %d backends healthy (%s); %d of %d slots moved (%.1f%%)",
		len(now), len(p.backends), strings.Join(change, " "), s.churn, m, 100*float64(s.churn)/float64(m))
	return nil
}
