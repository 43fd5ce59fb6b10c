package httpmaglev

import (
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// ClientIP returns the address the request's connection comes from: the
// host part of r.RemoteAddr, or all of it if it has no port ("" for a
// client's outgoing request, which has no RemoteAddr). Behind another
// proxy that is the proxy's address; see ForwardedClientIP. ClientIP does
// not allocate.
func ClientIP(r *http.Request) string {
	if r.RemoteAddr == "" {
		return "" // without the error SplitHostPort would allocate
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// ForwardedClientIP returns the first address of r's first X-Forwarded-For
// header, trimmed, if there is one, and otherwise ClientIP(r). Only use it
// behind a proxy that sets the header: a client can write any
// X-Forwarded-For it likes. It does not allocate.
func ForwardedClientIP(r *http.Request) string {
	if v := r.Header["X-Forwarded-For"]; len(v) > 0 {
		first, _, _ := strings.Cut(v[0], ",")
		if first = strings.TrimSpace(first); first != "" {
			return first
		}
	}
	return ClientIP(r)
}

// HeaderKey returns a Config.Key that keys a request by the first value of
// its header name (a session or tenant id, say). A request without the
// header, or with an empty value, gets "": the Transport then keys it by
// its client IP. The returned function does not allocate.
func HeaderKey(name string) func(*http.Request) string {
	name = textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) string {
		if v := r.Header[name]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

// CookieKey returns a Config.Key that keys a request by the value of its
// cookie name, with surrounding double quotes removed. A request without
// the cookie gets "": the Transport then keys it by its client IP. The
// returned function scans the Cookie headers without parsing every cookie,
// and does not allocate.
func CookieKey(name string) func(*http.Request) string {
	return func(r *http.Request) string {
		for _, line := range r.Header["Cookie"] {
			for line != "" {
				var part string
				part, line, _ = strings.Cut(line, ";")
				k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
				if !ok || k != name {
					continue
				}
				if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
					v = v[1 : len(v)-1]
				}
				return v
			}
		}
		return ""
	}
}

// QueryKey returns a Config.Key that keys a request by the first value of
// its URL query parameter name, unescaped. A request without the parameter
// gets "": the Transport then keys it by its client IP. The returned
// function scans the raw query without building url.Values, and allocates
// only to unescape a value that has escapes.
func QueryKey(name string) func(*http.Request) string {
	return func(r *http.Request) string {
		q := r.URL.RawQuery
		for q != "" {
			var part string
			part, q, _ = strings.Cut(q, "&")
			k, v, _ := strings.Cut(part, "=")
			if k != name {
				if !strings.ContainsAny(k, "%+") {
					continue
				}
				if uk, err := url.QueryUnescape(k); err != nil || uk != name {
					continue
				}
			}
			if strings.ContainsAny(v, "%+") {
				uv, err := url.QueryUnescape(v)
				if err != nil {
					continue
				}
				v = uv
			}
			return v
		}
		return ""
	}
}
