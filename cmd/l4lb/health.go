package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
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

// A checker probes the backends of one service, each in a goroutine of
// its own, and keeps each one's health: up or down, with the rise and fall
// counts of healthConfig. A backend starts up, and goes down after fall
// failed probes in a row; a down backend comes up after rise passes in a
// row. On each transition the checker prints a status line and calls
// changed, with no lock held; the caller (the pool) then asks isDown.
//
// A checker is safe for concurrent use by multiple goroutines. mu guards
// the backends' states and is never held across a probe, which waits on
// the network; changed is called with no lock held, so the caller may take
// its own locks and then call isDown (its locks before mu).
type checker struct {
	cfg         healthConfig
	svc         xdpmaglev.Service
	port        uint16 // the port probed
	out         io.Writer
	changed     func()
	client      *http.Client // http: no keep-alive, no redirects
	reg         metric.Registration
	probeDur    metric.Float64Histogram
	transitions metric.Int64Counter
	svcAttr     attribute.KeyValue
	failOpen    atomic.Bool // set by the pool: every backend down, the last table kept

	mu       sync.Mutex // guards the fields below
	backends map[netip.Addr]*probed
	closed   bool
	wg       sync.WaitGroup // the probing goroutines
}

// probed is the health of one backend. The checker's mu guards it.
type probed struct {
	up       bool
	ok, fail int    // probes passed, failed, in a row (one of them is 0)
	err      string // the last failed probe's error
	probes   int    // probes done
	stop     chan struct{}
	attrs    metric.MeasurementOption // maglev.service, maglev.backend
}

// newChecker returns the checker of svc by cfg, recording through mp
// (otel.GetMeterProvider() if nil); it probes nothing until set.
func newChecker(svc xdpmaglev.Service, cfg healthConfig, mp metric.MeterProvider, out io.Writer, changed func()) (*checker, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	c := &checker{cfg: cfg, svc: svc, port: cfg.port, out: out, changed: changed,
		backends: map[netip.Addr]*probed{}, svcAttr: attribute.String("maglev.service", svc.String())}
	if c.port == 0 {
		c.port = svc.VIP.Port()
	}
	if cfg.kind == "http" {
		c.client = &http.Client{
			Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse // a redirect is a status like any other
			},
		}
	}
	meter := mp.Meter(meterScope)
	var errs []error
	up, err := meter.Int64ObservableGauge("maglev.l4lb.health.up",
		metric.WithDescription("1 if the backend passes its health check (up), 0 if it is down, by service and backend."))
	errs = append(errs, err)
	open, err := meter.Int64ObservableGauge("maglev.l4lb.health.fail_open",
		metric.WithDescription("1 while every backend of the service is down and the service keeps its last table (fails open)."))
	errs = append(errs, err)
	c.transitions, err = meter.Int64Counter("maglev.l4lb.health.transitions", metric.WithUnit("{transition}"),
		metric.WithDescription("Health transitions of a backend, by the state it went to (up or down)."))
	errs = append(errs, err)
	c.probeDur, err = meter.Float64Histogram("maglev.l4lb.health.probe.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a health probe took, by service and outcome (ok or fail)."),
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
		}
		return nil
	}, up, open)
	if err != nil {
		return nil, fmt.Errorf("health metrics: %w", err)
	}
	return c, nil
}

// meterScope is the instrumentation scope of l4lb's own metrics.
const meterScope = "github.com/maglevlb/maglev/cmd/l4lb"

// set makes addrs the backends probed: a new one starts up and is probed
// from now on, one no longer listed stops being probed and its health is
// forgotten. It waits for nothing.
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
		b := &probed{up: true, stop: make(chan struct{}),
			attrs: metric.WithAttributeSet(attribute.NewSet(c.svcAttr, attribute.String("maglev.backend", a.String())))}
		c.backends[a] = b
		c.wg.Add(1)
		go c.loop(a, b)
	}
	for a, b := range c.backends {
		if !keep[a] {
			close(b.stop)
			delete(c.backends, a)
		}
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

// close stops every probe and waits for the probing goroutines to end.
func (c *checker) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	for a, b := range c.backends {
		close(b.stop)
		delete(c.backends, a)
	}
	c.mu.Unlock()
	c.wg.Wait()
	_ = c.reg.Unregister() // its error is the SDK shut down already
}

// loop probes the backend at a every interval, the first time after a
// random part of one (so that many backends' probes spread out), until b
// is stopped.
func (c *checker) loop(a netip.Addr, b *probed) {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-b.stop
		cancel() // a probe under way ends now
	}()
	t := time.NewTimer(rand.N(c.cfg.interval))
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		start := time.Now()
		err := c.probe(ctx, a) // no lock held: it waits on the network
		took := time.Since(start)
		if ctx.Err() != nil {
			return // stopped
		}
		t.Reset(max(c.cfg.interval-took, 0))
		c.record(a, b, err, took)
	}
}

// record counts a probe of b's: its result, and a transition if its rise
// or fall count is reached, printed and passed to changed.
func (c *checker) record(a netip.Addr, b *probed, err error, took time.Duration) {
	outcome := "ok"
	if err != nil {
		outcome = "fail"
	}
	c.probeDur.Record(context.Background(), took.Seconds(), metric.WithAttributeSet(attribute.NewSet(c.svcAttr, attribute.String("maglev.outcome", outcome))))
	c.mu.Lock()
	if c.backends[a] != b {
		c.mu.Unlock()
		return // stopped meanwhile
	}
	b.probes++
	var to string
	if err == nil {
		b.ok, b.fail = b.ok+1, 0
		if !b.up && b.ok >= c.cfg.rise {
			b.up, to = true, "up"
		}
	} else {
		b.ok, b.fail, b.err = 0, b.fail+1, err.Error()
		if b.up && b.fail >= c.cfg.fall {
			b.up, to = false, "down"
		}
	}
	line := ""
	switch to {
	case "up":
		line = fmt.Sprintf("l4lb: health: %v up: %d probes passed in a row", a, b.ok)
	case "down":
		line = fmt.Sprintf("l4lb: health: %v down: %d probes failed in a row, the last: %s", a, b.fail, b.err)
	}
	c.mu.Unlock()
	if to == "" {
		return
	}
	c.transitions.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(c.svcAttr,
		attribute.String("maglev.backend", a.String()), attribute.String("maglev.state", to))))
	_, _ = fmt.Fprintln(c.out, line)
	c.changed()
}

// probe checks the backend at a once, within the timeout: a TCP connect,
// or an HTTP GET whose status must be the configured one.
func (c *checker) probe(ctx context.Context, a netip.Addr) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	target := netip.AddrPortFrom(a, c.port).String()
	if c.cfg.kind == "tcp" {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", target)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+target+c.cfg.path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "l4lb-health")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // the status decides, not the body
	if resp.StatusCode != c.cfg.status {
		return fmt.Errorf("GET %s: status %d, want %d", req.URL, resp.StatusCode, c.cfg.status)
	}
	return nil
}
