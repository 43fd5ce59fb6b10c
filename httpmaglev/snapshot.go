package httpmaglev

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maglevlb/maglev"
)

// A member is one configured backend and what is known of its health. A
// member is replaced, not changed, when SetBackends changes its URL or
// weight, so b is immutable.
type member struct {
	b      Backend
	health string // the URL the active check GETs; "" with active checks off

	// Active health, guarded by Transport.mu.
	known   bool   // probed at least once
	up      bool   // by the active checks (true until the first probe says otherwise)
	fails   int    // consecutive failed probes
	passes  int    // consecutive passed probes since the last ejection
	seenGen uint64 // ejectGen when passes was last reset
	removed bool   // no longer configured: its probes are ignored

	// Passive ejection, written on the request path.
	connFails atomic.Int32  // consecutive failed requests
	ejected   atomic.Bool   // out of the table until readmitted
	ejectGen  atomic.Uint64 // ejections so far
	ejectedAt atomic.Int64  // when it was last ejected, in Unix nanoseconds
}

// healthy reports whether m belongs in the table. Call it with
// Transport.mu held.
func (m *member) healthy() bool { return m.up && !m.ejected.Load() }

// A snapshot is the routing state RoundTrip reads: the table over the
// healthy backends, their members, and the retry targets. It is immutable
// once published; a rebuild publishes a new one.
type snapshot struct {
	table   *maglev.Table
	bounded *maglev.Bounded // picks from table with the Transport's shared counts; nil when bounded loads are off
	members []*member       // members[i] is table backend i
	counts  []int           // counts[i] is the number of slots backend i owns

	// fallback[s] is the index in table of the owner of slot s in the
	// table built without s's owner: where the keys of slot s live once
	// that owner is dropped; -1 if it is the only backend.
	fallback []int32

	all      []*member // every configured backend, sorted by name
	built    time.Time // when the table was built
	round    int64     // health rounds started when it was built
	churn    int       // slots whose owner changed from the previous snapshot
	rebuilds int64     // snapshots published before this one
}

// retryTarget returns the backend a request for key should be retried on
// after backend failed failed: the owner of the key's slot in the table
// without failed, or -1 if there is none. When failed owns the key's slot,
// that is fallback; otherwise (a request that bounded loads spilled past
// its owner) it is the slot's owner, which keeps the slot when failed is
// dropped unless the slot is one of the few that move besides failed's.
// retryTarget is O(1) and does not allocate.
func (s *snapshot) retryTarget(key string, failed int) int {
	slot := s.table.SlotOf(s.table.Hasher().HashString(key))
	owner := s.table.OwnerIndex(slot)
	if owner != failed {
		return owner
	}
	return int(s.fallback[slot])
}

// newTable builds the table over backends with cfg's builder: cfg.NewTable
// if set, else maglev.NewWeighted with cfg.Hasher. An empty list gives the
// empty table (maglev.New's), whatever the builder. It checks that the
// table is over exactly the given names, and returns them in table order.
func (t *Transport) newTable(backends []maglev.Backend) (*maglev.Table, error) {
	if len(backends) == 0 {
		table, err := maglev.New(nil, t.cfg.TableSize, t.cfg.Hasher)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrTable, err)
		}
		return table, nil
	}
	var table *maglev.Table
	var err error
	if t.cfg.NewTable != nil {
		table, err = t.cfg.NewTable(slices.Clone(backends), t.cfg.TableSize)
	} else {
		table, err = maglev.NewWeighted(backends, t.cfg.TableSize, t.cfg.Hasher)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTable, err)
	}
	if table == nil || table.Len() != len(backends) {
		return nil, fmt.Errorf("%w: the table is not over the %d backends it was given", ErrTable, len(backends))
	}
	for _, b := range backends {
		if table.Index(b.Name) < 0 {
			return nil, fmt.Errorf("%w: the table lacks backend %q", ErrTable, b.Name)
		}
	}
	return table, nil
}

