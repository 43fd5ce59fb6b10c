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
	in, all, err := newInstruments(mp.Meter(scope))
	if err != nil {
		return nil, fmt.Errorf("xdpmaglev: metrics: %w", err)
	}
	reg, err := mp.Meter(scope).RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st, err := lb.Stats()
		if errors.Is(err, ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		in.observe(o, st)
		return nil
	}, all...)
	if err != nil {
		return nil, fmt.Errorf("xdpmaglev: metrics: %w", err)
	}
	return &metrics{reg: reg}, nil
}

// instruments are the data plane's metrics, observed from its Stats.
type instruments struct {
	packets, bytes, svcPackets, svcBytes              metric.Int64ObservableCounter
	lookups, stale, reopened, inserts, closed, flood  metric.Int64ObservableCounter
	passed, dropped, icmp, drv, stateless, secondHops metric.Int64ObservableCounter
	quic, quicDecrypted                               metric.Int64ObservableCounter
	floodTime                                         metric.Float64ObservableCounter
	hit, miss, icmpForwarded, icmpTooBig, byCID       metric.ObserveOption
	reasons                                           map[string]metric.ObserveOption // pass_ and drop_ counters' reasons
	byTable                                           map[string]metric.ObserveOption // quic_table_ counters' reasons
}

// newInstruments makes the instruments on meter, and returns them and
// the list a callback registers.
func newInstruments(meter metric.Meter) (*instruments, []metric.Observable, error) {
	var errs []error
	var all []metric.Observable
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		all = append(all, c)
		return c
	}
	in := &instruments{
		packets:       counter("maglev.xdp.packets", "{packet}", "Packets sent to a backend (XDP_TX), by service and backend; a backend's count starts at 0 when it joins the service."),
		bytes:         counter("maglev.xdp.bytes", "By", "Bytes of the frames sent to a backend, Ethernet header included, by service and backend."),
		svcPackets:    counter("maglev.xdp.service.packets", "{packet}", "Packets sent to a backend of the service, since the service was set."),
		svcBytes:      counter("maglev.xdp.service.bytes", "By", "Bytes of the frames sent to a backend of the service, since the service was set."),
		lookups:       counter("maglev.xdp.conntrack.lookups", "{lookup}", "Connection tracking lookups of packets to a service: hit (an entry named a backend still in the service) or miss (the table chose)."),
		stale:         counter("maglev.xdp.conntrack.stale", "{lookup}", "Of the misses, entries found whose backend had left the service."),
		reopened:      counter("maglev.xdp.conntrack.reopened", "{lookup}", "Of the misses, TCP SYNs on the tuple of a flow that ended (FIN or RST) or whose backend was draining: new connections, placed by the table."),
		inserts:       counter("maglev.xdp.conntrack.inserts", "{entry}", "Connection tracking entries written."),
		closed:        counter("maglev.xdp.conntrack.closed", "{entry}", "Connection tracking entries marked ended by the client's FIN or RST."),
		passed:        counter("maglev.xdp.passed", "{packet}", "Packets passed to the kernel (XDP_PASS), by reason."),
		dropped:       counter("maglev.xdp.dropped", "{packet}", "Packets dropped (XDP_DROP), by reason."),
		flood:         counter("maglev.xdp.conntrack.flood", "{lookup}", "Of the misses, flows routed by the table without a conntrack entry written: the flood guard had no credit."),
		icmp:          counter("maglev.xdp.icmp", "{packet}", "ICMP errors: forwarded (about a flow, sent to its backend) and too_big (sent to a client whose packet would not fit once encapsulated)."),
		drv:           counter("maglev.xdp.driver", "{event}", "The interface's driver's XDP counters (ethtool -S, the names with xdp, summed over queues), by name: among them the XDP_TX and redirect errors the program counts forwarded."),
		stateless:     counter("maglev.xdp.stateless", "{packet}", "Packets of stateless services (ServiceOptions.Conntrack off), sent by the table alone."),
		secondHops:    counter("maglev.xdp.second_hops", "{packet}", "Packets sent with a second hop in their GUE header: their slot moved within the service's second chance window, or their conntrack entry names one."),
		quic:          counter("maglev.xdp.quic", "{packet}", "UDP packets of QUIC-LB services, by route: cid (their destination connection ID named a server in service) or table, with the reason."),
		quicDecrypted: counter("maglev.xdp.quic.decrypted", "{packet}", "Encrypted QUIC-LB connection IDs decrypted: those the cache of decrypted server IDs did not have."),
	}
	var err error
	in.floodTime, err = meter.Float64ObservableCounter("maglev.xdp.flood.time", metric.WithUnit("s"), metric.WithDescription("Time the flood guard refused conntrack entries, summed over CPUs."))
	errs = append(errs, err)
	all = append(all, in.floodTime)
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	in.hit = metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.outcome", "hit")))
	in.miss = metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.outcome", "miss")))
	in.icmpForwarded = metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.kind", "forwarded")))
	in.icmpTooBig = metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.kind", "too_big")))
	in.byCID = metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.route", "cid")))
	in.byTable = map[string]metric.ObserveOption{}
	for _, name := range counterNames {
		if r, ok := strings.CutPrefix(name, "quic_table_"); ok {
			in.byTable[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.route", "table"), attribute.String("maglev.reason", r)))
		}
	}
	in.reasons = map[string]metric.ObserveOption{}
	for _, name := range counterNames {
		if _, r, ok := strings.Cut(name, "_"); ok && (strings.HasPrefix(name, "pass_") || strings.HasPrefix(name, "drop_")) {
			in.reasons[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.reason", r)))
		}
	}
	return in, all, nil
}

// observe records st.
func (in *instruments) observe(o metric.Observer, st Stats) {
	o.ObserveInt64(in.lookups, int64(st.Conntrack.Hits), in.hit)
	o.ObserveInt64(in.lookups, int64(st.Conntrack.Misses), in.miss)
	o.ObserveInt64(in.stale, int64(st.Conntrack.Stale))
	o.ObserveInt64(in.reopened, int64(st.Conntrack.Reopened))
	o.ObserveInt64(in.inserts, int64(st.Conntrack.Inserts))
	o.ObserveInt64(in.closed, int64(st.Conntrack.Closed))
	o.ObserveInt64(in.flood, int64(st.Conntrack.Flood))
	o.ObserveFloat64(in.floodTime, st.FloodSeconds)
	o.ObserveInt64(in.icmp, int64(st.ICMP.Forwarded), in.icmpForwarded)
	o.ObserveInt64(in.icmp, int64(st.ICMP.TooBig), in.icmpTooBig)
	o.ObserveInt64(in.stateless, int64(st.Stateless))
	o.ObserveInt64(in.secondHops, int64(st.SecondHops))
	o.ObserveInt64(in.quic, int64(st.QUIC.CID), in.byCID)
	for r, n := range st.QUIC.Table {
		o.ObserveInt64(in.quic, int64(n), in.byTable[r])
	}
	o.ObserveInt64(in.quicDecrypted, int64(st.QUIC.Decrypted))
	for r, n := range st.Passed {
		o.ObserveInt64(in.passed, int64(n), in.reasons[r])
	}
	for r, n := range st.Dropped {
		o.ObserveInt64(in.dropped, int64(n), in.reasons[r])
	}
	for name, n := range st.Driver {
		o.ObserveInt64(in.drv, int64(n), metric.WithAttributes(attribute.String("maglev.stat", name)))
	}
	for _, s := range st.Services {
		svc := attribute.String("maglev.service", s.Name)
		o.ObserveInt64(in.svcPackets, int64(s.Packets), metric.WithAttributes(svc))
		o.ObserveInt64(in.svcBytes, int64(s.Bytes), metric.WithAttributes(svc))
		for _, b := range s.Backends {
			attrs := metric.WithAttributeSet(attribute.NewSet(svc, attribute.String("maglev.backend", b.Addr.String())))
			o.ObserveInt64(in.packets, int64(b.Packets), attrs)
			o.ObserveInt64(in.bytes, int64(b.Bytes), attrs)
		}
	}
}

func (m *metrics) close() error {
	if err := m.reg.Unregister(); err != nil {
		return fmt.Errorf("xdpmaglev: metrics: %w", err)
	}
	return nil
}
