package xdpmaglev

import (
	"errors"
	"fmt"
	"slices"

	"github.com/maglevlb/maglev/membership"
)

// FromEndpoints returns the backends of a membership list (what
// etcdmaglev.Watch and k8smaglev.Watch hand their set functions), for
// SetService: each endpoint's host, which must be an IP address, with the
// endpoint's Weight (0: drained). The port is not used: a backend receives
// the VIP's packets as they were sent, to the VIP's port. Of several
// endpoints on one address (one backend registered on two ports), the one
// with the greatest weight counts, so the backend is live if any of them
// is. The backends are sorted by address; HW is left empty (the
// neighbour table gives it). It is the one function that makes xdpmaglev
// backends of endpoints.
//
// An endpoint whose host is not an IP address (a DNS name, an address
// with a zone) names no backend the data plane can reach: it is left out,
// and the error, wrapping ErrBackend, names each such endpoint. The
// backends of the others are returned with it, so a caller may log the
// error and go on. It is O(n log n).
func FromEndpoints(eps []membership.Endpoint) ([]Backend, error) {
	bs := make([]Backend, 0, len(eps))
	var errs []error
	for _, e := range eps {
		ip, ok := e.IP()
		if !ok {
			errs = append(errs, fmt.Errorf("%w: endpoint %q: host %q is not an IP address", ErrBackend, e.Name, e.Host))
			continue
		}
		bs = append(bs, Backend{Addr: ip, Weight: e.Weight})
	}
	slices.SortStableFunc(bs, func(a, b Backend) int { return a.Addr.Compare(b.Addr) })
	out := bs[:0]
	for _, b := range bs {
		if n := len(out); n > 0 && out[n-1].Addr == b.Addr {
			out[n-1].Weight = max(out[n-1].Weight, b.Weight)
			continue
		}
		out = append(out, b)
	}
	return out, errors.Join(errs...)
}
