package httpmaglev_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/httpmaglev"
)

// Tests of the faults a hostile or careless caller brings, and of what
// still counts against a backend.

// ejected returns the names of the backends tr has ejected.
func ejected(tr *httpmaglev.Transport) []string {
	var names []string
	for _, b := range tr.State().Backends {
		if b.Ejected {
			names = append(names, b.Name)
		}
	}
	return names
}

// TestCallerBodyFaultsEjectNothing: requests whose own body fails, by a
// read error or a ContentLength larger or smaller than the body, eject no
// backend however many are sent, and are neither retried nor reported as
// the backend's error.
func TestCallerBodyFaultsEjectNothing(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name   string
		method string
		body   func() io.Reader
		length int64 // the request's ContentLength
		// net/http sends ContentLength bytes of a longer body, and the
		// backend may answer them before the rest is read: then the
		// request succeeds, and either way ejects nothing.
		mayAnswer bool
	}{
		// POSTs are sent once, their body streamed: net/http meets the fault.
		{"POST read error", http.MethodPost, func() io.Reader {
			return io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom))
		}, -1, false},
		{"POST read error, length set", http.MethodPost, func() io.Reader {
			return io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom))
		}, 10, false},
		{"POST shorter than ContentLength", http.MethodPost, func() io.Reader { return strings.NewReader("abc") }, 10, false},
		{"POST longer than ContentLength", http.MethodPost, func() io.Reader { return strings.NewReader("abcdefgh") }, 3, true},
		// A PUT over MaxRetryBody is streamed too.
		{"PUT over MaxRetryBody, shorter", http.MethodPut, func() io.Reader { return strings.NewReader(strings.Repeat("x", 100)) }, 200, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servers := startServers(t, 3)
			tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectionTime: time.Hour, MaxRetryBody: 16}, servers)
			for range 5 {
				req, err := http.NewRequest(tc.method, "http://x/item", io.NopCloser(tc.body()))
				if err != nil {
					t.Fatal(err)
				}
				req.ContentLength = tc.length
				req.Header.Set(keyHeader, "k")
				resp, err := tr.RoundTrip(req)
				if err == nil {
					_ = resp.Body.Close()
					if tc.mayAnswer {
						continue
					}
					t.Fatal("the request succeeded")
				}
				var be *httpmaglev.BackendError
				if !errors.Is(err, httpmaglev.ErrRequestBody) || errors.As(err, &be) {
					t.Fatalf("RoundTrip = %v, want an error wrapping ErrRequestBody and no BackendError", err)
				}
			}
			if out := ejected(tr); len(out) != 0 {
				t.Errorf("backends ejected by the caller's own body faults: %v", out)
			}
			if st := tr.State(); st.Healthy != 3 || st.Retries != 0 {
				t.Errorf("%d of 3 healthy, %d retries; want 3 and none", st.Healthy, st.Retries)
			}
		})
	}
}

// TestWrongContentLengthNotRetried: a PUT whose ContentLength disagrees
// with its body (GetBody set, as http.NewRequest sets it) fails once, on
// one backend: it is not sent to a second backend, which one caller bug
// would otherwise count against too.
func TestWrongContentLengthNotRetried(t *testing.T) {
	servers := startServers(t, 2)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectAfter: 1, EjectionTime: time.Hour}, servers)
	for _, k := range keys(6) {
		req, err := http.NewRequest(http.MethodPut, "http://x/item", strings.NewReader("abc"))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = 10
		req.Header.Set(keyHeader, k)
		if _, err := tr.RoundTrip(req); !errors.Is(err, httpmaglev.ErrRequestBody) {
			t.Fatalf("RoundTrip = %v, want ErrRequestBody", err)
		}
	}
	if st := tr.State(); st.Retries != 0 || st.Healthy != 2 {
		t.Errorf("%d retries, %d of 2 healthy; want no retry and both healthy", st.Retries, st.Healthy)
	}
}

