package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/bounded"
	"github.com/maglevlb/maglev/httpmaglev"
	"github.com/maglevlb/maglev/internal/servertest"
)

// hotkeys turns on TestHotKeysMeasure, the full measurement docs/hotkeys.md
// quotes:
//
//	go test ./cmd/lbproxy -run TestHotKeysMeasure -hotkeys -v
var (
	hotkeys        = flag.Bool("hotkeys", false, "run the full hot-key load test (TestHotKeysMeasure)")
	hotkeysClients = flag.Int("hotkeys.clients", 32, "concurrent clients of TestHotKeysMeasure")
	hotkeysHold    = flag.Duration("hotkeys.hold", 5*time.Millisecond, "how long TestHotKeysMeasure's backends hold a request")
)

// A slowBackend holds every request for hold, as a backend doing real work
// would, and keeps its own count of the requests in flight on it and the
// peak of that count. Its health path answers at once and is not counted.
type slowBackend struct {
	id       string
	hold     time.Duration
	inflight atomic.Int64
	peak     atomic.Int64
	served   atomic.Int64
}

func (b *slowBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	n := b.inflight.Add(1)
	for p := b.peak.Load(); n > p && !b.peak.CompareAndSwap(p, n); p = b.peak.Load() {
	}
	time.Sleep(b.hold)
	b.inflight.Add(-1)
	b.served.Add(1)
	w.Header().Set("X-Backend", b.id)
	_, _ = io.WriteString(w, b.id+"\n")
}

// hotLoad is one load test's setup.
type hotLoad struct {
	backends int           // slowBackends behind the proxy
	clients  int           // concurrent clients, each with one request in flight
	requests int           // requests in all
	keys     int           // distinct keys, drawn Zipf(zipf) from a fixed source
	zipf     float64       // Zipf exponent s
	hold     time.Duration // how long a backend holds each request
	factor   float64       // -balance-factor
}

// hotResult is what a load test measured.
type hotResult struct {
	peak      int64   // the busiest backend's peak in-flight count
	mean      float64 // the mean in-flight count per backend, sampled
	proxyPeak int64   // the peak of requests in flight through the proxy
	spilled   uint64  // requests the proxy sent past their key's first choice
	forced    uint64  // requests placed on a full backend (Stats.Forced)
	moved     int     // distinct keys with a request away from plain Maglev's backend
	mostly    int     // distinct keys with most of their requests away from it
	seen      int     // distinct keys requested
	served    int64   // requests answered 200
	elapsed   time.Duration
}

