package k8smaglev

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/httpmaglev"
	"github.com/maglevlb/maglev/membership"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The tests in this file check the Watcher's logic on EndpointSlice
// values, with no API server; k8stest runs it against a real one.

func ptr[T any](v T) *T { return &v }

// ep is an endpoint with the given conditions: "ready", "notready",
// "draining" (terminating and serving), "gone" (terminating, not serving),
// "nil" (no condition given: ready, as the API says).
func ep(state string, addrs ...string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: addrs}
	switch state {
	case "ready":
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
	case "notready":
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
	case "draining":
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
	case "gone":
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
	case "nil":
	default:
		panic(state)
	}
	return e
}

func slice(name string, at discoveryv1.AddressType, ports map[string]int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: at,
		Endpoints:   eps,
	}
	names := make([]string, 0, len(ports))
	for n := range ports {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p := discoveryv1.EndpointPort{Port: ptr(ports[n])}
		if n != "" {
			p.Name = ptr(n)
		}
		s.Ports = append(s.Ports, p)
	}
	return s
}

// addrs renders a list as "NAME NAME(draining) ...", checking that each
// endpoint's Host and Port are its Name's.
func addrs(eps []membership.Endpoint) string {
	var b strings.Builder
	for i, e := range eps {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.Name)
		if e.HostPort() != e.Name {
			b.WriteString("(host " + e.HostPort() + ")")
		}
		switch e.Weight {
		case 0:
			b.WriteString("(draining)")
		case 1:
		default:
			fmt.Fprintf(&b, "(weight %d)", e.Weight)
		}
	}
	return b.String()
}

func TestEndpoints(t *testing.T) {
	v4, v6 := discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	http := map[string]int32{"http": 8080, "grpc": 9090}
	tests := []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		port   string
		at     discoveryv1.AddressType
		want   string
	}{
		{"conditions", []*discoveryv1.EndpointSlice{slice("a", v4, http,
			ep("ready", "198.18.0.1"), ep("notready", "198.18.0.2"), ep("draining", "198.18.0.3"),
			ep("gone", "198.18.0.4"), ep("nil", "198.18.0.5"))},
			"http", v4, "198.18.0.1:8080 198.18.0.3:8080(draining) 198.18.0.5:8080"},
		{"port by name", []*discoveryv1.EndpointSlice{slice("a", v4, http, ep("ready", "198.18.0.1"))},
			"grpc", v4, "198.18.0.1:9090"},
		{"port by number", []*discoveryv1.EndpointSlice{slice("a", v4, http, ep("ready", "198.18.0.1"))},
			"9090", v4, "198.18.0.1:9090"},
		{"unnamed port by number", []*discoveryv1.EndpointSlice{slice("a", v4, map[string]int32{"": 80}, ep("ready", "198.18.0.1"))},
			"80", v4, "198.18.0.1:80"},
		{"no such port", []*discoveryv1.EndpointSlice{slice("a", v4, http, ep("ready", "198.18.0.1"))},
			"https", v4, ""},
		{"a port's number differs between slices", []*discoveryv1.EndpointSlice{
			slice("a", v4, map[string]int32{"http": 8080}, ep("ready", "198.18.0.1")),
			slice("b", v4, map[string]int32{"http": 8081}, ep("ready", "198.18.0.2"))},
			"http", v4, "198.18.0.1:8080 198.18.0.2:8081"},
		{"one endpoint in two slices, counted once", []*discoveryv1.EndpointSlice{
			slice("a", v4, http, ep("ready", "198.18.0.1"), ep("ready", "198.18.0.2")),
			slice("b", v4, http, ep("ready", "198.18.0.2"), ep("ready", "198.18.0.3"))},
			"http", v4, "198.18.0.1:8080 198.18.0.2:8080 198.18.0.3:8080"},
		{"ready in one slice, draining in the other: ready", []*discoveryv1.EndpointSlice{
			slice("a", v4, http, ep("draining", "198.18.0.2")),
			slice("b", v4, http, ep("ready", "198.18.0.2"))},
			"http", v4, "198.18.0.2:8080"},
		{"dual-stack: IPv4", []*discoveryv1.EndpointSlice{
			slice("a", v4, http, ep("ready", "198.18.0.1")),
			slice("b", v6, http, ep("ready", "2001:2:0:0::1"))},
			"http", v4, "198.18.0.1:8080"},
		{"dual-stack: IPv6, in RFC 5952 form", []*discoveryv1.EndpointSlice{
			slice("a", v4, http, ep("ready", "198.18.0.1")),
			slice("b", v6, http, ep("ready", "2001:2:0:0::1"), ep("draining", "2001:0002::2"))},
			"http", v6, "[2001:2::1]:8080 [2001:2::2]:8080(draining)"},
		{"FQDN slices and bad addresses left out", []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeFQDN, http, ep("ready", "web.example")),
			slice("b", v4, http, ep("ready", "not-an-ip"), ep("ready", "2001:2::1"), ep("ready"), ep("ready", "198.18.0.9", "198.18.0.10"))},
			"http", v4, "198.18.0.9:8080"},
		{"no slices", nil, "http", v4, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := endpoints(tt.slices, tt.port, tt.at)
			if addrs(got) != tt.want {
				t.Errorf("got %q, want %q", addrs(got), tt.want)
			}
			rev := slices.Clone(tt.slices)
			slices.Reverse(rev)
			if again := endpoints(rev, tt.port, tt.at); !membership.Equal(again, got) {
				t.Errorf("slices in another order: %q, want %q", addrs(again), addrs(got))
			}
		})
	}
}