// TestMalformedChunkedThroughProxy: a remote client sends POSTs with a
// malformed chunked body, over raw TCP, to an httputil.ReverseProxy over
// the Transport. Each gets 400 from ErrorHandler, and the healthy backend
// the key owns is not ejected.
func TestMalformedChunkedThroughProxy(t *testing.T) {
	servers := startServers(t, 3)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectionTime: time.Hour}, servers)
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:      func(pr *httputil.ProxyRequest) { pr.SetURL(&url.URL{Scheme: "http", Host: "backends"}) },
		Transport:    tr,
		ErrorHandler: httpmaglev.ErrorHandler,
	})
	defer proxy.Close()
	for i := range 5 {
		conn, err := net.DialTimeout("tcp", proxy.Listener.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		// A first chunk, then a chunk size that is not hexadecimal.
		_, _ = fmt.Fprintf(conn, "POST /item HTTP/1.1\r\nHost: lb\r\n%s: k\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\nxyz\r\n0\r\n\r\n", keyHeader)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("POST %d: %v", i, err)
		}
		_ = resp.Body.Close()
		_ = conn.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("POST %d with a malformed chunked body: %s, want 400", i, resp.Status)
		}
	}
	if out := ejected(tr); len(out) != 0 {
		t.Errorf("backends ejected by a client's malformed bodies: %v", out)
	}
	// The proxy still routes the key to its owner.
	owner := tr.State().Backends[0].Name
	if b, ok := tr.Lookup("k"); ok {
		owner = b.Name
	}
	req, _ := http.NewRequest(http.MethodGet, proxy.URL+"/item", nil)
	req.Header.Set(keyHeader, "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got := resp.Header.Get("X-Backend"); got != owner {
		t.Errorf("after the bad POSTs key k reached %q, want its owner %q", got, owner)
	}
}

// TestCancelledCallerEjectsNothing: requests whose caller gives up (its
// context cancelled, or past its deadline) while the backend works eject
// nothing and are not retried.
func TestCancelledCallerEjectsNothing(t *testing.T) {
	servers := startServers(t, 2)
	for _, s := range servers {
		s.gate = make(chan struct{}) // hold every request until its context ends
	}
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectAfter: 1, EjectionTime: time.Hour}, servers)
	for i, k := range keys(6) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		if i%2 == 0 {
			ctx, cancel = context.WithCancel(context.Background())
			time.AfterFunc(20*time.Millisecond, cancel)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://x/item", nil)
		req.Header.Set(keyHeader, k)
		if resp, err := tr.RoundTrip(req); err == nil {
			_ = resp.Body.Close()
			t.Fatal("a held request succeeded")
		}
		cancel()
	}
	if st := tr.State(); len(ejected(tr)) != 0 || st.Retries != 0 {
		t.Errorf("ejected %v, %d retries; want none", ejected(tr), st.Retries)
	}
}

// TestBackendFaultsCount: what says something about the backend still
// ejects it, each for its reason: a refused dial, a failed TLS handshake
// (an https URL for a server that speaks plain HTTP), a connection closed
// before the response headers, and a timeout awaiting them.
func TestBackendFaultsCount(t *testing.T) {
	for fault, reason := range map[string]httpmaglev.Reason{
		"refused":        httpmaglev.ReasonConnect,
		"tls":            httpmaglev.ReasonTLS,
		"closed":         httpmaglev.ReasonLost,
		"header timeout": httpmaglev.ReasonTimeout,
	} {
		t.Run(fault, func(t *testing.T) {
			servers := startServers(t, 3)
			base := http.DefaultTransport.(*http.Transport).Clone()
			base.ResponseHeaderTimeout = 50 * time.Millisecond
			cfg := httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectionTime: time.Hour, DisableRetries: true, Base: base}
			owner, err := maglev.New([]string{"s0", "s1", "s2"}, maglev.DefaultSize, nil)
			if err != nil {
				t.Fatal(err)
			}
			var victim *server
			for _, s := range servers {
				if s.name == owner.Lookup("k") {
					victim = s
				}
			}
			if fault == "tls" {
				u := *victim.url
				u.Scheme = "https"
				victim.url = &u
			}
			tr := newTransport(t, cfg, servers)
			switch fault {
			case "refused":
				victim.srv.Close()
			case "closed":
				victim.broken.Store(true)
			case "header timeout":
				victim.hold = time.Second
			}
			for range 3 {
				_, _, err := get(t, &http.Client{Transport: tr}, "http://x", http.MethodGet, "k")
				var be *httpmaglev.BackendError
				if !errors.As(err, &be) || be.Backend != victim.name {
					t.Fatalf("GET = %v, want a BackendError naming %s", err, victim.name)
				}
			}
			if out := ejected(tr); len(out) != 1 || out[0] != victim.name {
				t.Errorf("ejected %v, want [%s]", out, victim.name)
			}
			for _, b := range tr.State().Backends {
				if b.Name == victim.name && (b.Status != httpmaglev.StatusEjected || b.Reason != reason) {
					t.Errorf("%s: status %q, reason %q; want ejected for %q", b.Name, b.Status, b.Reason, reason)
				}
			}
		})
	}
}

