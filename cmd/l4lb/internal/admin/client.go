package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/pool"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// A Client is the admin API of a running l4lb, at Addr (HOST:PORT), for
// the commands l4lb status, drain and reload.
type Client struct {
	Addr string
	HTTP *http.Client // nil: one with a 30 s timeout (a reload may start sources, 10 s each)
}

// An APIError is the admin API's answer to a request it refused: its
// status and its message ("l4lb: 198.18.0.99 is no backend of ...").
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return e.Message }

// do sends the request and decodes its answer into v.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, v any) error {
	u := url.URL{Scheme: "http", Host: c.Addr, Path: path, RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return err
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("the admin API of l4lb at %s: %w", c.Addr, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("the admin API of l4lb at %s: %w", c.Addr, err)
	}
	if resp.StatusCode/100 != 2 {
		return &APIError{Status: resp.StatusCode, Message: strings.TrimSpace(string(body))}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("the admin API of l4lb at %s: %s %s: %w", c.Addr, method, path, err)
	}
	return nil
}

// A Report is what l4lb status shows: the data plane's attach mode, each
// service with its backends (their state, weight, slots, health and
// packets), and BGP. It joins GET /debug/maglev and
// /debug/maglev/services.
type Report struct {
	Attach   string          `json:"attach"`
	Services []ServiceReport `json:"services"` // by name
	// QUIC are the data plane's QUIC-LB counters (xdpmaglev.Stats.QUIC),
	// when a service has quic-lb on.
	QUIC *QUICCounts `json:"quic_lb,omitempty"`
	BGP  *bgp.Status `json:"bgp,omitempty"`
}

// QUICCounts are the data plane's QUIC-LB counters: the packets routed by
// their connection ID, those decrypted, and those routed by the table, by
// reason.
type QUICCounts struct {
	CID       uint64            `json:"cid"`
	Decrypted uint64            `json:"decrypted"`
	Table     map[string]uint64 `json:"table"`
}

// A ServiceReport is a service of a Report.
type ServiceReport struct {
	Name      string `json:"name"`
	Service   string `json:"service"`                 // PROTO/VIP:PORT
	Forward   string `json:"forward"`                 // l2, ipip or gue
	Conntrack string `json:"conntrack"`               // on, or off for a stateless service
	Second    string `json:"second_chance,omitempty"` // the second chance window; none with second chance off
	// SecondHopsUntil and Handoff are pool.Status's: when the second hops
	// of the last change end, while it has some, and where those the
	// service started with came from.
	SecondHopsUntil string `json:"second_hops_until,omitempty"`
	Handoff         string `json:"handoff,omitempty"`
	TableSize       int    `json:"table_size"`
	Digest          string `json:"digest"`
	Health          string `json:"health"` // the check, or "none"
	FailOpen        bool   `json:"fail_open"`
	Error           string `json:"error,omitempty"` // the last update's, if it failed
	Packets         uint64 `json:"packets"`         // forwarded to its backends, since the data plane holds it
	// QUIC are its QUIC-LB configurations, the one in force first.
	QUIC     []pool.QUICStatus `json:"quic_lb,omitempty"`
	Backends []BackendReport   `json:"backends"` // by address
}

// A BackendReport is a backend of a ServiceReport.
type BackendReport struct {
	pool.BackendStatus
	// Slots are the backend's slots in the table the service uses (0
	// while it is down, draining or unresolved: the table without it).
	Slots int `json:"slots"`
	// Packets are the packets the data plane forwarded to the backend
	// since it joined the service: the data plane tracks flows, not
	// connections, so packets are what it can count honestly; a backend
	// that takes new flows has a count that grows.
	Packets uint64 `json:"packets"`
}

// Report returns the running l4lb's report.
func (c *Client) Report(ctx context.Context) (Report, error) {
	var st Status
	var svcs []pool.Status
	if err := c.do(ctx, http.MethodGet, "/debug/maglev", nil, &st); err != nil {
		return Report{}, err
	}
	if err := c.do(ctx, http.MethodGet, "/debug/maglev/services", nil, &svcs); err != nil {
		return Report{}, err
	}
	return join(st, svcs), nil
}

// join makes the Report of a running l4lb's summary and its services.
func join(st Status, svcs []pool.Status) Report {
	r := Report{Attach: st.Attach, BGP: st.BGP, Services: []ServiceReport{}}
	tables := map[string]ServiceStatus{}
	for _, s := range st.Services {
		tables[s.Name] = s
	}
	counts := map[string]xdpmaglev.ServiceStats{}
	for _, s := range st.Stats.Services {
		counts[s.Name] = s
	}
	for _, s := range svcs {
		t := tables[s.Name]
		sr := ServiceReport{Name: s.Name, Service: s.Service, Forward: t.Forward, Conntrack: t.Conntrack, Second: t.SecondChance, TableSize: t.Table.Size, Digest: s.Digest,
			Health: s.Health, FailOpen: s.FailOpen, Error: s.Error, Packets: counts[s.Service].Packets, QUIC: s.QUIC,
			SecondHopsUntil: s.SecondHopsUntil, Handoff: s.Handoff}
		if len(s.QUIC) > 0 {
			q := st.Stats.QUIC
			r.QUIC = &QUICCounts{CID: q.CID, Decrypted: q.Decrypted, Table: q.Table}
		}
		slots := map[string]int{}
		for _, b := range t.Table.Backends {
			slots[b.Addr] = b.Slots
		}
		packets := map[string]uint64{}
		for _, b := range counts[s.Service].Backends {
			packets[b.Addr.String()] = b.Packets
		}
		for _, b := range s.Backends {
			sr.Backends = append(sr.Backends, BackendReport{BackendStatus: b, Slots: slots[b.Addr], Packets: packets[b.Addr]})
		}
		r.Services = append(r.Services, sr)
	}
	return r
}

// Drain drains (on) or undrains the backend at addr, in the service named
// service or, with service "", in every service that has it; it returns
// the backends of each service that had it (the API's list). An address that is no
// backend of the services looked in is an APIError of status 404.
func (c *Client) Drain(ctx context.Context, addr, service string, on bool) ([]pool.Status, error) {
	path := "/undrain"
	if on {
		path = "/drain"
	}
	q := url.Values{"addr": {addr}}
	if service != "" {
		q.Set("service", service)
	}
	var out []pool.Status
	if err := c.do(ctx, http.MethodPost, path, q, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Reload has the running l4lb read its configuration file again and
// apply it (POST /reload), and returns what it did.
func (c *Client) Reload(ctx context.Context) (string, error) {
	var out map[string]string
	if err := c.do(ctx, http.MethodPost, "/reload", nil, &out); err != nil {
		return "", err
	}
	return out["reloaded"], nil
}
