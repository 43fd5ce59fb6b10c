package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/checker"
	"github.com/maglevlb/maglev/quiclb"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// The builders: Global, Service and Decap of the settings given, checked.
// A command line and a configuration file build through them alike; each
// error is a setting.Error of the setting at fault, its text naming it as
// its flag ("-health-rise 0: at least 1").

// buildGlobal returns the load balancer's settings of vs.
func buildGlobal(vs *setting.Values) (Global, error) {
	g := Global{Iface: iface.Get(vs), Admin: admin.Get(vs), LogFormat: logFormat.Get(vs), vals: vs}
	if g.LogFormat != "text" && g.LogFormat != "json" {
		return g, setting.Errorf(logFormat.Setting, "-log-format %q: text or json", g.LogFormat)
	}
	g.Pin = Pin{Dir: pinDir.Get(vs), Explicit: vs.Given(pinDir.Setting), Rebuild: rebuild.Get(vs)}
	g.Handoff = Handoff{StateFile: stateFile.Get(vs), Listen: handoffListen.Get(vs), Peers: handoffPeers.Get(vs)}
	if l := g.Handoff.Listen; l != "" {
		if _, port, err := net.SplitHostPort(l); err != nil || port == "" {
			return g, setting.Errorf(handoffListen.Setting, "-handoff-listen %q: not [HOST]:PORT", l)
		}
	}
	if g.Pin.Rebuild && g.Pin.Dir == "" {
		return g, setting.Errorf(rebuild.Setting, "-rebuild needs a -pin-dir")
	}
	var err error
	if g.Opts.Mode, err = attachMode(vs); err != nil {
		return g, err
	}
	g.Opts.Seed = seed.Get(vs)
	if err := loadOptions(vs, &g.Opts); err != nil {
		return g, err
	}
	if g.BGP, err = buildBGP(vs); err != nil {
		return g, err
	}
	g.K8s, err = buildK8s(vs)
	return g, err
}

// loadOptions sets the data plane's flood guard and sizes of o from vs,
// checked by xdpmaglev (Options.Validate) one after the other, so that
// the first refused is the setting at fault.
func loadOptions(vs *setting.Values, o *xdpmaglev.Options) error {
	for _, s := range []struct {
		o *setting.Of[int]
		v *int
	}{{&floodRate, &o.FloodRate}, {&conntrackSize, &o.ConntrackSize}, {&maxServices, &o.MaxServices}, {&maxBackends, &o.MaxBackends}} {
		*s.v = s.o.Get(vs)
		if err := o.Validate(); err != nil {
			return setting.Errorf(s.o.Setting, "-%s %d: %v", s.o.Name, *s.v, err)
		}
	}
	return nil
}

// attachMode returns the attach mode of vs.
func attachMode(vs *setting.Values) (xdpmaglev.AttachMode, error) {
	switch m := mode.Get(vs); m {
	case "auto":
		return xdpmaglev.AttachAuto, nil
	case "native":
		return xdpmaglev.AttachNative, nil
	case "generic":
		return xdpmaglev.AttachGeneric, nil
	default:
		return 0, setting.Errorf(mode.Setting, "-mode %q: auto, native or generic", m)
	}
}

// bgpSettings are the settings of the BGP speaker besides bgp-asn.
var bgpSettings = []*setting.Setting{bgpRouterID.Setting, bgpPeer.Setting, bgpListenPort.Setting, bgpHold.Setting, bgpRestartTime.Setting, bgpDrain.Setting,
	bgpBFD.Setting, bgpBFDInterval.Setting, bgpBFDMultiplier.Setting}

