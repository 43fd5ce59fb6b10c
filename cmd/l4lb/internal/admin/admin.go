// Package admin is l4lb's admin API, both sides: the handlers a running
// l4lb serves on its admin address (Register, DecapHandler), with the
// JSON of each answer, and the client the commands l4lb status, drain and
// reload use (Client), with the text table of l4lb status (WriteTable).
// The server shows and changes what small interfaces give it: the
// running services' pools (Services), the data plane's mode and counters,
// and the BGP speaker (Speaker); it holds no lock and no state of its
// own.
package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/pool"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// Status is /debug/maglev's JSON.
type Status struct {
	Attach   string          `json:"attach"`
	Services []ServiceStatus `json:"services"` // by name
	Stats    xdpmaglev.Stats `json:"stats"`
	BGP      *bgp.Status     `json:"bgp,omitempty"` // with BGP: the peers' sessions and the VIPs' routes
}

// ServiceStatus is a service's part of /debug/maglev.
type ServiceStatus struct {
	Name    string `json:"name"`
	Service string `json:"service"`
	Forward string `json:"forward"` // l2, ipip or gue
	// Conntrack is on, or off for a stateless service; SecondChance the
	// second chance window ("10m0s"), none with second chance off.
	Conntrack    string       `json:"conntrack"`
	SecondChance string       `json:"second_chance,omitempty"`
	Table        TableSummary `json:"table"`
}

// TableSummary is a service's table: its size, and each backend's slots.
type TableSummary struct {
	Size     int            `json:"size"`
	Backends []TableBackend `json:"backends"`
}

// TableBackend is a backend of a service's table.
type TableBackend struct {
	Addr   string `json:"addr"`
	Weight uint32 `json:"weight"`
	Slots  int    `json:"slots"`
}

// Services are the running services the admin API shows and drains
// (balancer.Balancer implements it): their pools, by name, and the data
// plane's attach mode and counters.
type Services interface {
	Pools() []*pool.Pool
	Mode() xdpmaglev.AttachMode
	Stats() (xdpmaglev.Stats, error)
}

// A Speaker is the BGP speaker as the admin API shows it, and takes the
// load balancer out of service with (bgp.Speaker implements it).
type Speaker interface {
	Status() *bgp.Status
	Retire() bool
}

