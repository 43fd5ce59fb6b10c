package etcdmaglev

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/maglevlb/maglev/membership"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

var (
	// ErrInvalidConfig is wrapped by the errors Watch and Register return
	// for a nil client or set function, an empty prefix or Addr, or a bad
	// option: a *ConfigError naming it. It is membership.ErrInvalidConfig,
	// which every membership source's config errors wrap.
	ErrInvalidConfig = membership.ErrInvalidConfig

	// ErrBadEndpoint is wrapped by the error Endpoint returns, and by the
	// error a Watcher logs, for a value under the prefix that is not the
	// JSON of an endpoints.Endpoint naming an endpoint: not JSON, an
	// empty Addr, an Addr that is not HOST[:PORT] or
	// http(s)://HOST[:PORT] (a port from 1 to 65535), or a Metadata
	// weight that is not an integer from 0 to 2^32-1.
	ErrBadEndpoint = errors.New("etcdmaglev: bad endpoint")
)

// value is the JSON an endpoints.Manager stores under an endpoint's key
// (its internal Update): the Op field, always Add for a stored endpoint,
// is not read, as etcd's own watcher does not read it.
type value struct {
	Addr     string
	Metadata json.RawMessage
}

// A ConfigError reports the argument or option that is wrong, and why:
// it is membership.ConfigError, the one config error of the membership
// sources. etcdmaglev's have Package "etcdmaglev", so their message
// starts with "etcdmaglev: invalid config: " and names the field ("client",
// "prefix", "set", "Addr", "TTL"); errors.Is matches them with
// ErrInvalidConfig and with the reason.
type ConfigError = membership.ConfigError

func configError(field, format string, args ...any) error {
	return &ConfigError{Package: "etcdmaglev", Field: field, Err: fmt.Errorf(format, args...)}
}

// Endpoint returns the membership endpoint an etcd endpoint names: its
// Name is the endpoint's Addr, verbatim, the name grpcmaglev gives the
// endpoint that etcd's gRPC resolver makes of it, so HTTP, gRPC and L4
// clients of one registry build the same table. Its Host and Port are the
// Addr's: HOST:PORT, HOST (no port: Port 0), or http(s)://HOST[:PORT][/],
// whose scheme is then Meta["scheme"] (and an HTTP Transport reaches the
// endpoint with it). Its Weight is the "weight" field of the Metadata if
// that is a JSON object with one (0 drains the endpoint), else 1. Meta
// holds the Metadata object's fields, a JSON string's as its text and any
// other value as its JSON; an Addr's scheme overrides a field "scheme".
//
// Endpoint returns an error wrapping ErrBadEndpoint for an endpoint that
// names none. It is O(len(Addr) + len(Metadata)).
func Endpoint(ep endpoints.Endpoint) (membership.Endpoint, error) {
	var meta json.RawMessage
	if ep.Metadata != nil {
		b, err := json.Marshal(ep.Metadata)
		if err != nil {
			return membership.Endpoint{}, fmt.Errorf("%w: metadata: %w", ErrBadEndpoint, err)
		}
		meta = b
	}
	return endpointOf(value{Addr: ep.Addr, Metadata: meta})
}

// parseValue returns the endpoint a stored value names.
func parseValue(v []byte) (membership.Endpoint, error) {
	var val value
	if err := json.Unmarshal(v, &val); err != nil {
		return membership.Endpoint{}, fmt.Errorf("%w: %w", ErrBadEndpoint, err)
	}
	return endpointOf(val)
}

func endpointOf(v value) (membership.Endpoint, error) {
	if v.Addr == "" {
		return membership.Endpoint{}, fmt.Errorf("%w: empty Addr", ErrBadEndpoint)
	}
	raw, scheme := v.Addr, strings.Contains(v.Addr, "://")
	if !scheme {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return membership.Endpoint{}, fmt.Errorf("%w: Addr %q: %w", ErrBadEndpoint, v.Addr, err)
	}
	port, perr := strconv.ParseUint(cmp.Or(u.Port(), "0"), 10, 16)
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || (u.Path != "" && u.Path != "/") ||
		u.RawPath != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" || perr != nil || (port == 0 && u.Port() != "") {
		return membership.Endpoint{}, fmt.Errorf("%w: Addr %q is not HOST:PORT or http(s)://HOST[:PORT]", ErrBadEndpoint, v.Addr)
	}
	w, err := weightOf(v.Metadata)
	if err != nil {
		return membership.Endpoint{}, err
	}
	e := membership.Endpoint{Name: v.Addr, Host: u.Hostname(), Port: uint16(port), Weight: w, Meta: metaOf(v.Metadata)}
	if ip, err := netip.ParseAddr(e.Host); err == nil && ip.Zone() == "" {
		e.Host = ip.Unmap().String()
	}
	if scheme {
		if e.Meta == nil {
			e.Meta = map[string]string{}
		}
		e.Meta["scheme"] = u.Scheme
	}
	return e, nil
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

// metaOf returns the fields of metadata if it is a JSON object with any:
// a string's text, any other value's JSON. It returns nil otherwise.
func metaOf(meta json.RawMessage) map[string]string {
	var m map[string]json.RawMessage
	if len(meta) == 0 || json.Unmarshal(meta, &m) != nil || len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, raw := range m {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			out[k] = s
		} else {
			out[k] = string(raw)
		}
	}
	return out
}

// endpointList returns the endpoints stored under keys (parsed by key), in
// the order of their keys: membership.Canonical (which a Watcher applies)
// then keeps, of several keys naming one Addr, the one of the greatest
// weight, and of those the one under the smallest key. It is O(n log n).
func endpointList(byKey map[string]membership.Endpoint) []membership.Endpoint {
	keys := slices.Sorted(maps.Keys(byKey))
	out := make([]membership.Endpoint, len(keys))
	for i, k := range keys {
		out[i] = byKey[k]
	}
	return out
}
