package httpmaglev_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/maglevlb/maglev/httpmaglev"
)

func TestKeys(t *testing.T) {
	tests := []struct {
		name   string
		key    func(*http.Request) string
		target string
		remote string
		header map[string]string
		want   string
	}{
		{"ip", httpmaglev.ClientIP, "/", "192.0.2.7:41234", nil, "192.0.2.7"},
		{"ip v6", httpmaglev.ClientIP, "/", "[2001:db8::1]:443", nil, "2001:db8::1"},
		{"ip no port", httpmaglev.ClientIP, "/", "192.0.2.7", nil, "192.0.2.7"},
		{"ip ignores XFF", httpmaglev.ClientIP, "/", "192.0.2.7:1", map[string]string{"X-Forwarded-For": "10.0.0.1"}, "192.0.2.7"},
		{"xff first", httpmaglev.ForwardedClientIP, "/", "192.0.2.7:1", map[string]string{"X-Forwarded-For": " 10.0.0.1 , 10.0.0.2"}, "10.0.0.1"},
		{"xff empty", httpmaglev.ForwardedClientIP, "/", "192.0.2.7:1", map[string]string{"X-Forwarded-For": " "}, "192.0.2.7"},
		{"xff none", httpmaglev.ForwardedClientIP, "/", "192.0.2.7:1", nil, "192.0.2.7"},
		{"header", httpmaglev.HeaderKey("x-session-id"), "/", "192.0.2.7:1", map[string]string{"X-Session-Id": "alice"}, "alice"},
		{"header missing", httpmaglev.HeaderKey("X-Session-Id"), "/", "192.0.2.7:1", nil, ""},
		{"cookie", httpmaglev.CookieKey("sid"), "/", "", map[string]string{"Cookie": "a=1; sid=bob; c=3"}, "bob"},
		{"cookie quoted", httpmaglev.CookieKey("sid"), "/", "", map[string]string{"Cookie": `sid="bob"`}, "bob"},
		{"cookie prefix only", httpmaglev.CookieKey("sid"), "/", "", map[string]string{"Cookie": "sidx=1; xsid=2"}, ""},
		{"cookie missing", httpmaglev.CookieKey("sid"), "/", "", nil, ""},
		{"query", httpmaglev.QueryKey("user"), "/?a=1&user=carol&user=dave", "", nil, "carol"},
		{"query escaped", httpmaglev.QueryKey("user"), "/?user=c%C3%A9line+x", "", nil, "céline x"},
		{"query escaped name", httpmaglev.QueryKey("the user"), "/?the+user=erin", "", nil, "erin"},
		{"query empty", httpmaglev.QueryKey("user"), "/?user=", "", nil, ""},
		{"query missing", httpmaglev.QueryKey("user"), "/?users=x", "", nil, ""},
		{"query bad escape", httpmaglev.QueryKey("user"), "/?user=%zz&user=ok", "", nil, "ok"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, tt.target, nil)
		r.RemoteAddr = tt.remote
		for k, v := range tt.header {
			r.Header.Set(k, v)
		}
		if got := tt.key(r); got != tt.want {
			t.Errorf("%s: key %q, want %q", tt.name, got, tt.want)
		}
	}
}
