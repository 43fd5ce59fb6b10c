package main

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/checker"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// A pool is the service's backends as l4lb knows them: the members (from
// the flags or from etcd, each with its weight), the backends drained by
// -drain or the admin API, and when each draining backend stopped taking
// new flows. It decides what the data plane holds, and puts it there.
//
// A backend is live when it is a member of weight > 0 and not drained by
// l4lb: it owns slots. It is draining when it was live and then was
// drained (weight 0 in its etcd Metadata, -drain, POST /drain) or left the
// members (deregistered, or its lease ran out): it stays in the service
// with weight 0 for the drain timeout, so it gets no new flow while the
// flows connection tracking holds for it keep going to it; then it leaves
// the service, and what is left of its flows is hashed again by the table.
// With a health check (health not nil), a member that fails it is down:
// it stays in the table's base and is out of service
// (xdpmaglev.Backend.Down, so the table is the base Without the down
// backends, and only their slots move); it comes back to exactly its slots
// when it passes again. The members decide who may be a backend, the
// health check who is up. If every backend of weight > 0 is down, the
// pool fails open: it keeps the down backends of the last table it
// applied (the last table itself, while the members stay the same), says
// so in a status line and in the admin API, and leaves it when one is up.
//
// A pool is safe for concurrent use by multiple goroutines. Two locks:
// applyMu orders the updates of the data plane, and is held across
// SetServiceOptions, which may wait for ARP or neighbour discovery; mu
// guards the pool's state and is never held across that wait, so that
// the admin API and the membership sources never stall behind it.
// applyMu is taken before mu, and mu before the checker's lock; the
// checker's probes hold none of them, and it calls apply with none held.
type pool struct {
	lb      *xdpmaglev.LB
	svc     xdpmaglev.Service
	log     *slog.Logger // status lines
	bgp     *bgp.Speaker // nil: no BGP; told after each apply whether the service is healthy; set before the first setMembers
	updates atomic.Int64 // the data plane's updates, for maglev.l4lb.service.updates

	applyMu    sync.Mutex               // held by apply across the data plane's update
	mu         sync.Mutex               // guards the fields below
	name       string                   // the service's name, for status lines
	fwd        xdpmaglev.ServiceOptions // how packets reach the backends
	timeout    time.Duration            // the drain timeout
	health     *checker.Checker         // nil: no health check; set before the first setMembers, or by reconfigure
	members    map[netip.Addr]member
	drained    map[netip.Addr]bool      // by -drain or the admin API
	since      map[netip.Addr]time.Time // when each draining backend began draining
	applied    []xdpmaglev.Backend      // what the data plane holds, by address
	appliedFwd xdpmaglev.ServiceOptions // and how it reaches them
	ready      bool                     // applied has been set once
	timer      *time.Timer              // the next drain timeout, if any
	open       bool                     // failing open: every backend down, the last table kept
	err        error                    // the last apply's error
	closed     bool
}

// A member is a backend of the flags or of etcd.
type member struct {
	weight uint32
	hw     net.HardwareAddr // nil: from the neighbour table
}

func newPool(lb *xdpmaglev.LB, svc xdpmaglev.Service, fwd xdpmaglev.ServiceOptions, timeout time.Duration, drained []netip.Addr, log *slog.Logger) *pool {
	p := &pool{lb: lb, svc: svc, fwd: fwd, timeout: timeout, log: log,
		members: map[netip.Addr]member{}, drained: map[netip.Addr]bool{}, since: map[netip.Addr]time.Time{}}
	for _, a := range drained {
		p.drained[a.Unmap()] = true
	}
	return p
}

// setMembers replaces the members and updates the data plane; it returns
// the data plane's error (the members are kept: the next change, or the
// next drain timeout, tries again).
func (p *pool) setMembers(m map[netip.Addr]member) error {
	p.members0(m)
	return p.apply()
}

// members0 replaces the members, and the health check's backends, and
// applies nothing.
func (p *pool) members0(m map[netip.Addr]member) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.members = m
	if p.health != nil {
		addrs := make([]netip.Addr, 0, len(m))
		for a := range m {
			addrs = append(addrs, a)
		}
		p.health.Set(addrs) // starts probes, waits for none
	}
}

// drain drains (on) or undrains (off) the backend at a, and applies. It
// returns false, changing nothing, if a is no backend of the pool: not a
// member, nor held by the data plane (draining after it left). Undrain
// also takes back a drain kept for an address that is neither (one the
// configuration drains, or one drained before it left).
func (p *pool) drain(a netip.Addr, on bool) (bool, error) {
	a = a.Unmap()
	p.mu.Lock()
	_, member := p.members[a]
	held := slices.ContainsFunc(p.applied, func(b xdpmaglev.Backend) bool { return b.Addr == a })
	if !member && !held && (on || !p.drained[a]) {
		p.mu.Unlock()
		return false, nil
	}
	if on {
		p.drained[a] = true
	} else {
		delete(p.drained, a)
	}
	p.mu.Unlock()
	return true, p.apply()
}

