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

// A member is one configured backend and its health. A member is
// replaced, not changed, when SetBackends changes its URL or weight, so b
// is immutable.
type member struct {
	b      Backend       // its Weight points to weight
	weight uint32        // the weight it has: 1 if none is given, 0 drained
	health string        // the URL the active check GETs; "" with active checks off
	mm     memberMetrics // its metrics' recording options
	life   life          // its health: see life
}

// A roster is the configured backends and the base: the table over
// those not drained, which failures take backends out of with
// maglev.Table.Without. SetBackends (and NewTransport) makes one, with one
// table build; every snapshot until the next shares it. It is immutable.
type roster struct {
	all      []*member        // every configured backend, sorted by name
	base     *maglev.Table    // the table over members
	members  []*member        // members[i] is base backend i: the members not drained
	backends []maglev.Backend // backends[i] is base backend i, with the weight the table was built with
}

// drained reports whether m is drained: its weight is 0 (Backend.Weight).
func (m *member) drained() bool { return m.weight == 0 }

// newMembership returns the membership of all, which is sorted by name,
// building its base with the table builder (see newTable), or reusing
// old's if the undrained backends and their weights are old's. It runs off
// the request path.
func (t *Transport) newMembership(all []*member, old *roster) (*roster, error) {
	ms := &roster{all: all, members: make([]*member, 0, len(all))}
	ms.backends = make([]maglev.Backend, 0, len(all))
	for _, m := range all {
		if !m.drained() {
			ms.members = append(ms.members, m)
			ms.backends = append(ms.backends, maglev.Backend{Name: m.b.Name, Weight: m.weight})
		}
	}
	if old != nil && slices.Equal(ms.backends, old.backends) {
		ms.base = old.base
		return ms, nil
	}
	var err error
	if ms.base, err = t.newTable(ms.backends); err != nil {
		return nil, err
	}
	return ms, nil
}

// A snapshot is the routing state RoundTrip reads: a membership, the table
// of its base without the backends out of service, and where retries go.
// It is immutable once published but for retry, a memo of a function of
// table alone, which changes how fast a retry target is found, never
// which; a change of health or membership publishes a new snapshot.
type snapshot struct {
	ms      *roster
	table   *maglev.Table   // ms.base.Without(the members out of service): what requests route by
	bounded *bounded.Picker // picks from table with the Transport's shared counts; nil when bounded loads are off
	serving []bool          // serving[i]: ms.members[i] is in service in table
	healthy int             // how many are
	counts  []int           // counts[i] is the number of slots backend i of table owns (0 out of service)

	// retry[i] holds where the requests that fail on backend i of table
	// are retried: filled the first time one is, and kept for the
	// snapshot's life (see retryTarget).
	retry []atomic.Pointer[retryTargets]

	built    time.Time // when the table was built
	round    int64     // health rounds started when it was built
	churn    int       // slots whose owner changed from the previous snapshot
	rebuilds int64     // snapshots published before this one
}

// serve returns the snapshot of ms with its members' health now: the base
// without the members not serving (see Transport.status), O(M + F·n) for F
// slots freed and n backends left, a fraction of a build; no build. It
// runs off the request path.
func (t *Transport) serve(ms *roster) (*snapshot, error) {
	now := time.Now().UnixNano()
	serving := make([]bool, len(ms.members))
	var out []string
	for i, m := range ms.members {
		st, _ := t.status(ms, m, now)
		if serving[i] = st == StatusServing; !serving[i] {
			out = append(out, m.b.Name)
		}
	}
	// Without keeps the base's backends and their indexes: backend i of
	// table is ms.members[i], in service or not.
	table, err := ms.base.Without(out...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTable, err) // not expected: out names distinct backends of the base
	}
	s := &snapshot{
		ms:      ms,
		table:   table,
		serving: serving,
		healthy: len(serving) - len(out),
		counts:  table.Counts(),
		retry:   make([]atomic.Pointer[retryTargets], len(ms.members)),
		built:   time.Now(),
		round:   t.rounds.Load(),
	}
	// Bound last: With forgets the counts of backends not in table, which
	// must not happen for a snapshot that is then not published.
	if t.bounded != nil {
		s.bounded = t.bounded.With(table)
	}
	return s, nil
}

// retryTarget returns the backend a request whose key hashes to h is
// retried on after backend failed of s.table failed, or -1 if there is
// none: the owner of the key's slot in s.table.Without(failed), which is
// where the key lives once failed is ejected. (With the backends out of
// service already, E, that is the base without E and failed: it depends
// only on the base and the failed set.) When failed owns the slot, that
// is its entry in s.retry; otherwise (a request that bounded loads spilled
// past its owner to failed) it is the slot's owner, which Without never
// moves.
//
// The first retry away from a backend in a snapshot fills its entry with
// one Table.Without, O(M + F·n) for its F slots (a fraction of a build,
// see BenchmarkRetryTarget), and concurrent ones away from it wait for
// that one; later ones cost a binary search over its slots, and none
// allocates. The entries of all the backends together hold at most one
// (slot, owner) pair per slot: 8 bytes a slot however many fail.
func (s *snapshot) retryTarget(h uint64, failed int) int {
	slot := int(h % uint64(s.table.Size()))
	if owner := s.table.LookupHashIndex(h); owner != failed {
		return owner
	}
	if s.healthy < 2 {
		return -1 // failed is the only backend in service
	}
	rt := s.retry[failed].Load()
	if rt == nil {
		s.retry[failed].CompareAndSwap(nil, new(retryTargets))
		rt = s.retry[failed].Load()
	}
	rt.once.Do(func() { rt.fill(s.table, failed, s.counts[failed]) })
	return rt.owner(slot)
}

