package httpmaglev_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/httpmaglev"
)

// startExampleBackends starts three servers on loopback, each answering
// with its own name, and returns them as Backends.
func startExampleBackends() ([]httpmaglev.Backend, func()) {
	var backends []httpmaglev.Backend
	var servers []*httptest.Server
	for _, name := range []string{"users-a", "users-b", "users-c"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = fmt.Fprint(w, name) // a write error is the client's to see
		}))
		servers = append(servers, srv)
		u, err := url.Parse(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		backends = append(backends, httpmaglev.Backend{Name: name, URL: u})
	}
	return backends, func() {
		for _, srv := range servers {
			srv.Close()
		}
	}
}

// Client-side sharding: an http.Client whose requests go to the backend
// that owns their X-User header in the Maglev table, which every client
// of the fleet computes alike. The request's URL names the service; the
// Transport replaces its host with the backend's.
func Example_client() {
	backends, stop := startExampleBackends()
	defer stop()

	t, err := httpmaglev.NewTransport(httpmaglev.Config{
		Backends: backends,
		Key:      httpmaglev.HeaderKey("X-User"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := t.Close(); err != nil {
			log.Fatal(err)
		}
	}()
	client := &http.Client{Transport: t}

	owners, err := maglev.New([]string{"users-a", "users-b", "users-c"}, maglev.DefaultSize, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, user := range []string{"alice", "carol", "frank", "alice"} {
		req, err := http.NewRequest(http.MethodGet, "http://users.internal/profile", nil)
		if err != nil {
			log.Fatal(err)
		}
		req.Header.Set("X-User", user)
		resp, err := client.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		if cerr := resp.Body.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s, the table's owner: %t\n", user, got, string(got) == owners.Lookup(user))
	}
	// Output:
	// alice: users-c, the table's owner: true
	// carol: users-b, the table's owner: true
	// frank: users-a, the table's owner: true
	// alice: users-c, the table's owner: true
}

// A reverse proxy: each request goes to the backend owning its session
// cookie (or, without one, its client IP). ErrorHandler answers 503 when
// no backend is healthy. The state is served on a separate admin
// listener, never on the proxy's own.
func Example_reverseProxy() {
	backends, stop := startExampleBackends()
	defer stop()

	t, err := httpmaglev.NewTransport(httpmaglev.Config{
		Backends:      backends,
		Key:           httpmaglev.CookieKey("session"),
		HealthPath:    "", // e.g. "/healthz" to check actively; passive ejection is on either way
		BalanceFactor: 1.25,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := t.Close(); err != nil {
			log.Fatal(err)
		}
	}()
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: "users"}) // the Transport picks the host
			pr.SetXForwarded()
		},
		Transport:    t,
		ErrorHandler: httpmaglev.ErrorHandler,
	})
	defer proxy.Close()
	admin := httptest.NewServer(t.StateHandler()) // on an admin listener
	defer admin.Close()

	for _, session := range []string{"s-1", "s-2", "s-4", "s-1"} {
		req, err := http.NewRequest(http.MethodGet, proxy.URL+"/cart", nil)
		if err != nil {
			log.Fatal(err)
		}
		req.AddCookie(&http.Cookie{Name: "session", Value: session})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		if cerr := resp.Body.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %d %s\n", session, resp.StatusCode, got)
	}
	st := t.State()
	fmt.Println("healthy:", st.Healthy, "requests:", st.Requests)
	// Output:
	// s-1: 200 users-c
	// s-2: 200 users-b
	// s-4: 200 users-a
	// s-1: 200 users-c
	// healthy: 3 requests: 4
}
