package membership

import (
	"cmp"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
)

// An Endpoint is one backend as a membership source names it. A source
// gives every field but Meta; Meta is nil when the source has no metadata
// for the endpoint.
type Endpoint struct {
	// Name is the backend's name in a table. By the project's rule
	// (docs/conventions.md) it is the address as HOST:PORT
	// ([IPv6]:PORT), which every source gives, so that processes fed by
	// different sources that know the same backends build the same
	// table; etcd's Addr is the name verbatim, a scheme included when it
	// has one. Canonical gives an endpoint with no Name HostPort().
	Name string

	// Host is the backend's host: an IP address in netip's form (IPv6
	// without brackets, an IPv4-mapped address unmapped), or a DNS name.
	Host string

	// Port is the backend's port; 0 when the source gives none (an etcd
	// Addr https://HOST), and then a consumer uses its own default.
	Port uint16

	// Weight is the backend's share of the keys, relative to the others'
	// in the list. 0 means drained: the backend is known, but no new key
	// goes to it. A source that has no weights gives 1.
	Weight uint32

	// Meta is the source's metadata about the endpoint, as strings; each
	// source's doc names its keys. It is informational: no consumer of
	// the project routes by it, except that httpmaglev.FromEndpoints
	// takes an endpoint's URL scheme from Meta["scheme"] when the source
	// gives one (an etcd Addr http://... or https://...).
	Meta map[string]string
}

// HostPort returns the endpoint's address as HOST:PORT ([IPv6]:PORT), or
// Host alone when Port is 0: the host of an HTTP backend's URL. It is
// O(len(Host)).
func (e Endpoint) HostPort() string {
	if e.Port == 0 {
		if ip, err := netip.ParseAddr(e.Host); err == nil && ip.Is6() {
			return "[" + e.Host + "]"
		}
		return e.Host
	}
	return net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port)))
}

// IP returns the endpoint's host as an IP address, unmapped, and false if
// it is none: a DNS name, or an address with a zone (which names a link,
// not a backend every machine reaches alike). It does not allocate.
func (e Endpoint) IP() (netip.Addr, bool) {
	ip, err := netip.ParseAddr(e.Host)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

// AddrPort returns the endpoint's IP address and port, and false if its
// host is not an IP address (see IP) or it has no port. It does not
// allocate.
func (e Endpoint) AddrPort() (netip.AddrPort, bool) {
	ip, ok := e.IP()
	if !ok || e.Port == 0 {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip, e.Port), true
}

// Canonical puts eps in the canonical order of an endpoint list, sorted by
// Name, with one endpoint per Name, and returns the list, which reuses
// eps's array (the caller gives up eps). An endpoint with no Name is named
// HostPort() first. Of several endpoints with one Name, the one with the
// greatest Weight is kept (a backend any registration says is live is
// live: a pod ready in one EndpointSlice and terminating in another, an
// etcd key written again with weight 1 before the old one with weight 0
// expired), and of those the first in eps. Which endpoints a list keeps,
// and so a table built from their names and weights, does not depend on
// the order of eps; only the Host, Port and Meta of an exact tie do. It is
// O(n log n).
func Canonical(eps []Endpoint) []Endpoint {
	for i := range eps {
		if eps[i].Name == "" {
			eps[i].Name = eps[i].HostPort()
		}
	}
	slices.SortStableFunc(eps, func(a, b Endpoint) int { return cmp.Compare(a.Name, b.Name) })
	out := eps[:0]
	for i := 0; i < len(eps); {
		best, j := i, i+1
		for ; j < len(eps) && eps[j].Name == eps[i].Name; j++ {
			if eps[j].Weight > eps[best].Weight {
				best = j
			}
		}
		out = append(out, eps[best])
		i = j
	}
	clear(eps[len(out):]) // no stale Meta maps held past the list
	return out
}

// Equal reports whether two lists in canonical order (see Canonical) are
// the same: the same endpoints in the same order, each equal in every
// field, Meta included (nil and an empty Meta are equal). This is the one
// rule by which a Watcher tells a new list from the last one: a list that
// Equal reports equal to the last one set accepted is not passed to set. It
// is O(n) and does not allocate.
func Equal(a, b []Endpoint) bool {
	return slices.EqualFunc(a, b, func(x, y Endpoint) bool {
		return x.Name == y.Name && x.Host == y.Host && x.Port == y.Port && x.Weight == y.Weight && maps.Equal(x.Meta, y.Meta)
	})
}
