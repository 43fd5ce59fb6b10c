// Command l4lb is a layer-4 load balancer: xdpmaglev's XDP program
// attached to one interface, sending one service's packets to its
// backends by layer-2 direct server return, or encapsulated in IPIP or GUE.
//
//	l4lb -iface eth0 -vip 203.0.113.1:80 -backend 10.0.0.11 -backend 10.0.0.12=02:00:00:00:00:12
//	l4lb -iface eth0 -vip 203.0.113.1:80 -etcd http://10.0.0.1:2379 -etcd-prefix services/web -seed 7
//	l4lb -iface eth0 -vip 203.0.113.1:80 -k8s-service prod/web:http [-kubeconfig FILE] -seed 7
//	l4lb -iface eth0 -vip 203.0.113.1:80 -forward ipip [-encap-src 10.0.1.5] -backend 10.0.2.11
//	l4lb -decap -iface eth0 -vip 203.0.113.1[,2001:db8::1]
//	l4lb -config /etc/l4lb.yaml
//	l4lb -detach -iface eth0
//	l4lb -version
//
// The flags describe one service; -config FILE describes many, in a YAML
// file whose keys are the flags' names (example.yaml, docs/l4lb.md):
// SIGHUP or POST /reload on the admin address applies a changed file
// service by service, leaving the unchanged ones untouched, and refuses a
// bad file whole, naming the line, the service and the setting.
//
// Each backend holds the VIP on its loopback device (see docs/xdp.md).
// With -forward l2 (the default) it must be on the interface's segment,
// and its MAC comes from the neighbour table when not given. With
// -forward ipip or gue (-gue-port, 6080 by default) it may be anywhere the
// kernel routes to, the outer source being -encap-src or the interface's
// address of the VIP's family; the kernel must forward on the interface
// (sysctl net.ipv4.conf.all.forwarding=1), and l4lb warns at start if it
// does not. l4lb -decap is the backends' side: the decapsulator on
// -iface for the -vip addresses, until SIGINT or SIGTERM. -flood-rate sets
// the connection tracking's flood guard (xdpmaglev.Options.FloodRate).
//
// With -etcd and -etcd-prefix, the backends are the endpoints registered
// under the prefix in the format of etcd's gRPC naming ({"Addr":"IP:PORT"},
// as etcdmaglev.Register writes it; the port is not used), each with the
// "weight" of its Metadata; the table is rebuilt and swapped atomically on
// every change, and while etcd is unreachable the last set stays.
//
// With -k8s-service NAMESPACE/NAME:PORT, the backends are the IPs of the
// Service's ready endpoints on that port, from its EndpointSlices (as
// k8smaglev.Watch reads them; the port, the Service's
// targetPort, picks the endpoints and is not used otherwise); a
// terminating but serving endpoint is drained as weight 0 in etcd is. The
// client configuration is the pod's service account inside a pod, else
// -kubeconfig, $KUBECONFIG or ~/.kube/config, as kubectl finds it.
//
// With -dns NAME:PORT, the backends are the addresses of NAME's A/AAAA
// records, looked up every -dns-interval. The sources are lbproxy's, from
// one package (cmd/internal/ops), but for -dns-srv (SRV targets are
// names, and the data plane needs addresses); one may be named, and not
// with -backend.
//
// A backend is drained by weight 0 in its etcd Metadata, by -drain IP, or
// by POST /drain?addr=IP on the admin address (POST /undrain takes it
// back; an address that is no backend, not a member nor draining, is
// 404): it gets no new flow, while the flows connection tracking holds
// for it keep going to it, for -drain-timeout; then it leaves the service.
// A backend that leaves etcd (deregistered, or its lease ran out) drains
// the same way. Load balancers of one fleet share -seed and the backend
// set, and so compute one table: each logs its digest
// (maglev.Table.Digest) on every change, and serves it with the backends'
// states at /debug/maglev/backends.
//
// With -health tcp or http, l4lb checks each member itself: a TCP connect,
// or an HTTP GET of -health-path that must answer -health-status, to the
// backend's address and the service's port (or -health-port), every
// -health-interval within -health-timeout. A backend goes down after
// -health-fall failed probes in a row and comes up after -health-rise
// passes; down, it is out of the table as maglev.Table.Without computes
// (only its slots move, and every load balancer that sees the same
// failures has the same table), and up again it takes back exactly its
// slots. If every backend is down, the service keeps its last table (it
// fails open) and says so. The members decide who may be a backend, the
// health check who is up.
//
// With -bgp-asn, -bgp-router-id and -bgp-peer ADDR,ASN (repeatable),
// l4lb speaks BGP itself (GoBGP, embedded) to those routers, accepting
// their sessions on -bgp-listen-port too, and announces the VIP as a /32
// or /128, next hop its own address on each session, while the service
// has a backend in service (of weight > 0, not drained, and up by the
// health check); it withdraws it when there is none, failing open
// included, so that the routers send the traffic to the load balancers
// that see a healthy backend. The sessions negotiate BGP graceful restart
// (RFC 4724) with -bgp-restart-time (120 s; 0: none): SIGINT and SIGTERM
// are a restart, which ends the sessions with no NOTIFICATION so that the
// routers keep l4lb's paths, as stale, for that time, until the next l4lb
// announces them again and sends its End-of-RIB. POST /drain-lb on the
// admin address takes the load balancer out of service: it withdraws the
// VIP, forwards for -bgp-drain while the routers move away, closes the
// sessions, detaches and exits; so does SIGTERM with -bgp-restart-time 0,
// or when no router's session negotiated graceful restart. -bgp-hold (9 s)
// is how long a router waits for a load balancer that went silent.
//
// l4lb logs to standard error, each line a log/slog record with its time
// and level (-log-format text, the default, or json): the attach mode,
// each table's digest, every change, warnings and errors; standard output
// is for -version (l4lb's version, VCS revision and Go version) and
// -detach. It serves
// the table's summary and the counters as JSON at /debug/maglev on the
// admin address, and /metrics for Prometheus. Its data plane
// is pinned in -pin-dir (/sys/fs/bpf/l4lb by default, a directory per
// interface: /sys/fs/bpf/l4lb/eth0), so that it outlives the process: at
// SIGINT or SIGTERM l4lb leaves the program attached and forwarding by
// the last tables, and the next l4lb on the interface adopts the maps
// (connection tracking, tables, backends, counters) and replaces the
// program on its link in one step, so that a restart drops nothing.
// Pins l4lb cannot adopt (another layout after an upgrade, another -mode)
// are refused, or replaced with -rebuild. With -pin-dir "", or where no
// BPF filesystem is mounted at the default, nothing is pinned and SIGINT
// or SIGTERM detaches. l4lb -detach -iface DEV removes the program and
// the pins, and prints what it removed. docs/l4lb.md runs a fleet of them
// behind an ECMP router, and has "Restarts and upgrades".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/checker"
	"github.com/maglevlb/maglev/xdpmaglev"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		if !errors.As(err, new(loggedError)) { // an error before the log format was known
			newLogger("text", os.Stderr).Error(err.Error())
		}
		os.Exit(1)
	}
}

