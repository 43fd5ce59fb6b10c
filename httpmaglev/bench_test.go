package httpmaglev_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/httpmaglev"
	"go.opentelemetry.io/otel/metric/noop"
)

// BenchmarkProxy measures a GET through httputil.ReverseProxy on loopback,
// client to proxy to backend and back, one at a time, with the proxy's
// Transport being transport=maglev (an httpmaglev.Transport over 3
// backends, keyed by a header), transport=maglev1 (the same over one
// backend, to separate the Transport's cost from the backends'),
// transport=plain (a clone of http.DefaultTransport to one backend) or
// transport=plain3 (the same, the proxy taking the 3 backends in turn). Each
// op is one request's latency; docs/http.md compares the medians over
// interleaved runs.
func BenchmarkProxy(b *testing.B) {
	servers := startServers(b, 3)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	for _, name := range []string{"maglev", "maglev1", "plain", "plain3"} {
		b.Run("transport="+name, func(b *testing.B) {
			var rt http.RoundTripper
			target := servers[0].url
			switch name {
			case "maglev":
				rt = newTransport(b, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader)}, servers)
				target = &url.URL{Scheme: "http", Host: "backends"}
			case "maglev1":
				rt = newTransport(b, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader)}, servers[:1])
				target = &url.URL{Scheme: "http", Host: "backends"}
			default:
				rt = http.DefaultTransport.(*http.Transport).Clone()
			}
			var turn atomic.Int64
			proxy := httptest.NewServer(&httputil.ReverseProxy{
				Rewrite: func(pr *httputil.ProxyRequest) {
					if name == "plain3" {
						pr.SetURL(servers[turn.Add(1)%3].url)
						return
					}
					pr.SetURL(target)
				},
				Transport: rt,
			})
			defer proxy.Close()
			client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
			defer client.CloseIdleConnections()
			req, err := http.NewRequest(http.MethodGet, proxy.URL+"/item", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				req.Header.Set(keyHeader, keys[i%len(keys)])
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}

var sinkBackend httpmaglev.Backend

// BenchmarkLookup measures Transport.Lookup, key to backend: one hash and
// one table index.
func BenchmarkLookup(b *testing.B) {
	servers := startServers(b, 10)
	tr := newTransport(b, httpmaglev.Config{}, servers)
	b.ReportAllocs()
	for b.Loop() {
		sinkBackend, _ = tr.Lookup("user-12345")
	}
}

// BenchmarkSetBackends measures a rebuild over N backends at the default
// size, op=set, next to op=build, one maglev.NewWeighted over the same
// backends: a rebuild builds the table and nothing more (the tables a
// retry needs are built when a retry first needs them), so the two should
// be close. docs/http.md compares them under benchstat.
func BenchmarkSetBackends(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 5000} {
		var backends []httpmaglev.Backend
		var names []maglev.Backend
		for i := range n {
			host := fmt.Sprintf("10.%d.%d.%d:80", i/65536, i/256%256, i%256)
			backends = append(backends, httpmaglev.Backend{URL: &url.URL{Scheme: "http", Host: host}})
			names = append(names, maglev.Backend{Name: host, Weight: 1})
		}
		b.Run(fmt.Sprintf("N=%d/op=set", n), func(b *testing.B) {
			tr, err := httpmaglev.NewTransport(httpmaglev.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = tr.Close() }()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				// Alternate two lists so that every call rebuilds.
				list := backends
				if i%2 == 1 {
					list = backends[1:]
				}
				if err := tr.SetBackends(list); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("N=%d/op=build", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				list := names
				if i%2 == 1 {
					list = names[1:]
				}
				if _, err := maglev.NewWeighted(list, maglev.DefaultSize, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// stubTransport answers every request at once with an empty 200, without
// a network: what is left of a RoundTrip is the caller's own cost.
type stubTransport struct{}

func (stubTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

// BenchmarkRoundTrip measures what the Transport adds to a request, with
// no network: transport=stub is the stub alone, transport=maglev the
// Transport over 3 backends sending through the stub, and
// transport=bounded the same with BalanceFactor 1.25 (a lease, and a body
// wrapper released by Close). Their metrics go to a no-op MeterProvider;
// transport=metrics is transport=maglev recording into a real
// OpenTelemetry SDK (sdk/metric with a ManualReader), for the cost of the
// metrics.
func BenchmarkRoundTrip(b *testing.B) {
	var backends []httpmaglev.Backend
	for i := range 3 {
		backends = append(backends, httpmaglev.Backend{URL: &url.URL{Scheme: "http", Host: fmt.Sprintf("10.0.0.%d:80", i+1)}})
	}
	for _, name := range []string{"stub", "maglev", "metrics", "bounded"} {
		b.Run("transport="+name, func(b *testing.B) {
			var rt http.RoundTripper = stubTransport{}
			if name != "stub" {
				cfg := httpmaglev.Config{Backends: backends, Key: httpmaglev.HeaderKey(keyHeader), Base: stubTransport{},
					MeterProvider: noop.NewMeterProvider()}
				switch name {
				case "bounded":
					cfg.BalanceFactor = 1.25
				case "metrics":
					cfg.MeterProvider = newMeter(b).provider
				}
				tr, err := httpmaglev.NewTransport(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer func() { _ = tr.Close() }()
				rt = tr
			}
			req, err := http.NewRequest(http.MethodGet, "http://backends/item", nil)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set(keyHeader, "user-12345")
			b.ReportAllocs()
			for b.Loop() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_ = resp.Body.Close()
			}
		})
	}
}
