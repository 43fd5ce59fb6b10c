package httpmaglev

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The instrumentation scope of the Transport's metrics.
const meterName = "github.com/maglevlb/maglev/httpmaglev"

// Attribute keys of the Transport's metrics.
const (
	attrBackend = attribute.Key("maglev.backend") // a backend's name
	attrOutcome = attribute.Key("maglev.outcome") // a request's outcome
	attrState   = attribute.Key("maglev.state")   // a backend's state
	attrReason  = attribute.Key("maglev.reason")  // why a table was rebuilt
)

// The outcomes of a request sent to a backend (maglev.outcome).
const (
	outcomeOK           = "ok"            // the backend answered, whatever the status
	outcomeBackendError = "backend_error" // a backend fault (see RoundTrip): it counts toward ejection
	outcomeRequestError = "request_error" // the caller's own fault, or a failure of no known kind
)

// metrics holds the Transport's instruments. What every request updates
// (requests by outcome, in flight, retries) is counted in atomics of the
// backend's member (memberMetrics) and observed when the MeterProvider
// collects: a request costs an atomic add or two, whatever the provider,
// and allocates nothing. Rare events (ejections, health transitions,
// rebuilds) are recorded as they happen.
type metrics struct {
	ejections metric.Int64Counter // maglev.http.ejections
	health    metric.Int64Counter // maglev.http.health.transitions
	rebuilds  metric.Int64Counter // maglev.table.rebuilds
	moved     metric.Int64Counter // maglev.table.slots.moved

	reasons map[rebuildReason][]metric.AddOption // rebuilds by reason

	reg metric.Registration // the observable instruments' callback
}

// memberMetrics are one backend's request counts and the attribute sets it
// is recorded and observed with, made when its member is.
type memberMetrics struct {
	ok, backendErr, requestErr atomic.Int64 // requests by outcome
	retries                    atomic.Int64 // requests sent again after this backend failed
	inFlight                   atomic.Int64 // requests sent and not answered yet

	backend                      attribute.Set      // maglev.backend=NAME
	okSet, backendErrSet, errSet attribute.Set      // and maglev.outcome
	backendAdd, upAdd, downAdd   []metric.AddOption // for the ejection and health transition counters
}

func addOptions(set attribute.Set) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(set)}
}

func (mm *memberMetrics) init(name string) {
	b := attrBackend.String(name)
	mm.backend = attribute.NewSet(b)
	mm.okSet = attribute.NewSet(b, attrOutcome.String(outcomeOK))
	mm.backendErrSet = attribute.NewSet(b, attrOutcome.String(outcomeBackendError))
	mm.errSet = attribute.NewSet(b, attrOutcome.String(outcomeRequestError))
	mm.backendAdd = addOptions(mm.backend)
	mm.upAdd = addOptions(attribute.NewSet(b, attrState.String("up")))
	mm.downAdd = addOptions(attribute.NewSet(b, attrState.String("down")))
}

