package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// loadError adds what to do to Load's errors about pins.
func loadError(err error, iface string) error {
	switch {
	case errors.Is(err, xdpmaglev.ErrLayout), errors.Is(err, xdpmaglev.ErrPinned):
		return fmt.Errorf("%w (l4lb -rebuild replaces them: connection tracking starts anew)", err)
	case errors.Is(err, xdpmaglev.ErrInUse):
		return fmt.Errorf("%w: is another l4lb running on %s?", err, iface)
	}
	return err
}

// adopted says where the data plane is pinned, and whether it was
// adopted; the balancer then keeps the adopted services where they are
// until an apply takes them over (see balancer.kept).
func adopted(lb *xdpmaglev.LB, b *balancer, log *slog.Logger) {
	if lb.PinPath() == "" {
		return
	}
	if !lb.Adopted() {
		log.Info(fmt.Sprintf("pinned in %s", lb.PinPath()))
		return
	}
	b.kept = map[xdpmaglev.Service]bool{}
	for _, s := range lb.Services() {
		b.kept[s] = true
	}
	log.Info(fmt.Sprintf("adopted the data plane pinned in %s: its connection tracking, tables and counters go on", lb.PinPath()))
}

// adoptedBackends returns the backends an earlier l4lb left in the data
// plane for svc, sorted by address, Down ones included
// (xdpmaglev.LB.Backends), as the pool that starts on them has them
// applied: those that are not its members then drain, as they would have
// had the earlier l4lb seen them leave, and those down start down.
func adoptedBackends(lb *xdpmaglev.LB, svc xdpmaglev.Service) []xdpmaglev.Backend {
	return lb.Backends(svc)
}

// prune deletes, once the first apply has succeeded, the services an
// earlier l4lb left in the data plane that the configuration does not
// hold.
func prune(lb *xdpmaglev.LB, b *balancer, log *slog.Logger) error {
	b.mu.Lock()
	kept := slices.Collect(maps.Keys(b.kept))
	b.kept = nil
	b.mu.Unlock()
	var gone []string
	for _, s := range kept {
		if err := lb.DeleteService(s); err != nil && !errors.Is(err, xdpmaglev.ErrNoService) {
			return err
		}
		gone = append(gone, s.String())
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		log.Info(fmt.Sprintf("deleted %s, which an earlier l4lb left and the configuration does not hold", strings.Join(gone, ", ")))
	}
	return nil
}

// leave ends l4lb's part at SIGINT or SIGTERM: a pinned data plane is
// released (the program stays attached and forwards by the last tables
// until the next l4lb adopts it), any other detached.
func leave(lb *xdpmaglev.LB, iface string, log *slog.Logger) error {
	if lb.PinPath() == "" {
		if err := lb.Close(); err != nil {
			return err
		}
		log.Info(fmt.Sprintf("detached from %s", iface))
		return nil
	}
	if err := lb.Release(); err != nil {
		return err
	}
	log.Info(fmt.Sprintf("left attached to %s, pinned in %s (l4lb -detach -iface %s removes it)", iface, lb.PinPath(), iface))
	return nil
}

// release is leave without a word, for run's error paths: a pinned data
// plane stays for the next l4lb. After leave or detach it does nothing.
func release(lb *xdpmaglev.LB) {
	if lb.PinPath() != "" {
		_ = lb.Release()
		return
	}
	_ = lb.Close()
}

// detach takes the load balancer out of the data path for good, where a
// restart leaves it (leave): the program leaves the interface, and the
// pins are removed. It ends a drain of the whole load balancer.
func detach(lb *xdpmaglev.LB, iface string, log *slog.Logger) error {
	dir := lb.PinPath()
	if err := lb.Close(); err != nil {
		return err
	}
	if dir != "" {
		log.Info(fmt.Sprintf("detached from %s, and removed the pins in %s", iface, dir))
	} else {
		log.Info(fmt.Sprintf("detached from %s", iface))
	}
	return nil
}

// runDetach is l4lb -detach: it removes what an l4lb left pinned for
// c.Iface, and says what on out (standard output: the command's output,
// not log records).
func runDetach(c config.Detach, out io.Writer) error {
	dir := filepath.Join(c.PinDir, c.Iface)
	removed, err := xdpmaglev.Detach(dir)
	for _, p := range removed {
		_, _ = fmt.Fprintf(out, "l4lb: removed %s\n", p)
	}
	if err != nil {
		return loadError(err, c.Iface)
	}
	switch {
	case len(removed) == 0:
		_, _ = fmt.Fprintf(out, "l4lb: nothing pinned in %s\n", dir)
	case slices.Contains(removed, filepath.Join(dir, "link")):
		_, _ = fmt.Fprintf(out, "l4lb: detached from %s\n", c.Iface)
	default:
		_, _ = fmt.Fprintf(out, "l4lb: no program was attached to %s\n", c.Iface)
	}
	return nil
}
