package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/quiclb"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// The settings of l4lb, each declared once: its flag, its key in a
// configuration file (the flag's name, unless Key says otherwise), its
// scope, type, default, whether a reload may change it, and its doc. The
// flags of l4lb run and l4lb decap, the keys of a file, the rules of a
// reload (SameGlobal) and the table of docs/l4lb-reference.md ("Settings") come
// from here and from the membership sources' own settings (sources).
// table lists them in the order of -h and the docs.
var (
	// The load balancer's own: in a file, at the top.
	iface = setting.New(setting.Setting{Name: "iface", Scope: setting.LB, Also: setting.Decap,
		Doc: "the `interface` to attach to (required)"}, "", setting.String)
	mode = setting.New(setting.Setting{Name: "mode", Scope: setting.LB, Also: setting.Decap,
		Doc: "the attach `mode`: auto, native or generic"}, "auto", setting.String)
	seed = setting.New(setting.Setting{Name: "seed", Scope: setting.LB,
		Doc: "the flow hash `seed` (load balancers that should agree share it)"}, uint64(0), setting.Uint64)
	floodRate = setting.New(setting.Setting{Name: "flood-rate", Scope: setting.LB,
		Doc: "the most connection tracking entries written a second, over all CPUs: new flows beyond it are routed by the table without one, so that no flood evicts idle flows' entries faster; an idle entry outlives any flood for conntrack-size/flood-rate - 10 seconds (0: conntrack-size/130, two minutes; -1: no limit)"}, 0, setting.Int)
	conntrackSize = setting.New(setting.Setting{Name: "conntrack-size", Scope: setting.LB,
		Doc: "the flows connection tracking holds, per address family (the default: 54 MiB of kernel memory for both)"}, xdpmaglev.DefaultConntrackSize, setting.Int)
	maxServices = setting.New(setting.Setting{Name: "max-services", Scope: setting.LB,
		Doc: "the most services the data plane holds"}, xdpmaglev.DefaultMaxServices, setting.Int)
	maxBackends = setting.New(setting.Setting{Name: "max-backends", Scope: setting.LB,
		Doc: "the most backends of all services together the data plane holds"}, xdpmaglev.DefaultMaxBackends, setting.Int)
	admin = setting.New(setting.Setting{Name: "admin", Scope: setting.LB, Also: setting.Decap,
		Doc: "the admin `address` serving /debug/maglev, /metrics and the admin API (empty: none)"}, DefaultAdmin, setting.String)
	pinDir = setting.New(setting.Setting{Name: "pin-dir", Scope: setting.LB,
		Doc: "the `directory`, in a BPF filesystem, where the data plane is pinned (in a subdirectory named after -iface) so that it outlives l4lb: SIGINT and SIGTERM leave the program attached and forwarding, and the next l4lb adopts it (connection tracking, tables, counters) and replaces the program without a gap; empty: nothing pinned, and a restart detaches and forgets connection tracking"},
		DefaultPinDir, cleanPath)
	stateFile = setting.New(setting.Setting{Name: "state-file", Scope: setting.LB,
		Doc: "a `file` where l4lb keeps each second chance service's table and second hops, written after every change and read at start: an l4lb that starts without the pinned data plane (-pin-dir \"\", a crash that lost the pins, a reboot) forwards with the second hops of a change made inside the window, and makes its own for a change made while it was down (empty: none)"},
		"", cleanPath)
	handoffListen = setting.New(setting.Setting{Name: "handoff-listen", Scope: setting.LB,
		Doc: "the `address` on which l4lb serves its services' tables and second hops to the other load balancers of its fleet (GET /debug/maglev/handoff, nothing else; empty: none)"}, "", setting.String)
	handoffPeers = setting.NewList(setting.Setting{Name: "handoff-peer", Key: "handoff-peers", Scope: setting.LB, Reload: true,
		Doc: "another load balancer's -handoff-listen `HOST:PORT` (repeat the flag for each; in a file a list): at start, l4lb asks them all for their services' tables and second hops (waiting 2 s at most), so that a service it starts inside another's second chance window forwards with the second hops of a change it did not see; read at start only"},
		setting.One(parseHostPort)).Checked(distinctHostPort)
	logFormat = setting.New(setting.Setting{Name: "log-format", Scope: setting.LB, Also: setting.Decap,
		Doc: "the log records' `format` on standard error: text (key=value) or json, each with its time, level and message"}, "text", setting.String)
	bgpASN = setting.New(setting.Setting{Name: "bgp-asn", Scope: setting.LB,
		Doc: "announce the VIP by BGP from this `AS`: a /32 or /128 to each -bgp-peer while the service has a healthy backend, withdrawn when it has none and first when the load balancer is taken out of service (POST /drain-lb) (default: no BGP)"}, "", setting.String)
	bgpRouterID = setting.New(setting.Setting{Name: "bgp-router-id", Scope: setting.LB,
		Doc: "the BGP identifier, an IPv4 `address` (required with -bgp-asn)"}, "", setting.String)
	bgpPeer = setting.NewList(setting.Setting{Name: "bgp-peer", Scope: setting.LB, Fields: []string{"addr", "asn"},
		Doc: "a router to announce to, `ADDR,ASN` (198.18.0.1,65000; repeat the flag for each, or a list); the next hop is l4lb's address on the session"},
		setting.One(bgp.ParsePeer)).WithFields(peerOf).Checked(distinctPeer)
	bgpListenPort = setting.New(setting.Setting{Name: "bgp-listen-port", Scope: setting.LB,
		Doc: "the TCP `port` on which l4lb accepts BGP sessions from its peers too (-1: none, l4lb connects only)"}, 179, setting.Int)
	bgpHold = setting.New(setting.Setting{Name: "bgp-hold", Scope: setting.LB,
		Doc: "the BGP hold time l4lb proposes (whole seconds, 3s at least, or 0 for none): a router drops l4lb's routes this long after it last heard of it"}, 9*time.Second, setting.Duration)
	bgpRestartTime = setting.New(setting.Setting{Name: "bgp-restart-time", Scope: setting.LB,
		Doc: "the BGP graceful restart time l4lb advertises (whole seconds, at most 4095s; 0: no graceful restart): how long a router keeps l4lb's paths, as stale, after a session ends with no NOTIFICATION, as at SIGINT or SIGTERM without -bgp-bfd, for the next l4lb to take them over"}, 120*time.Second, setting.Duration)
	bgpDrain = setting.New(setting.Setting{Name: "bgp-drain", Scope: setting.LB,
		Doc: "when the load balancer leaves the routers' paths (POST /drain-lb; SIGINT or SIGTERM with -bgp-restart-time 0 or -bgp-bfd), how long l4lb keeps forwarding after withdrawing the VIP and before it ends the sessions, for the routers to move the traffic away"}, 2*time.Second, setting.Duration)
	bgpBFD = setting.New(setting.Setting{Name: "bgp-bfd", Scope: setting.LB,
		Doc: "run BFD (RFC 5880; single-hop, RFC 5881: UDP port 3784) with each -bgp-peer, so that a router with BFD on the session drops a dead load balancer's routes after -bgp-bfd-multiplier times -bgp-bfd-interval of silence rather than the hold time; a router drops the routes when l4lb stops too, graceful restart or not, so SIGINT and SIGTERM withdraw and drain first (-bgp-drain)"}, false, setting.Bool)
	bgpBFDInterval = setting.New(setting.Setting{Name: "bgp-bfd-interval", Scope: setting.LB,
		Doc: "BFD's desired minimum transmit and required minimum receive interval, in [10ms, 4294.967295s] (whole microseconds: RFC 5880's 32 bits); the router's should be the same"}, 100*time.Millisecond, setting.Duration)
	bgpBFDMultiplier = setting.New(setting.Setting{Name: "bgp-bfd-multiplier", Scope: setting.LB,
		Doc: "BFD's detection time multiplier, in [1, 255]: a session fails after this many intervals without a packet"}, 3, setting.Int)

	// The Kubernetes controller's (package k8slb): on with vip-pool. At
	// the top of a file, kubeconfig (a source's setting) is its too.
	k8sLBClass = setting.New(setting.Setting{Name: "k8s-lb-class", Scope: setting.LB,
		Doc: "the spec.loadBalancerClass of the Kubernetes Services of type LoadBalancer whose VIPs l4lb allocates from -vip-pool and whose ports it serves, each an l4lb service named k8s/NAMESPACE/NAME/PORT"}, DefaultK8sLBClass, setting.String)
	k8sLBDefault = setting.New(setting.Setting{Name: "k8s-lb-default", Scope: setting.LB,
		Doc: "serve the Services of type LoadBalancer with no spec.loadBalancerClass too, as the cluster's default load balancer"}, false, setting.Bool)
	vipPool = setting.NewList(setting.Setting{Name: "vip-pool", Scope: setting.LB,
		Doc: "a `PREFIX` of VIPs, IPv4 or IPv6, for the Kubernetes Services of -k8s-lb-class (repeat the flag for each; in a file a list): given, l4lb runs the controller, which reads the cluster through -kubeconfig (at the top of a file), and the file may list no service"},
		setting.One(parsePoolPrefix)).Checked(distinctPrefix)
	k8sLease = setting.New(setting.Setting{Name: "k8s-lease", Scope: setting.LB,
		Doc: "the `NAMESPACE/NAME` of the Lease by which the l4lb of a fleet elect the one that allocates VIPs (every l4lb serves the Services from their status)"}, DefaultK8sLease, setting.String)

	// A service's: in a file, in the service, or at the top as every
	// service's default, but for its own (Own).
	name = setting.New(setting.Setting{Name: "name", Scope: setting.Service, Own: true, KeyOnly: true, Reload: true,
		Doc: "the service's name, in the admin API and in errors (required in a file: letters, digits, '.', '_' and '-'; the flags' one service is default)"}, "", serviceName)
	vip = setting.New(setting.Setting{Name: "vip", Scope: setting.Service, Own: true, Reload: true,
		Doc: "the service's `VIP:PORT` (required)"}, "", setting.String)
	proto = setting.New(setting.Setting{Name: "proto", Scope: setting.Service, Reload: true,
		Doc: "the service's `protocol`: tcp or udp"}, "tcp", setting.String)
	backends = setting.NewList(setting.Setting{Name: "backend", Key: "backends", Scope: setting.Service, Own: true, Reload: true, Fields: []string{"addr", "mac", "weight", "server-id"},
		Doc: "a backend, `IP[=MAC][*WEIGHT][@SERVERID]` (repeat the flag for each; in a file a list, an item IP, IP=MAC, IP*WEIGHT, IP@SERVERID or {addr, mac, weight, server-id}): its MAC for -forward l2 if the neighbour table should not give it, its weight if not 1, its QUIC-LB server ID in hex with -quic-lb"},
		setting.One(parseBackend)).WithFields(backendOf)
	tableSize = setting.New(setting.Setting{Name: "m", Scope: setting.Service, Reload: true,
		Doc: "the service's table size, a prime"}, maglev.DefaultSize, setting.Int)
	forward = setting.New(setting.Setting{Name: "forward", Scope: setting.Service, Reload: true,
		Doc: "how packets reach the backends: l2 (MACs rewritten, backends on the segment), ipip or gue (encapsulated, backends anywhere routed; they run l4lb decap)"}, "l2", setting.String)
	encapSrc = setting.New(setting.Setting{Name: "encap-src", Scope: setting.Service, Reload: true,
		Doc: "the outer source `address` of -forward ipip and gue, of the VIP's family (default: the interface's first global address of that family); a prefix (10.0.9.0/24, at most 65,536 addresses) varies it per flow, for the backends' receive queues"}, "", setting.String)
	guePort = setting.New(setting.Setting{Name: "gue-port", Scope: setting.Service, Also: setting.Decap, Reload: true,
		Doc: "the outer UDP destination `port` of -forward gue, and the one l4lb decap accepts"}, xdpmaglev.DefaultGUEPort, setting.Int)
	secondChance = setting.New(setting.Setting{Name: "second-chance", Scope: setting.Service, Reload: true,
		Doc: "after a change of the service's backends, the packets of each slot that moved carry its previous backend, to which a backend without a connection of theirs passes them on (l4lb decap), until the service has had no change for -second-chance-window; -forward gue only, whose header carries it (default: true with -forward gue, false otherwise)"},
		false, setting.Bool)
	secondChanceWindow = setting.New(setting.Setting{Name: "second-chance-window", Scope: setting.Service, Reload: true,
		Doc: "how long after the service's last change the slots that moved keep their second hops (8 bytes a slot of kernel memory meanwhile; at most 8760h); ignored where second chance is off, so that a default at the top of a file serves the GUE services"},
		10*time.Minute, setting.Duration)
	conntrack = setting.New(setting.Setting{Name: "conntrack", Scope: setting.Service, Reload: true,
		Doc: "track the service's flows, each kept on the backend its first packet went to; false: stateless, every packet by the table (and its second hop): no state for a flood to fill, no connection lost to a restart or an ECMP change within the window, but a flow on a slot that moved breaks at the change without second chance, and after the window with it"},
		true, setting.Bool)
	quicLB = setting.New(setting.Setting{Name: "quic-lb", Scope: setting.Service, Reload: true,
		Doc: "route the service's QUIC packets by the server ID their connection IDs carry (QUIC-LB, draft-ietf-quic-load-balancers): a packet of a connection goes to the backend whose -backend ...@SERVERID its ID names, from any client address or port; Initial packets, and IDs that name no backend, go by the table (-proto udp; the backends' QUIC servers issue such IDs: docs/quic.md)"},
		false, setting.Bool)
	quicLBConfigID = setting.New(setting.Setting{Name: "quic-lb-config-id", Scope: setting.Service, Needs: "quic-lb", Reload: true,
		Doc: "the QUIC-LB configuration's codepoint, the first three bits of its connection IDs: 0 to 6; a reload to another keeps the last one's IDs routed, for a rotation"},
		0, setting.Int)
	quicLBServerIDLength = setting.New(setting.Setting{Name: "quic-lb-server-id-length", Scope: setting.Service, Needs: "quic-lb", Reload: true,
		Doc: "the octets of a QUIC-LB server ID, 1 to 15: every backend's server ID has this length"},
		2, setting.Int)
	quicLBNonceLength = setting.New(setting.Setting{Name: "quic-lb-nonce-length", Scope: setting.Service, Needs: "quic-lb", Reload: true, Default: "16 - server ID length",
		Doc: "the octets of a QUIC-LB nonce, 4 to 18, and with the server ID's 19 at most: 16 together makes an encrypted ID one AES block, the cheapest to decrypt"},
		0, setting.Int)
	quicLBKeyFile = setting.New(setting.Setting{Name: "quic-lb-key-file", Scope: setting.Service, Needs: "quic-lb", Reload: true,
		Doc: "a `file` holding the QUIC-LB key, 16 octets in hex, which encrypts the server IDs (the kernel's AES decrypts them: Linux 6.10 and later); absent: plaintext server IDs, which anyone can read; read again at each reload"},
		"", cleanPath)
	drain = setting.NewList(setting.Setting{Name: "drain", Scope: setting.Service, Own: true, Reload: true,
		Doc: "drain the backend at this `IP`: no new flows (repeat the flag for each; in a file a list)"}, setting.One(parseAddr))
	drainTimeout = setting.New(setting.Setting{Name: "drain-timeout", Scope: setting.Service, Reload: true,
		Doc: "how long a draining backend's established flows keep it (0: none)"}, time.Minute, setting.Duration)

	// A service's health check: as a service's, but a default at the top
	// applies to the services whose health is tcp or http.
	healthKind = setting.New(setting.Setting{Name: "health", Scope: setting.Health, Reload: true,
		Doc: "the backends' health check: none, tcp (a connect) or http (a GET of -health-path that must answer -health-status); a backend that fails it is taken out of the table, only its slots moving"}, "none", setting.String)
	healthPath = setting.New(setting.Setting{Name: "health-path", Scope: setting.Health, Needs: "health", Reload: true,
		Doc: "the `path` of -health http's GET"}, "/healthz", setting.String)
	healthStatus = setting.New(setting.Setting{Name: "health-status", Scope: setting.Health, Needs: "health", Reload: true,
		Doc: "the HTTP `status` that passes -health http"}, 200, setting.Int)
	healthPort = setting.New(setting.Setting{Name: "health-port", Scope: setting.Health, Needs: "health", Reload: true,
		Doc: "the `port` probed on each backend (default: the service's port)"}, 0, setting.Int)
	healthInterval = setting.New(setting.Setting{Name: "health-interval", Scope: setting.Health, Needs: "health", Reload: true,
		Doc: "how often each backend is probed"}, 2*time.Second, setting.Duration)
	healthTimeout = setting.New(setting.Setting{Name: "health-timeout", Scope: setting.Health, Needs: "health", Reload: true,
		Doc: "how long a probe may take, at most -health-interval"}, time.Second, setting.Duration)
	healthRise = setting.New(setting.Setting{Name: "health-rise", Scope: setting.Health, Needs: "health", Reload: true,
		Doc: "probes passed in a row that bring a down backend up"}, 2, setting.Int)
	healthFall = setting.New(setting.Setting{Name: "health-fall", Scope: setting.Health, Needs: "health", Reload: true,
		Doc: "probes failed in a row that take an up backend down (a new backend's first probe decides)"}, 3, setting.Int)

	// The membership sources' settings are the sources' own
	// (cmd/internal/ops): the kinds whose endpoints are addresses.
	sources = ops.NewSources("", ops.AddrSources)

	// The decapsulator's (l4lb decap), besides those it shares above.
	decapVIP = setting.New(setting.Setting{Name: "vip", Scope: setting.Decap,
		Doc: fmt.Sprintf("the `VIPs` to decapsulate to, addresses without a port or prefixes (every address of a pool such as -vip-pool's), comma-separated, %d addresses at most (required)", xdpmaglev.MaxDecapVIPs)}, "", setting.String)
	decapSources = setting.New(setting.Setting{Name: "decap-sources", Scope: setting.Decap,
		Doc: "the outer source `prefixes` trusted, comma-separated (required): the load balancers' addresses they encapsulate from (-encap-src); any encapsulated packet to a VIP from elsewhere is dropped; \"any\" trusts every source"}, "", setting.String)

	// Flags of l4lb run that are no setting of a file.
	configFile = setting.New(setting.Setting{Name: "config", Scope: setting.LB, FlagOnly: true,
		Doc: "the configuration `file` (YAML) of many services; with it, no other flag but -rebuild (docs/l4lb-howto-deploy.md)"}, "", setting.String)
	rebuild = setting.New(setting.Setting{Name: "rebuild", Scope: setting.LB, FlagOnly: true,
		Doc: "replace pinned maps that l4lb cannot adopt (another layout after an upgrade; another -mode, -conntrack-size, -max-services, -max-backends or interface) with new, empty ones: connection tracking starts anew"}, false, setting.Bool)
)

