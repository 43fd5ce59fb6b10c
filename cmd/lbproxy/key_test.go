package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/maglevlb/maglev/httpmaglev"
)

func TestParseKey(t *testing.T) {
	tests := []struct {
		key        string
		remoteAddr string
		header     map[string]string
		want       string
	}{
		{"ip", "192.0.2.7:41234", nil, "192.0.2.7"},
		{"ip", "[2001:db8::1]:443", nil, "2001:db8::1"},
		{"ip", "192.0.2.7", nil, "192.0.2.7"},                                                // no port: all of it
		{"ip", "192.0.2.7:1", map[string]string{"X-Forwarded-For": "10.0.0.1"}, "192.0.2.7"}, // not trusted
		{"header:X-Session-Id", "192.0.2.7:1", map[string]string{"X-Session-Id": "alice"}, "alice"},
		{"header:x-session-id", "192.0.2.7:1", map[string]string{"X-Session-Id": "alice"}, "alice"}, // names are case-insensitive
		{"header:X-Session-Id", "192.0.2.7:1", nil, "192.0.2.7"},                                    // missing: client IP
		{"header:X-Session-Id", "192.0.2.7:1", map[string]string{"X-Session-Id": ""}, "192.0.2.7"},  // empty: client IP
		{"header:X-Tenant", "192.0.2.7:1", map[string]string{"X-Session-Id": "alice"}, "192.0.2.7"},
	}
	for _, tt := range tests {
		keyOf, err := parseKey(tt.key)
		if err != nil {
			t.Fatalf("parseKey(%q): %v", tt.key, err)
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tt.remoteAddr
		for k, v := range tt.header {
			r.Header.Set(k, v)
		}
		// What the Transport routes by: the key, or the client IP when the
		// key is nil or empty.
		got := ""
		if keyOf != nil {
			got = keyOf(r)
		}
		if got == "" {
			got = httpmaglev.ClientIP(r)
		}
		if got != tt.want {
			t.Errorf("-key %s, RemoteAddr %s, header %v: key %q, want %q", tt.key, tt.remoteAddr, tt.header, got, tt.want)
		}
	}
}

func TestParseKeyErrors(t *testing.T) {
	for _, key := range []string{"", "IP", "header:", "header:X Session", "cookie:session", "X-Session-Id"} {
		if _, err := parseKey(key); err == nil {
			t.Errorf("parseKey(%q) succeeded, want an error", key)
		}
	}
}
