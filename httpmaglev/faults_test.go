package httpmaglev_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/maglevlb/maglev/httpmaglev"
)

// TestRequestFaultNotBackend: a request that net/http rejects before it
// connects (here an invalid header value) fails without counting against
// its backend: it is not retried and ejects nothing, however many are sent.
func TestRequestFaultNotBackend(t *testing.T) {
	servers := startServers(t, 3)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectAfter: 1, EjectionTime: time.Hour}, servers)
	for _, k := range keys(20) {
		req := httptest.NewRequest(http.MethodGet, "http://x/", nil)
		req.RequestURI = ""
		req.Header.Set(keyHeader, k)
		req.Header.Set("X-Bad", "a\nb")
		if _, err := tr.RoundTrip(req); err == nil {
			t.Fatal("a request with an invalid header value succeeded")
		}
	}
	st := tr.State()
	if st.Retries != 0 {
		t.Errorf("%d requests retried, want none", st.Retries)
	}
	for _, b := range st.Backends {
		if b.Ejected {
			t.Errorf("%s ejected by requests that were at fault themselves", b.Name)
		}
	}
}

// TestEjectionCap: when every backend fails at once, passive ejection takes
// out at most half of them, so the table never empties on failures the
// backends may not be to blame for.
func TestEjectionCap(t *testing.T) {
	servers := startServers(t, 4)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectAfter: 1, EjectionTime: time.Hour, DisableRetries: true}, servers)
	for _, s := range servers {
		s.broken.Store(true)
	}
	for _, k := range keys(200) {
		req := httptest.NewRequest(http.MethodGet, "http://x/", nil)
		req.RequestURI = ""
		req.Header.Set(keyHeader, k)
		if resp, err := tr.RoundTrip(req); err == nil {
			_ = resp.Body.Close() // not expected: every backend drops requests
		}
	}
	out := 0
	for _, b := range tr.State().Backends {
		if b.Ejected {
			out++
		}
	}
	if out != 2 {
		t.Fatalf("%d of 4 backends ejected, want 2: ejection stops at half", out)
	}
}

// TestEjectionCapConcurrent is TestEjectionCap with the failures arriving
// at once: requests failing together on different backends must not each
// see room for one more ejection. Each trial is a new Transport.
func TestEjectionCapConcurrent(t *testing.T) {
	servers := startServers(t, 4)
	for _, s := range servers {
		s.broken.Store(true)
	}
	for trial := range 10 {
		tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectAfter: 1, EjectionTime: time.Hour, DisableRetries: true}, servers)
		var wg sync.WaitGroup
		for _, k := range keys(32) {
			wg.Go(func() {
				req := httptest.NewRequest(http.MethodGet, "http://x/", nil)
				req.RequestURI = ""
				req.Header.Set(keyHeader, k)
				if resp, err := tr.RoundTrip(req); err == nil {
					_ = resp.Body.Close() // not expected: every backend drops requests
				}
			})
		}
		wg.Wait()
		out := 0
		for _, b := range tr.State().Backends {
			if b.Ejected {
				out++
			}
		}
		if out > 2 {
			t.Fatalf("trial %d: %d of 4 backends ejected, want at most 2: ejection stops at half", trial, out)
		}
	}
}

// TestBodyReadError: a request whose body fails to read is not sent: the
// error is returned, and no backend gets a truncated body.
func TestBodyReadError(t *testing.T) {
	servers := startServers(t, 2)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader)}, servers)
	boom := errors.New("boom")
	req := httptest.NewRequest(http.MethodPut, "http://x/item", io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom)))
	req.RequestURI = ""
	req.ContentLength = -1
	req.Header.Set(keyHeader, "k")
	if _, err := tr.RoundTrip(req); !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "httpmaglev: ") {
		t.Fatalf("RoundTrip = %v, want an httpmaglev error wrapping the body's", err)
	}
	for _, s := range servers {
		if n := s.served.Load(); n != 0 {
			t.Errorf("%s served %d requests, want none", s.name, n)
		}
	}
	if st := tr.State(); st.InFlight != 0 {
		t.Errorf("%d requests in flight after the failure", st.InFlight)
	}
}
