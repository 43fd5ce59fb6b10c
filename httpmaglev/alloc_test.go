package httpmaglev

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// TestPickAllocs proves that the pick, key to backend with bounded loads
// off, does not allocate, for each key helper and for a keyless request
// (spread by a random hash), and that Lookup does not.
func TestPickAllocs(t *testing.T) {
	var backends []Backend
	for _, host := range []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"} {
		backends = append(backends, Backend{URL: &url.URL{Scheme: "http", Host: host}})
	}
	for name, key := range map[string]func(*http.Request) string{
		"nil":    nil,
		"header": HeaderKey("X-User"),
		"cookie": CookieKey("session"),
		"query":  QueryKey("user"),
		"none":   func(*http.Request) string { return "" },
	} {
		tr, err := NewTransport(Config{Backends: backends, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodGet, "http://x/?user=alice&b=c", nil)
		req.Header.Set("X-User", "alice")
		req.Header.Set("Cookie", "a=b; session=alice")
		if name == "none" {
			req.RemoteAddr = "" // as an http.Client's own request: no key at all
		}
		var idx int
		allocs := testing.AllocsPerRun(1000, func() {
			_, idx, _, _, _ = tr.pick(req)
		})
		if allocs != 0 || idx < 0 {
			t.Errorf("Key %s: pick allocates %v times a call (backend %d), want 0", name, allocs, idx)
		}
		allocs = testing.AllocsPerRun(1000, func() {
			_, _ = tr.Lookup("alice")
		})
		if allocs != 0 {
			t.Errorf("Lookup allocates %v times a call, want 0", allocs)
		}
		_ = tr.Close()
	}
}
