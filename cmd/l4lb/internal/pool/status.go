package pool

import (
	"encoding/hex"
	"net/netip"
	"slices"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/quiclb"
)

// Status is /debug/maglev/backends's JSON.
type Status struct {
	Name         string `json:"name"` // the service's, "default" for the flags' one
	Service      string `json:"service"`
	Digest       string `json:"digest"` // maglev.Table.Digest, hex
	DrainTimeout string `json:"drain_timeout"`
	Health       string `json:"health"` // the health check, or "none"
	// FailOpen is true while every backend of weight > 0 is down by the
	// health check and the service keeps its last table.
	FailOpen bool `json:"fail_open"`
	// SecondHopsUntil is when the window of the service's second hops
	// ends (RFC 3339), while it has some; Handoff is where those it
	// started with came from ("state file", "peer HOST:PORT"), if it
	// took a handoff when it started.
	SecondHopsUntil string `json:"second_hops_until,omitempty"`
	Handoff         string `json:"handoff,omitempty"`
	// QUIC are the service's QUIC-LB configurations with quic-lb on, the
	// one in force first.
	QUIC     []QUICStatus    `json:"quic_lb,omitempty"`
	Backends []BackendStatus `json:"backends"`
	Error    string          `json:"error,omitempty"` // the last update's, if it failed
}

type BackendStatus struct {
	Addr   string `json:"addr"`
	Weight uint32 `json:"weight"`
	// State is "live" (owns slots), "draining" (no new flow; its tracked
	// flows continue), "down" (out of the table by its health check: its
	// slots went to the others, its tracked flows are hashed again),
	// "unresolved" (-forward l2 with no MAC from the neighbour table: out
	// of service as if down, until it answers ARP or neighbour
	// discovery) or "drained" (a member of weight 0 or drained by l4lb
	// whose drain timeout has passed: out of the service).
	State string `json:"state"`
	// DrainLeft is the time left before a draining backend leaves the
	// service.
	DrainLeft string `json:"drain_left,omitempty"`
	Member    bool   `json:"member"`  // listed by the flags or etcd
	Drained   bool   `json:"drained"` // drained by -drain or the admin API
	// ServerID is its QUIC-LB server ID, in hex, with quic-lb on.
	ServerID string `json:"server_id,omitempty"`
	// Health is the health check's verdict, "up" or "down" ("" with no
	// check); HealthError the last failed probe's error, and HealthOK and
	// HealthFailed the probes passed and failed in a row (one is 0).
	Health       string `json:"health,omitempty"`
	HealthError  string `json:"health_error,omitempty"`
	HealthOK     int    `json:"health_ok"`
	HealthFailed int    `json:"health_failed"`
}

// withHealth fills in s's health fields for the backend at a.
func (p *Pool) withHealth(s BackendStatus, a netip.Addr) BackendStatus {
	if p.health != nil {
		s.Health, s.HealthError, s.HealthOK, s.HealthFailed = p.health.Health(a)
	}
	return s
}

func (p *Pool) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	st := Status{Name: p.name, Service: p.svc.String(), DrainTimeout: p.timeout.String(), Health: "none", FailOpen: p.open}
	if p.health != nil {
		st.Health = p.health.String()
	}
	if t := p.lb.Table(p.svc); t != nil {
		d := t.Digest()
		st.Digest = hex.EncodeToString(d[:])
	}
	if p.err != nil {
		st.Error = p.err.Error()
	}
	until, from := p.lb.SecondHops(p.svc)
	if !until.IsZero() {
		st.SecondHopsUntil = until.UTC().Format(time.RFC3339)
	}
	st.Handoff = from
	st.QUIC = p.quicStatus()
	ids := map[netip.Addr]quiclb.ServerID{}
	if p.quic.cur != nil {
		ids = p.serverIDs()
	}
	sid := func(a netip.Addr) string {
		if id, ok := ids[a]; ok {
			return id.String()
		}
		return ""
	}
	seen := map[netip.Addr]bool{}
	unresolved := p.unresolved()
	for _, b := range p.applied {
		seen[b.Addr] = true
		_, m := p.members[b.Addr]
		s := BackendStatus{Addr: b.Addr.String(), Weight: b.Weight, State: "live", Member: m, Drained: p.drained[b.Addr], ServerID: sid(b.Addr)}
		if b.Down {
			s.State = "down"
		} else if unresolved[b.Addr] {
			s.State = "unresolved"
		} else if b.Weight == 0 {
			s.State = "draining"
			if since, ok := p.since[b.Addr]; ok {
				s.DrainLeft = since.Add(p.timeout).Sub(now).Round(time.Millisecond).String()
			}
		}
		st.Backends = append(st.Backends, p.withHealth(s, b.Addr))
	}
	for a, m := range p.members {
		if !seen[a] {
			st.Backends = append(st.Backends, p.withHealth(BackendStatus{Addr: a.String(), Weight: m.Weight, State: "drained", Member: true, Drained: p.drained[a], ServerID: sid(a)}, a))
		}
	}
	slices.SortFunc(st.Backends, func(x, y BackendStatus) int {
		return netip.MustParseAddr(x.Addr).Compare(netip.MustParseAddr(y.Addr))
	})
	return st
}

// Table returns the service's table in the data plane (nil if it holds
// none).
func (p *Pool) Table() *maglev.Table { return p.lb.Table(p.svc) }