// buildBGP returns the BGP speaker's settings of vs; without bgp-asn no
// other bgp-* setting may be given. The peers' family is the services'
// to check (checkPeers).
func buildBGP(vs *setting.Values) (bgp.Config, error) {
	if !vs.Given(bgpASN.Setting) {
		for _, s := range bgpSettings {
			if vs.Given(s) {
				return bgp.Config{}, setting.Errorf(s, "-%s needs -bgp-asn", s.Name)
			}
		}
		return bgp.Config{}, nil
	}
	b := bgp.Config{ListenPort: bgpListenPort.Get(vs), Hold: bgpHold.Get(vs), Restart: bgpRestartTime.Get(vs), Drain: bgpDrain.Get(vs)}
	n, err := bgp.ParseASN(bgpASN.Get(vs))
	if err != nil {
		return b, setting.Errorf(bgpASN.Setting, "-bgp-asn: %v", err)
	}
	b.ASN = n
	if b.RouterID, err = netip.ParseAddr(bgpRouterID.Get(vs)); err != nil || !b.RouterID.Is4() {
		return b, setting.Errorf(bgpRouterID.Setting, "-bgp-router-id %q: an IPv4 address (the BGP identifier, often the load balancer's address)", bgpRouterID.Get(vs))
	}
	if b.Peers = bgpPeer.Get(vs); len(b.Peers) == 0 {
		return b, setting.Errorf(bgpASN.Setting, "-bgp-asn needs a -bgp-peer ADDR,ASN to announce to")
	}
	switch {
	case b.ListenPort != -1 && (b.ListenPort < 1 || b.ListenPort > 65535):
		return b, setting.Errorf(bgpListenPort.Setting, "-bgp-listen-port %d: a port in [1, 65535], or -1 for none", b.ListenPort)
	case b.Hold != 0 && (b.Hold < 3*time.Second || b.Hold > 65535*time.Second || b.Hold%time.Second != 0):
		return b, setting.Errorf(bgpHold.Setting, "-bgp-hold %v: 0 or whole seconds in [3s, 65535s] (RFC 4271)", b.Hold)
	case b.Restart != 0 && (b.Restart < time.Second || b.Restart > bgp.MaxRestartTime || b.Restart%time.Second != 0):
		return b, setting.Errorf(bgpRestartTime.Setting, "-bgp-restart-time %gs: 0 (no graceful restart) or whole seconds in [1s, %gs] (RFC 4724's 12 bits)", b.Restart.Seconds(), bgp.MaxRestartTime.Seconds())
	case b.Drain < 0:
		return b, setting.Errorf(bgpDrain.Setting, "-bgp-drain %v: must not be negative", b.Drain)
	}
	return b, buildBFD(vs, &b)
}

// buildBFD sets b's BFD from vs: -bgp-bfd-interval and
// -bgp-bfd-multiplier need -bgp-bfd, and are checked against what a BFD
// control packet carries (RFC 5880, 4.1).
func buildBFD(vs *setting.Values, b *bgp.Config) error {
	if !bgpBFD.Get(vs) {
		for _, s := range []*setting.Setting{bgpBFDInterval.Setting, bgpBFDMultiplier.Setting} {
			if vs.Given(s) {
				return setting.Errorf(s, "-%s needs -bgp-bfd", s.Name)
			}
		}
		return nil
	}
	b.BFD = bgp.BFD{On: true, Interval: bgpBFDInterval.Get(vs), Multiplier: bgpBFDMultiplier.Get(vs)}
	if i := b.BFD.Interval; i < bgp.MinBFDInterval || i > bgp.MaxBFDInterval || i%time.Microsecond != 0 {
		return setting.Errorf(bgpBFDInterval.Setting, "-bgp-bfd-interval %v: whole microseconds in [%v, %gs] (RFC 5880's 32 bits of microseconds; below %v a busy machine's delays look like failures)",
			i, bgp.MinBFDInterval, bgp.MaxBFDInterval.Seconds(), bgp.MinBFDInterval)
	}
	if m := b.BFD.Multiplier; m < 1 || m > bgp.MaxBFDMultiplier {
		return setting.Errorf(bgpBFDMultiplier.Setting, "-bgp-bfd-multiplier %d: a number in [1, %d] (RFC 5880's 8 bits, not 0)", m, bgp.MaxBFDMultiplier)
	}
	return nil
}

// checkPeers checks that b's peers are of the family of the service's
// VIP: the next hop announced is l4lb's address on the session.
func checkPeers(b bgp.Config, vip netip.Addr) error {
	for _, p := range b.Peers {
		if p.Addr.Is4() != vip.Unmap().Is4() {
			return setting.Errorf(bgpPeer.Setting, "-bgp-peer %v: not of the VIP's family (%v): the next hop announced is l4lb's address on the session", p, vip)
		}
	}
	return nil
}