// config is the command line, parsed: the load balancer's settings and,
// but for -decap, its one service's. A configuration file (-config) is
// the same settings for many services (loadFile).
type config struct {
	global
	serviceConfig
	version bool // -version: print it, and do nothing else
}

// global are the settings of the whole load balancer.
type global struct {
	iface    string
	opts     xdpmaglev.Options
	admin    string
	decap    bool                   // -decap: the backends' decapsulator, not a load balancer
	dopts    xdpmaglev.DecapOptions // -decap's -vip, -gue-port and -mode
	bgp      bgp.Config             // -bgp-asn and -bgp-*
	pin      pinConfig              // -pin-dir, -rebuild, -detach
	file     string                 // -config: the services come from this file
	logFmt   string                 // -log-format: text or json
	warnings []string               // logged at start: legal, but likely not what the operator meant
}

// serviceConfig is one service: where its backends come from, how its
// packets reach them, and how they are checked.
type serviceConfig struct {
	name     string // in the configuration file; "default" for the flags' one service
	svc      xdpmaglev.Service
	backends []xdpmaglev.Backend
	src      *ops.Sources // -etcd, -dns, -k8s-service, ...: where the backends come from, if not -backend
	drained  []netip.Addr // -drain
	timeout  time.Duration
	fwd      xdpmaglev.ServiceOptions // -forward, -encap-src, -gue-port, -m
	health   checker.Config           // -health and -health-*
	// settings are the flags the service was parsed from, in order: two
	// services of the same settings are the same; srcSettings those of
	// its membership source.
	settings, srcSettings string
}

// addrFlags collects -drain IP flags.
type addrFlags []netip.Addr

func (a *addrFlags) String() string { return fmt.Sprint(*a) }

func (a *addrFlags) Set(s string) error {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return err
	}
	*a = append(*a, ip)
	return nil
}