// table is every setting of l4lb, in the order of -h and the docs.
var table = concat(
	[]*setting.Setting{iface.Setting, mode.Setting, seed.Setting, floodRate.Setting, conntrackSize.Setting, maxServices.Setting,
		maxBackends.Setting, admin.Setting, pinDir.Setting, stateFile.Setting, handoffListen.Setting, handoffPeers.Setting, logFormat.Setting, bgpASN.Setting, bgpRouterID.Setting, bgpPeer.Setting,
		bgpListenPort.Setting, bgpHold.Setting, bgpRestartTime.Setting, bgpDrain.Setting, bgpBFD.Setting, bgpBFDInterval.Setting, bgpBFDMultiplier.Setting,
		k8sLBClass.Setting, k8sLBDefault.Setting, vipPool.Setting, k8sLease.Setting,
		name.Setting, vip.Setting, proto.Setting, backends.Setting, tableSize.Setting, forward.Setting, encapSrc.Setting,
		guePort.Setting, secondChance.Setting, secondChanceWindow.Setting, conntrack.Setting,
		quicLB.Setting, quicLBConfigID.Setting, quicLBServerIDLength.Setting, quicLBNonceLength.Setting, quicLBKeyFile.Setting,
		drain.Setting, drainTimeout.Setting,
		healthKind.Setting, healthPath.Setting, healthStatus.Setting, healthPort.Setting, healthInterval.Setting,
		healthTimeout.Setting, healthRise.Setting, healthFall.Setting},
	sources.Settings(),
	[]*setting.Setting{decapVIP.Setting, decapSources.Setting, configFile.Setting, rebuild.Setting},
)

