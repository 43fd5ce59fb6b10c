// Package dataplane is l4lb's side of the XDP data plane's life: its
// load's errors said as what to do, leaving it pinned for the next l4lb
// or detaching it for good, removing what an l4lb left (l4lb detach),
// the driver's XDP counters watched for errors, the kernel's forwarding
// checked for the encapsulating modes, and the backends' decapsulator
// (l4lb decap). It holds no state: each func acts on the xdpmaglev.LB or
// Decap it is given.
package dataplane

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// LoadError adds what to do to Load's errors about pins.
func LoadError(err error, iface string) error {
	switch {
	case errors.Is(err, xdpmaglev.ErrLayout), errors.Is(err, xdpmaglev.ErrPinned):
		return fmt.Errorf("%w (l4lb run -rebuild replaces them: connection tracking starts anew)", err)
	case errors.Is(err, xdpmaglev.ErrInUse):
		return fmt.Errorf("%w: is another l4lb running on %s?", err, iface)
	}
	return err
}

// Leave ends l4lb's part at SIGINT or SIGTERM: a pinned data plane is
// released (the program stays attached and forwards by the last tables
// until the next l4lb adopts it), any other detached.
func Leave(lb *xdpmaglev.LB, iface string, log *slog.Logger) error {
	if lb.PinPath() == "" {
		if err := lb.Close(); err != nil {
			return err
		}
		log.Info("detached", "iface", iface)
		return nil
	}
	if err := lb.Release(); err != nil {
		return err
	}
	log.Info("left attached and pinned for the next l4lb (l4lb detach removes it)", "iface", iface, "path", lb.PinPath())
	return nil
}

// Release is leave without a word, for the error paths of l4lb run: a pinned data
// plane stays for the next l4lb. After Leave or Detach it does nothing.
func Release(lb *xdpmaglev.LB) {
	if lb.PinPath() != "" {
		_ = lb.Release()
		return
	}
	_ = lb.Close()
}

// Detach takes the load balancer out of the data path for good, where a
// restart leaves it (Leave): the program leaves the interface, and the
// pins are removed. It ends a drain of the whole load balancer.
func Detach(lb *xdpmaglev.LB, iface string, log *slog.Logger) error {
	dir := lb.PinPath()
	if err := lb.Close(); err != nil {
		return err
	}
	if dir != "" {
		log.Info("detached, and removed the pins", "iface", iface, "path", dir)
	} else {
		log.Info("detached", "iface", iface)
	}
	return nil
}

// DetachPins is l4lb detach: it removes what an l4lb left pinned for
// c.Iface, and says what on out (standard output: the command's output,
// not log records).
func DetachPins(c config.Detach, out io.Writer) error {
	dir := filepath.Join(c.PinDir, c.Iface)
	removed, err := xdpmaglev.Detach(dir)
	for _, p := range removed {
		_, _ = fmt.Fprintf(out, "l4lb: removed %s\n", p)
	}
	if err != nil {
		return LoadError(err, c.Iface)
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

// WarnForwardingOff logs a warning if the encapsulating mode f cannot
// route svc's packets out of iface because the kernel does not forward
// there (bpf_fib_lookup then refuses, and the packets are dropped as
// forwarding_off), with the command that fixes it.
func WarnForwardingOff(iface string, svc xdpmaglev.Service, f xdpmaglev.Forward, log *slog.Logger) {
	if f == xdpmaglev.ForwardL2 {
		return
	}
	// IPv4 asks the receiving interface's setting, IPv6 the global one.
	key := "net/ipv4/conf/" + iface + "/forwarding"
	all := "net.ipv4.conf.all.forwarding"
	if !svc.VIP.Addr().Unmap().Is4() {
		key, all = "net/ipv6/conf/all/forwarding", "net.ipv6.conf.all.forwarding"
	}
	b, err := os.ReadFile("/proc/sys/" + key)
	if err != nil || strings.TrimSpace(string(b)) != "0" {
		return // unknown, or on
	}
	log.Warn("forwarding is off: the kernel's route lookup refuses, and the service's packets are dropped (forwarding_off)",
		"vip", svc.String(), "forward", f.String(), "sysctl", strings.ReplaceAll(key, "/", "."), "fix", "sysctl -w "+all+"=1")
}
