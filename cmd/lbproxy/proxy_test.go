package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/httpmaglev"
)

// With a single backend, which dies after the first health check, there
// is nowhere to retry: 502.
func TestOnlyBackendDead(t *testing.T) {
	dead := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer dead.Close()
	p, err := newProxy(config{
		Backends: []string{dead.URL},
		Key:      "ip",
		HTTP: httpmaglev.Config{
			HealthPath:     "/healthz",
			HealthInterval: time.Second,
			HealthTimeout:  time.Second,
			Fall:           2,
			Rise:           2,
			EjectAfter:     3,
			TableSize:      13,
		},
	}, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	dead.Close()
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if want := "bad gateway\n"; w.Code != http.StatusBadGateway || w.Body.String() != want {
		t.Errorf("GET: %d %q, want 502 %q", w.Code, w.Body, want)
	}
	if n := p.state().Retries; n != 0 {
		t.Errorf("%d retries, want 0", n)
	}
}

func TestNewProxyErrors(t *testing.T) {
	good := config{
		Backends: []string{"http://127.0.0.1:9001"},
		Key:      "ip",
		HTTP: httpmaglev.Config{
			HealthPath:     "/healthz",
			HealthInterval: time.Second,
			HealthTimeout:  time.Second / 2,
			Fall:           2,
			Rise:           2,
			EjectAfter:     3,
			TableSize:      65537,
		},
	}
	p, err := newProxy(good, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatalf("newProxy(%+v): %v", good, err)
	}
	p.close()
	tests := []struct {
		name   string
		change func(*config)
	}{
		{"no backends", func(c *config) { c.Backends = nil }},
		{"bad backend", func(c *config) { c.Backends = []string{"127.0.0.1:9001"} }},
		{"duplicate URL", func(c *config) { c.Backends = []string{"http://127.0.0.1:9001", "http://127.0.0.1:9001/"} }},
		{"duplicate name", func(c *config) { c.Backends = []string{"a=http://127.0.0.1:9001", "a=http://127.0.0.1:9002"} }},
		{"bad key", func(c *config) { c.Key = "cookie:id" }},
		{"relative health path", func(c *config) { c.HTTP.HealthPath = "healthz" }},
		{"negative interval", func(c *config) { c.HTTP.HealthInterval = -time.Second }},
		{"timeout over interval", func(c *config) { c.HTTP.HealthTimeout = 2 * time.Second }},
		{"negative fall", func(c *config) { c.HTTP.Fall = -1 }},
		{"negative rise", func(c *config) { c.HTTP.Rise = -1 }},
		{"eject-after below -1", func(c *config) { c.HTTP.EjectAfter = -2 }},
		{"composite size", func(c *config) { c.HTTP.TableSize = 65536 }},
		{"max ejection below the ejection time", func(c *config) { c.HTTP.EjectionTime, c.HTTP.MaxEjectionTime = time.Minute, time.Second }},
		{"max retry body below -1", func(c *config) { c.HTTP.MaxRetryBody = -2 }},
	}
	for _, tt := range tests {
		cfg := good
		tt.change(&cfg)
		p, err := newProxy(cfg, log.New(io.Discard, "", 0))
		if err == nil {
			p.close()
		}
		if err == nil || !strings.HasPrefix(err.Error(), "lbproxy: ") {
			t.Errorf("%s: newProxy: %v, want an error starting with lbproxy: ", tt.name, err)
		}
	}
}

// TestSameTableAsClient: lbproxy and a Go client given the same backend
// URLs name the backends alike (HOST:PORT) and so route every key to the
// same backend: every process that knows the same backends agrees.
func TestSameTableAsClient(t *testing.T) {
	urls := []string{"http://127.0.0.1:9001", "http://127.0.0.1:9002/", "http://[::1]:9003", "https://backend.example:8443"}
	p, err := newProxy(config{
		Backends: urls,
		Key:      "ip",
		HTTP: httpmaglev.Config{
			TableSize: 65537,
		},
	}, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	var backends []httpmaglev.Backend
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		backends = append(backends, httpmaglev.Backend{URL: u})
	}
	client, err := httpmaglev.NewTransport(httpmaglev.Config{Backends: backends})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	for i := range 1000 {
		k := fmt.Sprintf("session-%d", i)
		want, _ := client.Lookup(k)
		got, _ := p.t.Lookup(k)
		if got.Name != want.Name || got.URL.String() != want.URL.String() {
			t.Fatalf("key %q: lbproxy routes to %s (%s), a client to %s (%s)", k, got.Name, got.URL, want.Name, want.URL)
		}
	}
}
