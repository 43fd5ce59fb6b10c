// Package checker is l4lb's health checker: it probes the backends of
// one service, each on a schedule of its own (a TCP connect, or an HTTP
// GET on a connection kept from one probe to the next), and keeps each
// one's health, which the service's pool asks when it computes what the
// data plane holds. It owns the probes, their connections and the health
// metrics (maglev.l4lb.health.*); it knows nothing of the data plane nor
// of the pool: it calls a func on each transition.
//
// Locking: Checker.mu guards the backends' states and schedules, and is
// never held across a probe, which waits on the network, nor across the
// changed func, so that its caller may take its own locks and then ask
// IsDown (the pool's locks come before mu).
package checker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maglevlb/maglev/internal/health"
	"github.com/maglevlb/maglev/xdpmaglev"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Config is a service's health check, from the health settings. The zero
// value checks nothing.
type Config struct {
	Kind     string        // "tcp" (a connect) or "http" (a GET); "" for none
	Path     string        // http: the path of the GET
	Status   int           // http: the status that passes
	Port     uint16        // the port probed: the service's if 0
	Interval time.Duration // between the start of one probe of a backend and the next
	Timeout  time.Duration // of one probe, at most Interval
	Rise     int           // consecutive passes that bring a down backend up
	Fall     int           // consecutive failures that take an up backend down
}

// String describes the check: "http GET /healthz = 200 on port 8080 every 2s (timeout 1s, rise 2, fall 3)".
func (h Config) String() string {
	if h.Kind == "" {
		return "none"
	}
	what := "tcp connect"
	if h.Kind == "http" {
		what = fmt.Sprintf("http GET %s = %d", h.Path, h.Status)
	}
	port := "the service's port"
	if h.Port != 0 {
		port = fmt.Sprintf("port %d", h.Port)
	}
	return fmt.Sprintf("%s on %s every %v (timeout %v, rise %d, fall %d)", what, port, h.Interval, h.Timeout, h.Rise, h.Fall)
}

// A Checker probes the backends of one service, each on a schedule of its
// own, and keeps each one's health by the rule of internal/health, with
// the rise and fall of Config: a new backend is Unknown, in service, and
// its first probe decides (passed, it is up; failed, it is down at once);
// an up backend goes down after fall failed probes in a row, a down one
// comes up after rise passes in a row. A backend whose health is known
// from before (Start: the data plane a restart adopted, or the checker
// this one replaces) starts in that state. On each change of a backend's
// service (up or unknown to down, down to up) the checker prints a status
// line and calls changed, with no lock held; the caller (the pool) then
// asks IsDown.
//
// A backend's schedule is a timer, and a goroutine only while a probe is
// under way: at 10,000 backends an idle goroutine each would hold more
// memory in stacks than everything else the process has
// (docs/l4lb-howto-health.md, "Health checks at scale"). A TCP probe
// connects anew each time; an HTTP probe keeps its connection for the
// next one (HTTP/1.1 keep-alive), and reads the response in its own
// goroutine (net/http's transport would add two goroutines and 8 KiB of
// buffers a connection).
//
// A checker is safe for concurrent use by multiple goroutines. mu guards
// the backends' states and is never held across a probe, which waits on
// the network; changed is called with no lock held, so the caller may take
// its own locks and then call IsDown (its locks before mu).
type Checker struct {
	cfg       Config
	svc       xdpmaglev.Service
	port      uint16       // the port probed
	log       *slog.Logger // transitions
	changed   func()
	dialer    net.Dialer // no TCP keep-alive: a probe's connection lives a moment, or is used every interval
	reg       metric.Registration
	probeDur  metric.Float64Histogram
	okAttrs   metric.MeasurementOption // probeDur's, of a probe passed
	failAttrs metric.MeasurementOption // and failed
	svcAttr   attribute.KeyValue
	failOpen  atomic.Bool // set by the pool: every backend down, the last table kept

	mu       sync.Mutex // guards the fields below and the probed ones
	backends map[netip.Addr]*probed
	start    map[netip.Addr]health.State // the state a backend starts in when Set adds it (Start); else Unknown
	closed   bool
	wg       sync.WaitGroup // one for each timer armed and each probe under way
}

