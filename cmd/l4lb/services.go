package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/checker"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/membership"
	"github.com/maglevlb/maglev/xdpmaglev"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// A balancer is the running load balancer: the data plane, and a running
// service for each configured one. apply makes the running services those
// of a configuration, service by service: a service's data-plane key is
// its VIP, port and protocol, and one whose settings are the same is left
// alone.
//
// A balancer is safe for concurrent use by multiple goroutines: applyMu
// orders applies (a reload and the admin API's), mu guards the running
// services and is held only to read or swap them, never across a pool's
// update.
type balancer struct {
	ctx    context.Context // the watches' lifetime
	lb     *xdpmaglev.LB
	iface  string // for the flags' one service's status line
	mp     metric.MeterProvider
	sp     *bgp.Speaker        // nil: no BGP
	logger *slog.Logger        // status lines, and the membership sources' warnings
	reg    metric.Registration // observes the running services' updates

	applyMu sync.Mutex
	mu      sync.Mutex // guards running and kept
	running map[xdpmaglev.Service]*running
	// kept are the services an earlier l4lb left in the pinned data
	// plane that no apply has taken over yet: stopping one (an apply
	// undone) leaves it there, forwarding, for the next l4lb.
	kept map[xdpmaglev.Service]bool
}

// running is one service at work: its settings, its pool, and the watch
// of its membership source.
type running struct {
	cfg  config.Service
	pool *pool
	stop func()        // ends the watch; nil for static backends
	gen  atomic.Uint64 // the watch whose lists count: a replaced one's are dropped
}

// newBalancer returns the balancer of lb, with no service running. Its
// metric maglev.l4lb.service.updates is observed, from each running pool's
// count, when a reader collects: a service that stops has no series from
// then on (a synchronous counter's series would outlive it).
func newBalancer(ctx context.Context, lb *xdpmaglev.LB, mp metric.MeterProvider, sp *bgp.Speaker, logger *slog.Logger) (*balancer, error) {
	b := &balancer{ctx: ctx, lb: lb, mp: mp, sp: sp, logger: logger, running: map[xdpmaglev.Service]*running{}}
	meter := mp.Meter(meterScope)
	updates, err := meter.Int64ObservableCounter("maglev.l4lb.service.updates", metric.WithUnit("{update}"),
		metric.WithDescription("Updates of a service in the data plane (a table swapped in, or a backend's entry changed), by service, since it started."))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	state, err := meter.Int64ObservableGauge("maglev.l4lb.backend.state",
		metric.WithDescription("1 for each backend of a service in its state: live, draining, down (by its health check), unresolved (no MAC from the neighbour table) or drained, as /debug/maglev/backends has it."))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	b.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, r := range b.services() {
			svc := attribute.String("maglev.service", r.cfg.Svc.String())
			o.ObserveInt64(updates, r.pool.updates.Load(), metric.WithAttributes(svc))
			for _, be := range r.pool.status().Backends {
				o.ObserveInt64(state, 1, metric.WithAttributes(svc, attribute.String("maglev.backend", be.Addr), attribute.String("maglev.state", be.State)))
			}
		}
		return nil
	}, updates, state)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return b, nil
}