// build returns a snapshot over the healthy members of all, which is
// sorted by name. It builds the table and, for each of its N backends, the
// table without it, from which it keeps only the new owners of that
// backend's slots: N+1 table builds, O(N·M log M) time spread over
// GOMAXPROCS goroutines, and O(M) memory kept (4 bytes a slot). It runs
// off the request path.
func (t *Transport) build(all []*member) (*snapshot, error) {
	var healthy []*member
	var backends []maglev.Backend
	equal := true
	for _, m := range all {
		if m.healthy() {
			healthy = append(healthy, m)
			backends = append(backends, maglev.Backend{Name: m.b.Name, Weight: m.b.Weight})
			equal = equal && m.b.Weight == 0
		}
	}
	if equal {
		for i := range backends {
			backends[i].Weight = 1
		}
	}
	table, err := t.newTable(backends)
	if err != nil {
		return nil, err
	}
	// newTable checked that the table is over exactly these backends, and
	// a table lists its backends sorted by name, as all is: backend i of
	// the table is healthy[i].
	s := &snapshot{
		table:    table,
		members:  healthy,
		counts:   table.Counts(),
		fallback: make([]int32, table.Size()),
		all:      all,
		built:    time.Now(),
		round:    t.rounds.Load(),
	}
	if err := t.fillFallback(s, backends); err != nil {
		return nil, err
	}
	// Bound last: With forgets the counts of backends not in table, which
	// must not happen for a snapshot that is then not published.
	if t.bounded != nil {
		s.bounded = t.bounded.With(table)
	}
	return s, nil
}

// fillFallback fills s.fallback, the retry targets: for each of the N
// backends of s.table (backends, in its order), the table without it, from
// which it keeps the new owners of that backend's slots.
func (t *Transport) fillFallback(s *snapshot, backends []maglev.Backend) error {
	n, size := s.table.Len(), s.table.Size()
	for i := range s.fallback {
		s.fallback[i] = -1
	}
	if n < 2 {
		return nil
	}
	// Slots grouped by owner: owned[start[i]:start[i+1]] are backend i's.
	owners := s.table.AppendSlots(make([]uint32, 0, size))
	start := make([]int, n+1)
	for _, o := range owners {
		start[o+1]++
	}
	for i := range n {
		start[i+1] += start[i]
	}
	owned := make([]int32, size)
	next := slices.Clone(start[:n])
	for slot, o := range owners {
		owned[next[o]] = int32(slot)
		next[o]++
	}
	// One table per backend, without it; workers take backends in turn
	// and write only their backend's slots of s.fallback.
	workers := min(runtime.GOMAXPROCS(0), n)
	errs := make([]error, workers)
	var turn atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rest := make([]maglev.Backend, 0, n-1)
			for {
				i := int(turn.Add(1)) - 1
				if i >= n || errs[w] != nil {
					return
				}
				errs[w] = t.fallbackFor(s, backends, i, owned[start[i]:start[i+1]], rest)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fallbackFor fills s.fallback for the slots backend i of s.table owns,
// from the table over backends without it. backends are s.table's, in its
// order; rest is scratch space of n-1 entries.
func (t *Transport) fallbackFor(s *snapshot, backends []maglev.Backend, i int, slots []int32, rest []maglev.Backend) error {
	name := s.table.Backend(i)
	rest = append(append(rest[:0], backends[:i]...), backends[i+1:]...)
	without, err := t.newTable(rest)
	if err != nil {
		return err
	}
	if without.Size() != s.table.Size() {
		return fmt.Errorf("%w: the table without %q has %d slots, not %d", ErrTable, name, without.Size(), s.table.Size())
	}
	// Backend j of the table without i is backend j of s.table below i,
	// and j+1 from i on: both are sorted by name.
	for _, slot := range slots {
		if o := without.OwnerIndex(int(slot)); o >= 0 {
			if o >= i {
				o++
			}
			s.fallback[slot] = int32(o)
		}
	}
	return nil
}

// publishLocked builds the snapshot over all, publishes it and makes all
// the membership, logging the change. Call it with t.mu held. On error
// nothing changes.
func (t *Transport) publishLocked(all []*member, why string) error {
	s, err := t.build(all)
	if err != nil {
		return err
	}
	old := t.cur.Load()
	s.churn = old.table.Diff(s.table)
	s.rebuilds = old.rebuilds + 1
	t.members = all
	t.cur.Store(s)

	was, now := old.table.Backends(), s.table.Backends() // both sorted by name
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
	t.cfg.Logger.Info("httpmaglev: table rebuilt", "why", why, "healthy", len(now), "backends", len(all),
		"change", strings.Join(change, " "), "moved", s.churn, "slots", m,
		"percent", fmt.Sprintf("%.1f", 100*float64(s.churn)/float64(m)))
	return nil
}
