package xdpmaglev

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// scope is the instrumentation scope of the package's metrics.
const scope = "github.com/maglevlb/maglev/xdpmaglev"

// metrics are the data plane's per-CPU counters as OpenTelemetry
// observable counters: a callback reads Stats at each collection and
// observes the sums. docs/metrics.md lists them.
type metrics struct {
	reg metric.Registration
}

// newMetrics registers the instruments with mp's meter and a callback that
// reads lb's counters.
func newMetrics(lb *LB, mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(scope)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	packets := counter("maglev.xdp.packets", "{packet}", "Packets sent to a backend (XDP_TX), by service and backend; a backend's count starts at 0 when it joins the service.")
	bytes := counter("maglev.xdp.bytes", "By", "Bytes of the frames sent to a backend, Ethernet header included, by service and backend.")
	svcPackets := counter("maglev.xdp.service.packets", "{packet}", "Packets sent to a backend of the service, since the service was set.")
	svcBytes := counter("maglev.xdp.service.bytes", "By", "Bytes of the frames sent to a backend of the service, since the service was set.")
	lookups := counter("maglev.xdp.conntrack.lookups", "{lookup}", "Connection tracking lookups of packets to a service: hit (an entry named a backend still in the service) or miss (the table chose).")
	stale := counter("maglev.xdp.conntrack.stale", "{lookup}", "Of the misses, entries found whose backend had left the service.")
	reopened := counter("maglev.xdp.conntrack.reopened", "{lookup}", "Of the misses, TCP SYNs on the tuple of a flow that ended (FIN or RST) or whose backend was draining: new connections, placed by the table.")
	inserts := counter("maglev.xdp.conntrack.inserts", "{entry}", "Connection tracking entries written.")
	closed := counter("maglev.xdp.conntrack.closed", "{entry}", "Connection tracking entries marked ended by the client's FIN or RST.")
	passed := counter("maglev.xdp.passed", "{packet}", "Packets passed to the kernel (XDP_PASS), by reason.")
	dropped := counter("maglev.xdp.dropped", "{packet}", "Packets dropped (XDP_DROP), by reason.")
	flood := counter("maglev.xdp.conntrack.flood", "{lookup}", "Of the misses, flows routed by the table without a conntrack entry written: the flood guard had no credit.")
	icmp := counter("maglev.xdp.icmp", "{packet}", "ICMP errors: forwarded (about a flow, sent to its backend) and too_big (sent to a client whose packet would not fit once encapsulated).")
	drv := counter("maglev.xdp.driver", "{event}", "The interface's driver's XDP counters (ethtool -S, the names with xdp, summed over queues), by name: among them the XDP_TX and redirect errors the program counts forwarded.")
	floodTime, err := meter.Float64ObservableCounter("maglev.xdp.flood.time", metric.WithUnit("s"), metric.WithDescription("Time the flood guard refused conntrack entries, summed over CPUs."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("xdpmaglev: metrics: %w", err)
	}
	hit := metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.outcome", "hit")))
	miss := metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.outcome", "miss")))
	icmpForwarded := metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.kind", "forwarded")))
	icmpTooBig := metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.kind", "too_big")))
	reasons := map[string]metric.ObserveOption{}
	for _, name := range counterNames {
		if _, r, ok := strings.Cut(name, "_"); ok && (strings.HasPrefix(name, "pass_") || strings.HasPrefix(name, "drop_")) {
			reasons[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.reason", r)))
		}
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st, err := lb.Stats()
		if errors.Is(err, ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		o.ObserveInt64(lookups, int64(st.Conntrack.Hits), hit)
		o.ObserveInt64(lookups, int64(st.Conntrack.Misses), miss)
		o.ObserveInt64(stale, int64(st.Conntrack.Stale))
		o.ObserveInt64(reopened, int64(st.Conntrack.Reopened))
		o.ObserveInt64(inserts, int64(st.Conntrack.Inserts))
		o.ObserveInt64(closed, int64(st.Conntrack.Closed))
		o.ObserveInt64(flood, int64(st.Conntrack.Flood))
		o.ObserveFloat64(floodTime, st.FloodSeconds)
		o.ObserveInt64(icmp, int64(st.ICMP.Forwarded), icmpForwarded)
		o.ObserveInt64(icmp, int64(st.ICMP.TooBig), icmpTooBig)
		for r, n := range st.Passed {
			o.ObserveInt64(passed, int64(n), reasons[r])
		}
		for r, n := range st.Dropped {
			o.ObserveInt64(dropped, int64(n), reasons[r])
		}
		for name, n := range st.Driver {
			o.ObserveInt64(drv, int64(n), metric.WithAttributes(attribute.String("maglev.stat", name)))
		}
		for _, s := range st.Services {
			svc := attribute.String("maglev.service", s.Name)
			o.ObserveInt64(svcPackets, int64(s.Packets), metric.WithAttributes(svc))
			o.ObserveInt64(svcBytes, int64(s.Bytes), metric.WithAttributes(svc))
			for _, b := range s.Backends {
				attrs := metric.WithAttributeSet(attribute.NewSet(svc, attribute.String("maglev.backend", b.Addr.String())))
				o.ObserveInt64(packets, int64(b.Packets), attrs)
				o.ObserveInt64(bytes, int64(b.Bytes), attrs)
			}
		}
		return nil
	}, packets, bytes, svcPackets, svcBytes, lookups, stale, reopened, inserts, closed, passed, dropped, flood, icmp, floodTime, drv)
	if err != nil {
		return nil, fmt.Errorf("xdpmaglev: metrics: %w", err)
	}
	return &metrics{reg: reg}, nil
}

func (m *metrics) close() error {
	if err := m.reg.Unregister(); err != nil {
		return fmt.Errorf("xdpmaglev: metrics: %w", err)
	}
	return nil
}
