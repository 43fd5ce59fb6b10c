package balancer

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/checker"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/pool"
	"github.com/maglevlb/maglev/internal/health"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// Apply makes the running services those of svcs. New services start
// first: if one cannot (its source does not answer, the data plane is
// full), the ones started are stopped again and Apply returns the error,
// with the running services as they were. Then the services whose
// settings changed change in place (their pool keeps its state, and its
// swap is atomic), and those no longer listed stop and leave the data
// plane. It returns what it did.
func (b *Balancer) Apply(svcs []config.Service) (Applied, error) {
	b.applyMu.Lock()
	defer b.applyMu.Unlock()
	old := b.snapshot()
	started, err := b.startNew(svcs, old)
	if err != nil {
		return Applied{}, err
	}
	undo := func() {
		for _, r := range started {
			b.stopService(r)
		}
	}
	swaps, err := b.swapSources(svcs, old)
	if err != nil {
		undo()
		return Applied{}, err
	}

	// Nothing can fail from here on: the new configuration is in force.
	var did Applied
	b.mu.Lock()
	for k, r := range started {
		b.running[k] = r
		delete(b.kept, k)
		did.Added = append(did.Added, r.cfg.Name)
	}
	b.mu.Unlock()
	for _, s := range swaps {
		if err := b.change(s.r, s.c, s.stop); err != nil {
			s.r.log.Error("service change not applied, the pool tries again", "err", err)
		}
		did.Changed = append(did.Changed, s.c.Name)
	}
	did.Removed = b.stopRemoved(svcs, old)
	for _, l := range [][]string{did.Added, did.Changed, did.Removed} {
		sort.Strings(l)
	}
	did.Unchanged = len(svcs) - len(did.Added) - len(did.Changed)
	return did, nil
}

// Applied is what an Apply did: the services it added, changed and
// removed, by name, and how many it left as they were.
type Applied struct {
	Added, Changed, Removed []string
	Unchanged               int
}

// String returns a in a line: "2 services: added dns, web, changed none,
// removed none, 0 unchanged".
func (a Applied) String() string {
	n := len(a.Added) + len(a.Changed) + a.Unchanged
	return fmt.Sprintf("%s: added %s, changed %s, removed %s, %d unchanged",
		ops.Count(n, "service"), list(a.Added), list(a.Changed), list(a.Removed), a.Unchanged)
}

// LogValue makes a a group of attributes in a log record: services (how
// many the configuration has), added, changed, removed (lists of names)
// and unchanged.
func (a Applied) LogValue() slog.Value {
	return slog.GroupValue(slog.Int("services", len(a.Added)+len(a.Changed)+a.Unchanged),
		slog.Any("added", names(a.Added)), slog.Any("changed", names(a.Changed)), slog.Any("removed", names(a.Removed)),
		slog.Int("unchanged", a.Unchanged))
}

// names returns l, or an empty list for nil: a JSON record's [] rather
// than null.
func names(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// startNew starts the services of svcs that old does not run, and applies
// the new services of static backends at once (pool.ApplyAll); if one
// cannot start, it stops those it started and returns the error.
func (b *Balancer) startNew(svcs []config.Service, old map[xdpmaglev.Service]*running) (map[xdpmaglev.Service]*running, error) {
	started := map[xdpmaglev.Service]*running{}
	undo := func() {
		for _, r := range started {
			b.stopService(r)
		}
	}
	var batch []*pool.Pool // the new services of static backends: applied at once
	for _, c := range svcs {
		if old[c.Svc] != nil {
			continue
		}
		r, err := b.start(c)
		if err != nil {
			undo()
			return nil, c.Err(err)
		}
		started[c.Svc] = r
		if !c.Src.Dynamic() {
			batch = append(batch, r.pool)
		}
	}
	if err := pool.ApplyAll(b.lb, batch); err != nil {
		undo()
		return nil, err
	}
	return started, nil
}

// A swap is a change of a running service, with the watch of its new
// source, started already, if its source changed.
type swap struct {
	r    *running
	c    config.Service
	stop func()
}

// swapSources returns the changes of the services of svcs that old runs
// with other settings. A changed source's new watch starts, and must
// give its first list, before the old one stops; if one cannot, the new
// watches started stop and it returns the error.
func (b *Balancer) swapSources(svcs []config.Service, old map[xdpmaglev.Service]*running) ([]swap, error) {
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
				for _, s := range swaps {
					if s.stop != nil {
						s.stop()
					}
				}
				return nil, c.Err(err)
			}
		}
		swaps = append(swaps, swap{r: r, c: c, stop: stop})
	}
	return swaps, nil
}

