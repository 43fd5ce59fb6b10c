package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"

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

// cmdDetach is l4lb detach: the data plane removed for good.
var cmdDetach = &command{
	name:  "detach",
	usage: "-iface DEV [-pin-dir DIR]",
	short: "remove the program and the pins an l4lb left on an interface",
	long: `Detach removes the program l4lb left attached to -iface and what it
pinned for it in -pin-dir (the one l4lb ran with), prints each pin removed
on standard output, and exits; it is refused while an l4lb runs on -iface.`,
	flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
		vs := config.DetachFlags(fs)
		return func(_ context.Context, args []string, stdout, _ io.Writer) error {
			if err := noArgs(args); err != nil {
				return err
			}
			d, err := config.BuildDetach(vs, "l4lb detach")
			if err != nil {
				return err
			}
			return runDetach(d, stdout)
		}
	},
}

// runDetach is l4lb detach: it removes what an l4lb left pinned for
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
