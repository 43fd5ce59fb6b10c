package httpmaglev

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/bounded"
)

// A member is one configured backend and what is known of its health. A
// member is replaced, not changed, when SetBackends changes its URL or
// weight, so b is immutable.
type member struct {
	b      Backend
	health string        // the URL the active check GETs; "" with active checks off
	mm     memberMetrics // its metrics' recording options

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
	ejectFor  atomic.Int64  // how long that ejection lasts at least, in nanoseconds

	// The backoff of consecutive ejections: streak is written under
	// Transport.ejectMu, readmittedAt on readmission.
	streak       atomic.Int64 // consecutive ejections, less one for every EjectionTime spent in since
	readmittedAt atomic.Int64 // when it was last readmitted, in Unix nanoseconds; 0 if never
}

// healthy reports whether m belongs in the table. Call it with
// Transport.mu held.
func (m *member) healthy() bool { return m.up && !m.ejected.Load() }

// A snapshot is the routing state RoundTrip reads: the table over the
// healthy backends, their members, and the retry targets. It is immutable
// once published, but for the tables without one backend, which it builds
// the first time a retry needs one; a rebuild publishes a new snapshot.
type snapshot struct {
	table    *maglev.Table
	bounded  *bounded.Picker  // picks from table with the Transport's shared counts; nil when bounded loads are off
	members  []*member        // members[i] is table backend i
	backends []maglev.Backend // backends[i] is table backend i, with the weight the table was built with
	counts   []int            // counts[i] is the number of slots backend i owns

	// without[i] is the table built without backend i: where the keys of
	// i's slots live once i is dropped. It is built the first time a
	// request to i fails and is retried, by that request, and kept for
	// the snapshot's life.
	without     []atomic.Pointer[lazyTable]
	retryTables atomic.Int32 // how many of without are made, at most maxRetryTables
	t           *Transport   // builds them, with its table builder, and logs a failure

	all      []*member // every configured backend, sorted by name
	built    time.Time // when the table was built
	round    int64     // health rounds started when it was built
	churn    int       // slots whose owner changed from the previous snapshot
	rebuilds int64     // snapshots published before this one
}

// A lazyTable is a table built once, by the first caller that needs it;
// callers that come while it is being built wait for that build.
type lazyTable struct {
	once  sync.Once
	table *maglev.Table // nil if the build failed
	built atomic.Bool   // set once table is written
}

// maxRetryTables is how many tables without one backend a snapshot builds
// for retries. Past that many backends failing under one snapshot,
// something larger than a backend is failing (the network, a zone), and a
// retry goes to the key's next candidate instead: no more builds, nor
// memory, while the failure lasts.
const maxRetryTables = 16

// retryTarget returns the backend a request whose key hashes to h should be
// retried on after backend failed failed: the owner of the key's slot in
// the table without failed, or -1 if there is none. When failed owns the
// key's slot, that is the slot's owner in s.withoutTable(failed) (or, once
// the snapshot has built maxRetryTables of those, the key's next candidate
// after failed); otherwise (a request that bounded loads spilled past its
// owner) it is the slot's owner, which keeps the slot when failed is
// dropped unless the slot is one of the few that move besides failed's.
// retryTarget is O(1) and does not allocate, but for the first retry away
// from a backend in a snapshot, which builds the table without it.
func (s *snapshot) retryTarget(h uint64, failed int) int {
	owner := s.table.LookupHashIndex(h)
	if owner != failed {
		return owner
	}
	without := s.withoutTable(failed)
	if without == nil {
		if s.table.NumBackends() < 2 {
			return -1
		}
		for c := range s.table.CandidatesHash(h) {
			if c != failed {
				return c
			}
		}
		return -1
	}
	// Backend j of the table without failed is backend j of s.table below
	// failed, and j+1 from failed on: both are sorted by name.
	o := without.LookupHashIndex(h)
	if o >= failed {
		o++
	}
	return o
}

// withoutTable returns the table over s's backends without backend i,
// building it on the first call for i; nil if s has one backend, if s has
// built maxRetryTables already, or if the build failed (which it logs at
// Error). Concurrent callers for the same i wait for one build; callers for
// other backends do not wait for it.
func (s *snapshot) withoutTable(i int) *maglev.Table {
	if len(s.backends) < 2 {
		return nil
	}
	lt := s.without[i].Load()
	if lt == nil {
		if s.retryTables.Add(1) > maxRetryTables {
			s.retryTables.Add(-1)
			return nil
		}
		if !s.without[i].CompareAndSwap(nil, new(lazyTable)) {
			s.retryTables.Add(-1) // another request made it first
		}
		lt = s.without[i].Load()
	}
	lt.once.Do(func() {
		rest := make([]maglev.Backend, 0, len(s.backends)-1)
		rest = append(append(rest, s.backends[:i]...), s.backends[i+1:]...)
		table, err := s.t.newTable(rest)
		if err == nil && table.Size() != s.table.Size() {
			err = fmt.Errorf("%w: the table without %q has %d slots, not %d", ErrTable, s.backends[i].Name, table.Size(), s.table.Size())
		}
		if err != nil {
			s.t.cfg.Logger.Error("httpmaglev: no retry target: building the table without a backend failed", "backend", s.backends[i].Name, "err", err)
		} else {
			lt.table = table
		}
		lt.built.Store(true)
	})
	return lt.table
}