// buildService returns the service of vs named svcName, of the load
// balancer g, and the warnings it gives.
func buildService(vs *setting.Values, g Global, svcName string) (Service, []string, error) {
	c := Service{Name: svcName, Src: sources.With(vs), Drained: drain.Get(vs), Timeout: drainTimeout.Get(vs)}
	c.Settings, c.SrcSettings = identity(vs)
	if g.Iface == "" || vip.Get(vs) == "" {
		at := vip.Setting // a file's line: the vip's, or the service's
		if g.Iface == "" {
			at = iface.Setting
		}
		return c, nil, setting.Errorf(at, "-iface and -vip are required")
	}
	if p := guePort.Get(vs); p < 1 || p > 65535 {
		return c, nil, setting.Errorf(guePort.Setting, "-gue-port %d: not a port in [1, 65535]", p)
	}
	static := ""
	if len(backends.Get(vs)) > 0 {
		static = "-backend"
	}
	if err := c.Src.Check(static); err != nil {
		return c, nil, err
	}
	if err := checkService(vs); err != nil {
		return c, nil, err
	}
	var err error
	if c.Health, err = buildHealth(vs); err != nil {
		return c, nil, err
	}
	if c.Svc.VIP, err = netip.ParseAddrPort(vip.Get(vs)); err != nil {
		return c, nil, setting.Errorf(vip.Setting, "-vip: %v", err)
	}
	if err := checkPeers(g.BGP, c.Svc.VIP.Addr()); err != nil {
		return c, nil, err
	}
	var warnings []string
	switch p := proto.Get(vs); p {
	case "tcp":
		c.Svc.Proto = xdpmaglev.TCP
	case "udp":
		c.Svc.Proto = xdpmaglev.UDP
		warnings = append(warnings, fmt.Sprintf("-proto udp: TCP packets to %v pass to the kernel", c.Svc.VIP))
	default:
		return c, nil, setting.Errorf(proto.Setting, "-proto %q: tcp or udp", p)
	}
	if err := (xdpmaglev.ServiceOptions{}).Validate(c.Svc, nil); err != nil {
		return c, nil, setting.Errorf(vip.Setting, "-vip %v: %v", c.Svc.VIP, err)
	}
	if c.Fwd, err = buildForward(vs, c.Svc); err != nil {
		return c, nil, err
	}
	if c.Fwd.SecondChance, c.Fwd.Conntrack, err = buildFlows(vs, c.Svc, c.Fwd.Forward); err != nil {
		return c, nil, err
	}
	bs, err := checkBackends(vs, c.Svc, c.Fwd.Forward)
	if err != nil {
		return c, nil, err
	}
	for _, b := range bs {
		c.Backends = append(c.Backends, b.Backend)
	}
	var qw []string
	if c.QUIC, qw, err = buildQUIC(vs, c.Svc, bs); err != nil {
		return c, nil, err
	}
	warnings = append(warnings, qw...)
	if c.QUIC != nil && len(c.QUIC.Config.Key) > 0 {
		// The key file's contents are part of the service: a reload that
		// finds a new key there changes it, as a new path would.
		sum := sha256.Sum256(c.QUIC.Config.Key)
		c.Settings += "\x00quic-lb-key=" + hex.EncodeToString(sum[:8])
	}
	if vs.Given(tableSize.Setting) {
		c.Fwd.M = tableSize.Get(vs) // else 0: the LB's, maglev.DefaultSize, the setting's default
	}
	return c, warnings, nil
}

// quicSettings are the settings of QUIC-LB besides quic-lb.
var quicSettings = []*setting.Setting{quicLBConfigID.Setting, quicLBServerIDLength.Setting, quicLBNonceLength.Setting, quicLBKeyFile.Setting}

