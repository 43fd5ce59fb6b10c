package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/maglevlb/maglev/xdpmaglev"
)

// defaultPinDir is -pin-dir's default: the BPF filesystem systemd mounts.
const defaultPinDir = "/sys/fs/bpf/l4lb"

// bpfFSMagic is a BPF filesystem's type in statfs(2).
const bpfFSMagic = 0xcafe4a11

// pinConfig is -pin-dir, -rebuild and -detach: where the data plane is
// pinned so that it outlives l4lb (xdpmaglev.Options.PinPath), one
// directory per interface.
type pinConfig struct {
	dir      string // -pin-dir; "": nothing pinned
	explicit bool   // -pin-dir given: a directory outside a BPF filesystem is an error, not a warning
	rebuild  bool   // -rebuild
	detach   bool   // -detach: remove the program and the pins of -iface, and exit
}

func (p *pinConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&p.dir, "pin-dir", defaultPinDir, "the `directory`, in a BPF filesystem, where the data plane is pinned (in a subdirectory named after -iface) so that it outlives l4lb: SIGINT and SIGTERM leave the program attached and forwarding, and the next l4lb adopts it (connection tracking, tables, counters) and replaces the program without a gap; empty: nothing pinned, and a restart detaches and forgets connection tracking")
	fs.BoolVar(&p.rebuild, "rebuild", false, "replace pinned maps that l4lb cannot adopt (another layout after an upgrade; another -mode, -conntrack-size, -max-services, -max-backends or interface) with new, empty ones: connection tracking starts anew")
	fs.BoolVar(&p.detach, "detach", false, "remove the program from -iface and what is pinned for it in -pin-dir, print what was removed, and exit (no l4lb may be running on -iface)")
}

// check checks the pin flags once parsed; with -detach it is the whole
// command line, and done is true.
func (p *pinConfig) check(iface string, set map[string]bool) (done bool, err error) {
	p.explicit = set["pin-dir"]
	if p.dir != "" {
		p.dir = filepath.Clean(p.dir)
	}
	if !p.detach {
		if p.rebuild && p.dir == "" {
			return false, errors.New("-rebuild needs a -pin-dir")
		}
		return false, nil
	}
	var other []string
	for name := range set {
		if name != "detach" && name != "iface" && name != "pin-dir" {
			other = append(other, "-"+name)
		}
	}
	slices.Sort(other)
	switch {
	case len(other) > 0:
		return true, fmt.Errorf("-detach takes -iface and -pin-dir only, not %s", strings.Join(other, ", "))
	case iface == "":
		return true, errors.New("-detach needs -iface")
	case p.dir == "":
		return true, errors.New("-detach needs the -pin-dir l4lb ran with")
	}
	return true, nil
}

// path returns the pin directory of iface, or "" for none: -pin-dir "",
// or the default -pin-dir where no BPF filesystem is mounted, which is
// logged as a warning (l4lb then runs as it did before pinning). A
// -pin-dir given outside a BPF filesystem is left to Load, which refuses
// it.
func (p pinConfig) path(iface string, log *slog.Logger) string {
	if p.dir == "" {
		return ""
	}
	if !p.explicit && !inBPFFS(p.dir) {
		log.Warn(fmt.Sprintf("-pin-dir %s is not in a BPF filesystem (mount -t bpf bpf /sys/fs/bpf): nothing pinned, so a restart detaches the program and forgets connection tracking", p.dir))
		return ""
	}
	return filepath.Join(p.dir, iface)
}

// inBPFFS reports whether dir, or the nearest of its parents that
// exists, is in a BPF filesystem.
func inBPFFS(dir string) bool {
	for p := dir; ; p = filepath.Dir(p) {
		var st syscall.Statfs_t
		err := syscall.Statfs(p, &st)
		if err == nil {
			return uint32(st.Type) == bpfFSMagic
		}
		if !errors.Is(err, syscall.ENOENT) || p == filepath.Dir(p) {
			return false
		}
	}
}

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
// c.iface, and says what on out (standard output: the command's output,
// not log records).
func runDetach(c config, out io.Writer) error {
	dir := filepath.Join(c.pin.dir, c.iface)
	removed, err := xdpmaglev.Detach(dir)
	for _, p := range removed {
		_, _ = fmt.Fprintf(out, "l4lb: removed %s\n", p)
	}
	if err != nil {
		return loadError(err, c.iface)
	}
	switch {
	case len(removed) == 0:
		_, _ = fmt.Fprintf(out, "l4lb: nothing pinned in %s\n", dir)
	case slices.Contains(removed, filepath.Join(dir, "link")):
		_, _ = fmt.Fprintf(out, "l4lb: detached from %s\n", c.iface)
	default:
		_, _ = fmt.Fprintf(out, "l4lb: no program was attached to %s\n", c.iface)
	}
	return nil
}