func concat(ls ...[]*setting.Setting) []*setting.Setting {
	var out []*setting.Setting
	for _, l := range ls {
		out = append(out, l...)
	}
	return out
}

// Settings returns every setting of l4lb, in the order of the docs.
func Settings() []*setting.Setting { return table }

// DefaultK8sLBClass is -k8s-lb-class's default.
const DefaultK8sLBClass = "maglevlb.io/l4lb"

// DefaultK8sLease is -k8s-lease's default.
const DefaultK8sLease = "l4lb-system/l4lb-vip-allocator"

// DefaultPinDir is -pin-dir's default: the BPF filesystem systemd mounts.
const DefaultPinDir = "/sys/fs/bpf/l4lb"

// DefaultAdmin is -admin's default, l4lb run's and the admin API's
// clients' (l4lb status, drain, reload).
const DefaultAdmin = "127.0.0.1:9180"

// cleanPath is a path, cleaned; "" stays "".
func cleanPath(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	return filepath.Clean(s), nil
}

// nameRE is what a service's name may be: it names the service in the
// admin API and in errors.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func serviceName(s string) (string, error) {
	if !nameRE.MatchString(s) {
		return "", errors.New("letters, digits, '.', '_' and '-', at most 63, starting with a letter or digit")
	}
	return s, nil
}

