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
	// ErrInvalidConfig is wrapped by the errors Watch and Register return
	// for a nil client or set function, an empty prefix or Addr, or a bad
	// option: a *ConfigError naming it.
	ErrInvalidConfig = errors.New("etcdmaglev: invalid config")

	// ErrInvalidArgument is ErrInvalidConfig, its name before the
	// project's packages agreed on one.
	//
	// Deprecated: use ErrInvalidConfig.
	ErrInvalidArgument = ErrInvalidConfig

	// ErrBadEndpoint is wrapped by the error Backend returns, and by the
	// error a Watcher logs, for a value under the prefix that is not the
	// JSON of an endpoints.Endpoint naming an HTTP backend: not JSON, an
	// empty Addr, an Addr that is not HOST:PORT or http(s)://HOST[:PORT],
	// or a Metadata weight that is not an integer from 0 to 2^32-1.
	ErrBadEndpoint = errors.New("etcdmaglev: bad endpoint")
)

// value is the JSON an endpoints.Manager stores under an endpoint's key
// (its internal Update): the Op field, always Add for a stored endpoint,
// is not read, as etcd's own watcher does not read it.
type value struct {
	Addr     string
	Metadata json.RawMessage
}

// A ConfigError reports the argument or option that is wrong, and why.
// Its message starts with "etcdmaglev: invalid config: " and names it;
// errors.Is matches it with ErrInvalidConfig and with its reason.
type ConfigError struct {
	Field string // the argument or option: "client", "prefix", "set", "Addr", "TTL"
	Err   error  // the reason
}

// Error returns "etcdmaglev: invalid config: FIELD: REASON".
func (e *ConfigError) Error() string {
	return ErrInvalidConfig.Error() + ": " + e.Field + ": " + e.Err.Error()
}

// Unwrap returns ErrInvalidConfig and the reason, for errors.Is and
// errors.As.
func (e *ConfigError) Unwrap() []error { return []error{ErrInvalidConfig, e.Err} }

func configError(field, format string, args ...any) error {
	return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}

// HTTPBackend returns the httpmaglev backend an endpoint names: its Name is
// the endpoint's Addr, verbatim, the name grpcmaglev gives the endpoint
// that etcd's gRPC resolver makes of it, so HTTP and gRPC clients of one
// registry build the same table; its URL is the Addr if it has a scheme
// (http or https), else http://Addr; its Weight is the "weight" field of
// the Metadata if that is a JSON object with one (0 drains the backend),
// else 1.
//
// HTTPBackend returns an error wrapping ErrBadEndpoint for an endpoint that
// names no HTTP backend. It is O(len(Addr) + len(Metadata)).
func HTTPBackend(ep endpoints.Endpoint) (httpmaglev.Backend, error) {
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

// Backend is HTTPBackend, its name before the project's packages agreed
// that a function's name says what it returns.
//
// Deprecated: use HTTPBackend.
func Backend(ep endpoints.Endpoint) (httpmaglev.Backend, error) { return HTTPBackend(ep) }

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
// with one (0 is drained), else 1.
func weightOf(meta json.RawMessage) (uint32, error) {
	var m map[string]json.RawMessage
	if len(meta) == 0 || json.Unmarshal(meta, &m) != nil {
		return 1, nil // null, absent, or not an object: no weight
	}
	raw, ok := m["weight"]
	if !ok {
		return 1, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || string(raw) == "null" || f != math.Trunc(f) || f < 0 || f > math.MaxUint32 {
		return 0, fmt.Errorf("%w: Metadata weight %s is not an integer from 0 to 2^32-1", ErrBadEndpoint, raw)
	}
	return uint32(f), nil
}

// backendList returns the backends named by the endpoints stored under
// keys (parsed by key): one per name, the one under the smallest key when
// several keys name one Addr, sorted by name, each with its weight (1 for
// an endpoint that gives none, 0 for a drained one). A list in which every
// backend is drained is empty: httpmaglev would read a list of weights all
// 0 as unweighted. It is O(n log n).
func backendList(byKey map[string]httpmaglev.Backend) []httpmaglev.Backend {
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	seen := make(map[string]bool, len(keys))
	out := make([]httpmaglev.Backend, 0, len(keys))
	live := false
	for _, k := range keys {
		b := byKey[k]
		if seen[b.Name] {
			continue
		}
		seen[b.Name] = true
		live = live || b.Weight > 0
		out = append(out, b)
	}
	if !live {
		return out[:0] // none, or every backend drained
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
