package httpmaglev_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/maglevlb/maglev/httpmaglev"
)

// BenchmarkProxy measures a GET through httputil.ReverseProxy on loopback,
// client to proxy to backend and back, one at a time, with the proxy's
// Transport being transport=maglev (an httpmaglev.Transport over 3
// backends, keyed by a header) or transport=plain (a clone of
// http.DefaultTransport to one backend). Each op is one request's latency;
// docs/http.md compares the two medians over interleaved runs.
func BenchmarkProxy(b *testing.B) {
	servers := startServers(b, 3)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	for _, name := range []string{"maglev", "plain"} {
		b.Run("transport="+name, func(b *testing.B) {
			var rt http.RoundTripper
			target := servers[0].url
			if name == "maglev" {
				rt = newTransport(b, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader)}, servers)
				target = &url.URL{Scheme: "http", Host: "backends"}
			} else {
				rt = http.DefaultTransport.(*http.Transport).Clone()
			}
			proxy := httptest.NewServer(&httputil.ReverseProxy{
				Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
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
// size: the table and, for the retry targets, the N tables without one
// backend each.
func BenchmarkSetBackends(b *testing.B) {
	for _, n := range []int{3, 10, 100} {
		b.Run(fmt.Sprintf("N=%d/M=65537", n), func(b *testing.B) {
			var backends []httpmaglev.Backend
			for i := range n {
				backends = append(backends, httpmaglev.Backend{URL: &url.URL{Scheme: "http", Host: fmt.Sprintf("10.0.%d.%d:80", i/256, i%256)}})
			}
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
	}
}