// probed is the health of one backend, and its schedule. The checker's mu
// guards the fields up to timer; the others are set before its first
// probe, but for conn and unwatch.
type probed struct {
	health  health.Machine // its state, and the probes passed and failed in a row
	ups     int64          // transitions to up, for maglev.l4lb.health.transitions
	downs   int64          // and to down
	err     string         // the last failed probe's error
	probes  int            // probes done
	stopped bool           // no longer probed: its timer is not armed again
	timer   *time.Timer

	addr   netip.Addr
	target string          // addr and the port probed, as the dialer takes them
	ctx    context.Context // cancelled when stopped: a probe under way ends
	cancel context.CancelFunc
	attrs  metric.MeasurementOption // maglev.service, maglev.backend

	// http: the GET, as a request (for its URL and ReadResponse) and as
	// written; reqErr if the path makes none. Set before the first probe.
	req    *http.Request
	wire   []byte
	reqErr error
	// http: the connection kept from one probe to the next, nil if none,
	// and the func that stops closing it when ctx is cancelled. Only the
	// backend's probe uses them (one at a time).
	conn    net.Conn
	unwatch func() bool
}

// New returns the checker of svc by cfg, recording through meter and
// logging its transitions to log; it probes nothing until Set, and calls
// changed after each transition.
func New(svc xdpmaglev.Service, cfg Config, meter metric.Meter, log *slog.Logger, changed func()) (*Checker, error) {
	c := &Checker{cfg: cfg, svc: svc, port: cfg.Port, log: log, changed: changed,
		backends: map[netip.Addr]*probed{}, svcAttr: attribute.String("maglev.service", svc.String())}
	if c.port == 0 {
		c.port = svc.VIP.Port()
	}
	c.dialer.KeepAlive = -1
	// The histogram is synchronous: its series outlive the services, so
	// it names none (the outcome only, over every service).
	c.okAttrs = metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.outcome", "ok")))
	c.failAttrs = metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.outcome", "fail")))
	var errs []error
	up, err := meter.Int64ObservableGauge("maglev.l4lb.health.up",
		metric.WithDescription("1 if the backend is in service by its health check (up, or not yet probed), 0 if it is down, by service and backend."))
	errs = append(errs, err)
	open, err := meter.Int64ObservableGauge("maglev.l4lb.health.fail_open",
		metric.WithDescription("1 while every backend of the service is down and the service keeps its last table (fails open)."))
	errs = append(errs, err)
	transitions, err := meter.Int64ObservableCounter("maglev.l4lb.health.transitions", metric.WithUnit("{transition}"),
		metric.WithDescription("Health transitions of a backend, by the state it went to (up or down), since it is probed."))
	errs = append(errs, err)
	c.probeDur, err = meter.Float64Histogram("maglev.l4lb.health.probe.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a health probe took, by outcome (ok or fail), over every service."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("health metrics: %w", err)
	}
	svcSet := metric.WithAttributeSet(attribute.NewSet(c.svcAttr))
	c.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		v := int64(0)
		if c.failOpen.Load() {
			v = 1
		}
		o.ObserveInt64(open, v, svcSet)
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, b := range c.backends {
			v := int64(0)
			if b.health.State().InService() {
				v = 1
			}
			o.ObserveInt64(up, v, b.attrs)
			// Made here, not kept: few backends have transitions.
			if b.ups > 0 {
				o.ObserveInt64(transitions, b.ups, metric.WithAttributes(c.svcAttr, attribute.String("maglev.backend", b.addr.String()), attribute.String("maglev.state", "up")))
			}
			if b.downs > 0 {
				o.ObserveInt64(transitions, b.downs, metric.WithAttributes(c.svcAttr, attribute.String("maglev.backend", b.addr.String()), attribute.String("maglev.state", "down")))
			}
		}
		return nil
	}, up, open, transitions)
	if err != nil {
		return nil, fmt.Errorf("health metrics: %w", err)
	}
	return c, nil
}