// apply makes the running services those of svcs. New services start
// first: if one cannot (its source does not answer, the data plane is
// full), the ones started are stopped again and apply returns the error,
// with the running services as they were. Then the services whose
// settings changed change in place (their pool keeps its state, and its
// swap is atomic), and those no longer listed stop and leave the data
// plane. It returns what it did, for a status line.
func (b *balancer) apply(svcs []config.Service) (string, error) {
	b.applyMu.Lock()
	defer b.applyMu.Unlock()
	b.mu.Lock()
	old := maps.Clone(b.running)
	b.mu.Unlock()

	want := map[xdpmaglev.Service]config.Service{}
	for _, c := range svcs {
		want[c.Svc] = c
	}
	var added, changed, removed []string
	started := map[xdpmaglev.Service]*running{}
	undo := func() {
		for _, r := range started {
			b.stopService(r)
		}
	}
	var batch []*pool // the new services of static backends: applied at once
	for _, c := range svcs {
		if old[c.Svc] != nil {
			continue
		}
		r, err := b.start(c)
		if err != nil {
			undo()
			return "", c.Err(err)
		}
		started[c.Svc] = r
		added = append(added, c.Name)
		if !c.Src.Dynamic() {
			batch = append(batch, r.pool)
		}
	}
	if err := applyAll(b.lb, batch); err != nil {
		undo()
		return "", err
	}
	// A changed source: the new watch starts, and must give its first
	// list, before the old one stops.
	type swap struct {
		r    *running
		c    config.Service
		stop func()
	}
	var swaps []swap
	for _, c := range svcs {
		r := old[c.Svc]
		if r == nil || (r.cfg.Settings == c.Settings && r.cfg.Name == c.Name) {
			continue
		}
		var stop func()
		if c.SrcSettings != r.cfg.SrcSettings && c.Src.Dynamic() {
			// From here on the old watch's lists are dropped: the new
			// one's first list is the members, even if the old one's next
			// arrives after it.
			prev := r.gen.Load()
			var err error
			if stop, err = b.watch(c, r); err != nil {
				r.gen.Store(prev)
				undo()
				for _, s := range swaps {
					if s.stop != nil {
						s.stop()
					}
				}
				return "", c.Err(err)
			}
		}
		swaps = append(swaps, swap{r: r, c: c, stop: stop})
	}

	// Nothing can fail from here on: the new configuration is in force.
	b.mu.Lock()
	for k, r := range started {
		b.running[k] = r
		delete(b.kept, k)
	}
	b.mu.Unlock()
	for _, s := range swaps {
		if err := b.change(s.r, s.c, s.stop); err != nil {
			b.logger.Error(fmt.Sprintf("service %q: %v (the pool tries again)", s.c.Name, err))
		}
		changed = append(changed, s.c.Name)
	}
	for k, r := range old {
		if _, ok := want[k]; ok {
			continue
		}
		b.stopService(r)
		b.mu.Lock()
		delete(b.running, k)
		b.mu.Unlock()
		removed = append(removed, r.cfg.Name)
	}
	for _, l := range [][]string{added, changed, removed} {
		sort.Strings(l)
	}
	unchanged := len(svcs) - len(added) - len(changed)
	return fmt.Sprintf("%d services: added %s, changed %s, removed %s, %d unchanged",
		len(svcs), list(added), list(changed), list(removed), unchanged), nil
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// start starts the service c: its pool, its health check, and its
// backends: the source's first list applied, or the static ones set as
// the members, for the caller to apply (applyAll).
func (b *balancer) start(c config.Service) (*running, error) {
	p := newPool(b.lb, c.Svc, c.Fwd, c.Timeout, c.Drained, b.logger)
	p.name, p.bgp = c.Name, b.sp
	if c.Health.Kind != "" {
		h, err := checker.New(c.Svc, c.Health, b.mp.Meter(meterScope), b.logger, func() { _ = p.apply() })
		if err != nil {
			return nil, err
		}
		p.health = h
	}
	b.mu.Lock()
	if b.kept[c.Svc] {
		// Adopted: the backends the data plane holds that are not
		// members drain (the pool is not ready: its first apply writes),
		// and those it held down start down.
		p.applied = adoptedBackends(b.lb, c.Svc)
		if p.health != nil {
			var down []netip.Addr
			for _, be := range p.applied {
				if be.Down {
					down = append(down, be.Addr)
					b.logger.Info(fmt.Sprintf("%shealth: %v starts down, as the data plane left it: it needs %d probes passed in a row", p.prefix(), be.Addr, c.Health.Rise))
				}
			}
			p.health.StartDown(down)
		}
	}
	b.mu.Unlock()
	r := &running{cfg: c, pool: p}
	what := fmt.Sprintf("%d backends", len(c.Backends))
	if c.Src.Dynamic() {
		what = "backends from " + c.Src.String()
	}
	if c.Name == "default" { // the flags' one service: its first status line as it has always been
		b.logger.Info(fmt.Sprintf("%v attached to %s (%v)%s, %s", c.Svc, b.iface, b.lb.Mode(), by(c.Fwd), what))
	} else {
		b.logger.Info(fmt.Sprintf("service %q: %v%s, %s", c.Name, c.Svc, by(c.Fwd), what))
	}
	if p.health != nil {
		b.logger.Info(fmt.Sprintf("%shealth check: %v", p.prefix(), c.Health))
	}
	if c.Src.Dynamic() {
		stop, err := b.watch(c, r)
		if err != nil {
			b.stopService(r)
			return nil, err
		}
		r.stop = stop
	} else {
		p.members0(static(c.Backends)) // applied by the caller, with the other new services
	}
	return r, nil
}

// watch starts c's source, setting r's members from each list while it is
// r's current watch.
func (b *balancer) watch(c config.Service, r *running) (func(), error) {
	gen := r.gen.Add(1)
	set := func(eps []membership.Endpoint) error {
		if r.gen.Load() != gen {
			return nil // replaced
		}
		return r.pool.setMembers(members(eps, b.logger))
	}
	return c.Src.Watch(b.ctx, set, ops.WatchOptions{IPv6: !c.Svc.VIP.Addr().Unmap().Is4(), Logger: b.logger})
}

// static returns the members of static backends.
func static(bs []xdpmaglev.Backend) map[netip.Addr]member {
	m := make(map[netip.Addr]member, len(bs))
	for _, be := range bs {
		m[be.Addr.Unmap()] = member{weight: be.Weight, hw: be.HW}
	}
	return m
}

// change changes the running service r to the settings c, in place; stop
// is the watch of c's new source, started already, if it changed.
func (b *balancer) change(r *running, c config.Service, stop func()) error {
	p := r.pool
	var h *checker.Checker
	if c.Health != r.cfg.Health && c.Health.Kind != "" {
		var err error
		if h, err = checker.New(c.Svc, c.Health, b.mp.Meter(meterScope), b.logger, func() { _ = p.apply() }); err != nil {
			return err
		}
		if old := p.checker(); old != nil {
			h.StartDown(old.Downs()) // the new check starts from the old one's verdicts
		}
	}
	old := p.reconfigure(c, r.cfg.Drained, h, c.Health != r.cfg.Health)
	if old != nil {
		old.Close()
	}
	if c.SrcSettings != r.cfg.SrcSettings {
		if r.stop != nil {
			r.stop()
		}
		r.stop = stop
	}
	r.cfg = c
	var err error
	if !c.Src.Dynamic() {
		err = p.setMembers(static(c.Backends))
	} else {
		err = p.setMembers(p.currentMembers()) // the health check's new backends, and an apply
	}
	b.logger.Info(fmt.Sprintf("service %q: changed", c.Name))
	return err
}

// stopService ends r: its watch, its pool, and its place in the data
// plane and in BGP.
func (b *balancer) stopService(r *running) {
	if r.stop != nil {
		r.stop()
	}
	r.pool.close()
	if b.sp != nil {
		b.sp.Forget(r.cfg.Svc)
	}
	b.mu.Lock()
	kept := b.kept[r.cfg.Svc]
	b.mu.Unlock()
	if kept {
		b.logger.Info(fmt.Sprintf("service %q: stopped, and left in the data plane as the earlier l4lb left it", r.cfg.Name))
		return
	}
	if err := b.lb.DeleteService(r.cfg.Svc); err != nil && !errors.Is(err, xdpmaglev.ErrNoService) {
		b.logger.Error(fmt.Sprintf("service %q: leaving the data plane: %v", r.cfg.Name, err))
		return
	}
	b.logger.Info(fmt.Sprintf("service %q: stopped", r.cfg.Name))
}

// close stops every service's watch and pool, leaving the data plane as
// it is.
func (b *balancer) close() {
	b.applyMu.Lock()
	defer b.applyMu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.running {
		if r.stop != nil {
			r.stop()
		}
		r.pool.close()
	}
}

// services returns the running services, by name.
func (b *balancer) services() []*running {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*running, 0, len(b.running))
	for _, r := range b.running {
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y *running) int { return strings.Compare(x.cfg.Name, y.cfg.Name) })
	return out
}

// resolved tells the pool of svc, if it runs, that the data plane took
// back a backend it had unresolved (xdpmaglev.Options.Changed).
func (b *balancer) resolved(svc xdpmaglev.Service) {
	b.mu.Lock()
	r := b.running[svc]
	b.mu.Unlock()
	if r != nil {
		r.pool.resolved()
	}
}

// service returns the running service named name, or nil.
func (b *balancer) service(name string) *running {
	for _, r := range b.services() {
		if r.cfg.Name == name {
			return r
		}
	}
	return nil
}

// meterScope is the instrumentation scope of l4lb's own metrics.
const meterScope = "github.com/maglevlb/maglev/cmd/l4lb"
