// Package balancer is the running load balancer: the data plane's
// services, each a pool with its health check and the watch of its
// membership source, made those of a configuration service by service
// (Apply: at start and at each reload). A service's key is its VIP, port
// and protocol: one whose settings are the same is left alone, a changed
// one changes in place, a new one starts, one no longer listed stops. It
// also keeps, until an Apply takes them over, the services an earlier
// l4lb left in a pinned data plane (Adopt, Prune).
//
// Locking: Balancer.applyMu orders Applies (a reload's) and is held
// across them; Balancer.mu guards the running services and the kept ones,
// and is held only to read or swap them, never across a pool's update.
// applyMu comes before mu, and both before a pool's locks (see package
// pool); a membership source's lists and the health checks' transitions
// reach the pools with neither held.
package balancer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/checker"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/pool"
	"github.com/maglevlb/maglev/membership"
	"github.com/maglevlb/maglev/xdpmaglev"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// A Speaker is the BGP speaker as the balancer tells it of its services:
// each pool tells it its service's health, and a service that stops is
// forgotten. bgp.Speaker implements it.
type Speaker interface {
	pool.Announcer
	Forget(svc xdpmaglev.Service)
}

// A DataPlane is the data plane as the balancer uses it: its pools'
// (pool.DataPlane), and what it reads of it and deletes from it itself.
// xdpmaglev.LB implements it; the tests, a fake (package pooltest).
type DataPlane interface {
	pool.DataPlane
	Mode() xdpmaglev.AttachMode
	Stats() (xdpmaglev.Stats, error)
	Backends(svc xdpmaglev.Service) []xdpmaglev.Backend
	DeleteService(svc xdpmaglev.Service) error
	Services() []xdpmaglev.Service
	PinPath() string
	Adopted() bool
}

var _ DataPlane = (*xdpmaglev.LB)(nil)

// Options are a Balancer's: where it logs and records, and its BGP.
type Options struct {
	Iface   string       // the data plane's interface, for each service's first record
	Meter   metric.Meter // l4lb's metrics
	Speaker Speaker      // nil: no BGP
	Logger  *slog.Logger // the records of the services (each with its name), and the membership sources' warnings
	// Applied, if not nil, is called after each update of a service in
	// the data plane, with the service's pool locked: it waits for
	// nothing (l4lb's state file writer).
	Applied func()
}

// A Balancer is the running load balancer: the data plane, and a running
// service for each configured one. It is safe for concurrent use by
// multiple goroutines (see the package doc for its locks).
type Balancer struct {
	ctx    context.Context // the watches' lifetime
	lb     DataPlane
	opts   Options
	reg    metric.Registration // observes the running services' updates and backends
	logger *slog.Logger

	applyMu sync.Mutex
	mu      sync.Mutex // guards running and kept
	running map[xdpmaglev.Service]*running
	// kept are the services an earlier l4lb left in the pinned data
	// plane that no Apply has taken over yet: stopping one (an Apply
	// undone) leaves it there, forwarding, for the next l4lb.
	kept map[xdpmaglev.Service]bool
}

// running is one service at work: its settings, its pool, its health
// check, and the watch of its membership source.
type running struct {
	cfg    config.Service
	log    *slog.Logger // the balancer's, with the service's name
	pool   *pool.Pool
	health *checker.Checker // nil: none
	stop   func()           // ends the watch; nil for static backends
	gen    atomic.Uint64    // the watch whose lists count: a replaced one's are dropped
}

// New returns the balancer of lb, with no service running; its watches
// end with ctx. Its metrics maglev.l4lb.service.updates and
// maglev.l4lb.backend.state are observed, from each running pool, when a
// reader collects: a service that stops has no series from then on (a
// synchronous counter's series would outlive it).
func New(ctx context.Context, lb DataPlane, opts Options) (*Balancer, error) {
	b := &Balancer{ctx: ctx, lb: lb, opts: opts, logger: opts.Logger, running: map[xdpmaglev.Service]*running{}}
	meter := opts.Meter
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
		for _, p := range b.Pools() {
			svc := attribute.String("maglev.service", p.Service().String())
			o.ObserveInt64(updates, p.Updates(), metric.WithAttributes(svc))
			for _, be := range p.Status().Backends {
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

// Mode returns the data plane's attach mode.
func (b *Balancer) Mode() xdpmaglev.AttachMode { return b.lb.Mode() }

// Stats returns the data plane's counters.
func (b *Balancer) Stats() (xdpmaglev.Stats, error) { return b.lb.Stats() }

// Pools returns the running services' pools, by name.
func (b *Balancer) Pools() []*pool.Pool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*pool.Pool, 0, len(b.running))
	for _, r := range b.running {
		out = append(out, r.pool)
	}
	slices.SortFunc(out, func(x, y *pool.Pool) int { return strings.Compare(x.Name(), y.Name()) })
	return out
}

// Resolved tells the pool of svc, if it runs, that the data plane took
// back a backend it had unresolved (xdpmaglev.Options.Changed).
func (b *Balancer) Resolved(svc xdpmaglev.Service) {
	b.mu.Lock()
	r := b.running[svc]
	b.mu.Unlock()
	if r != nil {
		r.pool.Resolved()
	}
}

// Close stops every service's watch, health check and pool, leaving the
// data plane as it is.
func (b *Balancer) Close() {
	b.applyMu.Lock()
	defer b.applyMu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.running {
		if r.stop != nil {
			r.stop()
		}
		r.pool.Close()
	}
}

// stopService ends r: its watch, its pool, and its place in the data
// plane and in BGP.
func (b *Balancer) stopService(r *running) {
	if r.stop != nil {
		r.stop()
	}
	r.pool.Close()
	if b.opts.Speaker != nil {
		b.opts.Speaker.Forget(r.cfg.Svc)
	}
	b.mu.Lock()
	kept := b.kept[r.cfg.Svc]
	b.mu.Unlock()
	if kept {
		r.log.Info("service stopped, left in the data plane as the earlier l4lb left it")
		return
	}
	if err := b.lb.DeleteService(r.cfg.Svc); err != nil && !errors.Is(err, xdpmaglev.ErrNoService) {
		r.log.Error("service stopped, not deleted from the data plane", "err", err)
		return
	}
	r.log.Info("service stopped")
}

// serviceLogger returns log with the service c's name: the logger of its
// records.
func serviceLogger(log *slog.Logger, c config.Service) *slog.Logger {
	return log.With("service", c.Name)
}

// watch starts c's source, setting r's members from each list while it is
// r's current watch.
func (b *Balancer) watch(c config.Service, r *running) (func(), error) {
	gen := r.gen.Add(1)
	log := serviceLogger(b.logger, c)
	set := func(eps []membership.Endpoint) error {
		if r.gen.Load() != gen {
			return nil // replaced
		}
		return r.pool.SetMembers(pool.Members(eps, log))
	}
	return c.Src.Watch(b.ctx, set, ops.WatchOptions{IPv6: !c.Svc.VIP.Addr().Unmap().Is4(), Logger: log})
}

// snapshot returns the running services.
func (b *Balancer) snapshot() map[xdpmaglev.Service]*running {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.running)
}
