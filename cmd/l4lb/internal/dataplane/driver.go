package dataplane

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev"
)

// DriverEvery is how often l4lb run reads the driver's counters.
const DriverEvery = 5 * time.Second

// driverWarning is the message of WatchDriver's warning.
const driverWarning = "the driver counts XDP errors: frames the program passed on were lost after it (on a veth, its peer needs an XDP program); logged once a counter, the metric maglev.xdp.driver has every change"

// WatchDriver reads the XDP counters of iface's driver (xdpmaglev.LB.Driver,
// as ethtool -S has them) every interval until ctx ends, and logs a
// warning the first time each error counter rises: frames the program
// sent on (counted forwarded) that the driver failed to send. It logs a
// counter once: the metrics (maglev.xdp.driver) have the rest.
func WatchDriver(ctx context.Context, lb *xdpmaglev.LB, iface string, interval time.Duration, log *slog.Logger) {
	last, err := lb.Driver()
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, xdpmaglev.ErrClosed) {
			return // stopped before the first read: nothing to tell
		}
		log.Warn("the driver's XDP counters are not readable", "iface", iface, "err", err)
		return
	}
	warned := map[string]bool{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now, err := lb.Driver()
		if err != nil {
			continue // closed, or the interface renamed: the next read tells
		}
		for _, name := range slices.Sorted(maps.Keys(now)) {
			if warned[name] || !driverError(name) || now[name] <= last[name] {
				continue
			}
			warned[name] = true
			log.Warn(driverWarning, "iface", iface, "counter", name, "rose", now[name]-last[name], "value", now[name])
		}
		last = now
	}
}

// driverError reports whether a driver counter's name counts errors.
func driverError(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "err") || strings.Contains(n, "fail")
}