// plan returns the backends the data plane should hold at now, sorted by
// address, and the time of the next drain timeout (zero if none). It
// records when backends begin draining, and forgets those whose drain is
// over and that are no longer members. p.mu is held.
func (p *pool) plan(now time.Time) ([]xdpmaglev.Backend, time.Time) {
	var out []xdpmaglev.Backend
	var next time.Time
	add := func(a netip.Addr, m member, live bool) {
		if live {
			delete(p.since, a)
			out = append(out, xdpmaglev.Backend{Addr: a, Weight: m.weight, HW: m.hw})
			return
		}
		s, ok := p.since[a]
		if !ok {
			s = now
			p.since[a] = s
		}
		end := s.Add(p.timeout)
		if !now.Before(end) {
			return // drained: out of the service
		}
		if next.IsZero() || end.Before(next) {
			next = end
		}
		out = append(out, xdpmaglev.Backend{Addr: a, Weight: 0, HW: m.hw})
	}
	for a, m := range p.members {
		add(a, m, m.weight > 0 && !p.drained[a])
	}
	// Backends that left the members, live or draining, drain with the
	// hardware address the data plane has.
	gone := map[netip.Addr]net.HardwareAddr{}
	for _, b := range p.applied {
		if _, ok := p.members[b.Addr]; !ok {
			gone[b.Addr] = b.HW
		}
	}
	for a := range p.since {
		if _, ok := p.members[a]; !ok {
			if _, ok := gone[a]; !ok {
				gone[a] = nil
			}
		}
	}
	for a, hw := range gone {
		if s, ok := p.since[a]; ok && !now.Before(s.Add(p.timeout)) {
			delete(p.since, a) // its drain is over
			continue
		}
		add(a, member{hw: hw}, false)
	}
	slices.SortFunc(out, func(x, y xdpmaglev.Backend) int { return x.Addr.Compare(y.Addr) })
	return out, next
}

// apply puts the plan of the pool's state at the time it takes p.mu into
// the data plane if it differs from what the data plane holds, prints a
// status line when it does, and sets the timer for the next drain
// timeout. It holds p.applyMu throughout and p.mu except across
// SetServiceOptions (see pool).
func (p *pool) apply() error {
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return xdpmaglev.ErrClosed
	}
	defer p.tellBGP() // last, with p.mu held: what the data plane holds decides
	bs, fwd, todo := p.begin(time.Now())
	if !todo {
		return nil
	}
	p.mu.Unlock()
	err := p.lb.SetServiceOptions(p.svc, bs, fwd) // may wait for the neighbours: p.mu is free meanwhile
	p.mu.Lock()
	return p.end(bs, fwd, err)
}

// begin is apply's first half: it returns the backends and options the
// data plane should hold at now, and whether they differ from what it
// holds, and sets the timer for the next drain timeout. p.applyMu and
// p.mu are held.
func (p *pool) begin(now time.Time) ([]xdpmaglev.Backend, xdpmaglev.ServiceOptions, bool) {
	bs, next := p.plan(now)
	p.markDown(bs)
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if !next.IsZero() {
		p.timer = time.AfterFunc(next.Sub(now), p.tick)
	}
	// A backend that left the members while draining was added before the
	// first apply with no HW; the data plane keeps the address it has.
	if slices.EqualFunc(bs, p.applied, func(x, y xdpmaglev.Backend) bool {
		return x.Addr == y.Addr && x.Weight == y.Weight && x.Down == y.Down && (len(x.HW) == 0 || slices.Equal(x.HW, y.HW))
	}) && p.ready && p.fwd == p.appliedFwd {
		return nil, xdpmaglev.ServiceOptions{}, false
	}
	return bs, p.fwd, true
}

// end is apply's second half, once the data plane was given bs and fwd
// with the outcome err: it records them and prints the status line, or
// keeps err and tries again in a second. p.applyMu and p.mu are held.
func (p *pool) end(bs []xdpmaglev.Backend, fwd xdpmaglev.ServiceOptions, err error) error {
	if err != nil {
		p.err = err
		if p.timer == nil {
			p.timer = time.AfterFunc(time.Second, p.tick) // try again
		}
		return err
	}
	p.err = nil
	p.applied, p.ready, p.appliedFwd = bs, true, fwd
	p.updates.Add(1)
	p.logTable("")
	return nil
}

