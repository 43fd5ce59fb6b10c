package checker

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/nstest"
	"github.com/maglevlb/maglev/internal/health"
	"github.com/maglevlb/maglev/xdpmaglev"
	"go.opentelemetry.io/otel/metric/noop"
)

// probeServer is a real HTTP server on 127.0.0.1 for the checker's
// in-process tests: it counts the connections it accepted and closed, and
// its handler is the test's.
type probeServer struct {
	srv            *http.Server
	port           uint16
	opened, closed atomic.Int64
}

// newProbeServer serves h on 127.0.0.1, closing connections idle for
// idle (0: never), until the end of the test.
func newProbeServer(t *testing.T, idle time.Duration, h http.HandlerFunc) *probeServer {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &probeServer{port: uint16(l.Addr().(*net.TCPAddr).Port)}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idle,
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				s.opened.Add(1)
			case http.StateClosed, http.StateHijacked:
				s.closed.Add(1)
			}
		}}
	go func() { _ = s.srv.Serve(l) }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

// waitFor polls cond every 5 ms and fails the test if it does not hold
// within 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newTestChecker is the checker of cfg, recording nowhere, closed at the
// end of the test; changed counts its calls in n.
func newTestChecker(t *testing.T, cfg Config, n *atomic.Int64) *Checker {
	t.Helper()
	svc := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}
	c, err := New(svc, cfg, noop.NewMeterProvider().Meter(""), slog.New(slog.DiscardHandler), func() { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// probesOf returns the probes done and the health of the backend at a.
func probesOf(c *Checker, a netip.Addr) (probes int, state, lastErr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.backends[a]
	if b == nil {
		return 0, "", ""
	}
	return b.probes, b.health.State().String(), b.err
}

// TestHealthKeepAlive: HTTP probes of a real server reuse one connection
// from probe to probe, and a backend no longer probed has it closed; a
// server that closes it after each response (Connection: close), or while
// it is idle between two probes (an idle timeout shorter than the
// interval), costs a new connection a probe and never a failed probe.
func TestHealthKeepAlive(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close bool          // Connection: close on each response
		idle  time.Duration // the server's idle timeout
		conns func(probes, conns int64) bool
	}{
		{"kept", false, 0, func(p, n int64) bool { return n == 1 }},
		{"connection close", true, 0, func(p, n int64) bool { return n >= p }},
		{"closed while idle", false, time.Millisecond, func(p, n int64) bool { return n >= p/2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newProbeServer(t, tc.idle, func(w http.ResponseWriter, r *http.Request) {
				if tc.close {
					w.Header().Set("Connection", "close")
				}
				if r.URL.Path != "/healthz" || r.Header.Get("User-Agent") != "l4lb-health" || !strings.HasPrefix(r.Host, "127.0.0.1:") {
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			var transitions atomic.Int64
			c := newTestChecker(t, Config{Kind: "http", Path: "/healthz", Status: 200, Port: s.port,
				Interval: 20 * time.Millisecond, Timeout: 5 * time.Second, Rise: 1, Fall: 1}, &transitions)
			a := netip.MustParseAddr("127.0.0.1")
			c.Set([]netip.Addr{a})
			waitFor(t, "10 probes", func() bool { n, _, _ := probesOf(c, a); return n >= 10 })
			n, state, lastErr := probesOf(c, a)
			if conns := s.opened.Load(); !tc.conns(int64(n), conns) {
				t.Errorf("%d probes opened %d connections", n, conns)
			}
			if state != "up" || lastErr != "" || transitions.Load() != 0 {
				t.Errorf("health %s, last error %q, %d transitions; want up, none, 0", state, lastErr, transitions.Load())
			}
			c.Set(nil)
			waitFor(t, "every connection closed", func() bool { return s.closed.Load() == s.opened.Load() })
			if n, state, _ := probesOf(c, a); n != 0 || state != "" {
				t.Errorf("removed, the backend still has %d probes, health %q", n, state)
			}
		})
	}
}

// TestHealthStopEndsProbe: a probe under way (a GET the server never
// answers, with an hour's timeout) ends when its backend is no longer
// probed, and when the checker is closed, closing its connection: neither
// waits for the timeout. No transition is recorded for it.
func TestHealthStopEndsProbe(t *testing.T) {
	arrived := make(chan struct{}, 4)
	s := newProbeServer(t, 0, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done() // until the client closes the connection
	})
	var transitions atomic.Int64
	c := newTestChecker(t, Config{Kind: "http", Path: "/hang", Status: 200, Port: s.port,
		Interval: time.Hour, Timeout: time.Hour, Rise: 1, Fall: 1}, &transitions)
	a := netip.MustParseAddr("127.0.0.1")
	probeNow := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.backends[a].timer.Reset(0) // not in up to an hour
	}

	c.Set([]netip.Addr{a})
	probeNow()
	<-arrived
	c.Set(nil)
	waitFor(t, "the connection of the probe under way closed", func() bool { return s.closed.Load() == 1 })

	c.Set([]netip.Addr{a})
	probeNow()
	<-arrived
	c.Close() // returns: the probe under way ended
	waitFor(t, "the connection of the probe under way closed", func() bool { return s.closed.Load() == 2 })
	if n := s.opened.Load(); n != 2 {
		t.Errorf("server: %d connections opened, want 2", n)
	}
	if transitions.Load() != 0 {
		t.Errorf("%d transitions, want 0: a stopped probe is not a failure", transitions.Load())
	}
}

// TestFirstProbeDecides: the rule of internal/health, in the checker, by
// TCP against 127.0.0.1: a new backend is unknown, in service, until its
// first probe, which decides (passed, up with no transition; failed, down
// at once, logged and changed called); a backend started up (Start)
// needs fall failures to go down, one started down rise passes to come
// up; States gives each state.
func TestFirstProbeDecides(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	// The same port on other addresses of lo: nothing listens there.
	live, dead, wasUp, wasDown := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.1")
	var transitions atomic.Int64
	var log nstest.LogBuffer
	svc := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}
	cfg := Config{Kind: "tcp", Port: port, Interval: 30 * time.Millisecond, Timeout: 25 * time.Millisecond, Rise: 2, Fall: 3}
	c, err := New(svc, cfg, noop.NewMeterProvider().Meter(""), slog.New(slog.NewJSONHandler(&log, nil)), func() { transitions.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.Set([]netip.Addr{live, dead})
	if st := c.States(); st[live] != health.Unknown || st[dead] != health.Unknown || c.IsDown(dead) {
		t.Fatalf("before a probe: %v, IsDown(dead) %v; want both unknown, in service", st, c.IsDown(dead))
	}
	waitFor(t, "the first probes", func() bool { n1, _, _ := probesOf(c, live); n2, _, _ := probesOf(c, dead); return n1 >= 1 && n2 >= 1 })
	if n, state, _ := probesOf(c, dead); state != "down" || !c.IsDown(dead) {
		t.Errorf("dead after %d probes: %s, want down after its first", n, state)
	}
	if _, state, _ := probesOf(c, live); state != "up" {
		t.Errorf("live after its first probe: %s, want up", state)
	}
	waitFor(t, "the transition's call", func() bool { return transitions.Load() == 1 })
	if r := log.AwaitRecord(t, "health: backend down", "backend", "127.0.0.2", "failed", "1", "first_probe", "true"); r.Level != "WARN" || !strings.HasPrefix(r.Attrs["err"], "dial tcp 127.0.0.2:") {
		t.Errorf("record %+v", r)
	}

	// Known states: up needs fall failures, down rise passes.
	c.Set(nil)
	c.Start(map[netip.Addr]health.State{wasUp: health.Up, wasDown: health.Down})
	c.Set([]netip.Addr{wasUp, wasDown})
	waitFor(t, "wasDown up", func() bool { _, state, _ := probesOf(c, wasDown); return state == "up" })
	if n, _, _ := probesOf(c, wasDown); n < cfg.Rise {
		t.Errorf("started down, up after %d probes, want %d", n, cfg.Rise)
	}
	waitFor(t, "wasUp down", func() bool { _, state, _ := probesOf(c, wasUp); return state == "down" })
	if n, _, _ := probesOf(c, wasUp); n < cfg.Fall {
		t.Errorf("started up, down after %d probes, want %d", n, cfg.Fall)
	}
	log.AwaitRecord(t, "health: backend down", "backend", "127.0.0.3", "failed", "3")
	log.AwaitRecord(t, "health: backend up", "backend", "127.0.0.1", "passed", "2")
}
