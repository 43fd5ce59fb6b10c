package xdpmaglev

import (
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/maglevlb/maglev"
)

// refreshEvery is how often refresh reads the neighbour table.
const refreshEvery = time.Second

// refresh keeps the services in step with the kernel's neighbour table,
// every interval until Close. For the L2 services: a backend that did not
// resolve comes back into service once its MAC is known (the kernel is
// asked again each round), and a backend whose MAC changed gets frames
// at the new one; a backend given with Backend.HW keeps it. For the
// encapsulating services: the kernel is asked for every next hop toward
// their backends that it lacks, has failed, or holds stale (the program's
// packets bypass the kernel, which would otherwise never resolve a next
// hop again, nor notice that its MAC changed). The neighbour table is read
// with no lock held; a service changed by SetService meanwhile is left to
// the next round.
func (lb *LB) refresh(interval time.Duration) {
	defer close(lb.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-lb.stop:
			return
		case <-t.C:
		}
		work, encap := lb.refreshWork()
		if len(encap) > 0 {
			lb.neigh.keep(encap...)
		}
		if len(work) == 0 {
			continue
		}
		now, err := lb.neigh.all()
		if err != nil {
			continue // the next round tries again
		}
		for _, w := range work {
			lb.refreshOne(w, now)
		}
	}
}

// refreshSnap is what a round of refresh reads of an L2 service, under
// lb.mu, to resolve with no lock held.
type refreshSnap struct {
	svc     Service
	gen     uint64
	request []Backend
	full    *maglev.Table
	opts    ServiceOptions
	macs    map[netip.Addr]net.HardwareAddr // in use
}

// refreshWork returns the L2 services to resolve again, and the backends
// of the encapsulating services, whose next hops the kernel is asked to
// keep.
func (lb *LB) refreshWork() (work []refreshSnap, encap []netip.Addr) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for svc, s := range lb.services {
		if s.opts.Forward != ForwardL2 {
			for a := range s.backends {
				encap = append(encap, a)
			}
			continue
		}
		if s.request == nil {
			continue
		}
		macs := map[netip.Addr]net.HardwareAddr{}
		for a, b := range s.backends {
			macs[a] = b.hw
		}
		work = append(work, refreshSnap{svc, s.gen, s.request, s.full, s.opts, macs})
	}
	return work, encap
}

// refreshOne installs w's service again when the neighbour table (now)
// gives one of its backends another MAC than the one in use.
func (lb *LB) refreshOne(w refreshSnap, now map[netip.Addr]net.HardwareAddr) {
	bs := make([]Backend, len(w.request))
	var unresolved []string
	changed := false
	for i, b := range w.request {
		b.Addr = b.Addr.Unmap()
		if len(b.HW) == 0 && !b.Down {
			// The kernel's entry, else the MAC in use (an entry
			// the kernel forgot is no reason to take a backend out).
			if b.HW = now[b.Addr]; b.HW == nil {
				b.HW = w.macs[b.Addr]
			}
			if b.HW == nil {
				unresolved = append(unresolved, b.Addr.String())
				lb.neigh.ask(b.Addr)
			}
		}
		// A Down backend is out of the data plane, and has no MAC
		// in use to differ from.
		if b.HW != nil && !b.Down && !slices.Equal(b.HW, w.macs[b.Addr]) {
			changed = true
		}
		bs[i] = b
	}
	if !changed {
		return
	}
	gen := w.gen
	p := prepared{svc: w.svc, request: w.request, bs: bs, full: w.full, opts: w.opts, unresolved: unresolved}
	if err := lb.install(p, &gen); err == nil && lb.opts.Changed != nil {
		lb.opts.Changed(w.svc)
	} // else the next round tries again
}
