package httpmaglev_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/httpmaglev"
	"github.com/maglevlb/maglev/membership"
)

func TestFromEndpoints(t *testing.T) {
	eps := []membership.Endpoint{
		{Name: "10.0.0.1:80", Host: "10.0.0.1", Port: 80, Weight: 1},
		{Name: "[2001:db8::1]:8080", Host: "2001:db8::1", Port: 8080, Weight: 3},
		{Name: "https://web.test", Host: "web.test", Weight: 0, Meta: map[string]string{"scheme": "https", "zone": "a"}},
		{Name: "web.test:8443", Host: "web.test", Port: 8443, Weight: 1, Meta: map[string]string{"zone": "b"}},
	}
	want := []string{
		"10.0.0.1:80 http://10.0.0.1:80 1",
		"[2001:db8::1]:8080 http://[2001:db8::1]:8080 3",
		"https://web.test https://web.test 0",
		"web.test:8443 http://web.test:8443 1",
	}
	for _, scheme := range []string{"http", "https"} {
		bs, err := httpmaglev.FromEndpoints(scheme, eps)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != len(want) {
			t.Fatalf("%s: %d backends, want %d", scheme, len(bs), len(want))
		}
		for i, b := range bs {
			w := want[i]
			if scheme == "https" && i != 2 {
				w = strings.Replace(w, "http://", "https://", 1)
			}
			if got := fmt.Sprintf("%s %s %d", b.Name, b.URL, *b.Weight); got != w {
				t.Errorf("%s: backend %d: %q, want %q", scheme, i, got, w)
			}
		}
	}

	// Every endpoint drained: backends of weight 0, drained as any other.
	bs, err := httpmaglev.FromEndpoints("http", []membership.Endpoint{{Name: "a:80", Host: "a", Port: 80}, {Name: "b:80", Host: "b", Port: 80}})
	if err != nil || len(bs) != 2 || bs[0].Weight == nil || *bs[0].Weight != 0 || bs[1].Weight == nil || *bs[1].Weight != 0 {
		t.Errorf("every endpoint drained: %v, %v; want both, of weight 0", bs, err)
	}
	if bs, err := httpmaglev.FromEndpoints("http", nil); err != nil || bs == nil || len(bs) != 0 {
		t.Errorf("no endpoints: %v, %v; want an empty list", bs, err)
	}

	var ce *httpmaglev.ConfigError
	if _, err := httpmaglev.FromEndpoints("ftp", eps); !errors.As(err, &ce) || ce.Field != "scheme" {
		t.Errorf("scheme ftp: %v, want a ConfigError for scheme", err)
	}
	for _, bad := range []membership.Endpoint{
		{Name: "none", Weight: 1},
		{Name: "grpc://a:80", Host: "a", Port: 80, Weight: 1, Meta: map[string]string{"scheme": "grpc"}},
	} {
		if _, err := httpmaglev.FromEndpoints("http", []membership.Endpoint{bad}); !errors.Is(err, httpmaglev.ErrBadURL) ||
			!strings.HasPrefix(err.Error(), "httpmaglev: ") || !strings.Contains(err.Error(), bad.Name) {
			t.Errorf("%+v: %v, want ErrBadURL naming it", bad, err)
		}
	}
}

// TestSetEndpoints feeds a Transport endpoint lists: keys reach their
// owners over the endpoints' names, a drained endpoint gets no new key,
// and a list with a bad endpoint is rejected with the membership kept.
func TestSetEndpoints(t *testing.T) {
	servers := startServers(t, 3)
	eps := make([]membership.Endpoint, len(servers))
	for i, s := range servers {
		host, port, err := net.SplitHostPort(s.url.Host)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		eps[i] = membership.Endpoint{Name: s.name, Host: host, Port: uint16(p), Weight: 1}
	}
	tr, err := httpmaglev.NewTransport(httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close() }()
	client := &http.Client{Transport: tr}
	route := func(names ...string) {
		t.Helper()
		tab := table(t, names...)
		for i := range 200 {
			key := fmt.Sprintf("user-%d", i)
			code, got, err := get(t, client, "http://backends", "GET", key)
			if err != nil || code != 200 || got != tab.Lookup(key) {
				t.Fatalf("key %s: %d %q %v; its owner over %v is %s", key, code, got, err, names, tab.Lookup(key))
			}
		}
	}
	if err := tr.SetEndpoints(eps); err != nil {
		t.Fatal(err)
	}
	route("s0", "s1", "s2")

	eps[1].Weight = 0
	if err := tr.SetEndpoints(eps); err != nil {
		t.Fatal(err)
	}
	route("s0", "s2")
	if st := tr.State(); len(st.Backends) != 3 {
		t.Errorf("%d backends configured, want 3 (the drained one kept)", len(st.Backends))
	}

	rebuilds := tr.State().Rebuilds
	bad := append(eps[:3:3], membership.Endpoint{Name: "s3", Weight: 1})
	if err := tr.SetEndpoints(bad); !errors.Is(err, httpmaglev.ErrInvalidBackends) || !errors.Is(err, httpmaglev.ErrBadURL) {
		t.Errorf("a list with an endpoint without host: %v, want ErrInvalidBackends and ErrBadURL", err)
	}
	if tr.State().Rebuilds != rebuilds {
		t.Error("a rejected list rebuilt the table")
	}
	route("s0", "s2")
}
