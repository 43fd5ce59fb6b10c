package pool

import (
	"encoding/hex"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// Apply puts the plan of the pool's state at the time it takes p.mu into
// the data plane if it differs from what the data plane holds, logs a
// record of it when it does ("backends applied"), and sets the timer for the next drain
// timeout. It holds p.applyMu throughout and p.mu except across
// SetService (see pool).
func (p *Pool) Apply() error {
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
	err := p.lb.SetService(p.svc, bs, fwd) // may wait for the neighbours: p.mu is free meanwhile
	p.mu.Lock()
	return p.end(bs, fwd, err)
}

// begin is apply's first half: it returns the backends and options the
// data plane should hold at now, and whether they differ from what it
// holds, and sets the timer for the next drain timeout. p.applyMu and
// p.mu are held.
func (p *Pool) begin(now time.Time) ([]xdpmaglev.Backend, xdpmaglev.ServiceOptions, bool) {
	bs, next := p.plan(now)
	p.markDown(bs)
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if !next.IsZero() {
		p.timer = time.AfterFunc(next.Sub(now), p.tick)
	}
	fwd := p.fwd
	fwd.QUIC = p.quic.options(bs, p.serverIDs())
	// A backend that left the members while draining was added before the
	// first apply with no HW; the data plane keeps the address it has.
	if slices.EqualFunc(bs, p.applied, func(x, y xdpmaglev.Backend) bool {
		return x.Addr == y.Addr && x.Weight == y.Weight && x.Down == y.Down && (len(x.HW) == 0 || slices.Equal(x.HW, y.HW))
	}) && p.ready && sameOptions(fwd, p.appliedFwd) {
		return nil, xdpmaglev.ServiceOptions{}, false
	}
	return bs, fwd, true
}

// end is apply's second half, once the data plane was given bs and fwd
// with the outcome err: it records them and logs them (logTable), or
// keeps err and tries again in a second. p.applyMu and p.mu are held.
func (p *Pool) end(bs []xdpmaglev.Backend, fwd xdpmaglev.ServiceOptions, err error) error {
	if err != nil {
		p.err = err
		// Try again in a second, even with a drain timeout due later:
		// that apply sets the timer of the next one again.
		if p.timer != nil {
			p.timer.Stop()
		}
		p.timer = time.AfterFunc(time.Second, p.tick)
		return err
	}
	p.err = nil
	p.applied, p.ready, p.appliedFwd = bs, true, fwd
	p.updates.Add(1)
	if p.onApplied != nil {
		p.onApplied()
	}
	p.logTable("")
	return nil
}

// logTable logs the record of the backends applied and the table in
// use ("backends applied"), with why, if not "", as its reason: at WARN,
// naming them, if some are unresolved. p.mu is held.
func (p *Pool) logTable(why string) {
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
	attrs := []any{"live", live, "draining", draining, "down", down, "unresolved", len(unresolved)}
	if t := p.lb.Table(p.svc); t != nil {
		d := t.Digest()
		attrs = append(attrs, "digest", hex.EncodeToString(d[:]))
	}
	if why != "" {
		attrs = append(attrs, "reason", why)
	}
	if len(unresolved) > 0 {
		// Out of service until the neighbour table answers ARP.
		p.log.Warn("backends applied, some with no MAC in the neighbour table", append(attrs, "unresolved_backends", addrStrings(unresolved))...)
		return
	}
	p.log.Info("backends applied", attrs...)
}

// unresolved returns the backends of the service that the data plane has
// out of service because the neighbour table has no MAC for them.
func (p *Pool) unresolved() map[netip.Addr]bool {
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

// Resolved logs the backends applied after the data plane took back a backend
// it had unresolved (xdpmaglev.Options.Changed).
func (p *Pool) Resolved() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || !p.ready {
		return
	}
	p.logTable("the neighbour table answered")
}

// ApplyAll applies the pools' plans to their data plane, lb, at once
// (xdpmaglev.LB.SetServices: one batch update for every table, where one
// Apply each would wait on the kernel once each). If the batch fails,
// each pool applies on its own, and gets its own error. It returns the
// first error.
func ApplyAll(lb DataPlane, ps []*Pool) error {
	var us []xdpmaglev.Update
	var todo []*Pool
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
		if err := p.Apply(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// markDown sets Down on the backends of bs that the health check has
// down, beside those given Down (a Kubernetes node out of service), and
// fails open when that would leave no backend of weight > 0 and not
// given Down in service: then the backends down in the last table
// applied stay down, and the others up (none down by the health check if
// that too leaves none). It logs a record when failing open begins or
// ends. p.mu is held.
func (p *Pool) markDown(bs []xdpmaglev.Backend) {
	if p.health == nil {
		return
	}
	given := make([]bool, len(bs))
	weighted, up := 0, 0
	for i := range bs {
		given[i] = bs[i].Down
		bs[i].Down = given[i] || p.health.IsDown(bs[i].Addr)
		if bs[i].Weight > 0 && !given[i] {
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
			bs[i].Down = given[i] || last[bs[i].Addr]
			if bs[i].Weight > 0 && !bs[i].Down {
				up++
			}
		}
		if up == 0 {
			for i := range bs {
				bs[i].Down = given[i]
			}
		}
	}
	if open != p.open {
		if open {
			p.log.Warn("failing open: every backend is down by its health check, the last table kept", "vip", p.svc.String(), "backends", weighted)
		} else {
			p.log.Info("failing open no more", "vip", p.svc.String(), "up", up)
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
func (p *Pool) tellBGP() {
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
		p.bgp.Set(p.svc, true, ops.Count(live, "backend")+" in service")
	}
}
