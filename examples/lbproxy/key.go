package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/maglevlb/maglev/httpmaglev"
)

// A keyFunc returns the key a request is routed by: requests with the same
// key go to the same backend while membership is stable.
type keyFunc func(r *http.Request) string

// parseKey parses the -key flag. "ip" keys a request by its client IP, the
// host part of RemoteAddr: behind another proxy that is the proxy's address,
// and X-Forwarded-For is not trusted. "header:NAME" keys it by the value of
// header NAME, such as a session or tenant id; a request without the header,
// or with an empty value, falls back to its client IP.
func parseKey(s string) (keyFunc, error) {
	if s == "ip" {
		return httpmaglev.ClientIP, nil
	}
	name, ok := strings.CutPrefix(s, "header:")
	if !ok || name == "" || strings.ContainsAny(name, " \t:") {
		return nil, fmt.Errorf("lbproxy: bad key %q: want ip or header:NAME", s)
	}
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) string {
		if v := r.Header.Get(name); v != "" {
			return v
		}
		return httpmaglev.ClientIP(r)
	}, nil
}