// runHotLoad runs lbproxy in front of real backends on 127.0.0.1 and
// drives it with concurrent clients sending keys drawn Zipf(s).
func runHotLoad(t *testing.T, hl hotLoad) hotResult {
	t.Helper()
	var specs []string
	var backs []*slowBackend
	for i := range hl.backends {
		b := &slowBackend{id: fmt.Sprintf("h%d", i), hold: hl.hold}
		srv := httptest.NewServer(b)
		t.Cleanup(srv.Close)
		backs = append(backs, b)
		specs = append(specs, b.id+"="+srv.URL)
	}
	cfg := config{
		Backends:       specs,
		Key:            "header:" + keyHeader,
		IdlePerBackend: hl.clients,
		HTTP: httpmaglev.Config{
			HealthPath:     "/healthz",
			HealthInterval: time.Minute, // no health rounds during the test
			HealthTimeout:  time.Second,
			Fall:           2,
			Rise:           2,
			EjectAfter:     3,
			TableSize:      maglev.DefaultSize,
			BalanceFactor:  hl.factor,
		},
	}
	logs := new(servertest.Log)
	p, err := newProxy(cfg, log.New(logs, "", log.Lmicroseconds))
	if err != nil {
		t.Fatal(err)
	}
	// The wrapper's count of requests in flight through the proxy is at
	// least the Bounded's L at every moment: it rises before the lease is
	// taken and falls after it is released.
	var inProxy, proxyPeak atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inProxy.Add(1)
		for q := proxyPeak.Load(); n > q && !proxyPeak.CompareAndSwap(q, n); q = proxyPeak.Load() {
		}
		p.ServeHTTP(w, r)
		inProxy.Add(-1)
	}))
	t.Cleanup(front.Close)
	t.Cleanup(p.close)
	var names []string
	for _, b := range backs {
		names = append(names, b.id)
	}
	table, err := maglev.New(names, maglev.DefaultSize, nil) // plain Maglev's owners
	if err != nil {
		t.Fatal(err)
	}

	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, hl.zipf, 1, uint64(hl.keys-1))
	keys := make([]string, hl.requests)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", z.Uint64())
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: hl.clients}}
	t.Cleanup(client.CloseIdleConnections)

	// Sample the backends' in-flight counts for the mean while clients run.
	stop := make(chan struct{})
	var samples, sampled float64
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var sum int64
				for _, b := range backs {
					sum += b.inflight.Load()
				}
				samples++
				sampled += float64(sum)
			}
		}
	})

	var next atomic.Int64
	var mu sync.Mutex
	type keyCount struct{ requests, away int }
	perKey := map[string]keyCount{}
	var firstErr error
	began := time.Now()
	var clients sync.WaitGroup
	for range hl.clients {
		clients.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(keys) {
					return
				}
				key := keys[i]
				backend, err := hotGet(client, front.URL, key)
				mu.Lock()
				switch {
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
				default:
					c := perKey[key]
					c.requests++
					if backend != table.Lookup(key) {
						c.away++
					}
					perKey[key] = c
				}
				mu.Unlock()
			}
		})
	}
	clients.Wait()
	elapsed := time.Since(began)
	close(stop)
	sampler.Wait()
	if firstErr != nil {
		t.Fatalf("factor %v: %v\nproxy log:\n%s", hl.factor, firstErr, logs)
	}
	res := hotResult{proxyPeak: proxyPeak.Load(), elapsed: elapsed, seen: len(perKey)}
	for _, b := range backs {
		res.peak = max(res.peak, b.peak.Load())
		res.served += b.served.Load()
	}
	for _, c := range perKey {
		if c.away > 0 {
			res.moved++
		}
		if 2*c.away > c.requests {
			res.mostly++
		}
	}
	if samples > 0 {
		res.mean = sampled / samples / float64(hl.backends)
	}
	// Every lease is released once the handlers return, a moment after
	// the clients have their answers.
	st := p.state()
	for deadline := time.Now().Add(5 * time.Second); st.InFlight != 0 && time.Now().Before(deadline); st = p.state() {
		time.Sleep(time.Millisecond)
	}
	if st.InFlight != 0 {
		t.Errorf("factor %v: %d requests still in flight 5s after the run", hl.factor, st.InFlight)
	}
	res.spilled, res.forced = st.Spilled, st.Forced
	return res
}

// hotGet sends one GET for key and returns the backend that answered.
func hotGet(client *http.Client, url, key string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, url+"/item", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set(keyHeader, key)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("key %s: %s", key, resp.Status)
	}
	if b := resp.Header.Get("X-Backend"); b != "" {
		return b, nil
	}
	return "", errors.New("key " + key + ": no X-Backend header")
}

// checkBound checks bounded loads' guarantee at the backends: each
// request is placed on a backend holding fewer than its capacity
// ceil(F × L / N), L at most the proxy's peak, and a backend's own count
// never exceeds the proxy's count for it; so no backend's peak exceeds
// ceil(F × proxyPeak / N), plus one for each forced placement.
func checkBound(t *testing.T, hl hotLoad, res hotResult) {
	t.Helper()
	bound := int64(math.Ceil(hl.factor*float64(res.proxyPeak)/float64(hl.backends))) + int64(res.forced)
	if res.peak > bound {
		t.Errorf("factor %v: the busiest backend peaked at %d in flight, bound ceil(%v × %d / %d) + %d forced = %d",
			hl.factor, res.peak, hl.factor, res.proxyPeak, hl.backends, res.forced, bound)
	}
	if res.served != int64(hl.requests) {
		t.Errorf("factor %v: backends served %d requests, want %d", hl.factor, res.served, hl.requests)
	}
}