// builtWithout returns the table without one backend that old built for a
// retry, if it is the table over exactly backends, and nil otherwise. A
// backend ejected after failing requests was retried away from first, so
// its ejection publishes that table instead of building it again.
func builtWithout(old *snapshot, backends []maglev.Backend) *maglev.Table {
	if old == nil || len(backends) != len(old.backends)-1 {
		return nil
	}
	// The one backend of old's missing from backends: the first index
	// where they differ (both are sorted by name).
	i := 0
	for i < len(backends) && backends[i] == old.backends[i] {
		i++
	}
	if !slices.Equal(backends[i:], old.backends[i+1:]) {
		return nil
	}
	if lt := old.without[i].Load(); lt != nil && lt.built.Load() {
		return lt.table
	}
	return nil
}

// newTable builds the table over backends, which are sorted by name, with
// cfg's builder: cfg.NewTable if set, else maglev.NewWeighted with
// cfg.Hasher. An empty list gives the empty table (maglev.New's), whatever
// the builder. It checks that a table NewTable built is over exactly the
// given names.
func (t *Transport) newTable(backends []maglev.Backend) (*maglev.Table, error) {
	if len(backends) == 0 {
		table, err := maglev.New(nil, t.cfg.TableSize, t.cfg.Hasher)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrTable, err)
		}
		return table, nil
	}
	if t.cfg.NewTable == nil {
		table, err := maglev.NewWeighted(backends, t.cfg.TableSize, t.cfg.Hasher)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrTable, err)
		}
		return table, nil
	}
	table, err := t.cfg.NewTable(slices.Clone(backends), t.cfg.TableSize)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTable, err)
	}
	if table == nil || table.NumBackends() != len(backends) {
		return nil, fmt.Errorf("%w: the table is not over the %d backends it was given", ErrTable, len(backends))
	}
	for _, b := range backends {
		if table.Index(b.Name) < 0 {
			return nil, fmt.Errorf("%w: the table lacks backend %q", ErrTable, b.Name)
		}
	}
	return table, nil
}

// build returns a snapshot over the healthy members of all that are not
// drained (weight 0 in a weighted list), which is sorted by name: one table build, O(M log M) for N backends when
// maglev.NewWeighted builds it, or none when old built that table for its
// retries already (see builtWithout). The tables without each backend,
// which retries go to, are built later, one at a time, when a retry first
// needs one. It runs off the request path.
func (t *Transport) build(all []*member, old *snapshot) (*snapshot, error) {
	// A list that gives no weight (every Weight 0) is unweighted: each
	// backend weighs 1. In a weighted list, weight 0 is drained: the
	// backend stays configured and checked, but is not in the table.
	weighted := slices.ContainsFunc(all, func(m *member) bool { return m.b.Weight > 0 })
	healthy := make([]*member, 0, len(all))
	backends := make([]maglev.Backend, 0, len(all))
	for _, m := range all {
		if m.healthy() && (!weighted || m.b.Weight > 0) {
			healthy = append(healthy, m)
			backends = append(backends, maglev.Backend{Name: m.b.Name, Weight: max(m.b.Weight, 1)})
		}
	}
	table := builtWithout(old, backends)
	if table == nil {
		var err error
		if table, err = t.newTable(backends); err != nil {
			return nil, err
		}
	}
	// newTable checked that the table is over exactly these backends, and
	// a table lists its backends sorted by name, as all is: backend i of
	// the table is healthy[i].
	s := &snapshot{
		table:    table,
		members:  healthy,
		backends: backends,
		counts:   table.Counts(),
		without:  make([]atomic.Pointer[lazyTable], len(backends)),
		t:        t,
		all:      all,
		built:    time.Now(),
		round:    t.rounds.Load(),
	}
	// Bound last: With forgets the counts of backends not in table, which
	// must not happen for a snapshot that is then not published.
	if t.bounded != nil {
		s.bounded = t.bounded.With(table)
	}
	return s, nil
}

// publishLocked builds the snapshot over all, publishes it and makes all
// the membership, logging the change. Call it with t.mu held. On error
// nothing changes.
func (t *Transport) publishLocked(all []*member, why string) error {
	old := t.cur.Load()
	s, err := t.build(all, old)
	if err != nil {
		return err
	}
	s.churn = old.table.Diff(s.table)
	s.rebuilds = old.rebuilds + 1
	t.members = all
	t.metrics.rebuilt(why, s.churn) // first, so that whoever sees the new table sees it counted
	t.cur.Store(s)

	if t.cfg.Logger.Enabled(context.Background(), slog.LevelInfo) {
		t.logRebuild(old, s, why)
	}
	return nil
}

// maxLoggedChanges is how many joined and left backends a rebuild's log
// line names; the rest it counts.
const maxLoggedChanges = 8

// logRebuild logs the rebuild from old to s: the backends that joined and
// left the table (from the two tables' backends, both sorted by name: one
// merge, O(N)), and the slots that moved.
func (t *Transport) logRebuild(old, s *snapshot, why string) {
	was, now := old.backends, s.backends
	var change []string
	more := 0
	note := func(sign, name string) {
		if len(change) < maxLoggedChanges {
			change = append(change, sign+name)
		} else {
			more++
		}
	}
	for len(was) > 0 || len(now) > 0 {
		switch {
		case len(was) == 0 || (len(now) > 0 && now[0].Name < was[0].Name):
			note("+", now[0].Name)
			now = now[1:]
		case len(now) == 0 || was[0].Name < now[0].Name:
			note("-", was[0].Name)
			was = was[1:]
		default:
			was, now = was[1:], now[1:]
		}
	}
	if more > 0 {
		change = append(change, fmt.Sprintf("(and %d more)", more))
	}
	m := s.table.Size()
	t.cfg.Logger.Info("httpmaglev: table rebuilt", "why", why, "healthy", len(s.backends), "backends", len(s.all),
		"change", strings.Join(change, " "), "moved", s.churn, "slots", m,
		"percent", fmt.Sprintf("%.1f", 100*float64(s.churn)/float64(m)))
}