// buildQUIC returns the QUIC-LB of svc, of backends bs (nil with quic-lb
// off, when no other quic-lb-* setting and no server-id may be given),
// and its warnings: a backend without a server ID gets only what the
// table sends it. xdpmaglev checks the service's protocol and the server
// IDs (ServiceOptions.Validate).
func buildQUIC(vs *setting.Values, svc xdpmaglev.Service, bs []Backend) (*QUIC, []string, error) {
	if !quicLB.Get(vs) {
		for _, s := range quicSettings {
			if vs.Given(s) {
				return nil, nil, setting.Errorf(s, "-%s needs -quic-lb", s.Name)
			}
		}
		for _, b := range bs {
			if b.ServerID.Len() > 0 {
				return nil, nil, setting.Errorf(backends.Setting, "-backend %v@%v: a server ID is for -quic-lb", b.Addr, b.ServerID)
			}
		}
		return nil, nil, nil
	}
	q := &QUIC{KeyFile: quicLBKeyFile.Get(vs), ServerIDs: map[netip.Addr]quiclb.ServerID{}}
	id, sidLen := quicLBConfigID.Get(vs), quicLBServerIDLength.Get(vs)
	switch {
	case id < 0 || id >= quiclb.Unroutable:
		return nil, nil, setting.Errorf(quicLBConfigID.Setting, "-quic-lb-config-id %d: 0 to 6 (7 marks unroutable connection IDs)", id)
	case sidLen < quiclb.MinServerIDLen || sidLen > quiclb.MaxServerIDLen:
		return nil, nil, setting.Errorf(quicLBServerIDLength.Setting, "-quic-lb-server-id-length %d: 1 to %d", sidLen, quiclb.MaxServerIDLen)
	}
	nonce := max(quiclb.MinNonceLen, 16-sidLen)
	if vs.Given(quicLBNonceLength.Setting) {
		nonce = quicLBNonceLength.Get(vs)
	}
	if nonce < quiclb.MinNonceLen || nonce > quiclb.MaxNonceLen || sidLen+nonce > quiclb.MaxBlockLen {
		return nil, nil, setting.Errorf(quicLBNonceLength.Setting, "-quic-lb-nonce-length %d: 4 to 18, and with -quic-lb-server-id-length (%d) 19 at most", nonce, sidLen)
	}
	q.Config = quiclb.Config{ID: uint8(id), ServerIDLen: sidLen, NonceLen: nonce}
	if q.KeyFile != "" {
		b, err := os.ReadFile(q.KeyFile)
		if err != nil {
			return nil, nil, setting.Errorf(quicLBKeyFile.Setting, "-quic-lb-key-file: %v", err)
		}
		if q.Config.Key, err = quiclb.ParseKey(string(b)); err != nil {
			return nil, nil, setting.Errorf(quicLBKeyFile.Setting, "-quic-lb-key-file %s: %v", q.KeyFile, err)
		}
	}
	xq := &xdpmaglev.QUIC{Configs: []xdpmaglev.QUICConfig{{Config: q.Config}}}
	if err := (xdpmaglev.ServiceOptions{QUIC: xq}).Validate(svc, nil); err != nil {
		return nil, nil, setting.Errorf(quicLB.Setting, "-quic-lb: %v", err)
	}
	var warnings []string
	xbs := make([]xdpmaglev.Backend, len(bs))
	for i, b := range bs {
		xbs[i] = b.Backend
		if b.ServerID.Len() == 0 {
			warnings = append(warnings, fmt.Sprintf("-backend %v has no server ID (@SERVERID): its QUIC connections are routed by the table alone, and break when their clients move", b.Addr.Unmap()))
			continue
		}
		q.ServerIDs[b.Addr.Unmap()] = b.ServerID
	}
	xq.Configs[0].ServerIDs = q.ServerIDs
	if err := (xdpmaglev.ServiceOptions{QUIC: xq}).Validate(svc, xbs); err != nil {
		return nil, nil, setting.Errorf(backends.Setting, "-backend: %v", err)
	}
	return q, warnings, nil
}

// checkService checks the drain timeout and the table size.
func checkService(vs *setting.Values) error {
	if drainTimeout.Get(vs) < 0 {
		return setting.Errorf(drainTimeout.Setting, "-drain-timeout must not be negative")
	}
	if m := tableSize.Get(vs); vs.Given(tableSize.Setting) && maglev.CheckSize(m) != nil {
		return setting.Errorf(tableSize.Setting, "-m %d: %v", m, maglev.CheckSize(m))
	}
	return nil
}

// identity returns the text of the service's settings given, and of its
// membership source's: equal texts are equal services.
func identity(vs *setting.Values) (all, src string) {
	var a, s []string
	for _, st := range table {
		if st.FlagOnly || st.KeyOnly || !vs.Given(st) || (st.Scope != setting.Service && st.Scope != setting.Source && st.Scope != setting.Health) {
			continue
		}
		v := st.Name + "=" + vs.Format(st)
		a = append(a, v)
		if st.Scope == setting.Source {
			s = append(s, v)
		}
	}
	return strings.Join(a, "\x00"), strings.Join(s, "\x00")
}