// Register serves the load balancer's admin API on mux:
//
//	GET  /debug/maglev                    every service's table summary, the counters, BGP; JSON
//	GET  /debug/maglev/services           every service's backends, their states and the table's digest
//	GET  /debug/maglev/backends?service=N one service's (the one service's without service=)
//	POST /drain?addr=IP[&service=N]       drain a backend (in every service that has it, without service=): no new flows; its flows continue until the drain timeout; a list of each such service's backends, 404 if no service looked in has it
//	POST /undrain?addr=IP[&service=N]     take it back (or a drain kept for an address no service has); the same list
//	POST /reload                          with a configuration file: read it again and apply it (as SIGHUP does)
//	POST /drain-lb                        with BGP: take the load balancer out of service (see DrainLB)
//
// sp is nil without BGP; reload is nil without a configuration file.
func Register(mux *http.ServeMux, s Services, sp Speaker, reload func() (string, error)) {
	mux.Handle("POST /drain-lb", DrainLB(sp))
	mux.HandleFunc("GET /debug/maglev", func(w http.ResponseWriter, r *http.Request) { summary(w, s, sp) })
	mux.HandleFunc("GET /debug/maglev/services", func(w http.ResponseWriter, r *http.Request) {
		out := []pool.Status{}
		for _, p := range s.Pools() {
			out = append(out, p.Status())
		}
		ops.WriteJSON(w, out)
	})
	mux.HandleFunc("GET /debug/maglev/backends", func(w http.ResponseWriter, r *http.Request) {
		ps, err := named(s, r.FormValue("service"), true)
		if err != nil {
			http.Error(w, "l4lb: "+err.Error(), http.StatusBadRequest)
			return
		}
		ops.WriteJSON(w, ps[0].Status())
	})
	mux.HandleFunc("POST /drain", func(w http.ResponseWriter, r *http.Request) { drain(w, r, s, true) })
	mux.HandleFunc("POST /undrain", func(w http.ResponseWriter, r *http.Request) { drain(w, r, s, false) })
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

// summary answers GET /debug/maglev.
func summary(w http.ResponseWriter, s Services, sp Speaker) {
	st, err := s.Stats()
	if err != nil {
		http.Error(w, "l4lb: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	out := Status{Attach: s.Mode().String(), Stats: st, Services: []ServiceStatus{}}
	if sp != nil {
		out.BGP = sp.Status()
	}
	for _, p := range s.Pools() {
		o := p.Options()
		ss := ServiceStatus{Name: p.Name(), Service: p.Service().String(), Forward: o.Forward.String(), Conntrack: o.Conntrack.String()}
		if o.SecondChance > 0 {
			ss.SecondChance = o.SecondChance.String()
		}
		if t := p.Table(); t != nil {
			ss.Table.Size = t.Size()
			counts, weights := t.Counts(), t.Weights()
			for i, name := range t.Backends() {
				ss.Table.Backends = append(ss.Table.Backends, TableBackend{Addr: name, Weight: weights[i], Slots: counts[i]})
			}
		}
		out.Services = append(out.Services, ss)
	}
	ops.WriteJSON(w, out)
}

// drain answers POST /drain (on) and /undrain: a list of the backends of
// each service that had the address, whatever their number (one, with
// service=N); 404 if none did.
func drain(w http.ResponseWriter, r *http.Request, s Services, on bool) {
	a, err := netip.ParseAddr(r.FormValue("addr"))
	if err != nil {
		http.Error(w, "l4lb: addr: "+err.Error(), http.StatusBadRequest)
		return
	}
	ps, err := named(s, r.FormValue("service"), false)
	if err != nil {
		http.Error(w, "l4lb: "+err.Error(), http.StatusBadRequest)
		return
	}
	var out []pool.Status
	for _, p := range ps {
		ok, err := p.Drain(a, on)
		if err != nil {
			http.Error(w, fmt.Sprintf("l4lb: service %q: %v", p.Name(), err), http.StatusInternalServerError)
			return
		}
		if ok {
			out = append(out, p.Status())
		}
	}
	if len(out) == 0 { // nothing stored: a drain must not wait for the address to join
		where := fmt.Sprintf("service %q", r.FormValue("service"))
		if r.FormValue("service") == "" {
			where = "any service (looked in " + names(ps) + ")"
		}
		http.Error(w, fmt.Sprintf("l4lb: %v is no backend of %s: not a member, nor draining", a, where), http.StatusNotFound)
		return
	}
	ops.WriteJSON(w, out)
}

// named returns the running service named name, or with name "" every
// service (one with one), or an error naming the services.
func named(s Services, name string, one bool) ([]*pool.Pool, error) {
	all := s.Pools()
	if name == "" {
		if one && len(all) != 1 {
			return nil, fmt.Errorf("name a service: service=NAME, one of %s", names(all))
		}
		return all, nil
	}
	for _, p := range all {
		if p.Name() == name {
			return []*pool.Pool{p}, nil
		}
	}
	return nil, fmt.Errorf("no service %q: one of %s", name, names(all))
}

func names(ps []*pool.Pool) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name())
	}
	return strings.Join(out, ", ")
}

// DrainLB serves POST /drain-lb, which takes the load balancer out of
// service: sp withdraws every VIP from the routers at once, waits the
// BGP drain time while they move the traffic to the other load balancers
// (this one forwarding all it still receives), then closes the sessions,
// and l4lb detaches the data plane and exits. It answers 202 Accepted
// with the speaker's state once the VIPs are withdrawn from GoBGP's
// table, and the same to a repeated request; without BGP (sp nil), 409
// Conflict: nothing would move the traffic away.
func DrainLB(sp Speaker) http.Handler {
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

// DecapStatus is /debug/maglev's JSON with l4lb decap.
type DecapStatus struct {
	Decap   string               `json:"decap"` // the interface
	Attach  string               `json:"attach"`
	VIPs    []string             `json:"vips"`
	Sources []string             `json:"sources"` // the trusted outer sources, -decap-sources
	GUEPort uint16               `json:"gue_port"`
	Stats   xdpmaglev.DecapStats `json:"stats"`
}

// DecapHandler serves the decapsulator d's counters as JSON: the one on
// iface, for opts.
func DecapHandler(d *xdpmaglev.Decap, iface string, opts xdpmaglev.DecapOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := d.Stats()
		if err != nil {
			http.Error(w, "l4lb: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		s := DecapStatus{Decap: iface, Attach: d.Mode().String(), GUEPort: opts.GUEPort, Stats: st}
		for _, a := range opts.VIPs {
			s.VIPs = append(s.VIPs, a.String())
		}
		for _, p := range opts.Sources {
			s.Sources = append(s.Sources, p.String())
		}
		ops.WriteJSON(w, s)
	})
}
