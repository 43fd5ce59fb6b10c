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

func TestIdempotent(t *testing.T) {
	tests := []struct {
		method string
		header string // an idempotency header set to "k1", if any
		want   bool
	}{
		{http.MethodGet, "", true},
		{http.MethodHead, "", true},
		{http.MethodOptions, "", true},
		{http.MethodPut, "", true},
		{http.MethodDelete, "", true},
		{http.MethodTrace, "", true},
		{http.MethodPost, "", false},
		{http.MethodPatch, "", false},
		{http.MethodConnect, "", false},
		{"PURGE", "", false},
		{http.MethodPost, "Idempotency-Key", true},
		{http.MethodPatch, "Idempotency-Key", true},
		{http.MethodPost, "X-Idempotency-Key", true},
		{http.MethodPost, "X-Request-Id", false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, "/", nil)
		if tt.header != "" {
			r.Header.Set(tt.header, "k1")
		}
		if got := idempotent(r); got != tt.want {
			t.Errorf("idempotent(%s with %q) = %t, want %t", tt.method, tt.header, got, tt.want)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Idempotency-Key", "")
	if idempotent(r) {
		t.Error("POST with an empty Idempotency-Key is idempotent, want not")
	}
}

func TestBufferBody(t *testing.T) {
	small := strings.Repeat("x", 100)
	big := strings.Repeat("y", maxReplay+1)
	tests := []struct {
		name string
		body string
		size int64 // ContentLength; -1 for unknown
		want bool
	}{
		{"empty", "", 0, true},
		{"small", small, int64(len(small)), true},
		{"small chunked", small, -1, true},
		{"big", big, int64(len(big)), false},
		{"big chunked", big, -1, false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodPut, "/", strings.NewReader(tt.body))
		r.ContentLength = tt.size
		if got := bufferBody(r); got != tt.want {
			t.Errorf("%s: bufferBody = %t, want %t", tt.name, got, tt.want)
		}
		// The body reads whole either way, and once more from GetBody if
		// it can be replayed.
		if b, _ := io.ReadAll(r.Body); string(b) != tt.body {
			t.Errorf("%s: body of %d bytes, want %d", tt.name, len(b), len(tt.body))
		}
		if tt.want && tt.body != "" {
			body, _ := r.GetBody()
			if b, _ := io.ReadAll(body); string(b) != tt.body {
				t.Errorf("%s: body again of %d bytes, want %d", tt.name, len(b), len(tt.body))
			}
		}
	}
}

// With a single backend, which is dead, there is nowhere to retry: 502.
func TestOnlyBackendDead(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	p, err := newProxy(config{
		Backends:       []string{dead.URL},
		Key:            "ip",
		HealthPath:     "/healthz",
		HealthInterval: time.Second,
		HealthTimeout:  time.Second,
		Fall:           2,
		Rise:           2,
		TableSize:      13,
	}, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.transport.CloseIdleConnections()
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if want := "bad gateway: backend " + dead.URL + " failed\n"; w.Code != http.StatusBadGateway || w.Body.String() != want {
		t.Errorf("GET: %d %q, want 502 %q", w.Code, w.Body, want)
	}
	if n := p.retries.Load(); n != 0 {
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
		TableSize:      65537,
	}
	if _, err := newProxy(good, log.New(io.Discard, "", 0)); err != nil {
		t.Fatalf("newProxy(%+v): %v", good, err)
	}
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
		{"composite size", func(c *config) { c.TableSize = 65536 }},
	}
	for _, tt := range tests {
		cfg := good
		tt.change(&cfg)
		_, err := newProxy(cfg, log.New(io.Discard, "", 0))
		if err == nil || !strings.HasPrefix(err.Error(), "lbproxy: ") {
			t.Errorf("%s: newProxy: %v, want an error starting with lbproxy: ", tt.name, err)
		}
	}
}