// retryTargets are the slots one backend of a table owns and their owners
// in the table without it. They are filled once, by fill.
type retryTargets struct {
	once   sync.Once
	slots  []uint32 // the backend's slots, ascending
	owners []int32  // owners[k] owns slots[k] in the table without the backend
}

// fill computes rt for backend i of table, which owns n slots and is in
// service with another: one Without, whose changes from table are exactly
// i's slots.
func (rt *retryTargets) fill(table *maglev.Table, i, n int) {
	without, err := table.Without(table.Backend(i))
	if err != nil {
		return // not expected: i is in service in table; rt stays empty, and owner says -1
	}
	rt.slots, rt.owners = make([]uint32, 0, n), make([]int32, 0, n)
	for slot, owner := range table.Changes(without) {
		rt.slots = append(rt.slots, uint32(slot))
		rt.owners = append(rt.owners, int32(owner))
	}
}

// owner returns the owner of slot in the table without rt's backend, or -1
// if slot is not one of its slots. It is O(log F) for its F slots and does
// not allocate.
func (rt *retryTargets) owner(slot int) int {
	k, ok := slices.BinarySearch(rt.slots, uint32(slot))
	if !ok {
		return -1
	}
	return int(rt.owners[k])
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

// A rebuildReason says why a snapshot was published, in the log and the
// metrics (maglev.reason).
type rebuildReason string

// The reasons a snapshot is published.
const (
	rebuildBackends    rebuildReason = "backends set" // SetBackends changed the membership
	rebuildHealth      rebuildReason = "health"       // an active health round changed a backend's health
	rebuildEjection    rebuildReason = "ejection"     // a passive ejection took a backend out
	rebuildReadmission rebuildReason = "readmission"  // an ejection ended, with active checks off
)

// rebuildReasons are all of them, for the metrics.
var rebuildReasons = []rebuildReason{rebuildBackends, rebuildHealth, rebuildEjection, rebuildReadmission}

// publishLocked publishes the snapshot of ms with its members' health now
// (see serve), logging the change. Call it with t.mu held. On error
// nothing changes.
func (t *Transport) publishLocked(ms *roster, why rebuildReason) error {
	old := t.cur.Load()
	s, err := t.serve(ms)
	if err != nil {
		return err
	}
	s.churn = old.table.Diff(s.table)
	s.rebuilds = old.rebuilds + 1
	t.metrics.rebuilt(why, s.churn) // first, so that whoever sees the new table sees it counted
	t.cur.Store(s)

	if t.cfg.Logger.Enabled(context.Background(), slog.LevelInfo) {
		t.logRebuild(old, s, why)
	}
	return nil
}

// staleLocked reports whether the current snapshot does not serve exactly
// the members whose status is serving. Call it with t.mu held.
func (t *Transport) staleLocked() bool {
	s := t.cur.Load()
	for i, m := range s.ms.members {
		if st, _ := t.status(s.ms, m, 0); (st == StatusServing) != s.serving[i] {
			return true
		}
	}
	return false
}

// inService returns the names of the backends s serves, sorted.
func (s *snapshot) inService() []string {
	names := make([]string, 0, s.healthy)
	for i, m := range s.ms.members {
		if s.serving[i] {
			names = append(names, m.b.Name)
		}
	}
	return names
}

// maxLoggedChanges is how many joined and left backends a rebuild's log
// line names; the rest it counts.
const maxLoggedChanges = 8

// logRebuild logs the rebuild from old to s: the backends that joined and
// left the table (from the two snapshots' backends in service, both sorted
// by name: one merge, O(N)), and the slots that moved.
func (t *Transport) logRebuild(old, s *snapshot, why rebuildReason) {
	was, now := old.inService(), s.inService()
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
		case len(was) == 0 || (len(now) > 0 && now[0] < was[0]):
			note("+", now[0])
			now = now[1:]
		case len(now) == 0 || was[0] < now[0]:
			note("-", was[0])
			was = was[1:]
		default:
			was, now = was[1:], now[1:]
		}
	}
	if more > 0 {
		change = append(change, fmt.Sprintf("(and %d more)", more))
	}
	m := s.table.Size()
	t.cfg.Logger.Info("httpmaglev: table rebuilt", "why", why, "healthy", s.healthy, "backends", len(s.ms.all),
		"change", strings.Join(change, " "), "moved", s.churn, "slots", m,
		"percent", fmt.Sprintf("%.1f", 100*float64(s.churn)/float64(m)))
}