// TestEjectionBackoff: with active checks off, each consecutive ejection
// of a backend lasts EjectionTime longer than the one before, up to
// MaxEjectionTime. The bounds are lower bounds: a backend can come back
// late on a slow machine, never early.
func TestEjectionBackoff(t *testing.T) {
	servers := startServers(t, 3)
	const base = 150 * time.Millisecond
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectAfter: 1, DisableRetries: true,
		EjectionTime: base, MaxEjectionTime: 2 * base, HealthInterval: 10 * time.Millisecond}, servers)
	b, _ := tr.Lookup("k")
	var victim *server
	for _, s := range servers {
		if s.name == b.Name {
			victim = s
		}
	}
	victim.broken.Store(true)
	client := &http.Client{Transport: tr}
	for n, want := range []time.Duration{base, 2 * base, 2 * base} { // the third is capped
		start := time.Now()
		if _, _, err := get(t, client, "http://x", http.MethodGet, "k"); err == nil {
			t.Fatal("a GET to a broken backend succeeded")
		}
		var ej int64
		for _, st := range tr.State().Backends {
			if st.Name == victim.name {
				if !st.Ejected {
					t.Fatalf("ejection %d: %s not ejected", n+1, victim.name)
				}
				ej = st.Ejections
			}
		}
		if ej != int64(n+1) {
			t.Errorf("ejection %d: State says %d consecutive ejections", n+1, ej)
		}
		waitFor(t, "the ejection's rebuild", func() bool { return tr.State().Healthy == 2 })
		waitFor(t, "readmission", func() bool { return tr.State().Healthy == 3 })
		if took := time.Since(start); took < want {
			t.Errorf("ejection %d lasted less than %v: readmitted %v after the failure", n+1, want, took)
		}
	}
}

// TestMaxEjectionTimeCheck: a MaxEjectionTime below EjectionTime is a
// config error.
func TestMaxEjectionTimeCheck(t *testing.T) {
	_, err := httpmaglev.NewTransport(httpmaglev.Config{EjectionTime: time.Minute, MaxEjectionTime: time.Second})
	if !errors.Is(err, httpmaglev.ErrInvalidConfig) || !strings.Contains(err.Error(), "MaxEjectionTime") {
		t.Fatalf("NewTransport = %v, want ErrInvalidConfig naming MaxEjectionTime", err)
	}
}

// TestKeylessSpread: an http.Client's own requests have no client IP; with
// no Key they are spread over the backends in proportion to their slots,
// not all sent to the empty key's owner.
func TestKeylessSpread(t *testing.T) {
	servers := startServers(t, 4)
	tr := newTransport(t, httpmaglev.Config{}, servers, 1, 1, 1, 3)
	client := &http.Client{Transport: tr}
	const n = 600
	got := map[string]int{}
	for range n {
		_, name, err := get(t, client, "http://x", http.MethodGet, "")
		if err != nil {
			t.Fatal(err)
		}
		got[name]++
	}
	// Expected 100, 100, 100 and 300: a binomial's standard deviation is
	// under 12, so these bounds hold but for a 5-sigma accident.
	for i, s := range servers {
		want := 100
		if i == 3 {
			want = 300
		}
		if c := got[s.name]; c < want-60 || c > want+60 {
			t.Errorf("%s got %d of %d keyless requests, want about %d: %v", s.name, c, n, want, got)
		}
	}
}