// Set makes addrs the backends probed: a new one starts up and is probed
// from now on, the first time after a random part of the interval, so
// that many backends' probes spread out over it (grouped in bursts, they
// would share the process's wakeups, but 10,000 HTTP probes a second then
// missed their deadlines: docs/l4lb-howto-health.md, "Health checks at
// scale"); one no longer listed stops being probed and its health is
// forgotten. It waits for nothing.
func (c *Checker) Set(addrs []netip.Addr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	keep := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		keep[a] = true
		if c.backends[a] != nil {
			continue
		}
		b := c.newProbed(a)
		c.backends[a] = b
		c.wg.Add(1)
		b.timer = time.AfterFunc(rand.N(c.cfg.Interval), func() { c.run(b) })
	}
	for a, b := range c.backends {
		if !keep[a] {
			c.stop(b)
			delete(c.backends, a)
		}
	}
}

// Start makes the backends of states start in their state when Set adds
// them, as a backend whose health is known from before: the data plane a
// restart adopted had it in service (Up) or out of it (Down), or the
// checker this one replaces had it so. A backend down needs rise passes
// to come up; one up, fall failures to go down.
func (c *Checker) Start(states map[netip.Addr]health.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start == nil {
		c.start = map[netip.Addr]health.State{}
	}
	maps.Copy(c.start, states)
}

// States returns the state of each backend probed.
func (c *Checker) States() map[netip.Addr]health.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[netip.Addr]health.State, len(c.backends))
	for a, b := range c.backends {
		out[a] = b.health.State()
	}
	return out
}

// newProbed returns the health of a backend at a not yet probed: the
// state Start gave it, else Unknown, with no timer. c.mu is held.
func (c *Checker) newProbed(a netip.Addr) *probed {
	start := c.start[a]
	delete(c.start, a)
	b := &probed{health: health.New(c.cfg.Rise, c.cfg.Fall, start), addr: a, target: netip.AddrPortFrom(a, c.port).String(),
		attrs: metric.WithAttributeSet(attribute.NewSet(c.svcAttr, attribute.String("maglev.backend", a.String())))}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	if c.cfg.Kind == "http" {
		b.req, b.reqErr = http.NewRequest(http.MethodGet, "http://"+b.target+c.cfg.Path, nil)
		if b.req != nil {
			// What net/http's transport writes, less Accept-Encoding: the
			// body is not read.
			b.wire = fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: l4lb-health\r\n\r\n", b.req.URL.RequestURI(), b.req.URL.Host)
		}
	}
	return b
}

// stop stops probing b: its timer is not armed again, a probe under way
// ends. c.mu must be held.
func (c *Checker) stop(b *probed) {
	b.stopped = true
	b.cancel()
	if b.timer.Stop() {
		c.wg.Done() // its probe will not run
	}
}

// IsDown reports whether the backend at a is down. It takes mu.
func (c *Checker) IsDown(a netip.Addr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.backends[a]
	return b != nil && b.health.State() == health.Down
}

// Health returns what the admin API shows of a's health: "up", "down" or
// "unknown" (not yet probed; "" if a is not probed at all), the last
// failed probe's error, and the probes passed and failed in a row.
func (c *Checker) Health(a netip.Addr) (state, lastErr string, ok, fail int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.backends[a]
	if b == nil {
		return "", "", 0, 0
	}
	return b.health.State().String(), b.err, b.health.Passed(), b.health.Failed()
}

// SetFailOpen records whether the service fails open (every backend
// down, its last table kept), for the gauge maglev.l4lb.health.fail_open.
func (c *Checker) SetFailOpen(open bool) { c.failOpen.Store(open) }

// Config returns the check's configuration.
func (c *Checker) Config() Config { return c.cfg }

// Close stops every probe and waits for the probes under way to end.
func (c *Checker) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	for a, b := range c.backends {
		c.stop(b)
		delete(c.backends, a)
	}
	c.mu.Unlock()
	c.wg.Wait()            // and with the probes, their connections are closed
	_ = c.reg.Unregister() // its error is the SDK shut down already
}

// String describes the check, as Config.String does.
func (c *Checker) String() string { return c.cfg.String() }
