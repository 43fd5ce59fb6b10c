package main

import (
	"encoding/json"
	"net/http"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// status is /debug/maglev's JSON.
type status struct {
	Service string          `json:"service"`
	Attach  string          `json:"attach"`
	Forward string          `json:"forward"` // -forward: l2, ipip or gue
	Table   tableSummary    `json:"table"`
	Stats   xdpmaglev.Stats `json:"stats"`
	BGP     *bgpStatus      `json:"bgp,omitempty"` // with -bgp-asn: the peers' sessions and the VIP's route
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

// handler serves the table's summary and the counters as JSON, and the
// BGP speaker's state if sp is not nil.
func handler(lb *xdpmaglev.LB, c config, sp *speaker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := lb.Stats()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		s := status{Service: c.svc.String(), Attach: lb.Mode().String(), Forward: c.fwd.Forward.String(), Stats: st}
		if sp != nil {
			s.BGP = sp.status()
		}
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

// decapStatus is /debug/maglev's JSON with -decap.
type decapStatus struct {
	Decap   string               `json:"decap"` // the interface
	Attach  string               `json:"attach"`
	VIPs    []string             `json:"vips"`
	GUEPort uint16               `json:"gue_port"`
	Stats   xdpmaglev.DecapStats `json:"stats"`
}

// decapHandler serves the decapsulator's counters as JSON.
func decapHandler(d *xdpmaglev.Decap, c config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := d.Stats()
		if err != nil {
			http.Error(w, "l4lb: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		s := decapStatus{Decap: c.iface, Attach: d.Mode().String(), GUEPort: c.dopts.GUEPort, Stats: st}
		for _, a := range c.dopts.VIPs {
			s.VIPs = append(s.VIPs, a.String())
		}
		ops.WriteJSON(w, s)
	})
}

// drainLB serves POST /drain-lb, which takes the load balancer out of
// service: sp withdraws every VIP from the routers at once, waits
// -bgp-drain while they move the traffic to the other load balancers
// (this one forwarding all it still receives), then closes the sessions,
// and run detaches the data plane and returns. It answers 202 Accepted
// with the speaker's state once the VIPs are withdrawn from GoBGP's
// table, and the same to a repeated request; without BGP (sp nil), 409
// Conflict: nothing would move the traffic away.
func drainLB(sp *speaker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sp == nil {
			http.Error(w, "l4lb: POST /drain-lb needs -bgp-asn: without BGP nothing takes this load balancer out of the routers' paths; remove it from their routes, then stop it", http.StatusConflict)
			return
		}
		sp.retire()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(sp.status()) // an error is the client gone
	})
}
