package main

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// With a single backend, which dies after the first health check, there
// is nowhere to retry: 502.
func TestOnlyBackendDead(t *testing.T) {
	dead := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer dead.Close()
	p, err := newProxy(config{
		Backends:       []string{dead.URL},
		Key:            "ip",
		HealthPath:     "/healthz",
		HealthInterval: time.Second,
		HealthTimeout:  time.Second,
		Fall:           2,
		Rise:           2,
		EjectAfter:     3,
		TableSize:      13,
	}, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	dead.Close()
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if want := "bad gateway: backend " + dead.URL + " failed\n"; w.Code != http.StatusBadGateway || w.Body.String() != want {
		t.Errorf("GET: %d %q, want 502 %q", w.Code, w.Body, want)
	}
	if n := p.state().Retries; n != 0 {
		t.Errorf("%d retries, want 0", n)
	}
}

func TestNewProxyErrors(t *testing.T) {
	good := config{
		Backends:       []string{"http://127.0.0.1:9001"},
		Key:            "ip",
		HealthPath:     "/healthz",
		HealthInterval: time.Second,
		HealthTimeout:  time.Second / 2,
		Fall:           2,
		Rise:           2,
		EjectAfter:     3,
		TableSize:      65537,
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
		{"relative health path", func(c *config) { c.HealthPath = "healthz" }},
		{"zero interval", func(c *config) { c.HealthInterval = 0 }},
		{"timeout over interval", func(c *config) { c.HealthTimeout = 2 * time.Second }},
		{"zero fall", func(c *config) { c.Fall = 0 }},
		{"zero rise", func(c *config) { c.Rise = 0 }},
		{"zero eject-after", func(c *config) { c.EjectAfter = 0 }},
		{"composite size", func(c *config) { c.TableSize = 65536 }},
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
