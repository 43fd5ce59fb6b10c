package etcdmaglev_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/etcdmaglev"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

func TestHTTPBackend(t *testing.T) {
	tests := []struct {
		ep     endpoints.Endpoint
		url    string // "" for an error
		weight uint32
	}{
		{endpoints.Endpoint{Addr: "10.0.0.1:8080"}, "http://10.0.0.1:8080", 1},
		{endpoints.Endpoint{Addr: "[::1]:80"}, "http://[::1]:80", 1},
		{endpoints.Endpoint{Addr: "web-1.internal"}, "http://web-1.internal", 1},
		{endpoints.Endpoint{Addr: "http://10.0.0.1:8080"}, "http://10.0.0.1:8080", 1},
		{endpoints.Endpoint{Addr: "https://web-1.internal:8443/"}, "https://web-1.internal:8443", 1},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": 3}}, "http://10.0.0.1:80", 3},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": 0}}, "http://10.0.0.1:80", 0}, // drained
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": 4294967295}}, "http://10.0.0.1:80", 4294967295},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"zone": "a"}}, "http://10.0.0.1:80", 1},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: "a string"}, "http://10.0.0.1:80", 1},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: []int{1}}, "http://10.0.0.1:80", 1},
		// Errors.
		{endpoints.Endpoint{}, "", 0},
		{endpoints.Endpoint{Addr: "http://10.0.0.1:80/api"}, "", 0},
		{endpoints.Endpoint{Addr: "10.0.0.1:80?x=1"}, "", 0},
		{endpoints.Endpoint{Addr: "u:p@10.0.0.1:80"}, "", 0},
		{endpoints.Endpoint{Addr: "ftp://10.0.0.1:21"}, "", 0},
		{endpoints.Endpoint{Addr: "unix:///run/web.sock"}, "", 0},
		{endpoints.Endpoint{Addr: "http://"}, "", 0},
		{endpoints.Endpoint{Addr: "10.0.0.1:80%"}, "", 0},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": -1}}, "", 0},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": 1.5}}, "", 0},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": "2"}}, "", 0},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": 4294967296}}, "", 0},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: map[string]any{"weight": nil}}, "", 0},
		{endpoints.Endpoint{Addr: "10.0.0.1:80", Metadata: func() {}}, "", 0},
	}
	for _, tt := range tests {
		b, err := etcdmaglev.HTTPBackend(tt.ep)
		if tt.url == "" {
			if !errors.Is(err, etcdmaglev.ErrBadEndpoint) || !strings.HasPrefix(err.Error(), "etcdmaglev: bad endpoint") {
				t.Errorf("HTTPBackend(%+v) = %+v, %v; want ErrBadEndpoint", tt.ep, b, err)
			}
			continue
		}
		if err != nil || b.Name != tt.ep.Addr || b.URL.String() != tt.url || b.Weight != tt.weight {
			t.Errorf("HTTPBackend(%+v) = {%q %v %d}, %v; want {%q %s %d}", tt.ep, b.Name, b.URL, b.Weight, err, tt.ep.Addr, tt.url, tt.weight)
		}
	}
}