// newMetrics creates the Transport's instruments with mp's meter (the
// global MeterProvider if mp is nil) and registers the callback of the
// observable ones, which reads t's current snapshot.
func newMetrics(t *Transport, mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(meterName)
	m := &metrics{reasons: make(map[rebuildReason][]metric.AddOption, len(rebuildReasons))}
	for _, r := range rebuildReasons {
		m.reasons[r] = addOptions(attribute.NewSet(attrReason.String(string(r))))
	}
	noBackend := metric.WithAttributeSet(attribute.NewSet(attrOutcome.String("no_backend")))
	var err error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, e := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err == nil && e != nil {
			err = fmt.Errorf("%s: %w", name, e)
		}
		return c
	}
	m.ejections = counter("maglev.http.ejections", "{ejection}", "Passive ejections, by backend.")
	m.health = counter("maglev.http.health.transitions", "{transition}", "Active health check transitions, by backend and the state entered (up or down).")
	m.rebuilds = counter("maglev.table.rebuilds", "{rebuild}", "Tables published after the first, by reason.")
	m.moved = counter("maglev.table.slots.moved", "{slot}", "Slots whose owner a rebuild changed, summed over rebuilds.")

	var gauge = func(name, unit, desc string) metric.Int64ObservableGauge {
		g, e := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err == nil && e != nil {
			err = fmt.Errorf("%s: %w", name, e)
		}
		return g
	}
	slots := gauge("maglev.table.slots", "{slot}", "Slots each backend of the current table owns.")
	minSlots := gauge("maglev.table.slots.min", "{slot}", "The fewest slots a backend of the current table owns (Envoy's min_entries_per_host).")
	maxSlots := gauge("maglev.table.slots.max", "{slot}", "The most slots a backend of the current table owns (Envoy's max_entries_per_host).")
	backends := gauge("maglev.http.backends", "{backend}", "Configured backends, by state: healthy (in the table), down (failed active checks), ejected, drained.")
	observed := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, e := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err == nil && e != nil {
			err = fmt.Errorf("%s: %w", name, e)
		}
		return c
	}
	requests := observed("maglev.http.requests", "{request}", "Requests sent to a backend, by backend and outcome; a retry is a second request.")
	retries := observed("maglev.http.retries", "{request}", "Requests sent again after a backend fault, by the backend that failed.")
	spills := observed("maglev.bounded.spills", "{request}", "Requests placed past a full first candidate with bounded loads, by that first candidate's backend.")
	inFlight, e := meter.Int64ObservableUpDownCounter("maglev.http.requests.in_flight", metric.WithUnit("{request}"),
		metric.WithDescription("Requests sent to a backend and not answered yet, by backend."))
	if err == nil && e != nil {
		err = e
	}
	if err != nil {
		return nil, fmt.Errorf("httpmaglev: metrics: %w", err)
	}
	m.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := t.cur.Load()
		o.ObserveInt64(requests, t.noBackend.Load(), noBackend)
		for _, mb := range s.ms.all {
			mm := &mb.mm
			o.ObserveInt64(requests, mm.ok.Load(), metric.WithAttributeSet(mm.okSet))
			o.ObserveInt64(requests, mm.backendErr.Load(), metric.WithAttributeSet(mm.backendErrSet))
			o.ObserveInt64(requests, mm.requestErr.Load(), metric.WithAttributeSet(mm.errSet))
			o.ObserveInt64(retries, mm.retries.Load(), metric.WithAttributeSet(mm.backend))
			o.ObserveInt64(inFlight, mm.inFlight.Load(), metric.WithAttributeSet(mm.backend))
		}
		lo, hi := math.MaxInt, -1
		for i, c := range s.counts {
			if s.serving[i] {
				o.ObserveInt64(slots, int64(c), metric.WithAttributes(attrBackend.String(s.table.Backend(i))))
				lo, hi = min(lo, c), max(hi, c)
			}
		}
		if hi >= 0 {
			o.ObserveInt64(minSlots, int64(lo))
			o.ObserveInt64(maxSlots, int64(hi))
		}
		// By status, in the gauge's own names: serving is healthy, and a
		// backend out of service is ejected for a passive reason, down
		// for its failed active checks.
		byState := map[string]int64{"healthy": 0, "down": 0, "ejected": 0, "drained": 0}
		now := time.Now().UnixNano()
		for _, mb := range s.ms.all {
			switch status, reason := t.status(s.ms, mb, now); {
			case status == StatusServing:
				byState["healthy"]++
			case status == StatusDraining:
				byState["drained"]++
			case reason.passive():
				byState["ejected"]++
			default:
				byState["down"]++
			}
		}
		for state, n := range byState {
			o.ObserveInt64(backends, n, metric.WithAttributes(attrState.String(state)))
		}
		if s.bounded != nil {
			for _, l := range s.bounded.Loads(nil) {
				o.ObserveInt64(spills, int64(l.Spilled), metric.WithAttributes(attrBackend.String(l.Backend)))
			}
		}
		return nil
	}, requests, retries, inFlight, slots, minSlots, maxSlots, backends, spills)
	if err != nil {
		return nil, fmt.Errorf("httpmaglev: metrics: %w", err)
	}
	return m, nil
}

// rebuilt records a published rebuild.
func (m *metrics) rebuilt(why rebuildReason, churn int) {
	ctx := context.Background()
	m.rebuilds.Add(ctx, 1, m.reasons[why]...)
	m.moved.Add(ctx, int64(churn))
}
