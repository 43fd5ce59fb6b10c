package pool

import (
	"log/slog"
	"net/netip"

	"github.com/maglevlb/maglev/membership"
	"github.com/maglevlb/maglev/quiclb"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// Members returns the pool's members of a membership list, from etcd or
// Kubernetes: the backends xdpmaglev.FromEndpoints makes of it (each
// endpoint's IP, its port not used, with its weight: 0 drains it; one IP
// twice is live if either is), each with the QUIC-LB server ID of its
// metadata's "server-id", where the source has one (an etcd
// registration's Metadata). Endpoints whose host is not an IP address, and
// server IDs that are not 1 to 15 octets of hex, are logged and left out.
func Members(eps []membership.Endpoint, logger *slog.Logger) map[netip.Addr]Member {
	bs, err := xdpmaglev.FromEndpoints(eps)
	if err != nil {
		logger.Warn("endpoints ignored: their host is not an IP address", "err", err)
	}
	ids := map[netip.Addr]quiclb.ServerID{}
	for _, e := range eps {
		s, ok := e.Meta["server-id"]
		a, isIP := e.IP()
		if !ok || !isIP {
			continue
		}
		id, err := quiclb.ParseServerID(s)
		if err != nil {
			logger.Warn("a server-id ignored: its endpoint's QUIC connections are routed by the table", "endpoint", e.Name, "err", err)
			continue
		}
		ids[a] = id
	}
	m := make(map[netip.Addr]Member, len(bs))
	for _, b := range bs {
		m[b.Addr] = Member{Weight: b.Weight, ServerID: ids[b.Addr]}
	}
	return m
}

// Static returns the members of static backends (the configuration's,
// or a Kubernetes Service's nodes, Down where out of service), with their
// QUIC-LB server IDs ids.
func Static(bs []xdpmaglev.Backend, ids map[netip.Addr]quiclb.ServerID) map[netip.Addr]Member {
	m := make(map[netip.Addr]Member, len(bs))
	for _, be := range bs {
		a := be.Addr.Unmap()
		m[a] = Member{Weight: be.Weight, Down: be.Down, HW: be.HW, ServerID: ids[a]}
	}
	return m
}
