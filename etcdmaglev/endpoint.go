package etcdmaglev

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"

	"github.com/maglevlb/maglev/httpmaglev"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

var (
	// ErrInvalidArgument is wrapped by the errors Watch and Register
	// return for a nil client or set function, an empty prefix or address,
	// or a TTL below one second; the message names the argument.
	ErrInvalidArgument = errors.New("etcdmaglev: invalid argument")

	// ErrBadEndpoint is wrapped by the error Backend returns, and by the
	// error a Watcher logs, for a value under the prefix that is not the
	// JSON of an endpoints.Endpoint naming an HTTP backend: not JSON, an
	// empty Addr, an Addr that is not HOST:PORT or http(s)://HOST[:PORT],
	// or a Metadata weight that is not an integer from 1 to 2^32-1.
	ErrBadEndpoint = errors.New("etcdmaglev: bad endpoint")
)

// value is the JSON an endpoints.Manager stores under an endpoint's key
// (its internal Update): the Op field, always Add for a stored endpoint,
// is not read, as etcd's own watcher does not read it.
type value struct {
	Addr     string
	Metadata json.RawMessage
}

// Backend returns the httpmaglev backend an endpoint names: its Name is the
// endpoint's Addr, verbatim, the name grpcmaglev gives the endpoint that
// etcd's gRPC resolver makes of it, so HTTP and gRPC clients of one
// registry build the same table; its URL is the Addr if it has a scheme
// (http or https), else http://Addr; its Weight is the "weight" field of
// the Metadata if that is a JSON object with one, else 0.
//
// Backend returns an error wrapping ErrBadEndpoint for an endpoint that
// names no HTTP backend. It is O(len(Addr) + len(Metadata)).
func Backend(ep endpoints.Endpoint) (httpmaglev.Backend, error) {
	var meta json.RawMessage
	if ep.Metadata != nil {
		b, err := json.Marshal(ep.Metadata)
		if err != nil {
			return httpmaglev.Backend{}, fmt.Errorf("%w: metadata: %w", ErrBadEndpoint, err)
		}
		meta = b
	}
	return backendOf(value{Addr: ep.Addr, Metadata: meta})
}

// parseValue returns the backend a stored value names.
func parseValue(v []byte) (httpmaglev.Backend, error) {
	var val value
	if err := json.Unmarshal(v, &val); err != nil {
		return httpmaglev.Backend{}, fmt.Errorf("%w: %w", ErrBadEndpoint, err)
	}
	return backendOf(val)
}

func backendOf(v value) (httpmaglev.Backend, error) {
	if v.Addr == "" {
		return httpmaglev.Backend{}, fmt.Errorf("%w: empty Addr", ErrBadEndpoint)
	}
	raw := v.Addr
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return httpmaglev.Backend{}, fmt.Errorf("%w: Addr %q: %w", ErrBadEndpoint, v.Addr, err)
	}
	base, err := httpmaglev.BaseURL(u) // the Transport's rule, one backend at a time
	if err != nil {
		return httpmaglev.Backend{}, fmt.Errorf("%w: Addr %q is not HOST:PORT or http(s)://HOST[:PORT]", ErrBadEndpoint, v.Addr)
	}
	w, err := weightOf(v.Metadata)
	if err != nil {
		return httpmaglev.Backend{}, err
	}
	return httpmaglev.Backend{Name: v.Addr, URL: base, Weight: w}, nil
}

// weightOf returns the "weight" field of metadata, if it is a JSON object
// with one, else 0.
func weightOf(meta json.RawMessage) (uint32, error) {
	var m map[string]json.RawMessage
	if len(meta) == 0 || json.Unmarshal(meta, &m) != nil {
		return 0, nil // null, absent, or not an object: no weight
	}
	raw, ok := m["weight"]
	if !ok {
		return 0, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || f != math.Trunc(f) || f < 1 || f > math.MaxUint32 {
		return 0, fmt.Errorf("%w: Metadata weight %s is not an integer from 1 to 2^32-1", ErrBadEndpoint, raw)
	}
	return uint32(f), nil
}

// backendList returns the backends named by the endpoints stored under
// keys (parsed by key): one per name, the one under the smallest key when
// several keys name one Addr, sorted by name; with weights all 0 (equal)
// unless some endpoint has one, and then 1 for those that have none. It
// is O(n log n).
func backendList(byKey map[string]httpmaglev.Backend) []httpmaglev.Backend {
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	seen := make(map[string]bool, len(keys))
	out := make([]httpmaglev.Backend, 0, len(keys))
	weighted := false
	for _, k := range keys {
		b := byKey[k]
		if seen[b.Name] {
			continue
		}
		seen[b.Name] = true
		weighted = weighted || b.Weight > 0
		out = append(out, b)
	}
	if weighted {
		for i := range out {
			out[i].Weight = max(out[i].Weight, 1)
		}
	}
	slices.SortFunc(out, func(a, b httpmaglev.Backend) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// sameBackends reports whether a and b, both sorted by name, list the same
// names, URLs and weights.
func sameBackends(a, b []httpmaglev.Backend) bool {
	return slices.EqualFunc(a, b, func(x, y httpmaglev.Backend) bool {
		return x.Name == y.Name && x.Weight == y.Weight && *x.URL == *y.URL
	})
}