// parseAddr parses an address, unmapped.
func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	return a.Unmap(), err
}

// A Backend is a backend of the configuration: the data plane's, and its
// QUIC-LB server ID (zero: none).
type Backend struct {
	xdpmaglev.Backend
	ServerID quiclb.ServerID
}

// parseBackend parses a backend, IP[=MAC][*WEIGHT][@SERVERID].
func parseBackend(s string) (Backend, error) {
	s, sid, hasSID := strings.Cut(s, "@")
	rest, weight, hasWeight := strings.Cut(s, "*")
	addr, mac, hasMAC := strings.Cut(rest, "=")
	f := map[string]string{"addr": addr}
	if hasSID {
		f["server-id"] = sid
	}
	if hasMAC {
		f["mac"] = mac
	}
	if hasWeight {
		f["weight"] = weight
	}
	return backendOf(f)
}

// backendOf makes a backend of its fields: addr, and mac, weight and
// server-id if given.
func backendOf(f map[string]string) (Backend, error) {
	if f["addr"] == "" {
		return Backend{}, errors.New("needs addr")
	}
	a, err := netip.ParseAddr(f["addr"])
	if err != nil {
		return Backend{}, err
	}
	be := Backend{Backend: xdpmaglev.Backend{Addr: a, Weight: 1}}
	if mac, ok := f["mac"]; ok {
		if be.HW, err = net.ParseMAC(mac); err != nil || len(be.HW) != 6 {
			return Backend{}, fmt.Errorf("%q is not an Ethernet address", mac)
		}
	}
	if weight, ok := f["weight"]; ok {
		w, err := strconv.ParseUint(weight, 10, 32)
		if err != nil {
			return Backend{}, fmt.Errorf("weight %q is not a number in [0, 4294967295]", weight)
		}
		be.Weight = uint32(w)
	}
	if sid, ok := f["server-id"]; ok {
		if be.ServerID, err = quiclb.ParseServerID(sid); err != nil {
			return Backend{}, fmt.Errorf("server-id %q: 1 to %d octets in hex", sid, quiclb.MaxServerIDLen)
		}
	}
	return be, nil
}

// peerOf makes a BGP peer of its fields, addr and asn.
func peerOf(f map[string]string) (bgp.Peer, error) {
	if f["addr"] == "" {
		return bgp.Peer{}, errors.New("needs addr")
	}
	a, err := netip.ParseAddr(f["addr"])
	if err != nil {
		return bgp.Peer{}, err
	}
	n, err := bgp.ParseASN(f["asn"])
	if err != nil {
		return bgp.Peer{}, err
	}
	return bgp.Peer{Addr: a.Unmap(), ASN: n}, nil
}

// parseHostPort parses HOST:PORT, a port in [1, 65535].
func parseHostPort(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return "", errors.New("not HOST:PORT")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return "", fmt.Errorf("port %q is not in [1, 65535]", port)
	}
	return s, nil
}

// distinctHostPort refuses an address given before.
func distinctHostPort(have []string, s string) error {
	for _, h := range have {
		if h == s {
			return fmt.Errorf("%s: given twice", s)
		}
	}
	return nil
}

// distinctPeer refuses a peer given before.
func distinctPeer(have []bgp.Peer, p bgp.Peer) error {
	for _, h := range have {
		if h.Addr == p.Addr {
			return fmt.Errorf("%v: given twice", p.Addr)
		}
	}
	return nil
}