// backendFlags collects -backend IP[=MAC][*WEIGHT] flags.
type backendFlags []xdpmaglev.Backend

func (b *backendFlags) String() string { return fmt.Sprint(len(*b), " backends") }

func (b *backendFlags) Set(s string) error {
	rest, weight, hasWeight := strings.Cut(s, "*")
	addr, mac, hasMAC := strings.Cut(rest, "=")
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return fmt.Errorf("backend %q: %v", s, err)
	}
	be := xdpmaglev.Backend{Addr: a, Weight: 1}
	if hasMAC {
		if be.HW, err = net.ParseMAC(mac); err != nil || len(be.HW) != 6 {
			return fmt.Errorf("backend %q: %q is not an Ethernet address", s, mac)
		}
	}
	if hasWeight {
		w, err := strconv.ParseUint(weight, 10, 32)
		if err != nil {
			return fmt.Errorf("backend %q: weight %q is not a number in [0, 4294967295]", s, weight)
		}
		be.Weight = uint32(w)
	}
	*b = append(*b, be)
	return nil
}

func parse(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("l4lb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var bs backendFlags
	var drained addrFlags
	var vip, proto, mode, forward, encapSrc string
	var m, guePort int
	var health string
	var healthPort int
	var seed uint64
	var bgpASN, routerID string
	var peers peerFlags
	var decapSources string
	fs.StringVar(&c.iface, "iface", "", "the interface to attach to (required)")
	fs.StringVar(&vip, "vip", "", "the service's VIP:PORT (required); with -decap, the `VIP`s, addresses without a port, comma-separated")
	fs.StringVar(&proto, "proto", "tcp", "the service's protocol: tcp or udp")
	fs.Var(&bs, "backend", "a backend, `IP[=MAC][*WEIGHT]` (repeat the flag for each): its MAC for -forward l2 if the neighbour table should not give it, its weight if not 1")
	fs.IntVar(&m, "m", 0, "the table size, a prime (default 65537)")
	fs.StringVar(&c.file, "config", "", "the configuration `file` (YAML) of many services; with it, no other flag (docs/l4lb.md)")
	fs.IntVar(&c.opts.ConntrackSize, "conntrack-size", 0, "the flows connection tracking holds, per address family (default 262144: 54 MiB of kernel memory for both)")
	fs.IntVar(&c.opts.MaxServices, "max-services", 0, "the most services the data plane holds (default 64)")
	fs.IntVar(&c.opts.MaxBackends, "max-backends", 0, "the most backends of all services together the data plane holds (default 4096)")
	fs.Uint64Var(&seed, "seed", 0, "the flow hash seed (load balancers that should agree share it)")
	fs.StringVar(&mode, "mode", "auto", "the attach mode: auto, native or generic")
	fs.StringVar(&c.admin, "admin", "127.0.0.1:9180", "the admin address serving /debug/maglev (empty: none)")
	c.src = ops.RegisterSources(fs, "", ops.Etcd|ops.DNS|ops.Kubernetes) // no -dns-srv: SRV targets are names, and the data plane needs addresses
	fs.Var(&drained, "drain", "drain the backend at this `IP`: no new flows (repeat the flag for each)")
	fs.DurationVar(&c.timeout, "drain-timeout", time.Minute, "how long a draining backend's established flows keep it (0: none)")
	fs.StringVar(&forward, "forward", "l2", "how packets reach the backends: l2 (MACs rewritten, backends on the segment), ipip or gue (encapsulated, backends anywhere routed; they run l4lb -decap)")
	fs.StringVar(&encapSrc, "encap-src", "", "the outer source `address` of -forward ipip and gue, of the VIP's family (default: the interface's first global address of that family); a prefix (10.0.9.0/24, at most 65,536 addresses) varies it per flow, for the backends' receive queues")
	fs.IntVar(&guePort, "gue-port", xdpmaglev.DefaultGUEPort, "the outer UDP destination `port` of -forward gue, and the one -decap accepts")
	fs.IntVar(&c.opts.FloodRate, "flood-rate", 0, "the most connection tracking entries written a second, over all CPUs: new flows beyond it are routed by the table without one, so that no flood evicts idle flows' entries faster; an idle entry outlives any flood for conntrack-size/flood-rate - 10 seconds (0: conntrack-size/130, two minutes; -1: no limit)")
	fs.StringVar(&health, "health", "none", "the backends' health check: none, tcp (a connect) or http (a GET of -health-path that must answer -health-status); a backend that fails it is taken out of the table, only its slots moving")
	fs.StringVar(&c.health.Path, "health-path", "/healthz", "the `path` of -health http's GET")
	fs.IntVar(&c.health.Status, "health-status", 200, "the HTTP `status` that passes -health http")
	fs.IntVar(&healthPort, "health-port", 0, "the `port` probed on each backend (default: the service's port)")
	fs.DurationVar(&c.health.Interval, "health-interval", 2*time.Second, "how often each backend is probed")
	fs.DurationVar(&c.health.Timeout, "health-timeout", time.Second, "how long a probe may take, at most -health-interval")
	fs.IntVar(&c.health.Rise, "health-rise", 2, "probes passed in a row that bring a down backend up")
	fs.IntVar(&c.health.Fall, "health-fall", 3, "probes failed in a row that take an up backend down")
	fs.StringVar(&bgpASN, "bgp-asn", "", "announce the VIP by BGP from this `AS`: a /32 or /128 to each -bgp-peer while the service has a healthy backend, withdrawn when it has none and first when the load balancer is taken out of service (POST /drain-lb) (default: no BGP)")
	fs.StringVar(&routerID, "bgp-router-id", "", "the BGP identifier, an IPv4 `address` (required with -bgp-asn)")
	fs.Var(&peers, "bgp-peer", "a router to announce to, `ADDR,ASN` (198.18.0.1,65000; repeat the flag for each); the next hop is l4lb's address on the session")
	fs.IntVar(&c.bgp.ListenPort, "bgp-listen-port", 179, "the TCP `port` on which l4lb accepts BGP sessions from its peers too (-1: none, l4lb connects only)")
	fs.DurationVar(&c.bgp.Hold, "bgp-hold", 9*time.Second, "the BGP hold time l4lb proposes (whole seconds, 3s at least, or 0 for none): a router drops l4lb's routes this long after it last heard of it")
	fs.DurationVar(&c.bgp.Restart, "bgp-restart-time", 120*time.Second, "the BGP graceful restart time l4lb advertises (whole seconds, at most 4095s; 0: no graceful restart): how long a router keeps l4lb's paths, as stale, after a session ends with no NOTIFICATION, as at SIGINT or SIGTERM, for the next l4lb to take them over")
	fs.DurationVar(&c.bgp.Drain, "bgp-drain", 2*time.Second, "when the load balancer leaves the routers' paths (POST /drain-lb; SIGINT or SIGTERM with -bgp-restart-time 0), how long l4lb keeps forwarding after withdrawing the VIP and before it ends the sessions, for the routers to move the traffic away")
	fs.StringVar(&c.logFmt, "log-format", "text", "the log records' `format` on standard error: text (key=value) or json, each with its time, level and message")
	fs.BoolVar(&c.version, "version", false, "print l4lb's version, VCS revision and Go version on standard output, and exit")
	fs.BoolVar(&c.decap, "decap", false, "run the backends' decapsulator of -forward ipip and gue on -iface for the -vip addresses, instead of a load balancer")
	fs.StringVar(&decapSources, "decap-sources", "", "with -decap (required), the outer source `prefixes` trusted, comma-separated: the load balancers' addresses they encapsulate from (-encap-src); any encapsulated packet to a VIP from elsewhere is dropped; \"any\" trusts every source")
	c.pin.register(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.version {
		return c, nil // whatever else the command line says
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.logFmt != "text" && c.logFmt != "json" {
		return c, fmt.Errorf("-log-format %q: text or json", c.logFmt)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if done, err := c.pin.check(c.iface, set); done || err != nil {
		return c, err
	}
	if c.file != "" {
		if len(set) > 1 && (len(set) != 2 || !set["rebuild"]) { // -rebuild is a one-off, not in the file
			return c, errors.New("-config takes no other flag: the file has every setting")
		}
		return c, nil
	}
	c.name = "default"
	if c.iface == "" || vip == "" {
		return c, errors.New("-iface and -vip are required")
	}
	switch mode {
	case "auto":
		c.opts.Mode = xdpmaglev.AttachAuto
	case "native":
		c.opts.Mode = xdpmaglev.AttachNative
	case "generic":
		c.opts.Mode = xdpmaglev.AttachGeneric
	default:
		return c, fmt.Errorf("-mode %q: auto, native or generic", mode)
	}
	if guePort < 1 || guePort > 65535 {
		return c, fmt.Errorf("-gue-port %d: not a port in [1, 65535]", guePort)
	}
	if c.decap {
		return parseDecap(c, vip, decapSources, uint16(guePort), set)
	}
	if set["decap-sources"] {
		return c, errors.New("-decap-sources needs -decap")
	}

	static := ""
	if len(bs) > 0 {
		static = "-backend"
	}
	if err := c.src.Check(static); err != nil {
		return c, err
	}
	switch {
	case c.timeout < 0:
		return c, errors.New("-drain-timeout must not be negative")
	case c.opts.FloodRate < -1 || c.opts.FloodRate > 1<<31:
		return c, fmt.Errorf("-flood-rate %d: -1 (off), 0 (the default) or a rate in [1, 2^31]", c.opts.FloodRate)
	case set["m"] && maglev.CheckSize(m) != nil:
		return c, fmt.Errorf("-m %d: %v", m, maglev.CheckSize(m))
	}
	for name, v := range map[string]int{"conntrack-size": c.opts.ConntrackSize, "max-services": c.opts.MaxServices, "max-backends": c.opts.MaxBackends} {
		if set[name] && (v < 1 || v > 1<<24) {
			return c, fmt.Errorf("-%s %d: not in [1, 16777216]", name, v)
		}
	}
	if err := parseHealth(&c.health, health, healthPort, set); err != nil {
		return c, err
	}
	c.drained = drained
	var err error
	if c.svc.VIP, err = netip.ParseAddrPort(vip); err != nil {
		return c, fmt.Errorf("-vip: %v", err)
	}
	if err := parseBGP(&c.bgp, bgpASN, routerID, peers, c.svc.VIP.Addr(), set); err != nil {
		return c, err
	}
	switch proto {
	case "tcp":
		c.svc.Proto = xdpmaglev.TCP
	case "udp":
		c.svc.Proto = xdpmaglev.UDP
		c.warnings = append(c.warnings, fmt.Sprintf("-proto udp: TCP packets to %v pass to the kernel", c.svc.VIP))
	default:
		return c, fmt.Errorf("-proto %q: tcp or udp", proto)
	}
	if err := parseForward(&c, forward, encapSrc, uint16(guePort), set); err != nil {
		return c, err
	}
	seen := make(map[netip.Addr]bool, len(bs))
	for _, b := range bs {
		a := b.Addr.Unmap()
		if seen[a] {
			return c, fmt.Errorf("-backend %v: given twice", a)
		}
		seen[a] = true
		if c.fwd.Forward == xdpmaglev.ForwardL2 {
			continue
		}
		if b.HW != nil {
			return c, fmt.Errorf("-backend %v=%v: a MAC is for -forward l2; -forward %v sends to the backend's next hop by the routing table", a, b.HW, c.fwd.Forward)
		}
		if a.Is4() != c.svc.VIP.Addr().Unmap().Is4() {
			return c, fmt.Errorf("-backend %v: -forward %v encapsulates IPv4 in IPv4 and IPv6 in IPv6, and the VIP is %v", a, c.fwd.Forward, c.svc.VIP.Addr())
		}
	}
	c.fwd.M, c.opts.Seed, c.backends = m, seed, bs
	return c, nil
}

// parseForward sets c.fwd from -forward, -encap-src and -gue-port, for
// c.svc.
func parseForward(c *config, forward, encapSrc string, guePort uint16, set map[string]bool) error {
	f, err := xdpmaglev.ParseForward(forward)
	if err != nil {
		return fmt.Errorf("-forward %q: l2, ipip or gue", forward)
	}
	c.fwd.Forward = f
	if set["gue-port"] && f != xdpmaglev.ForwardGUE {
		return fmt.Errorf("-gue-port needs -forward gue (or -decap), not -forward %v", f)
	}
	if f == xdpmaglev.ForwardGUE {
		c.fwd.GUEPort = guePort
	}
	if encapSrc == "" {
		return nil
	}
	if f == xdpmaglev.ForwardL2 {
		return errors.New("-encap-src needs -forward ipip or gue")
	}
	bits := 0 // of the source that vary per flow
	var src netip.Addr
	if strings.Contains(encapSrc, "/") {
		p, err := netip.ParsePrefix(encapSrc)
		if err != nil {
			return fmt.Errorf("-encap-src: %v", err)
		}
		src, bits = p.Addr().Unmap(), p.Addr().BitLen()-p.Bits()
		switch {
		case p.Masked() != p:
			return fmt.Errorf("-encap-src %v: not a prefix's first address (%v)", p, p.Masked())
		case bits > xdpmaglev.MaxSourceBits:
			return fmt.Errorf("-encap-src %v: a prefix of at most %d addresses (/%d for %v)", p, 1<<xdpmaglev.MaxSourceBits, src.BitLen()-xdpmaglev.MaxSourceBits, src)
		}
	} else {
		a, err := netip.ParseAddr(encapSrc)
		if err != nil {
			return fmt.Errorf("-encap-src: %v", err)
		}
		src = a.Unmap()
	}
	vip := c.svc.VIP.Addr().Unmap()
	switch {
	case src.Zone() != "":
		return fmt.Errorf("-encap-src %v: an address without a zone", src)
	case !src.IsGlobalUnicast():
		return fmt.Errorf("-encap-src %v: not a unicast address", src)
	case src.Is4() != vip.Is4():
		return fmt.Errorf("-encap-src %v: not of the VIP's family (%v): IPv4 is encapsulated in IPv4, IPv6 in IPv6", src, vip)
	}
	c.fwd.Source, c.fwd.SourceBits = src, uint8(bits)
	return nil
}

// parseHealth checks -health and the -health-* flags, and fills in h;
// with -health none, h stays without a kind and no -health-* flag may be
// set.
func parseHealth(h *checker.Config, kind string, port int, set map[string]bool) error {
	switch kind {
	case "none":
		for _, name := range healthFlags {
			if set[name] {
				return fmt.Errorf("-%s needs -health tcp or http", name)
			}
		}
		*h = checker.Config{}
		return nil
	case "tcp":
		for _, name := range []string{"health-path", "health-status"} {
			if set[name] {
				return fmt.Errorf("-%s needs -health http, not -health tcp", name)
			}
		}
		h.Path, h.Status = "", 0
	case "http":
		if !strings.HasPrefix(h.Path, "/") {
			return fmt.Errorf("-health-path %q: a path, starting with /", h.Path)
		}
		if u, err := url.Parse(h.Path); err != nil || u.Path == "" || u.Host != "" || u.Scheme != "" || u.Fragment != "" {
			return fmt.Errorf("-health-path %q: not a URL path (and query)", h.Path)
		}
		if h.Status < 100 || h.Status > 599 {
			return fmt.Errorf("-health-status %d: not an HTTP status in [100, 599]", h.Status)
		}
	default:
		return fmt.Errorf("-health %q: none, tcp or http", kind)
	}
	h.Kind = kind
	switch {
	case set["health-port"] && (port < 1 || port > 65535):
		return fmt.Errorf("-health-port %d: not a port in [1, 65535]", port)
	case h.Interval <= 0:
		return fmt.Errorf("-health-interval %v: must be positive", h.Interval)
	case h.Timeout <= 0:
		return fmt.Errorf("-health-timeout %v: must be positive", h.Timeout)
	case h.Timeout > h.Interval:
		return fmt.Errorf("-health-timeout %v: at most -health-interval (%v), so that a backend's probes never overlap", h.Timeout, h.Interval)
	case h.Rise < 1:
		return fmt.Errorf("-health-rise %d: at least 1", h.Rise)
	case h.Fall < 1:
		return fmt.Errorf("-health-fall %d: at least 1", h.Fall)
	}
	h.Port = uint16(port)
	return nil
}

// healthFlags are the flags of the health check besides -health.
var healthFlags = []string{"health-path", "health-status", "health-port", "health-interval", "health-timeout", "health-rise", "health-fall"}

// lbOnly are the flags of the load balancer that -decap refuses.
var lbOnly = append([]string{"backend", "config", "conntrack-size", "max-services", "max-backends", "dns", "dns-interval", "drain", "drain-timeout", "encap-src", "etcd", "etcd-prefix",
	"flood-rate", "forward", "health", "k8s-service", "kubeconfig", "m", "proto", "seed", "bgp-asn", "pin-dir", "rebuild"}, append(healthFlags, bgpFlags...)...)

// parseDecap fills in c for -decap from -vip, the addresses,
// -decap-sources and -gue-port.
func parseDecap(c config, vip, sources string, guePort uint16, set map[string]bool) (config, error) {
	var bad []string
	for _, name := range lbOnly {
		if set[name] {
			bad = append(bad, "-"+name)
		}
	}
	if len(bad) > 0 {
		return c, fmt.Errorf("-decap cannot be used with %s: a backend's decapsulator does not load-balance", strings.Join(bad, ", "))
	}
	seen := map[netip.Addr]bool{}
	for _, s := range strings.Split(vip, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			if _, perr := netip.ParseAddrPort(s); perr == nil {
				return c, fmt.Errorf("-vip %q: -decap takes addresses, without a port", s)
			}
			return c, fmt.Errorf("-vip %q: %v", s, err)
		}
		a = a.Unmap()
		if a.Zone() != "" {
			return c, fmt.Errorf("-vip %v: an address without a zone", a)
		}
		if seen[a] {
			return c, fmt.Errorf("-vip %v: given twice", a)
		}
		seen[a] = true
		c.dopts.VIPs = append(c.dopts.VIPs, a)
	}
	var err error
	if c.dopts.Sources, err = parseSources(sources); err != nil {
		return c, err
	}
	c.dopts.GUEPort, c.dopts.Mode = guePort, c.opts.Mode
	return c, nil
}

// parseSources parses -decap-sources: prefixes (or addresses, each its
// own /32 or /128), comma-separated, or "any", every source.
func parseSources(s string) ([]netip.Prefix, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("-decap needs -decap-sources: the prefixes of the load balancers' outer source addresses (their -encap-src), or \"any\" to trust every source, which lets anyone who can reach this host send packets to the VIPs from any source address")
	}
	if strings.TrimSpace(s) == "any" {
		return []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}, nil
	}
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("-decap-sources %q: neither a prefix nor an address", f)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Zone() != "" {
			return nil, fmt.Errorf("-decap-sources %v: a prefix without a zone", p)
		}
		if p.Masked() != p {
			return nil, fmt.Errorf("-decap-sources %v: not a prefix's first address (%v)", p, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

// run is l4lb with the command line args: -version and -detach print on
// stdout; everything else logs on stderr, once the log format is known
// (from the flags, or from the -config file). An error run has logged is
// a loggedError; one before the log format was known is not.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parse(args, stderr)
	if err != nil {
		return err
	}
	if c.version {
		_, err := fmt.Fprintln(stdout, ops.ReadBuild().Line("l4lb"))
		return err
	}
	if c.pin.detach {
		return runDetach(c, stdout)
	}
	g, svcs := c.global, []serviceConfig{c.serviceConfig}
	if c.file != "" {
		if g, svcs, err = loadFile(c.file); err != nil {
			return err
		}
		g.pin.rebuild = c.pin.rebuild // beside -config, not in the file: a one-off
	}
	log := newLogger(g.logFmt, stderr)
	for _, w := range g.warnings {
		log.Warn(w)
	}
	if c.decap {
		err = runDecap(ctx, c, log)
	} else {
		err = runLB(ctx, g, svcs, log)
	}
	if err != nil {
		log.Error(err.Error())
		return loggedError{err}
	}
	return nil
}

// runLB is the load balancer of g's settings and the services svcs, until
// SIGINT or SIGTERM (ctx), or POST /drain-lb.
func runLB(ctx context.Context, g global, svcs []serviceConfig, log *slog.Logger) error {
	for _, s := range svcs {
		if w := forwardingOff(g.iface, s.svc, s.fwd.Forward); w != "" {
			log.Warn(w)
		}
	}
	pm, err := ops.NewMetrics("l4lb", ops.ReadBuild())
	if err != nil {
		return err
	}
	defer pm.Close()
	g.opts.MeterProvider = pm.Provider
	g.opts.PinPath, g.opts.Rebuild = g.pin.path(g.iface, log), g.pin.rebuild
	var bal atomic.Pointer[balancer] // for Changed, which the data plane may call before the balancer is made
	g.opts.Changed = func(svc xdpmaglev.Service) {
		if b := bal.Load(); b != nil {
			b.resolved(svc)
		}
	}
	lb, err := xdpmaglev.Load(g.iface, g.opts)
	if err != nil {
		return loadError(err, g.iface)
	}
	defer release(lb) // on an error; the normal path leaves it below
	var sp *bgp.Speaker
	if g.bgp.ASN != 0 {
		if sp, err = bgp.New(g.bgp, pm.Provider.Meter(meterScope), log); err != nil {
			return err
		}
		defer sp.StopServer(false) // on an error, with no drain; after sp.Restart or sp.Retire, nothing
		log.Info(fmt.Sprintf("bgp: %v", g.bgp))
	}
	b, err := newBalancer(ctx, lb, pm.Provider, sp, log)
	if err != nil {
		return err
	}
	bal.Store(b)
	b.iface = g.iface
	adopted(lb, b, log)
	defer b.close()
	if g.file != "" {
		log.Info(fmt.Sprintf("attached to %s (%v), services from %s", g.iface, lb.Mode(), g.file))
	}
	did, err := b.apply(svcs)
	if err != nil {
		return err
	}
	if err := prune(lb, b, log); err != nil {
		return err
	}
	var reload func() (string, error)
	if g.file != "" {
		log.Info(did)
		reload = func() (string, error) {
			ng, nsvcs, err := loadFile(g.file)
			if err == nil {
				err = sameGlobal(g, ng)
			}
			if err == nil {
				did, err = b.apply(nsvcs)
			}
			if err != nil {
				log.Warn(fmt.Sprintf("reload refused, the running configuration stays: %v", err))
				return "", err
			}
			log.Info(fmt.Sprintf("reloaded %s: %s", g.file, did))
			return did, nil
		}
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					_, _ = reload() // its record says how it went
				}
			}
		}()
	}

	if sp != nil {
		if err := sp.Connect(); err != nil { // once every service has its first state
			return err
		}
	}

	if g.admin != "" {
		mux := http.NewServeMux()
		b.register(mux, reload)
		mux.Handle("/metrics", pm.Handler)
		a, err := ops.ServeAdmin(g.admin, mux)
		if err != nil {
			return err
		}
		defer func() { _ = a.Close() }()
		log.Info(fmt.Sprintf("admin on http://%s/debug/maglev", a.Addr()))
	}
	go watchDriver(ctx, lb, g.iface, driverEvery, log)
	retired := false
	select {
	case <-ctx.Done(): // SIGINT or SIGTERM: a restart
		if sp != nil {
			sp.Restart() // the routers keep the paths (graceful restart), or they are withdrawn and drained
		}
	case <-sp.OutOfService(): // POST /drain-lb: withdrawn, drained, the sessions closed
		retired = true
	}
	b.close()
	if retired {
		return detach(lb, g.iface, log) // out of service: the program and the pins go
	}
	return leave(lb, g.iface, log) // the data plane stays, pinned, for the next l4lb
}