// logTable logs the status line of the backends applied and the table in
// use, with why, if not "", after it. p.mu is held.
func (p *pool) logTable(why string) {
	unresolved := p.unresolved()
	live, draining, down := 0, 0, 0
	for _, b := range p.applied {
		switch {
		case b.Down:
			down++
		case unresolved[b.Addr]:
		case b.Weight > 0:
			live++
		default:
			draining++
		}
	}
	line := fmt.Sprintf("%s%d backends live, %d draining", p.prefix(), live, draining)
	if down > 0 {
		line += fmt.Sprintf(", %d down", down)
	}
	if len(unresolved) > 0 {
		line += fmt.Sprintf(", %d unresolved", len(unresolved))
	}
	d := p.lb.Table(p.svc).Digest()
	line += ", table digest " + hex.EncodeToString(d[:])
	if why != "" {
		line += " (" + why + ")"
	}
	if len(unresolved) > 0 {
		p.log.Warn(line + ": the neighbour table has no MAC for " + strings.Join(addrStrings(unresolved), ", ") + ", out of service until it answers ARP")
		return
	}
	p.log.Info(line)
}

// unresolved returns the backends of the service that the data plane has
// out of service because the neighbour table has no MAC for them.
func (p *pool) unresolved() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, a := range p.lb.Unresolved(p.svc) {
		out[a] = true
	}
	return out
}

// addrStrings returns the addresses of set, sorted.
func addrStrings(set map[netip.Addr]bool) []string {
	as := slices.SortedFunc(maps.Keys(set), netip.Addr.Compare)
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}

// resolved logs the status line after the data plane took back a backend
// it had unresolved (xdpmaglev.Options.Changed).
func (p *pool) resolved() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || !p.ready {
		return
	}
	p.logTable("the neighbour table answered")
}

// applyAll applies the pools' plans to their data plane, lb, at once
// (xdpmaglev.LB.SetServices: one batch update for every table, where one
// apply each would wait on the kernel once each). If the batch fails,
// each pool applies on its own, and gets its own error. It returns the
// first error.
func applyAll(lb *xdpmaglev.LB, ps []*pool) error {
	var us []xdpmaglev.Update
	var todo []*pool
	var plans [][]xdpmaglev.Backend
	for _, p := range ps {
		p.applyMu.Lock()
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			p.applyMu.Unlock()
			continue
		}
		bs, fwd, do := p.begin(time.Now())
		if do {
			us = append(us, xdpmaglev.Update{Service: p.svc, Backends: bs, Options: fwd})
			todo, plans = append(todo, p), append(plans, bs)
		} else {
			p.tellBGP()
		}
		p.mu.Unlock()
		if !do {
			p.applyMu.Unlock()
		}
	}
	err := lb.SetServices(us)
	for i, p := range todo {
		if err == nil {
			p.mu.Lock()
			_ = p.end(plans[i], us[i].Options, nil)
			p.tellBGP()
			p.mu.Unlock()
		}
		p.applyMu.Unlock()
	}
	if err == nil {
		return nil
	}
	var first error
	for _, p := range todo {
		if err := p.apply(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// markDown sets Down on the backends of bs that the health check has
// down, and fails open when that would leave no backend of weight > 0 in
// service: then the backends down in the last table applied stay down,
// and the others up (none down if that too leaves none). It prints a
// status line when failing open begins or ends. p.mu is held.
func (p *pool) markDown(bs []xdpmaglev.Backend) {
	if p.health == nil {
		return
	}
	weighted, up := 0, 0
	for i := range bs {
		bs[i].Down = p.health.IsDown(bs[i].Addr)
		if bs[i].Weight > 0 {
			weighted++
			if !bs[i].Down {
				up++
			}
		}
	}
	open := weighted > 0 && up == 0
	if open {
		last := map[netip.Addr]bool{}
		for _, b := range p.applied {
			last[b.Addr] = b.Down
		}
		up = 0
		for i := range bs {
			bs[i].Down = last[bs[i].Addr]
			if bs[i].Weight > 0 && !bs[i].Down {
				up++
			}
		}
		if up == 0 {
			for i := range bs {
				bs[i].Down = false
			}
		}
	}
	if open != p.open {
		if open {
			p.log.Warn(fmt.Sprintf("FAILING OPEN: every backend of %v is down by its health check (%d of weight > 0); keeping the last table", p.svc, weighted))
		} else {
			p.log.Info(fmt.Sprintf("failing open no more: %d backends of %v up", up, p.svc))
		}
		p.open = open
		p.health.SetFailOpen(open)
	}
}

// tellBGP tells the BGP speaker whether the service has a healthy
// backend in the data plane: one of weight > 0 that is not down, and the
// pool not failing open. Failing open, the data plane still forwards on
// the last table, but the VIP is withdrawn: the routers then send its
// traffic to the load balancers that see a healthy backend, and the flows
// that still arrive here are served. p.mu is held.
func (p *pool) tellBGP() {
	if p.bgp == nil {
		return
	}
	live := 0
	for _, b := range p.applied {
		if b.Weight > 0 && !b.Down {
			live++
		}
	}
	switch {
	case p.open:
		p.bgp.Set(p.svc, false, "failing open: every backend is down by its health check")
	case live == 0:
		p.bgp.Set(p.svc, false, "no backend in service (none of weight > 0 up)")
	default:
		p.bgp.Set(p.svc, true, fmt.Sprintf("%d backends in service", live))
	}
}

// prefix starts the pool's status lines: "service NAME: ", or "" for the
// one service of the flags. p.mu is held.
func (p *pool) prefix() string {
	if p.name == "" || p.name == "default" {
		return ""
	}
	return fmt.Sprintf("service %q: ", p.name)
}

// reconfigure takes c's settings: name, forwarding, drain timeout, the
// drains of the configuration (those of old leave, c's come; the admin
// API's stay), and, if health, the checker h (nil: none). It returns the
// checker replaced, for the caller to close with no lock held; the next
// setMembers applies the rest.
func (p *pool) reconfigure(c config.Service, old []netip.Addr, h *checker.Checker, health bool) *checker.Checker {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.name, p.fwd, p.timeout = c.Name, c.Fwd, c.Timeout
	for _, a := range old {
		delete(p.drained, a.Unmap())
	}
	for _, a := range c.Drained {
		p.drained[a.Unmap()] = true
	}
	if !health {
		return nil
	}
	replaced := p.health
	p.health = h
	if h != nil {
		h.SetFailOpen(p.open)
	}
	if h == nil && p.open {
		p.open = false
	}
	return replaced
}

// checker returns the health checker, nil if none.
func (p *pool) checker() *checker.Checker {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.health
}

// currentMembers returns a copy of the members.
func (p *pool) currentMembers() map[netip.Addr]member {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.members)
}

// tick applies the plan when a drain timeout passes.
func (p *pool) tick() {
	_ = p.apply() // an error is kept in p.err, and tried again
}

// close stops the health check and the timer; nothing is applied after
// it returns.
func (p *pool) close() {
	if p.health != nil {
		p.health.Close() // first, with no lock held: a probe's transition may be waiting to apply
	}
	p.applyMu.Lock() // an apply under way ends first
	defer p.applyMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
	}
}