// checkBackends returns the backends of vs, checked by xdpmaglev for svc
// forwarded by f (each given once, of the VIP's family for an
// encapsulating forward), with no MAC for an encapsulating forward.
func checkBackends(vs *setting.Values, svc xdpmaglev.Service, f xdpmaglev.Forward) ([]Backend, error) {
	bs := backends.Get(vs)
	xs := make([]xdpmaglev.Backend, len(bs))
	for i, b := range bs {
		if f != xdpmaglev.ForwardL2 && b.HW != nil {
			return nil, setting.Errorf(backends.Setting, "-backend %v=%v: a MAC is for -forward l2; -forward %v sends to the backend's next hop by the routing table", b.Addr.Unmap(), b.HW, f)
		}
		xs[i] = b.Backend
	}
	if err := (xdpmaglev.ServiceOptions{Forward: f}).Validate(svc, xs); err != nil {
		return nil, setting.Errorf(backends.Setting, "-backend: %v", err)
	}
	return bs, nil
}

// buildForward returns how svc's packets reach its backends: forward,
// encap-src (checked by xdpmaglev) and gue-port.
func buildForward(vs *setting.Values, svc xdpmaglev.Service) (xdpmaglev.ServiceOptions, error) {
	var o xdpmaglev.ServiceOptions
	f, err := xdpmaglev.ParseForward(forward.Get(vs))
	if err != nil {
		return o, setting.Errorf(forward.Setting, "-forward %q: l2, ipip or gue", forward.Get(vs))
	}
	o.Forward = f
	if vs.Given(guePort.Setting) && f != xdpmaglev.ForwardGUE {
		return o, setting.Errorf(guePort.Setting, "-gue-port needs -forward gue (or l4lb decap), not -forward %v", f)
	}
	if f == xdpmaglev.ForwardGUE {
		o.GUEPort = uint16(guePort.Get(vs))
	}
	src := encapSrc.Get(vs)
	if src == "" {
		return o, nil
	}
	if f == xdpmaglev.ForwardL2 {
		return o, setting.Errorf(encapSrc.Setting, "-encap-src needs -forward ipip or gue")
	}
	if o.Source, o.SourceBits, err = parseEncapSrc(src); err != nil {
		return o, err
	}
	if err := o.Validate(svc, nil); err != nil {
		return o, setting.Errorf(encapSrc.Setting, "-encap-src %s: %v", src, err)
	}
	return o, nil
}

// maxWindow is the longest second-chance-window: a year, which the data
// plane's clock of seconds holds with room to spare.
const maxWindow = 365 * 24 * time.Hour

// buildFlows returns how svc keeps its flows on their backends, with
// forwarding f: its second chance window (second-chance and
// second-chance-window; 0 with second chance off, on by default for
// -forward gue alone, checked by xdpmaglev) and its connection tracking
// (conntrack). The window is checked where second chance is off too, and
// ignored there.
func buildFlows(vs *setting.Values, svc xdpmaglev.Service, f xdpmaglev.Forward) (time.Duration, xdpmaglev.ConntrackMode, error) {
	mode := xdpmaglev.ConntrackOn
	if !conntrack.Get(vs) {
		mode = xdpmaglev.ConntrackOff
	}
	window := secondChanceWindow.Get(vs)
	if window <= 0 || window > maxWindow {
		return 0, mode, setting.Errorf(secondChanceWindow.Setting, "-second-chance-window %v: must be positive, and at most %v (a year)", window, maxWindow)
	}
	on := f == xdpmaglev.ForwardGUE
	if vs.Given(secondChance.Setting) {
		on = secondChance.Get(vs)
	}
	if !on {
		return 0, mode, nil
	}
	if err := (xdpmaglev.ServiceOptions{Forward: f, SecondChance: window}).Validate(svc, nil); err != nil {
		return 0, mode, setting.Errorf(secondChance.Setting, "-second-chance with -forward %v: %v", f, err)
	}
	return window, mode, nil
}

