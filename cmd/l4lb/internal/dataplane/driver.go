package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// DriverEvery is how often l4lb run and l4lb decap read the driver's
// counters.
const DriverEvery = 5 * time.Second

// A DriverReader reads the XDP counters of its interface's driver
// (ethtool -S): xdpmaglev.LB and xdpmaglev.Decap.
type DriverReader interface {
	Driver() (map[string]uint64, error)
}

var (
	_ DriverReader = (*xdpmaglev.LB)(nil)
	_ DriverReader = (*xdpmaglev.Decap)(nil)
)

// driverWarning is the message of WatchDriver's warning.
const driverWarning = "the driver counts XDP errors: frames the program passed on were lost after it (on a veth, its peer needs an XDP program); logged once a counter, the metric maglev.xdp.driver has every change"

// WatchDriver reads the XDP counters of iface's driver (dp.Driver, as
// ethtool -S has them) every interval until ctx ends, and logs a warning
// the first time each error counter rises: frames the program sent on
// (counted forwarded, or passed on to a second hop) that the driver
// failed to send. It logs a counter once: the metrics (maglev.xdp.driver)
// have the rest.
func WatchDriver(ctx context.Context, dp DriverReader, iface string, interval time.Duration, log *slog.Logger) {
	last, err := dp.Driver()
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
		now, err := dp.Driver()
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

// observeDriver makes the metric maglev.xdp.driver of meter observe dp's
// counters, by name (maglev.stat), as xdpmaglev's LB does its own: for
// l4lb decap, whose data plane records no metric.
func observeDriver(meter metric.Meter, dp DriverReader) error {
	drv, err := meter.Int64ObservableCounter("maglev.xdp.driver", metric.WithUnit("{event}"),
		metric.WithDescription("The interface's driver's XDP counters (ethtool -S, the names with xdp, summed over queues), by name: among them the XDP_TX errors of the packets the program passed on."))
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		counters, err := dp.Driver()
		if err != nil {
			return nil // closed: nothing to observe
		}
		for name, n := range counters {
			o.ObserveInt64(drv, int64(n), metric.WithAttributes(attribute.String("maglev.stat", name)))
		}
		return nil
	}, drv)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
