package main

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/maglevlb/maglev"
)

// debugState is the JSON document /debug/maglev serves.
type debugState struct {
	Backends    []debugBackend `json:"backends"`     // all configured, sorted by name
	Healthy     int            `json:"healthy"`      // backends in the table
	TableSize   int            `json:"table_size"`   // M
	Key         string         `json:"key"`          // the -key flag
	LastRebuild time.Time      `json:"last_rebuild"` // when the current table was built
	LastChurn   debugChurn     `json:"last_churn"`   // its difference from the one before
	Rebuilds    int64          `json:"rebuilds"`     // tables built after the first
	Retries     int64          `json:"retries"`      // requests sent a second time

	BalanceFactor float64 `json:"balance_factor"` // the -balance-factor flag; 0 is off
	Requests      int64   `json:"requests"`       // requests routed to a backend
	InFlight      int64   `json:"in_flight"`      // of them, not yet answered
	Spilled       uint64  `json:"spilled"`        // of them, sent past a full first choice
}

type debugBackend struct {
	Name     string `json:"name"`
	URL      string `json:"url"`
	Healthy  bool   `json:"healthy"`
	Slots    int    `json:"slots"`     // slots owned; 0 when not healthy
	InFlight int64  `json:"in_flight"` // requests in flight on it; 0 when not healthy
	Capacity int64  `json:"capacity"`  // with bounded loads, the most it may hold now; 0 when off or not healthy
	Spilled  uint64 `json:"spilled"`   // its keys' requests spilled elsewhere since it last became healthy
}

type debugChurn struct {
	Slots    int     `json:"slots"`    // slots whose owner changed, from Diff
	Fraction float64 `json:"fraction"` // Slots / M
}

// state returns the proxy's current routing state.
func (p *proxy) state() debugState {
	s := p.cur.Load()
	loads := map[string]maglev.BackendLoad{}
	for _, l := range p.loads.Loads(nil) {
		loads[l.Backend] = l
	}
	stats := p.loads.Stats()
	m := s.table.Size()
	d := debugState{
		Healthy:     s.table.Len(),
		TableSize:   m,
		Key:         p.cfg.Key,
		LastRebuild: s.built,
		LastChurn:   debugChurn{Slots: s.churn, Fraction: float64(s.churn) / float64(m)},
		Rebuilds:    s.rebuilds,
		Retries:     p.retries.Load(),

		BalanceFactor: p.cfg.BalanceFactor,
		Requests:      p.requests.Load(),
		InFlight:      stats.InFlight,
		Spilled:       stats.Spilled,
	}
	for _, b := range p.backends {
		db := debugBackend{Name: b.name, URL: b.url.String()}
		if i := s.table.Index(b.name); i >= 0 {
			db.Healthy, db.Slots = true, s.counts[i]
			l := loads[b.name]
			db.InFlight, db.Capacity, db.Spilled = l.InFlight, l.Capacity, l.Spilled
		}
		d.Backends = append(d.Backends, db)
	}
	return d
}

// adminHandler serves the admin endpoints: /debug/maglev, the routing state
// as JSON.
func (p *proxy) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/maglev", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(p.state()) // a write error means the client left; nothing to do
	})
	return mux
}
