// Package pool is one service's backends as l4lb knows them, and what
// its data plane holds of them: the members (the configuration's, or a
// membership source's, each with its weight), the drains, the drain
// timeouts, the health check's verdicts, failing open, and the status
// line, admin API status and BGP wish of each change. It owns the service
// in the data plane (a DataPlane: xdpmaglev.LB) and nothing else: it asks
// a Health who is down and tells an Announcer whether the service has a
// healthy backend, two small interfaces that the health checker and the
// BGP speaker implement.
//
// Locking: Pool.applyMu orders the updates of the data plane and is held
// across SetService, which may wait for ARP or neighbour
// discovery; Pool.mu guards the pool's state and is never held across
// that wait. applyMu is taken before mu, and mu before the Health's own
// lock; the Announcer is told with mu held and waits for nothing.
package pool

import (
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/quiclb"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// A Health is a service's health check, as the pool asks it
// (checker.Checker implements it): the backends it probes, which are
// down, what the admin API shows of each, and the service failing open.
// The pool calls it with its mu held: its methods wait for nothing.
type Health interface {
	// Set makes addrs the backends probed.
	Set(addrs []netip.Addr)
	// IsDown reports whether the backend at a is down.
	IsDown(a netip.Addr) bool
	// Health returns a's health for the admin API: its state ("up",
	// "down", "unknown" before its first probe; "" if not probed), the
	// last failed probe's error and the probes passed and failed in a row.
	Health(a netip.Addr) (state, lastErr string, ok, fail int)
	// SetFailOpen records whether the service fails open.
	SetFailOpen(open bool)
	// String describes the check.
	String() string
	// Close stops it, and waits for the probes under way.
	Close()
}

// A DataPlane is the data plane as a pool uses it: it sets the
// service's backends (one service, or many services at once), and reads
// back its table, its unresolved backends and its second hops.
// xdpmaglev.LB implements it; the tests, a fake (package pooltest).
type DataPlane interface {
	SetService(svc xdpmaglev.Service, backends []xdpmaglev.Backend, opts xdpmaglev.ServiceOptions) error
	SetServices(us []xdpmaglev.Update) error
	Table(svc xdpmaglev.Service) *maglev.Table
	Unresolved(svc xdpmaglev.Service) []netip.Addr
	SecondHops(svc xdpmaglev.Service) (until time.Time, from string)
}

var _ DataPlane = (*xdpmaglev.LB)(nil)

// An Announcer is told, after each change of what the data plane holds,
// whether the service has a healthy backend (bgp.Speaker implements it,
// announcing or withdrawing the service's VIP). It waits for nothing: the
// pool tells it with its mu held.
type Announcer interface {
	Set(svc xdpmaglev.Service, healthy bool, why string)
}

// A Pool is the service's backends as l4lb knows them: the members (from
// the flags, the file or a membership source, each with its weight), the
// backends drained by the configuration or the admin API, and when each
// draining backend stopped taking new flows. It decides what the data
// plane holds, and puts it there.
//
// A backend is live when it is a member of weight > 0 and not drained by
// l4lb: it owns slots. It is draining when it was live and then was
// drained (weight 0 in its etcd Metadata, drain, POST /drain) or left the
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
// so in a log record and in the admin API, and leaves it when one is up.
//
// A Pool is safe for concurrent use by multiple goroutines. Two locks:
// applyMu orders the updates of the data plane, and is held across
// SetService, which may wait for ARP or neighbour discovery; mu
// guards the pool's state and is never held across that wait, so that
// the admin API and the membership sources never stall behind it.
// applyMu is taken before mu, and mu before the checker's lock; the
// checker's probes hold none of them, and it calls Apply with none held.
type Pool struct {
	lb        DataPlane
	svc       xdpmaglev.Service
	base      *slog.Logger // New's: log is it with the service's name
	bgp       Announcer    // nil: no BGP; told after each apply whether the service is healthy
	updates   atomic.Int64 // the data plane's updates, for maglev.l4lb.service.updates
	onApplied func()       // nil, or called after each update of the data plane (OnApplied), with p.mu held

	applyMu    sync.Mutex               // held by Apply across the data plane's update
	mu         sync.Mutex               // guards the fields below
	name       string                   // the service's name
	log        *slog.Logger             // base, with the name
	fwd        xdpmaglev.ServiceOptions // how packets reach the backends
	timeout    time.Duration            // the drain timeout
	health     Health                   // nil: no health check; set before the first members, or by Reconfigure
	members    map[netip.Addr]Member
	drained    map[netip.Addr]bool            // by the configuration's drain or the admin API
	since      map[netip.Addr]time.Time       // when each draining backend began draining
	applied    []xdpmaglev.Backend            // what the data plane holds, by address
	appliedFwd xdpmaglev.ServiceOptions       // and how it reaches them
	ready      bool                           // applied has been set once
	timer      *time.Timer                    // the next drain timeout, if any
	open       bool                           // failing open: every backend down, the last table kept
	quic       quicPlan                       // QUIC-LB: the configuration in force and the earlier ones
	lastIDs    map[netip.Addr]quiclb.ServerID // each backend's last server ID, for one that left the members and drains
	err        error                          // the last apply's error
	closed     bool
}

// A Member is a backend of the configuration or of a membership source.
type Member struct {
	Weight   uint32
	Down     bool             // out of service by its source (a Kubernetes node not Ready, or with no ready endpoint), as the health check's down
	HW       net.HardwareAddr // nil: from the neighbour table
	ServerID quiclb.ServerID  // QUIC-LB: its server ID in the configuration in force; zero: none
}

// New returns the pool of the service c in the data plane lb, with no
// member yet, telling an (if not nil) whether the service is healthy
// and logging its records to log, with the service's name as their
// "service" attribute.
func New(lb DataPlane, c config.Service, an Announcer, log *slog.Logger) *Pool {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pool{lb: lb, svc: c.Svc, name: c.Name, fwd: c.Fwd, timeout: c.Timeout, base: log, log: log.With("service", c.Name), bgp: an,
		members: map[netip.Addr]Member{}, drained: map[netip.Addr]bool{}, since: map[netip.Addr]time.Time{},
		quic: quicPlan{cur: c.QUIC}, lastIDs: map[netip.Addr]quiclb.ServerID{}}
	for _, a := range c.Drained {
		p.drained[a.Unmap()] = true
	}
	return p
}

// OnApplied makes f called after each update of the data plane, before
// the first: with the pool's lock held, so f must wait for nothing (l4lb
// tells its state file's writer, which writes from a goroutine of its
// own).
func (p *Pool) OnApplied(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onApplied = f
}

// SetHealth gives the pool its health check, before its first members.
func (p *Pool) SetHealth(h Health) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.health = h
}