// sameGlobal returns an error naming the first of the load balancer's own
// settings that differs between the running configuration a and the file
// read again, b: those take a restart.
func sameGlobal(a, b global) error {
	for _, d := range []struct {
		key  string
		x, y any
	}{
		{"iface", a.iface, b.iface},
		{"mode", a.opts.Mode, b.opts.Mode},
		{"seed", a.opts.Seed, b.opts.Seed},
		{"flood-rate", a.opts.FloodRate, b.opts.FloodRate},
		{"conntrack-size", a.opts.ConntrackSize, b.opts.ConntrackSize},
		{"max-services", a.opts.MaxServices, b.opts.MaxServices},
		{"max-backends", a.opts.MaxBackends, b.opts.MaxBackends},
		{"admin", a.admin, b.admin},
		{"pin-dir", a.pin.dir, b.pin.dir},
		{"log-format", a.logFmt, b.logFmt},
		{"bgp-*", fmt.Sprint(a.bgp, a.bgp.ListenPort), fmt.Sprint(b.bgp, b.bgp.ListenPort)},
	} {
		if d.x != d.y {
			return fmt.Errorf("%w: %s: %v, running with %v: the load balancer's own settings take a restart", ErrConfig, d.key, d.y, d.x)
		}
	}
	return nil
}

