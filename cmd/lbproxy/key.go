package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/maglevlb/maglev/httpmaglev"
)

// parseKey parses the -key flag into an httpmaglev.Config.Key. "ip" is nil:
// the Transport keys a request by its client IP, the host part of
// RemoteAddr (behind another proxy that is the proxy's address, and
// X-Forwarded-For is not trusted). "header:NAME" is httpmaglev.HeaderKey:
// the value of header NAME, such as a session or tenant id; a request
// without the header, or with an empty value, gets "", which the
// Transport keys by its client IP.
func parseKey(s string) (func(*http.Request) string, error) {
	if s == "ip" {
		return nil, nil
	}
	name, ok := strings.CutPrefix(s, "header:")
	if !ok || name == "" || strings.ContainsAny(name, " \t:") {
		return nil, fmt.Errorf("lbproxy: bad key %q: want ip or header:NAME", s)
	}
	return httpmaglev.HeaderKey(name), nil
}