// TestHotKeys is the hot-key load test at a small scale, for every test
// run: 4 backends holding each request 2ms, 16 clients, 600 requests of
// keys drawn Zipf(1.1). With bounded loads at 1.25 no backend holds more
// than its capacity; with them off, every request goes where plain Maglev
// sends it.
func TestHotKeys(t *testing.T) {
	base := hotLoad{backends: 4, clients: 16, requests: 600, keys: 1000, zipf: 1.1, hold: 2 * time.Millisecond}
	off := base
	res := runHotLoad(t, off)
	if res.spilled != 0 || res.moved != 0 || res.served != int64(off.requests) {
		t.Errorf("factor 0: %d spilled, %d keys moved, %d served; want 0, 0, %d", res.spilled, res.moved, res.served, off.requests)
	}
	on := base
	on.factor = 1.25
	res = runHotLoad(t, on)
	checkBound(t, on, res)
	if res.spilled == 0 {
		t.Errorf("factor 1.25: no request spilled under Zipf(1.1) keys")
	}
}

// TestHotKeysMeasure is the full measurement, with -hotkeys: 8 backends
// holding each request 5ms (-hotkeys.hold), 32 clients (-hotkeys.clients), 20,000 requests of 1,000 keys
// drawn Zipf(1.1), with bounded loads off, at 1.25 and at 2. It checks the
// bound, and that bounded loads lower the busiest backend's peak, and logs
// the figures.
func TestHotKeysMeasure(t *testing.T) {
	if !*hotkeys {
		t.Skip("the full hot-key measurement runs with -hotkeys")
	}
	base := hotLoad{backends: 8, clients: *hotkeysClients, requests: 20000, keys: 1000, zipf: 1.1, hold: *hotkeysHold}
	var offRatio float64
	var lines []string
	for _, f := range []float64{0, 1.25, 2} {
		hl := base
		hl.factor = f
		res := runHotLoad(t, hl)
		ratio := float64(res.peak) / res.mean
		if f == 0 {
			offRatio = ratio
		} else {
			checkBound(t, hl, res)
			if ratio >= offRatio {
				t.Errorf("factor %v: peak/mean %.2f, not below %.2f with bounded loads off", f, ratio, offRatio)
			}
		}
		lines = append(lines, fmt.Sprintf("factor %-4v  peak %3d  mean %5.2f  peak/mean %5.2f  spilled %5.2f%% of requests  keys moved: any %d, most %d of %d  forced %d  proxy peak %d  %v",
			f, res.peak, res.mean, ratio, 100*float64(res.spilled)/float64(hl.requests),
			res.moved, res.mostly, res.seen, res.forced, res.proxyPeak, res.elapsed.Round(time.Millisecond)))
	}
	t.Logf("%d backends holding each request %v, %d clients, %d requests, %d keys drawn Zipf(%v):\n%s",
		base.backends, base.hold, base.clients, base.requests, base.keys, base.zipf, strings.Join(lines, "\n"))
}

// TestBalanceFactorConfig checks the flag and newProxy's checks of it.
func TestBalanceFactorConfig(t *testing.T) {
	o, err := parseFlags([]string{"-demo", "2", "-balance-factor", "1.25"})
	if err != nil || o.cfg.HTTP.BalanceFactor != 1.25 {
		t.Fatalf("parseFlags(-balance-factor 1.25) = %v, %v", o.cfg.HTTP.BalanceFactor, err)
	}
	if o, _ := parseFlags([]string{"-demo", "2"}); o.cfg.HTTP.BalanceFactor != 0 {
		t.Fatalf("default balance factor %v, want 0 (off)", o.cfg.HTTP.BalanceFactor)
	}
	for _, f := range []string{"0.5", "-1", "NaN", "+Inf"} {
		_, err := parseFlags([]string{"-demo", "2", "-balance-factor", f})
		if !errors.Is(err, bounded.ErrBalanceFactor) || !strings.HasPrefix(err.Error(), "lbproxy: -balance-factor: ") {
			t.Errorf("parseFlags(-balance-factor %s): %v, want an error wrapping bounded.ErrBalanceFactor", f, err)
		}
	}
	cfg := config{
		Backends: []string{"http://127.0.0.1:9"},
		Key:      "ip",
		HTTP: httpmaglev.Config{
			HealthPath:     "/healthz",
			HealthInterval: time.Second,
			HealthTimeout:  time.Second,
			Fall:           1,
			Rise:           1,
			EjectAfter:     3,
			TableSize:      7,
		},
	}
	for _, f := range []float64{0.5, -1, math.NaN(), math.Inf(1)} {
		cfg.HTTP.BalanceFactor = f
		_, err := newProxy(cfg, log.New(io.Discard, "", 0))
		if !errors.Is(err, bounded.ErrBalanceFactor) || !strings.HasPrefix(err.Error(), "lbproxy: ") {
			t.Errorf("balance factor %v: %v, want an lbproxy error wrapping bounded.ErrBalanceFactor", f, err)
		}
	}
	for _, f := range []float64{0, 1, 1.25} {
		cfg.HTTP.BalanceFactor = f
		p, err := newProxy(cfg, log.New(io.Discard, "", 0))
		if err != nil {
			t.Errorf("balance factor %v: %v", f, err)
			continue
		}
		p.close()
	}
}