// TestHTTPBackends: the endpoints of a slice, adapted by
// httpmaglev.FromEndpoints (the one adapter), are backends named IP:PORT
// at http://IP:PORT, weight 1 or 0 for a draining one, which a Transport
// drains; every endpoint draining gives no backend.
func TestHTTPBackends(t *testing.T) {
	eps := endpoints([]*discoveryv1.EndpointSlice{
		slice("a", discoveryv1.AddressTypeIPv4, map[string]int32{"http": 80}, ep("ready", "198.18.0.1"), ep("draining", "198.18.0.2")),
	}, "http", discoveryv1.AddressTypeIPv4)
	eps = append(eps, endpoints([]*discoveryv1.EndpointSlice{
		slice("b", discoveryv1.AddressTypeIPv6, map[string]int32{"http": 80}, ep("ready", "2001:2::1")),
	}, "http", discoveryv1.AddressTypeIPv6)...)
	bs, err := httpmaglev.FromEndpoints("http", eps)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range bs {
		got = append(got, fmt.Sprintf("%s %s %d", b.Name, b.URL, *b.Weight))
	}
	want := []string{"198.18.0.1:80 http://198.18.0.1:80 1", "198.18.0.2:80 http://198.18.0.2:80 0", "[2001:2::1]:80 http://[2001:2::1]:80 1"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	// A Transport takes the list, and drains the weight-0 backend.
	tr, err := httpmaglev.NewTransport(httpmaglev.Config{Backends: bs})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close() }()
	for i := range 200 {
		if b, ok := tr.Lookup(fmt.Sprint(i)); !ok || b.Name == "198.18.0.2:80" {
			t.Fatalf("key %d: %v %v, want a backend that is not drained", i, b.Name, ok)
		}
	}
	// Every endpoint draining: each a backend of weight 0, drained.
	if bs, err := httpmaglev.FromEndpoints("http", eps[1:2]); err != nil || len(bs) != 1 || *bs[0].Weight != 0 {
		t.Errorf("all draining: %v, %v; want the backend at weight 0", bs, err)
	}
}

