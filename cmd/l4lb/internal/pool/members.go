package pool

import (
	"log/slog"
	"net/netip"

	"github.com/maglevlb/maglev/membership"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// Members returns the pool's members of a membership list, from etcd or
// Kubernetes: the backends xdpmaglev.FromEndpoints makes of it (each
// endpoint's IP, its port not used, with its weight: 0 drains it; one IP
// twice is live if either is). Endpoints whose host is not an IP address
// are logged and left out.
func Members(eps []membership.Endpoint, logger *slog.Logger) map[netip.Addr]Member {
	bs, err := xdpmaglev.FromEndpoints(eps)
	if err != nil {
		logger.Warn("endpoints ignored: their host is not an IP address", "err", err)
	}
	m := make(map[netip.Addr]Member, len(bs))
	for _, b := range bs {
		m[b.Addr] = Member{Weight: b.Weight}
	}
	return m
}

// Static returns the members of static backends (the configuration's).
func Static(bs []xdpmaglev.Backend) map[netip.Addr]Member {
	m := make(map[netip.Addr]Member, len(bs))
	for _, be := range bs {
		m[be.Addr.Unmap()] = Member{Weight: be.Weight, HW: be.HW}
	}
	return m
}
