package xdpmaglev

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/maglevlb/maglev"
	"golang.org/x/sys/unix"
)

// An Update is one service's backends and options, for SetServices.
type Update struct {
	Service  Service
	Backends []Backend
	Options  ServiceOptions
}

// SetServices sets each update's service as SetService does, and swaps
// their tables in with one batch update of the map of tables: the kernel
// waits for running programs to be done with the maps it replaces once,
// not once a service (about 10 ms each: 100 tables took 1.15 s one by one
// and 9 ms in one batch; docs/l4lb-howto-sizing.md, "Many services at scale"). Each
// service's swap is atomic, as SetService's is. If one update is bad, or
// the data plane cannot take them all, none is made. It is SetService's
// pair for the two things a loop of SetService cannot give: that wait paid
// once, and all or none.
func (lb *LB) SetServices(us []Update) error {
	type ready struct {
		u     Update
		p     prepared
		table *maglev.Table
		up    []Backend
	}
	rs := make([]ready, 0, len(us))
	seen := make(map[Service]bool, len(us))
	if lb.neigh != nil {
		// The neighbours of every update asked for, and waited for, at
		// once: each prepare then takes what the table has.
		var l2, encap []netip.Addr
		for _, u := range us {
			if u.Options.Forward == ForwardL2 {
				for _, b := range u.Backends {
					if len(b.HW) == 0 && !b.Down {
						l2 = append(l2, b.Addr.Unmap())
					}
				}
			} else {
				encap = append(encap, upAddrs(u.Backends)...)
			}
		}
		if len(l2) > 0 {
			_, _ = lb.neigh.resolve(true, l2...) // an error is each prepare's again
		}
		if len(encap) > 0 {
			lb.neigh.prime(encap...)
		}
	}
	for _, u := range us {
		if seen[u.Service] {
			return fmt.Errorf("%w %v: updated twice", ErrService, u.Service)
		}
		seen[u.Service] = true
		p, err := lb.prepare(u.Service, u.Backends, u.Options, false)
		if err != nil {
			return err
		}
		table, up, err := inService(u.Service, p.bs, p.full, p.unresolved)
		if err != nil {
			return err
		}
		rs = append(rs, ready{u: u, p: p, table: table, up: up})
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.closed {
		return ErrClosed
	}
	sts := make([]*staged, 0, len(rs))
	for _, r := range rs {
		st, err := lb.stage(r.u.Service, r.table, r.up, r.p.opts)
		if err != nil {
			for i := len(sts) - 1; i >= 0; i-- {
				sts[i].close()
				err = sts[i].fail(err)
			}
			return err
		}
		sts = append(sts, st)
	}
	errs := lb.swapAll(sts)
	for i, st := range sts {
		if st.undone {
			continue
		}
		if err := lb.record(rs[i].p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// swapAll swaps the staged updates sts in, their tables with one batch
// update of the map of tables (their second hops first, one by one: a
// service's second hops change only with its table, which SetServices
// mostly makes anew), and finishes them, marking those it could not
// undone. lb.mu is held.
func (lb *LB) swapAll(sts []*staged) []error {
	var errs []error
	undo := func(st *staged, err error) {
		st.close()
		st.undone = true
		errs = append(errs, st.fail(err))
		if !st.isNew && st.old.val.LookupM == 0 && st.old.val.M != 0 {
			_ = lb.putService(st.svc, st.old) // best effort: the size its table has, which stays
		}
	}
	// A service whose size M changes: packets read the size from the
	// table's slot 0 (lookup_m 0) from a grace period before the swap to
	// one after it, so that none indexes a table by the other's size.
	resizing := 0
	for _, st := range sts {
		if st.isNew || st.old.val.LookupM == uint32(st.next.table.Size()) {
			continue
		}
		if err := lb.holdSize(st); err != nil {
			undo(st, err)
			continue
		}
		resizing++
	}
	if resizing > 0 {
		grace()
	}
	var keys, fds []uint32
	var in []*staged
	for _, st := range sts {
		if st.undone {
			continue
		}
		if err := lb.putPrev(st); err != nil {
			undo(st, err)
			continue
		}
		keys, fds, in = append(keys, st.next.id), append(fds, uint32(st.inner.FD())), append(in, st)
	}
	if len(in) > 0 {
		n, err := lb.objs.Tables.BatchUpdate(keys, fds, nil)
		if err != nil {
			// The first n are swapped in: they are finished, the rest
			// undone.
			err = fmt.Errorf("xdpmaglev: swapping the tables of %d of %d services: %w", len(in)-n, len(in), err)
			for i := len(in) - 1; i >= n; i-- {
				undo(in[i], err)
			}
			in = in[:n]
		}
	}
	if resizing > 0 {
		grace()
	}
	for _, st := range in {
		st.close() // the outer maps hold the tables
		if err := lb.finish(st); err != nil {
			st.undone = true
			errs = append(errs, err)
		}
	}
	return errs
}

// holdSize writes st's service's value with lookup_m 0: packets read the
// table's size from its slot 0 until finish writes the new size. lb.mu
// is held.
func (lb *LB) holdSize(st *staged) error {
	v := st.old.val
	v.LookupM = 0
	m, k := lb.key(st.svc)
	if err := m.Put(k, v); err != nil {
		return fmt.Errorf("xdpmaglev: writing service %v: %w", st.svc, err)
	}
	st.old.val = v
	return nil
}

// graceWait is how long grace sleeps where the kernel cannot wait for a
// grace period on the process's behalf: far longer than any run of the
// program.
const graceWait = 50 * time.Millisecond

// grace waits until every run of the program that began before it has
// ended: an RCU grace period (membarrier's MEMBARRIER_CMD_GLOBAL waits for
// one; XDP programs run inside RCU read-side sections), or graceWait where
// membarrier refuses (a kernel with nohz_full CPUs, or a filter).
func grace() {
	const membarrierCmdGlobal = 1 // MEMBARRIER_CMD_GLOBAL, <linux/membarrier.h>
	if _, _, e := unix.Syscall(unix.SYS_MEMBARRIER, membarrierCmdGlobal, 0, 0); e != 0 {
		time.Sleep(graceWait)
	}
}