func TestParseService(t *testing.T) {
	good := map[string]Service{
		"default/web:http": {"default", "web", "http"},
		"ns-1/web-2:8080":  {"ns-1", "web-2", "8080"},
	}
	for s, want := range good {
		got, err := ParseService(s)
		if err != nil || got != want || got.String() != s {
			t.Errorf("ParseService(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	bad := map[string]string{
		"web:http":          "service",
		"default/web":       "service",
		"/web:http":         "Service.Namespace",
		"Default/web:http":  "Service.Namespace",
		"default/:http":     "Service.Name",
		"default/1web:http": "Service.Name",
		"default/web:":      "Service.Port",
		"default/web:0":     "Service.Port",
		"default/web:65536": "Service.Port",
		"default/web:Http!": "Service.Port",
	}
	for s, field := range bad {
		_, err := ParseService(s)
		var ce *ConfigError
		if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != field ||
			!strings.HasPrefix(err.Error(), "k8smaglev: invalid config: "+field+": ") {
			t.Errorf("ParseService(%q): %v, want a *ConfigError naming %s", s, err, field)
		}
	}
}

func TestWatchConfigErrors(t *testing.T) {
	set := func([]membership.Endpoint) error { return nil }
	svc := Service{Namespace: "default", Name: "web", Port: "http"}
	tests := []struct {
		field string
		err   error
	}{
		{"client", func() error { _, err := Watch(t.Context(), nil, svc, set, WatchOptions{}); return err }()},
		{"set", func() error { _, err := Watch(t.Context(), nil, svc, nil, WatchOptions{}); return err }()},
	}
	for _, tt := range tests {
		var ce *ConfigError
		if !errors.As(tt.err, &ce) || ce.Field != tt.field || !errors.Is(tt.err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want a *ConfigError naming it", tt.field, tt.err)
		}
		// The one config error of the membership sources: membership's
		// type and sentinel, with k8smaglev's name in the message.
		var mce *membership.ConfigError
		if !errors.As(tt.err, &mce) || mce.Package != "k8smaglev" || !errors.Is(tt.err, membership.ErrInvalidConfig) ||
			!strings.HasPrefix(tt.err.Error(), "k8smaglev: invalid config: "+tt.field+": ") {
			t.Errorf("%s: %v, want a membership.ConfigError of k8smaglev", tt.field, tt.err)
		}
	}
}

// TestStore checks that a relist is one change: the watcher sees the
// list's whole difference at once, never a state between; and that
// nothing is handed on before the first list.
func TestStore(t *testing.T) {
	http := map[string]int32{"http": 8080}
	var lists []string
	s := newStore(slog.New(slog.DiscardHandler), func(all []*discoveryv1.EndpointSlice) {
		lists = append(lists, addrs(endpoints(all, "http", "IPv4")))
	})
	if err := s.Add(slice("z", "IPv4", http, ep("ready", "198.18.0.9"))); err != nil {
		t.Fatal(err)
	}
	if s.synced() || len(lists) != 0 {
		t.Fatalf("before the first list: synced %t, %q handed on", s.synced(), lists)
	}
	if err := s.Replace([]any{slice("a", "IPv4", http, ep("ready", "198.18.0.1")), slice("b", "IPv4", http, ep("ready", "198.18.0.2"))}, "1"); err != nil {
		t.Fatal(err)
	}
	if !s.synced() {
		t.Fatal("not synced after the first Replace")
	}
	// A watch gap: a moved to c, b dropped, d added; the relist replaces
	// everything at once.
	if err := s.Replace([]any{slice("c", "IPv4", http, ep("ready", "198.18.0.1")), slice("d", "IPv4", http, ep("ready", "198.18.0.4"))}, "9"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(slice("d", "IPv4", http)); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(slice("c", "IPv4", http, ep("draining", "198.18.0.1"), ep("ready", "198.18.0.5"))); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"198.18.0.1:8080 198.18.0.2:8080",
		"198.18.0.1:8080 198.18.0.4:8080",
		"198.18.0.1:8080",
		"198.18.0.1:8080(draining) 198.18.0.5:8080",
	}
	if !slices.Equal(lists, want) {
		t.Errorf("lists handed on %q, want %q", lists, want)
	}
	if err := s.Add("not a slice"); err == nil || !strings.HasPrefix(err.Error(), "k8smaglev: ") {
		t.Errorf("Add of a string: %v", err)
	}
}

// TestEndpointMeta: an endpoint's zone and node are its Meta, from the
// first slice (by name) that lists it, whatever the store's order.
func TestEndpointMeta(t *testing.T) {
	http := map[string]int32{"http": 8080}
	a := ep("ready", "198.18.0.1")
	a.Zone, a.NodeName = ptr("zone-a"), ptr("node-1")
	b := ep("ready", "198.18.0.1")
	b.Zone = ptr("zone-b")
	c := ep("ready", "198.18.0.2")
	for _, order := range [][]*discoveryv1.EndpointSlice{
		{slice("a", "IPv4", http, a, c), slice("b", "IPv4", http, b)},
		{slice("b", "IPv4", http, b), slice("a", "IPv4", http, a, c)},
	} {
		eps := endpoints(order, "http", "IPv4")
		if len(eps) != 2 || eps[0].Meta["zone"] != "zone-a" || eps[0].Meta["node"] != "node-1" || len(eps[0].Meta) != 2 || eps[1].Meta != nil {
			t.Errorf("endpoints %+v; want 198.18.0.1 with zone-a and node-1, 198.18.0.2 with no Meta", eps)
		}
	}
}