// parseEncapSrc parses encap-src, a unicast address or a prefix, whose
// bits below the prefix's length vary per flow.
func parseEncapSrc(s string) (netip.Addr, uint8, error) {
	bits := 0 // of the source that vary per flow
	var src netip.Addr
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return src, 0, setting.Errorf(encapSrc.Setting, "-encap-src: %v", err)
		}
		src, bits = p.Addr().Unmap(), p.Addr().BitLen()-p.Bits()
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return src, 0, setting.Errorf(encapSrc.Setting, "-encap-src: %v", err)
		}
		src = a.Unmap()
	}
	switch {
	case src.Zone() != "":
		return src, 0, setting.Errorf(encapSrc.Setting, "-encap-src %v: an address without a zone", src)
	case !src.IsGlobalUnicast():
		return src, 0, setting.Errorf(encapSrc.Setting, "-encap-src %v: not a unicast address", src)
	}
	return src, uint8(bits), nil
}

// healthSettings are the settings of the health check besides health.
var healthSettings = []*setting.Setting{healthPath.Setting, healthStatus.Setting, healthPort.Setting, healthInterval.Setting, healthTimeout.Setting, healthRise.Setting, healthFall.Setting}

// buildHealth returns the health check of vs; with health none, no
// health-* setting may be given.
func buildHealth(vs *setting.Values) (checker.Config, error) {
	h := checker.Config{Path: healthPath.Get(vs), Status: healthStatus.Get(vs), Interval: healthInterval.Get(vs),
		Timeout: healthTimeout.Get(vs), Rise: healthRise.Get(vs), Fall: healthFall.Get(vs)}
	switch kind := healthKind.Get(vs); kind {
	case "none":
		for _, s := range healthSettings {
			if vs.Given(s) {
				return checker.Config{}, setting.Errorf(s, "-%s needs -health tcp or http", s.Name)
			}
		}
		return checker.Config{}, nil
	case "tcp":
		for _, s := range []*setting.Setting{healthPath.Setting, healthStatus.Setting} {
			if vs.Given(s) {
				return h, setting.Errorf(s, "-%s needs -health http, not -health tcp", s.Name)
			}
		}
		h.Path, h.Status = "", 0
	case "http":
		if err := checkHTTP(h); err != nil {
			return h, err
		}
	default:
		return h, setting.Errorf(healthKind.Setting, "-health %q: none, tcp or http", kind)
	}
	h.Kind = healthKind.Get(vs)
	port := healthPort.Get(vs)
	switch {
	case vs.Given(healthPort.Setting) && (port < 1 || port > 65535):
		return h, setting.Errorf(healthPort.Setting, "-health-port %d: not a port in [1, 65535]", port)
	case h.Interval <= 0:
		return h, setting.Errorf(healthInterval.Setting, "-health-interval %v: must be positive", h.Interval)
	case h.Timeout <= 0:
		return h, setting.Errorf(healthTimeout.Setting, "-health-timeout %v: must be positive", h.Timeout)
	case h.Timeout > h.Interval:
		return h, setting.Errorf(healthTimeout.Setting, "-health-timeout %v: at most -health-interval (%v), so that a backend's probes never overlap", h.Timeout, h.Interval)
	case h.Rise < 1:
		return h, setting.Errorf(healthRise.Setting, "-health-rise %d: at least 1", h.Rise)
	case h.Fall < 1:
		return h, setting.Errorf(healthFall.Setting, "-health-fall %d: at least 1", h.Fall)
	}
	h.Port = uint16(port)
	return h, nil
}

// checkHTTP checks an http check's path and status.
func checkHTTP(h checker.Config) error {
	if !strings.HasPrefix(h.Path, "/") {
		return setting.Errorf(healthPath.Setting, "-health-path %q: a path, starting with /", h.Path)
	}
	if u, err := url.Parse(h.Path); err != nil || u.Path == "" || u.Host != "" || u.Scheme != "" || u.Fragment != "" {
		return setting.Errorf(healthPath.Setting, "-health-path %q: not a URL path (and query)", h.Path)
	}
	if h.Status < 100 || h.Status > 599 {
		return setting.Errorf(healthStatus.Setting, "-health-status %d: not an HTTP status in [100, 599]", h.Status)
	}
	return nil
}

// Decap is l4lb decap's configuration: the decapsulator on Iface.
type Decap struct {
	Iface, Admin, LogFormat string
	Opts                    xdpmaglev.DecapOptions // VIPs, Sources, GUEPort, Mode
}

