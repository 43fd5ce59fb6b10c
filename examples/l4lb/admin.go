package main

import (
	"encoding/json"
	"net/http"

	"github.com/maglevlb/maglev/xdpmaglev"
)

// status is /debug/maglev's JSON.
type status struct {
	Service string          `json:"service"`
	Attach  string          `json:"attach"`
	Table   tableSummary    `json:"table"`
	Stats   xdpmaglev.Stats `json:"stats"`
}

type tableSummary struct {
	Size     int            `json:"size"`
	Backends []tableBackend `json:"backends"`
}

type tableBackend struct {
	Addr   string `json:"addr"`
	Weight uint32 `json:"weight"`
	Slots  int    `json:"slots"`
}

// handler serves the table's summary and the counters as JSON.
func handler(lb *xdpmaglev.LB, c config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := lb.Stats()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		s := status{Service: c.svc.String(), Attach: lb.Mode().String(), Stats: st}
		if t := lb.Table(c.svc); t != nil {
			s.Table.Size = t.Size()
			counts, weights := t.Counts(), t.Weights()
			for i, name := range t.Backends() {
				s.Table.Backends = append(s.Table.Backends, tableBackend{Addr: name, Weight: weights[i], Slots: counts[i]})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s) // an error is the client gone
	})
}
