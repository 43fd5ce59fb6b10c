package xdpmaglev

import (
	"net/netip"
	"slices"

	"github.com/maglevlb/maglev"
)

// Table returns the table svc's packets are routed by, or nil if svc is
// not set. Its backend names are the backends' addresses (Addr.String()):
//
//	lb.Table(svc).LookupHash(xdpmaglev.FlowHash(seed, client, svc.VIP, uint8(svc.Proto)))
//
// is the address of the backend a new flow from client goes to.
func (lb *LB) Table(svc Service) *maglev.Table {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if s := lb.services[svc]; s != nil {
		return s.table
	}
	return nil
}

// Unresolved returns the ForwardL2 backends of svc whose MAC the
// neighbour table does not have, sorted: they are out of service, their
// slots the others', until the kernel resolves them (the LB asks again
// every second). It returns nil if there are none or svc is not set.
func (lb *LB) Unresolved(svc Service) []netip.Addr {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	s := lb.services[svc]
	if s == nil || len(s.unresolved) == 0 {
		return nil
	}
	out := make([]netip.Addr, 0, len(s.unresolved))
	for _, name := range s.unresolved {
		if a, err := netip.ParseAddr(name); err == nil {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Services returns the services set, in no particular order.
func (lb *LB) Services() []Service {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	out := make([]Service, 0, len(lb.services))
	for s := range lb.services {
		out = append(out, s)
	}
	return out
}
