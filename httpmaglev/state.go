package httpmaglev

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/maglevlb/maglev/bounded"
)

// A State is a Transport's routing state at one moment, for an admin
// page: the backends, their health, slots and loads, and the last
// rebuild. Its JSON form is what StateHandler serves.
type State struct {
	Backends      []BackendState `json:"backends"`       // every configured backend, sorted by name
	Healthy       int            `json:"healthy"`        // backends in the table
	TableSize     int            `json:"table_size"`     // M
	BalanceFactor float64        `json:"balance_factor"` // 0: bounded loads off
	Requests      int64          `json:"requests"`       // requests routed to a backend
	Retries       int64          `json:"retries"`        // of them, sent a second time
	InFlight      int64          `json:"in_flight"`      // of them, holding a lease now (0 with bounded loads off, which count nothing)
	Spilled       uint64         `json:"spilled"`        // of them, placed past a full first candidate
	Forced        uint64         `json:"forced"`         // of them, placed on a full first candidate because every candidate was full
	LastRebuild   time.Time      `json:"last_rebuild"`   // when the current table was built
	HealthRounds  int64          `json:"health_rounds"`  // active health rounds started so far
	RebuildRound  int64          `json:"rebuild_round"`  // health rounds started when the current table was built
	LastChurn     Churn          `json:"last_churn"`     // its difference from the table before
	Rebuilds      int64          `json:"rebuilds"`       // tables published after the first
}

// A BackendState is one backend's part of a State.
type BackendState struct {
	Name      string `json:"name"`
	URL       string `json:"url"`
	Weight    uint32 `json:"weight"`    // its weight: as configured, 1 if none is given; 0 is drained
	Status    Status `json:"status"`    // where it is in its life cycle: serving, ejected, probing or draining
	Reason    Reason `json:"reason"`    // why it is out of service, when ejected or probing; else ""
	Drained   bool   `json:"drained"`   // weight 0: out of the table, still checked (status draining)
	Healthy   bool   `json:"healthy"`   // in the table
	Ejected   bool   `json:"ejected"`   // out by passive ejection, until readmitted (a passive Reason)
	Ejections int64  `json:"ejections"` // consecutive ejections, the backoff's n (see Config.EjectionTime)
	Slots     int    `json:"slots"`     // slots owned; 0 when not healthy
	InFlight  int64  `json:"in_flight"` // requests holding a lease on it; 0 with bounded loads off
	Capacity  int64  `json:"capacity"`  // with bounded loads, the most it may hold for one more request; else 0
	Spilled   uint64 `json:"spilled"`   // requests whose first candidate it was, placed on a later one because it was full
}

// Churn is a rebuild's difference from the table before it.
type Churn struct {
	Slots    int     `json:"slots"`    // slots whose owner changed, from maglev.Table.Diff
	Fraction float64 `json:"fraction"` // Slots / M
}

// State returns the Transport's routing state. It reads the current
// snapshot, the backends' health (Transport.status) and the counters
// without a lock; it is O(N log N) for N backends and allocates the
// result.
func (t *Transport) State() State {
	s := t.cur.Load()
	m := s.table.Size()
	now := time.Now().UnixNano()
	st := State{
		Healthy:       s.healthy,
		TableSize:     m,
		BalanceFactor: t.cfg.BalanceFactor,
		Requests:      t.requests.Load(),
		Retries:       t.retries.Load(),
		LastRebuild:   s.built,
		HealthRounds:  t.rounds.Load(),
		RebuildRound:  s.round,
		LastChurn:     Churn{Slots: s.churn, Fraction: float64(s.churn) / float64(m)},
		Rebuilds:      s.rebuilds,
		Backends:      make([]BackendState, 0, len(s.ms.all)),
	}
	loads := map[string]bounded.Load{}
	if s.bounded != nil {
		for _, l := range s.bounded.Loads(nil) {
			loads[l.Backend] = l
		}
		stats := s.bounded.Stats()
		st.InFlight, st.Spilled, st.Forced = stats.InFlight, stats.Spilled, stats.Forced
	}
	for _, mb := range s.ms.all {
		status, reason := t.status(s.ms, mb, now)
		b := BackendState{Name: mb.b.Name, URL: mb.b.URL.String(), Weight: mb.weight, Status: status, Reason: reason,
			Drained: status == StatusDraining, Ejected: reason.passive(), Ejections: mb.life.phase.Load().streak}
		if i := s.table.Index(mb.b.Name); i >= 0 && s.serving[i] {
			b.Healthy, b.Slots = true, s.counts[i]
			l := loads[mb.b.Name]
			b.InFlight, b.Capacity, b.Spilled = l.InFlight, l.Capacity, l.Spilled
		}
		st.Backends = append(st.Backends, b)
	}
	return st
}

// StateHandler returns a handler that serves State as indented JSON to
// GET and HEAD requests, and 405 to others. Serve it on an admin listener,
// not the proxy's own: backend names, addresses and health are not for
// clients.
func (t *Transport) StateHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(t.State()) // a write error means the client left; nothing to do
	})
}

// ErrorHandler is an httputil.ReverseProxy ErrorHandler for a proxy over
// a Transport: it answers 503 "no healthy backend" (with Retry-After: 1)
// when no backend is healthy, 400 "bad request body" when the client's
// request body failed (ErrRequestBody), and 502 "bad gateway" otherwise. It writes
// no backend name: those are for the admin listener.
func ErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ErrNoHealthyBackend) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "no healthy backend", http.StatusServiceUnavailable)
		return
	}
	if errors.Is(err, ErrRequestBody) {
		http.Error(w, "bad request body", http.StatusBadRequest)
		return
	}
	http.Error(w, "bad gateway", http.StatusBadGateway)
}