// A gateBackend holds every request until its gate is closed, counting
// the requests it holds.
type gateBackend struct {
	id   string
	gate chan struct{}
	held atomic.Int64
}

func (b *gateBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	b.held.Add(1)
	<-b.gate
	b.held.Add(-1)
	w.Header().Set("X-Backend", b.id)
}

// TestDebugInFlight holds four requests for one key on two backends with
// bounded loads at 1 and checks what /debug/maglev shows: each backend
// can hold ceil(L/2) of L requests, so the key's backend takes two and the
// other two spill; then, once they are answered, nothing is in flight.
func TestDebugInFlight(t *testing.T) {
	gate := make(chan struct{})
	var specs []string
	backs := map[string]*gateBackend{}
	for _, id := range []string{"g0", "g1"} {
		b := &gateBackend{id: id, gate: gate}
		srv := httptest.NewServer(b)
		t.Cleanup(srv.Close)
		backs[id] = b
		specs = append(specs, id+"="+srv.URL)
	}
	cfg := config{
		Backends: specs,
		Key:      "header:" + keyHeader,
		HTTP: httpmaglev.Config{
			HealthPath:     "/healthz",
			HealthInterval: time.Minute,
			HealthTimeout:  time.Second,
			Fall:           2,
			Rise:           2,
			EjectAfter:     3,
			TableSize:      maglev.DefaultSize,
			BalanceFactor:  1,
		},
	}
	p, err := newProxy(cfg, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	admin := httptest.NewServer(p.adminHandler())
	t.Cleanup(admin.Close)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)

	const key = "celebrity"
	b, _ := p.t.Lookup(key)
	home := b.Name
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := hotGet(client, front.URL, key)
			errs <- err
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); backs["g0"].held.Load()+backs["g1"].held.Load() < 4; {
		if time.Now().After(deadline) {
			close(gate)
			t.Fatal("4 requests not held within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	debug := func() wireState {
		t.Helper()
		resp, err := client.Get(admin.URL + "/debug/maglev")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var ws wireState
		if err := json.NewDecoder(resp.Body).Decode(&ws); err != nil {
			t.Fatal(err)
		}
		return ws
	}
	ws := debug()
	if ws.BalanceFactor != 1 || ws.InFlight != 4 || ws.Spilled != 2 || ws.Requests != 4 {
		t.Errorf("/debug/maglev while 4 are held: balance_factor %v, in_flight %d, spilled %d, requests %d; want 1, 4, 2, 4",
			ws.BalanceFactor, ws.InFlight, ws.Spilled, ws.Requests)
	}
	for _, b := range ws.Backends {
		wantSpilled := uint64(0)
		if b.Name == home {
			wantSpilled = 2
		}
		// Capacity for the next request: ceil(1 × 5 / 2) = 3.
		if b.InFlight != 2 || b.InFlight != backs[b.Name].held.Load() || b.Capacity != 3 || b.Spilled != wantSpilled {
			t.Errorf("/debug/maglev: %s: in_flight %d (holding %d), capacity %d, spilled %d; want 2, 3, %d",
				b.Name, b.InFlight, backs[b.Name].held.Load(), b.Capacity, b.Spilled, wantSpilled)
		}
	}
	close(gate)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// A client has its answer a moment before the proxy's handler returns
	// and releases the lease: wait for that moment.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		ws := debug()
		if ws.InFlight == 0 && ws.Backends[0].InFlight == 0 && ws.Backends[1].InFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/debug/maglev 5s after the answers: in_flight %d, backends %d and %d; want 0",
				ws.InFlight, ws.Backends[0].InFlight, ws.Backends[1].InFlight)
		}
	}
}
