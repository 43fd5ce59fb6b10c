package main

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
)

// peerFlags collects -bgp-peer ADDR,ASN flags (ADDR@ASN, the form of
// earlier versions, is taken too).
type peerFlags []bgp.Peer

func (f *peerFlags) String() string { return fmt.Sprint(*f) }

func (f *peerFlags) Set(s string) error {
	peer, err := bgp.ParsePeer(s)
	if err != nil {
		return err
	}
	for _, p := range *f {
		if p.Addr == peer.Addr {
			return fmt.Errorf("%v: given twice", peer.Addr)
		}
	}
	*f = append(*f, peer)
	return nil
}

// bgpFlags are the flags of the BGP speaker besides -bgp-asn.
var bgpFlags = []string{"bgp-router-id", "bgp-peer", "bgp-listen-port", "bgp-hold", "bgp-restart-time", "bgp-drain"}

// parseBGP checks -bgp-asn and the -bgp-* flags and fills in b, for the
// service's VIP; without -bgp-asn no other -bgp-* flag may be set.
func parseBGP(b *bgp.Config, asn, routerID string, peers peerFlags, vip netip.Addr, set map[string]bool) error {
	if !set["bgp-asn"] {
		for _, name := range bgpFlags {
			if set[name] {
				return fmt.Errorf("-%s needs -bgp-asn", name)
			}
		}
		*b = bgp.Config{}
		return nil
	}
	n, err := bgp.ParseASN(asn)
	if err != nil {
		return fmt.Errorf("-bgp-asn: %v", err)
	}
	b.ASN = n
	if b.RouterID, err = netip.ParseAddr(routerID); err != nil || !b.RouterID.Is4() {
		return fmt.Errorf("-bgp-router-id %q: an IPv4 address (the BGP identifier, often the load balancer's address)", routerID)
	}
	if len(peers) == 0 {
		return errors.New("-bgp-asn needs a -bgp-peer ADDR,ASN to announce to")
	}
	for _, p := range peers {
		if p.Addr.Is4() != vip.Unmap().Is4() {
			return fmt.Errorf("-bgp-peer %v: not of the VIP's family (%v): the next hop announced is l4lb's address on the session", p, vip)
		}
	}
	b.Peers = peers
	switch {
	case b.ListenPort != -1 && (b.ListenPort < 1 || b.ListenPort > 65535):
		return fmt.Errorf("-bgp-listen-port %d: a port in [1, 65535], or -1 for none", b.ListenPort)
	case b.Hold != 0 && (b.Hold < 3*time.Second || b.Hold > 65535*time.Second || b.Hold%time.Second != 0):
		return fmt.Errorf("-bgp-hold %v: 0 or whole seconds in [3s, 65535s] (RFC 4271)", b.Hold)
	case b.Restart != 0 && (b.Restart < time.Second || b.Restart > bgp.MaxRestartTime || b.Restart%time.Second != 0):
		return fmt.Errorf("-bgp-restart-time %gs: 0 (no graceful restart) or whole seconds in [1s, %gs] (RFC 4724's 12 bits)", b.Restart.Seconds(), bgp.MaxRestartTime.Seconds())
	case b.Drain < 0:
		return fmt.Errorf("-bgp-drain %v: must not be negative", b.Drain)
	}
	return nil
}
