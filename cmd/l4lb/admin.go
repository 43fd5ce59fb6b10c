package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// status is /debug/maglev's JSON.
type status struct {
	Attach   string          `json:"attach"`
	Services []serviceStatus `json:"services"` // by name
	Stats    xdpmaglev.Stats `json:"stats"`
	BGP      *bgp.Status     `json:"bgp,omitempty"` // with -bgp-asn: the peers' sessions and the VIPs' routes
}

// serviceStatus is a service's part of /debug/maglev.
type serviceStatus struct {
	Name    string       `json:"name"`
	Service string       `json:"service"`
	Forward string       `json:"forward"` // l2, ipip or gue
	Table   tableSummary `json:"table"`
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

// register serves the load balancer's admin API on mux:
//
//	GET  /debug/maglev                    every service's table summary, the counters, BGP; JSON
//	GET  /debug/maglev/services           every service's backends, their states and the table's digest
//	GET  /debug/maglev/backends?service=N one service's (the one service's without service=)
//	POST /drain?addr=IP[&service=N]       drain a backend (in every service that has it, without service=): no new flows; its flows continue until the drain timeout; 404 if no service looked in has it
//	POST /undrain?addr=IP[&service=N]     take it back (or a drain kept for an address no service has)
//	POST /reload                          with -config: read the file again and apply it (as SIGHUP does)
//	POST /drain-lb                        with -bgp-asn: take the load balancer out of service (drainLB)
//
// reload is nil without -config.
func (b *balancer) register(mux *http.ServeMux, reload func() (string, error)) {
	mux.Handle("POST /drain-lb", drainLB(b.sp))
	mux.HandleFunc("GET /debug/maglev", func(w http.ResponseWriter, r *http.Request) {
		st, err := b.lb.Stats()
		if err != nil {
			http.Error(w, "l4lb: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		s := status{Attach: b.lb.Mode().String(), Stats: st, Services: []serviceStatus{}}
		if b.sp != nil {
			s.BGP = b.sp.Status()
		}
		for _, r := range b.services() {
			ss := serviceStatus{Name: r.cfg.Name, Service: r.cfg.Svc.String(), Forward: r.cfg.Fwd.Forward.String()}
			if t := b.lb.Table(r.cfg.Svc); t != nil {
				ss.Table.Size = t.Size()
				counts, weights := t.Counts(), t.Weights()
				for i, name := range t.Backends() {
					ss.Table.Backends = append(ss.Table.Backends, tableBackend{Addr: name, Weight: weights[i], Slots: counts[i]})
				}
			}
			s.Services = append(s.Services, ss)
		}
		ops.WriteJSON(w, s)
	})
	mux.HandleFunc("GET /debug/maglev/services", func(w http.ResponseWriter, r *http.Request) {
		out := []backendsStatus{}
		for _, r := range b.services() {
			out = append(out, r.pool.status())
		}
		ops.WriteJSON(w, out)
	})
	mux.HandleFunc("GET /debug/maglev/backends", func(w http.ResponseWriter, r *http.Request) {
		rs, err := b.named(r.FormValue("service"), true)
		if err != nil {
			http.Error(w, "l4lb: "+err.Error(), http.StatusBadRequest)
			return
		}
		ops.WriteJSON(w, rs[0].pool.status())
	})
	for path, on := range map[string]bool{"POST /drain": true, "POST /undrain": false} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			a, err := netip.ParseAddr(r.FormValue("addr"))
			if err != nil {
				http.Error(w, "l4lb: addr: "+err.Error(), http.StatusBadRequest)
				return
			}
			rs, err := b.named(r.FormValue("service"), false)
			if err != nil {
				http.Error(w, "l4lb: "+err.Error(), http.StatusBadRequest)
				return
			}
			var out []backendsStatus
			for _, r := range rs {
				ok, err := r.pool.drain(a, on)
				if err != nil {
					http.Error(w, fmt.Sprintf("l4lb: service %q: %v", r.cfg.Name, err), http.StatusInternalServerError)
					return
				}
				if ok {
					out = append(out, r.pool.status())
				}
			}
			if len(out) == 0 { // nothing stored: a drain must not wait for the address to join
				where := fmt.Sprintf("service %q", r.FormValue("service"))
				if r.FormValue("service") == "" {
					where = "any service (looked in " + names(rs) + ")"
				}
				http.Error(w, fmt.Sprintf("l4lb: %v is no backend of %s: not a member, nor draining", a, where), http.StatusNotFound)
				return
			}
			if len(out) == 1 {
				ops.WriteJSON(w, out[0])
				return
			}
			ops.WriteJSON(w, out)
		})
	}
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
		if reload == nil {
			http.Error(w, "l4lb: no -config file to reload", http.StatusBadRequest)
			return
		}
		did, err := reload()
		if err != nil {
			http.Error(w, "l4lb: "+err.Error(), http.StatusBadRequest)
			return
		}
		ops.WriteJSON(w, map[string]string{"reloaded": did})
	})
}

// named returns the running service named name, or with name "" every
// service (one with one), or an error naming the services.
func (b *balancer) named(name string, one bool) ([]*running, error) {
	all := b.services()
	if name == "" {
		if one && len(all) != 1 {
			return nil, fmt.Errorf("name a service: service=NAME, one of %s", names(all))
		}
		return all, nil
	}
	if r := b.service(name); r != nil {
		return []*running{r}, nil
	}
	return nil, fmt.Errorf("no service %q: one of %s", name, names(all))
}

func names(rs []*running) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.cfg.Name)
	}
	return strings.Join(out, ", ")
}

// decapStatus is /debug/maglev's JSON with -decap.
type decapStatus struct {
	Decap   string               `json:"decap"` // the interface
	Attach  string               `json:"attach"`
	VIPs    []string             `json:"vips"`
	Sources []string             `json:"sources"` // the trusted outer sources, -decap-sources
	GUEPort uint16               `json:"gue_port"`
	Stats   xdpmaglev.DecapStats `json:"stats"`
}

// decapHandler serves the decapsulator's counters as JSON.
func decapHandler(d *xdpmaglev.Decap, c config.Decap) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := d.Stats()
		if err != nil {
			http.Error(w, "l4lb: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		s := decapStatus{Decap: c.Iface, Attach: d.Mode().String(), GUEPort: c.Opts.GUEPort, Stats: st}
		for _, a := range c.Opts.VIPs {
			s.VIPs = append(s.VIPs, a.String())
		}
		for _, p := range c.Opts.Sources {
			s.Sources = append(s.Sources, p.String())
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
func drainLB(sp *bgp.Speaker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sp == nil {
			http.Error(w, "l4lb: POST /drain-lb needs -bgp-asn: without BGP nothing takes this load balancer out of the routers' paths; remove it from their routes, then stop it", http.StatusConflict)
			return
		}
		sp.Retire()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(sp.Status()) // an error is the client gone
	})
}