// buildDecap returns the decapsulator's settings of vs, for the command
// cmd (l4lb decap), which its errors name.
func buildDecap(vs *setting.Values, cmd string) (Decap, error) {
	d := Decap{Iface: iface.Get(vs), Admin: admin.Get(vs), LogFormat: logFormat.Get(vs)}
	if d.LogFormat != "text" && d.LogFormat != "json" {
		return d, setting.Errorf(logFormat.Setting, "-log-format %q: text or json", d.LogFormat)
	}
	if d.Iface == "" || decapVIP.Get(vs) == "" {
		return d, setting.Errorf(decapVIP.Setting, "-iface and -vip are required")
	}
	var err error
	if d.Opts.Mode, err = attachMode(vs); err != nil {
		return d, err
	}
	p := guePort.Get(vs)
	if p < 1 || p > 65535 {
		return d, setting.Errorf(guePort.Setting, "-gue-port %d: not a port in [1, 65535]", p)
	}
	d.Opts.GUEPort = uint16(p)
	if d.Opts.VIPs, err = decapVIPs(decapVIP.Get(vs), cmd); err != nil {
		return d, err
	}
	d.Opts.Sources, err = parseSources(decapSources.Get(vs), cmd)
	return d, err
}

// decapVIPs parses decap's vip: addresses and prefixes (each of its
// addresses, as a pool of a cluster's VIPs), comma-separated, at most
// xdpmaglev.MaxDecapVIPs addresses in all.
func decapVIPs(vips, cmd string) ([]netip.Addr, error) {
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, s := range strings.Split(vips, ",") {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			as, err := prefixAddrs(p)
			if err != nil {
				return nil, setting.Errorf(decapVIP.Setting, "-vip %s: %v", s, err)
			}
			for _, a := range as {
				if seen[a] {
					return nil, setting.Errorf(decapVIP.Setting, "-vip %v: given twice", a)
				}
				seen[a] = true
			}
			out = append(out, as...)
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			if _, perr := netip.ParseAddrPort(s); perr == nil {
				return nil, setting.Errorf(decapVIP.Setting, "-vip %q: %s takes addresses, without a port", s, cmd)
			}
			return nil, setting.Errorf(decapVIP.Setting, "-vip %q: %v", s, err)
		}
		a = a.Unmap()
		if a.Zone() != "" {
			return nil, setting.Errorf(decapVIP.Setting, "-vip %v: an address without a zone", a)
		}
		if seen[a] {
			return nil, setting.Errorf(decapVIP.Setting, "-vip %v: given twice", a)
		}
		seen[a] = true
		out = append(out, a)
	}
	if len(out) > xdpmaglev.MaxDecapVIPs {
		return nil, setting.Errorf(decapVIP.Setting, "-vip: %d addresses, at most %d", len(out), xdpmaglev.MaxDecapVIPs)
	}
	return out, nil
}

// prefixAddrs returns every address of p, masked and unmapped, if they
// are at most xdpmaglev.MaxDecapVIPs.
func prefixAddrs(p netip.Prefix) ([]netip.Addr, error) {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	p = p.Masked()
	if host := p.Addr().BitLen() - p.Bits(); host > 8 || 1<<host > xdpmaglev.MaxDecapVIPs {
		return nil, fmt.Errorf("a prefix of more than %d addresses", xdpmaglev.MaxDecapVIPs)
	}
	var out []netip.Addr
	for a := p.Addr(); a.IsValid() && p.Contains(a); a = a.Next() {
		out = append(out, a)
	}
	return out, nil
}

// parseSources parses decap-sources: prefixes (or addresses, each its own
// /32 or /128), comma-separated, or "any", every source.
func parseSources(s, cmd string) ([]netip.Prefix, error) {
	if strings.TrimSpace(s) == "" {
		return nil, setting.Errorf(decapSources.Setting, "%s needs -decap-sources: the prefixes of the load balancers' outer source addresses (their -encap-src), or \"any\" to trust every source, which lets anyone who can reach this host send packets to the VIPs from any source address", cmd)
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
				return nil, setting.Errorf(decapSources.Setting, "-decap-sources %q: neither a prefix nor an address", f)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Zone() != "" {
			return nil, setting.Errorf(decapSources.Setting, "-decap-sources %v: a prefix without a zone", p)
		}
		if p.Masked() != p {
			return nil, setting.Errorf(decapSources.Setting, "-decap-sources %v: not a prefix's first address (%v)", p, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}
