package etcdmaglev_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/httpmaglev"
	"github.com/maglevlb/maglev/membership"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

// TestEndpoint: an etcd endpoint's Name (its Addr, verbatim), host,
// port, weight and metadata, and the URL an HTTP Transport reaches it at
// (through httpmaglev.FromEndpoints, the one adapter); values that name no
// endpoint are ErrBadEndpoint.
func TestEndpoint(t *testing.T) {
	tests := []struct {
		ep     endpoints.Endpoint
		url    string // "" for an error
		host   string
		port   uint16
		weight uint32
		meta   string // the Meta fields, sorted, "k=v ..."
	}{
		{endpoints.Endpoint{Addr: "10.0.0.1:8080"}, "http://10.0.0.1:8080", "10.0.0.1", 8080, 1, ""},
		{endpoints.Endpoint{Addr: "[::1]:80"}, "http://[::1]:80", "::1", 80, 1, ""},
		{endpoints.Endpoint{Addr: "[::ffff:10.0.0.3]:80"}, "http://10.0.0.3:80", "10.0.0.3", 80, 1, ""},
		{endpoints.Endpoint{Addr: "web-1.internal"}, "http://web-1.internal", "web-1.internal", 0, 1, ""},
		{endpoints.Endpoint{Addr: "http://10.0.0.1:8080"}, "http://10.0.0.1:8080", "10.0.0.1", 8080, 1, "scheme=http"},
		{endpoints.Endpoint{Addr: "https://web-1.internal:8443/"}, "https://web-1.internal:8443", "web-1.internal", 8443, 1, "scheme=https"},
		{endpoints.Endpoint{Addr: "HTTPS://web-1.internal"}, "https://web-1.internal", "web-1.internal", 0, 1, "scheme=https"},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": 3}}, "http://10.0.0.1:80", "10.0.0.1", 80, 3, "weight=3"},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": 0}}, "http://10.0.0.1:80", "10.0.0.1", 80, 0, "weight=0"}, // drained
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": 4294967295}}, "http://10.0.0.1:80", "10.0.0.1", 80, 4294967295, "weight=4294967295"},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"zone": "a", "rack": 7, "tags": []string{"x"}}}, "http://10.0.0.1:80", "10.0.0.1", 80, 1, `rack=7 tags=["x"] zone=a`},
		{endpoints.Endpoint{Addr: "https://10.0.0.1:443", Metadata: map[string]any{"scheme": "http"}}, "https://10.0.0.1:443", "10.0.0.1", 443, 1, "scheme=https"},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: "a string"}, "http://10.0.0.1:80", "10.0.0.1", 80, 1, ""},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: []int{1}}, "http://10.0.0.1:80", "10.0.0.1", 80, 1, ""},
		// Errors.
		{endpoints.Endpoint{}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "http://10.0.0.1:80/api"}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "10.0.0.1:80?x=1"}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "u:p@10.0.0.1:80"}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "ftp://10.0.0.1:21"}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "unix:///run/web.sock"}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "http://"}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "10.0.0.1:80%"}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "10.0.0.1:0"}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "10.0.0.1:65536"}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": -1}}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": 1.5}}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": "2"}}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": 4294967296}}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": nil}}, "", "", 0, 0, ""},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: func() {}}, "", "", 0, 0, ""},
	}
	for _, tt := range tests {
		e, err := etcdmaglev.Endpoint(tt.ep)
		if tt.url == "" {
			if !errors.Is(err, etcdmaglev.ErrBadEndpoint) || !strings.HasPrefix(err.Error(), "etcdmaglev: bad endpoint") {
				t.Errorf("Endpoint(%+v) = %+v, %v; want ErrBadEndpoint", tt.ep, e, err)
			}
			continue
		}
		if err != nil || e.Name != tt.ep.Addr || e.Host != tt.host || e.Port != tt.port || e.Weight != tt.weight || metaString(e.Meta) != tt.meta {
			t.Errorf("Endpoint(%+v) = %+v, %v; want {%q %q %d %d %s}", tt.ep, e, err, tt.ep.Addr, tt.host, tt.port, tt.weight, tt.meta)
			continue
		}
		bs, err := httpmaglev.FromEndpoints("http", []membership.Endpoint{e})
		if err != nil || len(bs) != 1 || bs[0].Name != tt.ep.Addr || bs[0].URL.String() != tt.url || bs[0].Weight == nil || *bs[0].Weight != tt.weight {
			t.Errorf("FromEndpoints of Endpoint(%+v) = %+v, %v; want {%q %s %d}", tt.ep, bs, err, tt.ep.Addr, tt.url, tt.weight)
		}
	}
}

func metaString(m map[string]string) string {
	var s []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s = append(s, k+"="+m[k])
	}
	return strings.Join(s, " ")
}

// TestConfigError: etcdmaglev's bad arguments are membership's one
// ConfigError, with etcdmaglev's name in the message, matched by
// ErrInvalidConfig (membership's) as before.
func TestConfigError(t *testing.T) {
	set := func([]membership.Endpoint) error { return nil }
	_, err := etcdmaglev.Watch(t.Context(), nil, "services/web", set, etcdmaglev.WatchOptions{})
	var ce *membership.ConfigError
	if !errors.As(err, &ce) || ce.Package != "etcdmaglev" || ce.Field != "client" ||
		!errors.Is(err, etcdmaglev.ErrInvalidConfig) || !errors.Is(err, membership.ErrInvalidConfig) ||
		!strings.HasPrefix(err.Error(), "etcdmaglev: invalid config: client: ") {
		t.Errorf("Watch with a nil client: %v, want etcdmaglev's membership.ConfigError for client", err)
	}
}