// by returns how packets reach the backends, for the first status line:
// "" for -forward l2, " by ipip" or " by gue".
func by(f xdpmaglev.ServiceOptions) string {
	if f.Forward == xdpmaglev.ForwardL2 {
		return ""
	}
	return " by " + f.Forward.String()
}

// forwardingOff returns a warning if the encapsulating mode f cannot route
// svc's packets out of iface because the kernel does not forward there
// (bpf_fib_lookup then refuses, and the packets are dropped as
// forwarding_off), or "".
func forwardingOff(iface string, svc xdpmaglev.Service, f xdpmaglev.Forward) string {
	if f == xdpmaglev.ForwardL2 {
		return ""
	}
	// IPv4 asks the receiving interface's setting, IPv6 the global one.
	key := "net/ipv4/conf/" + iface + "/forwarding"
	all := "net.ipv4.conf.all.forwarding"
	if !svc.VIP.Addr().Unmap().Is4() {
		key, all = "net/ipv6/conf/all/forwarding", "net.ipv6.conf.all.forwarding"
	}
	b, err := os.ReadFile("/proc/sys/" + key)
	if err != nil || strings.TrimSpace(string(b)) != "0" {
		return "" // unknown, or on
	}
	return fmt.Sprintf("-forward %v: %s is 0: the kernel's route lookup refuses, and %v's packets are dropped (forwarding_off); sysctl -w %s=1",
		f, strings.ReplaceAll(key, "/", "."), svc, all)
}
