package httpmaglev_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/httpmaglev"
)

// A server is a backend on loopback that answers every request with its
// own name, in the body and an X-Backend header, and counts what it gets.
// Its /healthz answers 200, or 503 while down is set.
type server struct {
	name string
	srv  *httptest.Server
	url  *url.URL
	down atomic.Bool
	// broken makes it drop every request but /healthz: it closes the
	// connection without an answer.
	broken atomic.Bool
	// failing makes it answer every request but /healthz with a 500.
	failing atomic.Bool

	gate     chan struct{} // if not nil, requests wait for it to close
	hold     time.Duration // how long each request is held, as real work would
	inflight atomic.Int64  // requests being served, /healthz aside
	peak     atomic.Int64  // the most in flight at once
	served   atomic.Int64  // requests answered, /healthz aside

	mu  sync.Mutex     // protects ids
	ids map[string]int // X-Request-Id values seen, with their counts
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		if s.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	if s.broken.Load() {
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = c.Close()
		}
		return
	}
	if s.failing.Load() {
		s.served.Add(1)
		w.Header().Set("X-Backend", s.name)
		http.Error(w, "failing", http.StatusInternalServerError)
		return
	}
	n := s.inflight.Add(1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	if id := r.Header.Get("X-Request-Id"); id != "" {
		s.mu.Lock()
		s.ids[id]++
		s.mu.Unlock()
	}
	body, _ := io.ReadAll(r.Body)
	if s.hold > 0 {
		time.Sleep(s.hold)
	}
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-r.Context().Done():
		}
	}
	s.inflight.Add(-1)
	s.served.Add(1)
	w.Header().Set("X-Backend", s.name)
	_, _ = fmt.Fprintf(w, "%s %s %d", s.name, r.Method, len(body))
}

// count returns how many requests with X-Request-Id id the server got.
func (s *server) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

// startServers starts n servers named s0, s1, ... on loopback.
func startServers(t testing.TB, n int) []*server {
	t.Helper()
	var out []*server
	for i := range n {
		s := &server{name: fmt.Sprintf("s%d", i), ids: map[string]int{}}
		s.srv = httptest.NewServer(s)
		t.Cleanup(s.srv.Close)
		u, err := url.Parse(s.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		s.url = u
		out = append(out, s)
	}
	return out
}

// backendsOf returns the servers as Backends, with the given weights (none
// for equal weights).
func backendsOf(servers []*server, weights ...uint32) []httpmaglev.Backend {
	var bs []httpmaglev.Backend
	for i, s := range servers {
		b := httpmaglev.Backend{Name: s.name, URL: s.url}
		if len(weights) > 0 {
			b.Weight = new(weights[i])
		}
		bs = append(bs, b)
	}
	return bs
}

// newTransport returns a Transport for cfg over servers, closed when the
// test ends.
func newTransport(t testing.TB, cfg httpmaglev.Config, servers []*server, weights ...uint32) *httpmaglev.Transport {
	t.Helper()
	cfg.Backends = backendsOf(servers, weights...)
	tr, err := httpmaglev.NewTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// table builds the table the Transport should hold over names (all
// weights equal) with the default size and hasher.
func table(t testing.TB, names ...string) *maglev.Table {
	t.Helper()
	tab, err := maglev.New(names, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// tableWithout returns tab.Without(names...): the table a Transport over
// tab's backends routes by while names are out of service.
func tableWithout(t testing.TB, tab *maglev.Table, names ...string) *maglev.Table {
	t.Helper()
	w, err := tab.Without(names...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

const keyHeader = "X-Key"

// get sends method with key through client to any URL (the Transport
// replaces the host) and returns the status and the backend that answered.
func get(t testing.TB, client *http.Client, base, method, key string, header ...string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequest(method, base+"/item", nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(keyHeader, key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, "", err
	}
	return resp.StatusCode, resp.Header.Get("X-Backend"), nil
}

// waitFor polls cond every millisecond until it holds, failing the test
// if it does not within 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// healthyNames returns the names of the healthy backends in tr's state.
func healthyNames(tr *httpmaglev.Transport) []string {
	var names []string
	for _, b := range tr.State().Backends {
		if b.Healthy {
			names = append(names, b.Name)
		}
	}
	return names
}
