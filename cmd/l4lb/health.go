package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// healthConfig is a service's health check, from -health and the
// -health-* flags. The zero value checks nothing.
type healthConfig struct {
	kind     string        // "tcp" (a connect) or "http" (a GET); "" for none
	path     string        // http: the path of the GET
	status   int           // http: the status that passes
	port     uint16        // the port probed: the service's if 0
	interval time.Duration // between the start of one probe of a backend and the next
	timeout  time.Duration // of one probe, at most interval
	rise     int           // consecutive passes that bring a down backend up
	fall     int           // consecutive failures that take an up backend down
}

// String describes the check: "http GET /healthz = 200 on port 8080 every 2s (timeout 1s, rise 2, fall 3)".
func (h healthConfig) String() string {
	if h.kind == "" {
		return "none"
	}
	what := "tcp connect"
	if h.kind == "http" {
		what = fmt.Sprintf("http GET %s = %d", h.path, h.status)
	}
	port := "the service's port"
	if h.port != 0 {
		port = fmt.Sprintf("port %d", h.port)
	}
	return fmt.Sprintf("%s on %s every %v (timeout %v, rise %d, fall %d)", what, port, h.interval, h.timeout, h.rise, h.fall)
}

// A checker probes the backends of one service, each on a schedule of its
// own, and keeps each one's health: up or down, with the rise and fall
// counts of healthConfig. A new backend starts up, and goes down after
// fall failed probes in a row; a down backend comes up after rise passes
// in a row. A backend last known down (startDown: by the data plane a
// restart adopted, or by the checker this one replaces) starts down. On each transition the checker prints a status line and calls
// changed, with no lock held; the caller (the pool) then asks isDown.
//
// A backend's schedule is a timer, and a goroutine only while a probe is
// under way: at 10,000 backends an idle goroutine each would hold more
// memory in stacks than everything else the process has (docs/l4lb.md,
// "Health checks at scale"). A TCP probe connects anew each time; an HTTP
// probe keeps its connection for the next one (HTTP/1.1 keep-alive), and
// reads the response in its own goroutine (net/http's transport would
// add two goroutines and 8 KiB of buffers a connection).
//
// A checker is safe for concurrent use by multiple goroutines. mu guards
// the backends' states and is never held across a probe, which waits on
// the network; changed is called with no lock held, so the caller may take
// its own locks and then call isDown (its locks before mu).
type checker struct {
	cfg       healthConfig
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
	down     map[netip.Addr]bool // backends that start down when set adds them (startDown)
	closed   bool
	wg       sync.WaitGroup // one for each timer armed and each probe under way
}