// stopRemoved stops the services of old that svcs no longer lists, and
// returns their names.
func (b *Balancer) stopRemoved(svcs []config.Service, old map[xdpmaglev.Service]*running) []string {
	want := map[xdpmaglev.Service]bool{}
	for _, c := range svcs {
		want[c.Svc] = true
	}
	var removed []string
	for k, r := range old {
		if want[k] {
			continue
		}
		b.stopService(r)
		b.mu.Lock()
		delete(b.running, k)
		b.mu.Unlock()
		removed = append(removed, r.cfg.Name)
	}
	return removed
}

// start starts the service c: its pool, its health check, and its
// backends: the source's first list applied, or the static ones set as
// the members, for the caller to apply (pool.ApplyAll).
func (b *Balancer) start(c config.Service) (*running, error) {
	p := pool.New(b.lb, c, b.announcer(), b.logger)
	p.OnApplied(b.opts.Applied)
	r := &running{cfg: c, pool: p, log: serviceLogger(b.logger, c)}
	if c.Health.Kind != "" {
		h, err := checker.New(c.Svc, c.Health, b.opts.Meter, serviceLogger(b.logger, c), func() { _ = p.Apply() })
		if err != nil {
			return nil, err
		}
		r.health = h
		p.SetHealth(h)
	}
	b.adopt(r)
	b.logStart(c, r)
	if !c.Src.Dynamic() {
		p.Stage(pool.Static(c.Backends, c.ServerIDs())) // applied by the caller, with the other new services
		return r, nil
	}
	stop, err := b.watch(c, r)
	if err != nil {
		b.stopService(r)
		return nil, err
	}
	r.stop = stop
	return r, nil
}

// announcer returns the speaker as the pools' Announcer: nil without
// BGP.
func (b *Balancer) announcer() pool.Announcer {
	if b.opts.Speaker == nil {
		return nil
	}
	return b.opts.Speaker
}

// adopt gives r's pool what the data plane holds of its service, if an
// earlier l4lb left it there: the backends that are not members drain
// (the pool is not ready: its first apply writes), and the health check
// starts from the data plane's record: a backend it held out of service
// starts down, one it held in service up (health survives the restart;
// a backend new to it is unknown until its first probe).
func (b *Balancer) adopt(r *running) {
	b.mu.Lock()
	kept := b.kept[r.cfg.Svc]
	b.mu.Unlock()
	if !kept {
		return
	}
	applied := b.lb.Backends(r.cfg.Svc)
	r.pool.Adopt(applied)
	if r.health == nil {
		return
	}
	states := map[netip.Addr]health.State{}
	for _, be := range applied {
		states[be.Addr] = health.Up
		if be.Down {
			states[be.Addr] = health.Down
			r.log.Info("health: backend starts down, as the data plane left it", "backend", be.Addr.String(), "rise", r.cfg.Health.Rise)
		}
	}
	r.health.Start(states)
}

// logStart logs a service's first records: where it is, how packets
// reach its backends and where they come from (how many, or the
// membership source), and its health check.
func (b *Balancer) logStart(c config.Service, r *running) {
	from := slog.Int("backends", len(c.Backends))
	if c.Src.Dynamic() {
		from = slog.String("source", c.Src.String())
	}
	r.log.Info("service started", "vip", c.Svc.String(), "iface", b.opts.Iface, "mode", b.lb.Mode().String(), "forward", c.Fwd.Forward.String(), from)
	if r.health != nil {
		r.log.Info("health check", "check", c.Health.String())
	}
}

// change changes the running service r to the settings c, in place; stop
// is the watch of c's new source, started already, if it changed.
func (b *Balancer) change(r *running, c config.Service, stop func()) error {
	p := r.pool
	healthChanged := c.Health != r.cfg.Health
	var h *checker.Checker
	if healthChanged && c.Health.Kind != "" {
		var err error
		if h, err = checker.New(c.Svc, c.Health, b.opts.Meter, serviceLogger(b.logger, c), func() { _ = p.Apply() }); err != nil {
			return err
		}
		if r.health != nil {
			h.Start(r.health.States()) // the new check starts from the old one's verdicts
		}
	}
	var next pool.Health // nil, not a nil *checker.Checker, for none
	if h != nil {
		next = h
	}
	if old := p.Reconfigure(c, r.cfg.Drained, next, healthChanged); old != nil {
		old.Close()
	}
	if healthChanged {
		r.health = h
	}
	if c.SrcSettings != r.cfg.SrcSettings {
		if r.stop != nil {
			r.stop()
		}
		r.stop = stop
	}
	r.cfg, r.log = c, serviceLogger(b.logger, c)
	var err error
	if !c.Src.Dynamic() {
		err = p.SetMembers(pool.Static(c.Backends, c.ServerIDs()))
	} else {
		err = p.SetMembers(p.Members()) // the health check's new backends, and an apply
	}
	r.log.Info("service changed")
	return err
}