// TestProbesOwnPool: probes do not wait behind requests for the request
// pool's connections: with MaxConnsPerHost 2 and two slow requests holding
// both, a live backend stays healthy through many health rounds.
func TestProbesOwnPool(t *testing.T) {
	servers := startServers(t, 1)
	s := servers[0]
	s.gate = make(chan struct{})
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxConnsPerHost = 2
	tr := newTransport(t, httpmaglev.Config{Base: base, HealthPath: "/healthz",
		HealthInterval: 100 * time.Millisecond, HealthTimeout: 80 * time.Millisecond, Fall: 2}, servers)
	client := &http.Client{Transport: tr}
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, _, err := get(t, client, "http://x", http.MethodGet, "")
			done <- err
		}()
	}
	waitFor(t, "two requests in flight", func() bool { return s.inflight.Load() == 2 })
	r0 := tr.State().HealthRounds
	waitFor(t, "six health rounds", func() bool { return tr.State().HealthRounds >= r0+6 })
	if st := tr.State(); st.Healthy != 1 {
		t.Errorf("a live backend with both request connections busy marked down after %d rounds", st.HealthRounds-r0)
	}
	close(s.gate)
	for range 2 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestRetryReplaysOnStaleConnection: a retried request keeps GetBody, so
// that when the retry backend closes the pooled connection it is sent on
// (as a server whose keep-alive timer fires does), net/http sends it again
// on a new connection instead of failing it against the retry backend.
func TestRetryReplaysOnStaleConnection(t *testing.T) {
	// s1 answers the first request of each connection and closes the
	// connection, unanswered, at the second.
	type connKey struct{}
	stale := &server{name: "s1", ids: map[string]int{}}
	stale.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(connKey{}).(*atomic.Int64).Add(1) == 2 {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = c.Close()
			}
			return
		}
		stale.ServeHTTP(w, r)
	}))
	stale.srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, new(atomic.Int64))
	}
	stale.srv.Start()
	defer stale.srv.Close()
	stale.url, _ = url.Parse(stale.srv.URL)
	servers := append(startServers(t, 1), stale) // s0, broken below, and s1
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectAfter: -1}, servers)
	tab, err := maglev.New([]string{"s0", "s1"}, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	var k0, k1 string // keys s0 and s1 own
	for _, k := range keys(100) {
		switch tab.Lookup(k) {
		case "s0":
			k0 = k
		case "s1":
			k1 = k
		}
	}
	client := &http.Client{Transport: tr}
	put := func(key string) (string, error) {
		// A POST with an Idempotency-Key, which both the Transport and
		// net/http send again; its body has no GetBody of its own.
		req, _ := http.NewRequest(http.MethodPost, "http://x/item", io.NopCloser(strings.NewReader("body")))
		req.ContentLength = 4
		req.Header.Set(keyHeader, key)
		req.Header.Set("Idempotency-Key", "id-"+key)
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	// A first POST to s1 leaves one connection to it in the pool.
	if got, err := put(k1); err != nil || got != "s1 POST 4" {
		t.Fatalf("POST to s1: %q, %v", got, err)
	}
	servers[0].broken.Store(true)
	// k0's POST fails on s0 and is retried on s1, over the pooled
	// connection, which s1 closes: net/http must send it again.
	if got, err := put(k0); err != nil || got != "s1 POST 4" {
		t.Fatalf("POST retried from s0 to s1: %q, %v; want s1's answer", got, err)
	}
	if st := tr.State(); st.Retries != 1 {
		t.Errorf("%d retries, want 1", st.Retries)
	}
}