// backendsStatus is /debug/maglev/backends's JSON.
type backendsStatus struct {
	Name         string `json:"name"` // the service's, "default" for the flags' one
	Service      string `json:"service"`
	Digest       string `json:"digest"` // maglev.Table.Digest, hex
	DrainTimeout string `json:"drain_timeout"`
	Health       string `json:"health"` // the health check, or "none"
	// FailOpen is true while every backend of weight > 0 is down by the
	// health check and the service keeps its last table.
	FailOpen bool            `json:"fail_open"`
	Backends []backendStatus `json:"backends"`
	Error    string          `json:"error,omitempty"` // the last update's, if it failed
}

type backendStatus struct {
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
	// Health is the health check's verdict, "up" or "down" ("" with no
	// check); HealthError the last failed probe's error, and HealthOK and
	// HealthFailed the probes passed and failed in a row (one is 0).
	Health       string `json:"health,omitempty"`
	HealthError  string `json:"health_error,omitempty"`
	HealthOK     int    `json:"health_ok"`
	HealthFailed int    `json:"health_failed"`
}

// withHealth fills in s's health fields for the backend at a.
func (p *pool) withHealth(s backendStatus, a netip.Addr) backendStatus {
	if p.health != nil {
		s.Health, s.HealthError, s.HealthOK, s.HealthFailed = p.health.Health(a)
	}
	return s
}

func (p *pool) status() backendsStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	st := backendsStatus{Name: p.name, Service: p.svc.String(), DrainTimeout: p.timeout.String(), Health: "none", FailOpen: p.open}
	if p.health != nil {
		st.Health = p.health.Config().String()
	}
	if t := p.lb.Table(p.svc); t != nil {
		d := t.Digest()
		st.Digest = hex.EncodeToString(d[:])
	}
	if p.err != nil {
		st.Error = p.err.Error()
	}
	seen := map[netip.Addr]bool{}
	unresolved := p.unresolved()
	for _, b := range p.applied {
		seen[b.Addr] = true
		_, m := p.members[b.Addr]
		s := backendStatus{Addr: b.Addr.String(), Weight: b.Weight, State: "live", Member: m, Drained: p.drained[b.Addr]}
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
			st.Backends = append(st.Backends, p.withHealth(backendStatus{Addr: a.String(), Weight: m.weight, State: "drained", Member: true, Drained: p.drained[a]}, a))
		}
	}
	slices.SortFunc(st.Backends, func(x, y backendStatus) int {
		return netip.MustParseAddr(x.Addr).Compare(netip.MustParseAddr(y.Addr))
	})
	return st
}
