package envoymaglev_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/envoymaglev"
	"github.com/maglevlb/maglev/httpmaglev"
)

// TestHTTPEnvoyMode: an httpmaglev.Transport with NewTable set to
// envoymaglev.NewTable sends every request key, through real HTTP servers
// on loopback, to the host of Envoy's table for the same hosts, weights and
// size, hashed with XXH64: the host an Envoy with a header hash policy on
// the same header picks.
func TestHTTPEnvoyMode(t *testing.T) {
	weights := []uint32{1, 2, 3, 5}
	var backends []httpmaglev.Backend
	var hosts []envoymaglev.Host
	for i, w := range weights {
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			_, _ = fmt.Fprint(rw, r.Host) // a write error is the client's to see
		}))
		t.Cleanup(srv.Close)
		u, err := url.Parse(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		backends = append(backends, httpmaglev.Backend{URL: u, Weight: new(w)}) // named by URL.Host
		hosts = append(hosts, envoymaglev.Host{Key: u.Host, Weight: weights[i]})
	}
	const size = 1009
	want, err := envoymaglev.New(hosts, size)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := httpmaglev.NewTransport(httpmaglev.Config{
		Backends:  backends,
		Key:       httpmaglev.HeaderKey("X-User"),
		TableSize: size,
		NewTable:  envoymaglev.NewTable,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Error(err)
		}
	})
	client := &http.Client{Transport: tr}
	names := make([]maglev.Backend, len(hosts))
	for i, h := range hosts {
		names[i] = maglev.Backend{Name: h.Key, Weight: h.Weight}
	}
	own, err := maglev.NewWeighted(names, size, nil)
	if err != nil {
		t.Fatal(err)
	}
	differ := 0
	for k := range 300 {
		key := fmt.Sprint("user-", k)
		req, err := http.NewRequest(http.MethodGet, "http://users.internal/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-User", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		body, err := io.ReadAll(resp.Body)
		if cerr := resp.Body.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := string(body); got != want.Lookup(key) {
			t.Fatalf("key %q reached %s; Envoy's table names %s", key, got, want.Lookup(key))
		}
		if own.Lookup(key) != want.Lookup(key) {
			differ++
		}
	}
	// The default table would route many keys elsewhere: the check above
	// tells the two apart.
	if differ < 100 {
		t.Fatalf("only %d of 300 keys differ between Envoy's table and the default one", differ)
	}
}
