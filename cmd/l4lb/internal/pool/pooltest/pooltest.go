// Package pooltest is a fake data plane for the tests of l4lb's pools
// and balancer: it implements pool.DataPlane and balancer.DataPlane in
// memory, records every update it is given, and fails on demand, so
// those tests run without privileges, namespaces or an XDP program.
package pooltest

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// M is the size of the fake's tables when a service's options give none.
const M = 251

// A Call is an update the data plane was given: Op is "set" (one
// service, SetService), "batch" (one of SetServices' updates) or
// "delete" (DeleteService, with no backends).
type Call struct {
	Op       string
	Service  xdpmaglev.Service
	Backends []xdpmaglev.Backend
	Options  xdpmaglev.ServiceOptions
}

// A DataPlane is a fake xdpmaglev.LB: its services and their backends in
// memory, with a table each built as the LB builds it (the backends of
// weight > 0 for the base, without those Down). The zero value is an
// empty data plane in native mode, not pinned. It is safe for
// concurrent use by multiple goroutines.
type DataPlane struct {
	mu         sync.Mutex // guards the fields below
	services   map[xdpmaglev.Service]service
	calls      []Call
	failSet    error // returned by SetService, if not nil
	failBatch  error // returned by SetServices, if not nil
	failDelete error // returned by DeleteService, if not nil
	unresolved map[xdpmaglev.Service][]netip.Addr
	pinPath    string
	adopted    bool
}

type service struct {
	backends []xdpmaglev.Backend
	opts     xdpmaglev.ServiceOptions
	table    *maglev.Table
}

// Left returns a data plane pinned at path that an earlier l4lb left
// with the services svcs, as xdpmaglev.Load returns one it adopted.
func Left(path string, svcs map[xdpmaglev.Service][]xdpmaglev.Backend) *DataPlane {
	d := &DataPlane{pinPath: path, adopted: true}
	for s, bs := range svcs {
		if err := d.set(s, bs, xdpmaglev.ServiceOptions{}); err != nil {
			panic("pooltest: " + err.Error())
		}
	}
	return d
}

// FailSet makes SetService return err from now on (nil: succeed
// again).
func (d *DataPlane) FailSet(err error) { d.mu.Lock(); d.failSet = err; d.mu.Unlock() }

// FailBatch makes SetServices return err from now on (nil: succeed
// again).
func (d *DataPlane) FailBatch(err error) { d.mu.Lock(); d.failBatch = err; d.mu.Unlock() }

// FailDelete makes DeleteService return err from now on (nil: succeed
// again).
func (d *DataPlane) FailDelete(err error) { d.mu.Lock(); d.failDelete = err; d.mu.Unlock() }

// SetUnresolved makes addrs the backends of svc the neighbour table has
// no MAC for.
func (d *DataPlane) SetUnresolved(svc xdpmaglev.Service, addrs ...netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.unresolved == nil {
		d.unresolved = map[xdpmaglev.Service][]netip.Addr{}
	}
	d.unresolved[svc] = addrs
}

// Calls returns the updates the data plane was given, in order,
// successful or not.
func (d *DataPlane) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls)
}

// SetService records the update, and sets svc's backends unless
// FailSet has an error for it.
func (d *DataPlane) SetService(svc xdpmaglev.Service, backends []xdpmaglev.Backend, opts xdpmaglev.ServiceOptions) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, Call{Op: "set", Service: svc, Backends: slices.Clone(backends), Options: opts})
	if d.failSet != nil {
		return d.failSet
	}
	return d.set(svc, backends, opts)
}

// SetServices records the updates, and makes them all, or none if
// FailBatch has an error or one of them is bad.
func (d *DataPlane) SetServices(us []xdpmaglev.Update) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, u := range us {
		d.calls = append(d.calls, Call{Op: "batch", Service: u.Service, Backends: slices.Clone(u.Backends), Options: u.Options})
	}
	if d.failBatch != nil {
		return d.failBatch
	}
	for _, u := range us {
		if _, err := build(u.Backends, u.Options); err != nil {
			return err
		}
	}
	for _, u := range us {
		_ = d.set(u.Service, u.Backends, u.Options) // built above
	}
	return nil
}

// set sets svc's backends and options, with its table. d.mu is held.
func (d *DataPlane) set(svc xdpmaglev.Service, backends []xdpmaglev.Backend, opts xdpmaglev.ServiceOptions) error {
	t, err := build(backends, opts)
	if err != nil {
		return err
	}
	if d.services == nil {
		d.services = map[xdpmaglev.Service]service{}
	}
	d.services[svc] = service{backends: slices.Clone(backends), opts: opts, table: t}
	return nil
}

// build returns the table of backends: the base of those of weight > 0,
// without those Down.
func build(backends []xdpmaglev.Backend, opts xdpmaglev.ServiceOptions) (*maglev.Table, error) {
	m := opts.M
	if m == 0 {
		m = M
	}
	var base []maglev.Backend
	var down []string
	for _, b := range backends {
		if b.Weight == 0 {
			continue
		}
		base = append(base, maglev.Backend{Name: b.Addr.Unmap().String(), Weight: b.Weight})
		if b.Down {
			down = append(down, b.Addr.Unmap().String())
		}
	}
	t, err := maglev.NewWeighted(base, m, nil)
	if err != nil || len(down) == 0 {
		return t, err
	}
	return t.Without(down...)
}

// Table returns svc's table, or nil if svc is not set.
func (d *DataPlane) Table(svc xdpmaglev.Service) *maglev.Table {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.services[svc].table
}

// Backends returns svc's backends as last set, or nil.
func (d *DataPlane) Backends(svc xdpmaglev.Service) []xdpmaglev.Backend {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.services[svc].backends)
}

// Unresolved returns what SetUnresolved gave for svc.
func (d *DataPlane) Unresolved(svc xdpmaglev.Service) []netip.Addr {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.unresolved[svc])
}

// SecondHops returns no second hops: the fake takes no handoff.
func (d *DataPlane) SecondHops(xdpmaglev.Service) (time.Time, string) { return time.Time{}, "" }

// DeleteService records the call, and deletes svc: it returns
// xdpmaglev.ErrNoService if svc is not set, or FailDelete's error.
func (d *DataPlane) DeleteService(svc xdpmaglev.Service) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, Call{Op: "delete", Service: svc})
	if d.failDelete != nil {
		return d.failDelete
	}
	if _, ok := d.services[svc]; !ok {
		return xdpmaglev.ErrNoService
	}
	delete(d.services, svc)
	return nil
}

// Services returns the services set, sorted.
func (d *DataPlane) Services() []xdpmaglev.Service {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]xdpmaglev.Service, 0, len(d.services))
	for s := range d.services {
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y xdpmaglev.Service) int {
		if c := x.VIP.Compare(y.VIP); c != 0 {
			return c
		}
		return int(x.Proto) - int(y.Proto)
	})
	return out
}

// Mode returns xdpmaglev.AttachNative.
func (d *DataPlane) Mode() xdpmaglev.AttachMode { return xdpmaglev.AttachNative }

// Stats returns zero counters.
func (d *DataPlane) Stats() (xdpmaglev.Stats, error) { return xdpmaglev.Stats{}, nil }

// PinPath returns where the data plane is pinned: "" unless made by
// Left.
func (d *DataPlane) PinPath() string { return d.pinPath }

// Adopted reports whether an earlier l4lb left the data plane (made by
// Left).
func (d *DataPlane) Adopted() bool { return d.adopted }