// Adopt makes applied what the data plane holds of the service, as an
// earlier l4lb left it (xdpmaglev.LB.Backends), before the first
// members: those that are not members then drain, as they would have had
// the earlier l4lb seen them leave.
func (p *Pool) Adopt(applied []xdpmaglev.Backend) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.applied = applied
}

// Name returns the service's name.
func (p *Pool) Name() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.name
}

// Service returns the service: its data plane key.
func (p *Pool) Service() xdpmaglev.Service { return p.svc }

// Options returns the service's options: how its packets reach its
// backends, its table size, its second chance window and its connection
// tracking, as configured.
func (p *Pool) Options() xdpmaglev.ServiceOptions {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fwd
}

// Updates returns the data plane's updates of the service so far, for
// maglev.l4lb.service.updates.
func (p *Pool) Updates() int64 { return p.updates.Load() }

// SetMembers replaces the members and updates the data plane; it returns
// the data plane's error (the members are kept: the next change, or the
// next drain timeout, tries again).
func (p *Pool) SetMembers(m map[netip.Addr]Member) error {
	p.Stage(m)
	return p.Apply()
}

// Stage replaces the members, and the health check's backends, and
// applies nothing.
func (p *Pool) Stage(m map[netip.Addr]Member) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.members = m
	for a, mb := range m {
		if mb.ServerID.Len() > 0 {
			p.lastIDs[a] = mb.ServerID
		}
	}
	if p.health != nil {
		addrs := make([]netip.Addr, 0, len(m))
		for a := range m {
			addrs = append(addrs, a)
		}
		p.health.Set(addrs) // starts probes, waits for none
	}
}

// Drain drains (on) or undrains (off) the backend at a, and applies. It
// returns false, changing nothing, if a is no backend of the pool: not a
// member, nor held by the data plane (draining after it left). Undrain
// also takes back a drain kept for an address that is neither (one the
// configuration drains, or one drained before it left).
func (p *Pool) Drain(a netip.Addr, on bool) (bool, error) {
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
	return true, p.Apply()
}

// plan returns the backends the data plane should hold at now, sorted by
// address, and the time of the next drain timeout (zero if none). It
// records when backends begin draining, and forgets those whose drain is
// over and that are no longer members. p.mu is held.
func (p *Pool) plan(now time.Time) ([]xdpmaglev.Backend, time.Time) {
	var out []xdpmaglev.Backend
	var next time.Time
	add := func(a netip.Addr, m Member, live bool) {
		if live {
			delete(p.since, a)
			out = append(out, xdpmaglev.Backend{Addr: a, Weight: m.Weight, HW: m.HW, Down: m.Down})
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
		out = append(out, xdpmaglev.Backend{Addr: a, Weight: 0, HW: m.HW})
	}
	for a, m := range p.members {
		add(a, m, m.Weight > 0 && !p.drained[a])
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
			delete(p.lastIDs, a)
			continue
		}
		add(a, Member{HW: hw}, false)
	}
	slices.SortFunc(out, func(x, y xdpmaglev.Backend) int { return x.Addr.Compare(y.Addr) })
	return out, next
}

// Reconfigure takes c's settings: name, forwarding, drain timeout, the
// drains of the configuration (those of old leave, c's come; the admin
// API's stay), and, if health, the checker h (nil: none). It returns the
// checker replaced, for the caller to close with no lock held; the next
// SetMembers applies the rest.
func (p *Pool) Reconfigure(c config.Service, old []netip.Addr, h Health, health bool) Health {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.Name != p.name {
		p.log = p.base.With("service", c.Name)
	}
	p.name, p.fwd, p.timeout = c.Name, c.Fwd, c.Timeout
	if p.quic.reconfigure(c.QUIC, p.appliedIDs()) {
		p.log.Warn("QUIC-LB configuration changed in place: the connection IDs issued under it before no longer decode, and their connections are routed by the table (rotate to another -quic-lb-config-id to keep them)",
			"quic_lb_config_id", c.QUIC.Config.ID)
	}
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

// Members returns a copy of the members.
func (p *Pool) Members() map[netip.Addr]Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.members)
}

// tick applies the plan when a drain timeout passes.
func (p *Pool) tick() {
	_ = p.Apply() // an error is kept in p.err, and tried again
}

// Close stops the health check and the timer; nothing is applied after
// it returns.
func (p *Pool) Close() {
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