// probed is the health of one backend, and its schedule. The checker's mu
// guards the fields up to timer; the others are set before its first
// probe, but for conn and unwatch.
type probed struct {
	up       bool
	ok, fail int    // probes passed, failed, in a row (one of them is 0)
	ups      int64  // transitions to up, for maglev.l4lb.health.transitions
	downs    int64  // and to down
	err      string // the last failed probe's error
	probes   int    // probes done
	stopped  bool   // no longer probed: its timer is not armed again
	timer    *time.Timer

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

// newChecker returns the checker of svc by cfg, recording through mp
// (otel.GetMeterProvider() if nil); it probes nothing until set.
func newChecker(svc xdpmaglev.Service, cfg healthConfig, mp metric.MeterProvider, log *slog.Logger, changed func()) (*checker, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	c := &checker{cfg: cfg, svc: svc, port: cfg.port, log: log, changed: changed,
		backends: map[netip.Addr]*probed{}, svcAttr: attribute.String("maglev.service", svc.String())}
	if c.port == 0 {
		c.port = svc.VIP.Port()
	}
	c.dialer.KeepAlive = -1
	// The histogram is synchronous: its series outlive the services, so
	// it names none (the outcome only, over every service).
	c.okAttrs = metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.outcome", "ok")))
	c.failAttrs = metric.WithAttributeSet(attribute.NewSet(attribute.String("maglev.outcome", "fail")))
	meter := mp.Meter(meterScope)
	var errs []error
	up, err := meter.Int64ObservableGauge("maglev.l4lb.health.up",
		metric.WithDescription("1 if the backend passes its health check (up), 0 if it is down, by service and backend."))
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
			if b.up {
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

// meterScope is the instrumentation scope of l4lb's own metrics.
const meterScope = "github.com/maglevlb/maglev/cmd/l4lb"

// set makes addrs the backends probed: a new one starts up and is probed
// from now on, the first time after a random part of the interval, so
// that many backends' probes spread out over it (grouped in bursts, they
// would share the process's wakeups, but 10,000 HTTP probes a second then
// missed their deadlines: docs/l4lb.md, "Health checks at scale"); one no
// longer listed stops being probed and its health is forgotten. It waits
// for nothing.
func (c *checker) set(addrs []netip.Addr) {
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
		b.timer = time.AfterFunc(rand.N(c.cfg.interval), func() { c.run(b) })
	}
	for a, b := range c.backends {
		if !keep[a] {
			c.stop(b)
			delete(c.backends, a)
		}
	}
}

// startDown makes the backends at addrs start down when set adds them, as
// a backend last known down does: the data plane a restart adopted had
// them out of service (Backend.Down), or the checker this one replaces
// had them down. Each then needs rise passes to come up.
func (c *checker) startDown(addrs []netip.Addr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down == nil {
		c.down = map[netip.Addr]bool{}
	}
	for _, a := range addrs {
		c.down[a] = true
	}
}

// downs returns the backends that are down.
func (c *checker) downs() []netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []netip.Addr
	for a, b := range c.backends {
		if !b.up {
			out = append(out, a)
		}
	}
	return out
}

// newProbed returns the health of a backend at a not yet probed: up, or
// down if startDown said so, with no timer. c.mu is held.
func (c *checker) newProbed(a netip.Addr) *probed {
	up := !c.down[a]
	delete(c.down, a)
	b := &probed{up: up, addr: a, target: netip.AddrPortFrom(a, c.port).String(),
		attrs: metric.WithAttributeSet(attribute.NewSet(c.svcAttr, attribute.String("maglev.backend", a.String())))}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	if c.cfg.kind == "http" {
		b.req, b.reqErr = http.NewRequest(http.MethodGet, "http://"+b.target+c.cfg.path, nil)
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
func (c *checker) stop(b *probed) {
	b.stopped = true
	b.cancel()
	if b.timer.Stop() {
		c.wg.Done() // its probe will not run
	}
}

// isDown reports whether the backend at a is down. It takes mu.
func (c *checker) isDown(a netip.Addr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.backends[a]
	return b != nil && !b.up
}

// healthOf returns what the admin API shows of a's health: "up" or "down"
// (or "" if a is not probed), the last failed probe's error, and the
// probes passed and failed in a row.
func (c *checker) healthOf(a netip.Addr) (state, lastErr string, ok, fail int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.backends[a]
	if b == nil {
		return "", "", 0, 0
	}
	state = "down"
	if b.up {
		state = "up"
	}
	return state, b.err, b.ok, b.fail
}

// close stops every probe and waits for the probes under way to end.
func (c *checker) close() {
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

// run is a probe of b's, in a goroutine of its own (its timer's): it
// probes, records the result, and arms the timer for the next probe, an
// interval after this one started, unless b was stopped meanwhile. A
// probe that started late does not hurry the next one: a process short of
// CPU probes less often, rather than piling probes up (an interval after
// the one before was due, 10,000 backends a second on a loaded machine
// fell behind and missed deadlines).
func (c *checker) run(b *probed) {
	defer c.wg.Done()
	start := time.Now()
	err := c.probe(b) // no lock held: it waits on the network
	took := time.Since(start)
	if b.ctx.Err() != nil {
		return // stopped
	}
	c.record(b, err, took)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !b.stopped {
		c.wg.Add(1)
		b.timer.Reset(max(c.cfg.interval-time.Since(start), 0))
	}
}

// record counts a probe of b's: its result, and a transition if its rise
// or fall count is reached, printed and passed to changed.
func (c *checker) record(b *probed, err error, took time.Duration) {
	outcome := c.okAttrs
	if err != nil {
		outcome = c.failAttrs
	}
	c.probeDur.Record(context.Background(), took.Seconds(), outcome)
	c.mu.Lock()
	if b.stopped {
		c.mu.Unlock()
		return
	}
	b.probes++
	var to string
	if err == nil {
		b.ok, b.fail = b.ok+1, 0
		if !b.up && b.ok >= c.cfg.rise {
			b.up, to = true, "up"
			b.ups++
		}
	} else {
		b.ok, b.fail, b.err = 0, b.fail+1, err.Error()
		if b.up && b.fail >= c.cfg.fall {
			b.up, to = false, "down"
			b.downs++
		}
	}
	line, level := "", slog.LevelInfo
	switch to {
	case "up":
		line = fmt.Sprintf("health: %v up: %d probes passed in a row", b.addr, b.ok)
	case "down":
		line, level = fmt.Sprintf("health: %v down: %d probes failed in a row, the last: %s", b.addr, b.fail, b.err), slog.LevelWarn
	}
	c.mu.Unlock()
	if to == "" {
		return
	}
	c.log.Log(context.Background(), level, line)
	c.changed()
}

// probe checks b once, within the timeout: a TCP connect, or an HTTP GET
// whose status must be the configured one.
func (c *checker) probe(b *probed) error {
	deadline := time.Now().Add(c.cfg.timeout)
	if c.cfg.kind == "http" {
		return c.probeHTTP(b, deadline)
	}
	ctx, cancel := context.WithDeadline(b.ctx, deadline)
	defer cancel()
	conn, err := c.dialer.DialContext(ctx, "tcp", b.target)
	if err != nil {
		return err
	}
	return conn.Close()
}

// probeHTTP GETs b's path on its kept connection, dialled if it has none,
// by the deadline, and checks the status. A kept connection that the
// backend closed since the last probe (the GET meets its end or a reset
// before a byte of response) is dialled anew, once, as net/http's
// transport retries such a GET.
func (c *checker) probeHTTP(b *probed, deadline time.Time) error {
	if b.reqErr != nil {
		return b.reqErr
	}
	for retried := false; ; retried = true {
		kept := b.conn != nil
		if !kept {
			ctx, cancel := context.WithDeadline(b.ctx, deadline)
			conn, err := c.dialer.DialContext(ctx, "tcp", b.target)
			cancel()
			if err != nil {
				return fmt.Errorf("GET %s: %w", b.req.URL, err)
			}
			b.conn = conn
			b.unwatch = context.AfterFunc(b.ctx, func() { _ = conn.Close() }) // stopped: a GET under way ends
		}
		status, keep, answered, err := b.get(deadline)
		if !keep {
			b.drop()
		}
		switch {
		case err != nil && kept && !answered && !retried && b.ctx.Err() == nil && !errors.Is(err, os.ErrDeadlineExceeded):
			continue
		case err != nil:
			return fmt.Errorf("GET %s: %w", b.req.URL, err)
		case status != c.cfg.status:
			return fmt.Errorf("GET %s: status %d, want %d", b.req.URL, status, c.cfg.status)
		}
		return nil
	}
}

// readers are the buffered readers of HTTP probes under way, so that a
// kept connection holds none.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 1<<10) }}

// get writes b's GET on b.conn and reads the response, past any 1xx, and
// its body to its end (up to 64 KiB: the status decides, not the body).
// It returns the status, whether the connection may serve the next GET,
// and whether any response came.
func (b *probed) get(deadline time.Time) (status int, keep, answered bool, err error) {
	if err := b.conn.SetDeadline(deadline); err != nil {
		return 0, false, false, err
	}
	if _, err := b.conn.Write(b.wire); err != nil {
		return 0, false, false, err
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(b.conn)
	defer func() {
		br.Reset(nil)
		readers.Put(br)
	}()
	for range 5 { // net/http's transport reads at most five 1xx too
		if _, err := br.Peek(1); err != nil {
			return 0, false, answered, err
		}
		answered = true
		resp, err := http.ReadResponse(br, b.req)
		if err != nil {
			return 0, false, true, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		// Read to its end, the body needs no Close; a longer one is left
		// unread, with its connection.
		n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10+1))
		// Kept if the body ended, nothing came after it, and the backend
		// keeps the connection alive.
		keep = err == nil && n <= 64<<10 && !resp.Close && br.Buffered() == 0 && resp.StatusCode != http.StatusSwitchingProtocols
		return resp.StatusCode, keep, true, nil
	}
	return 0, false, true, errors.New("more than five 1xx responses")
}

// drop closes b's kept connection, if any.
func (b *probed) drop() {
	if b.conn == nil {
		return
	}
	b.unwatch()
	_ = b.conn.Close()
	b.conn, b.unwatch = nil, nil
}
