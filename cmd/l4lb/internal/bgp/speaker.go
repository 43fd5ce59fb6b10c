// Package bgp is l4lb's BGP speaker: GoBGP embedded, a session to each
// router, and each VIP announced as a host route (a /32 or /128, next hop
// l4lb's address on the session) while a service of it has a healthy
// backend, withdrawn when none has; graceful restart (RFC 4724) for
// l4lb's restarts, and the drain of a load balancer taken out of service.
// It owns the speaker's state (the VIPs' wishes and routes, the peers'
// sessions) and the BGP metrics (maglev.l4lb.bgp.*); the pools tell it
// each service's health through Set, and wait for nothing.
//
// Locking: Speaker.mu guards the VIPs' states and the peers' sessions and
// is never held across a call into GoBGP; rmu serializes the calls that
// change GoBGP's table (reconcile), which wait on no network. A caller
// may call Set with its own locks held.
package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/maglevlb/maglev/xdpmaglev"
	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Config is the BGP speaker's configuration, from the bgp-* settings.
// The zero value (ASN 0) speaks no BGP.
type Config struct {
	ASN        uint32     // the load balancer's AS; 0: no BGP
	RouterID   netip.Addr // an IPv4 address, the BGP identifier
	Peers      []Peer     // the routers to announce to
	ListenPort int        // the port it accepts sessions on; -1: none
	Hold       time.Duration
	Restart    time.Duration // the graceful restart time (RFC 4724) l4lb advertises; 0: no graceful restart
	Drain      time.Duration // between the withdrawal and the end of the sessions, when l4lb leaves the routers' paths
	BFD        BFD           // BFD on every session (RFC 5880, 5881)
}

// BFD is the speaker's BFD: single-hop BFD (RFC 5881: UDP port 3784,
// TTL 255) with each peer, by GoBGP, which resets a peer's BGP session
// when its BFD session fails; the router, with BFD on the session too,
// drops l4lb's routes when it hears nothing for Multiplier times
// Interval, not the hold time.
type BFD struct {
	On         bool
	Interval   time.Duration // the desired minimum transmit and required minimum receive intervals
	Multiplier int           // the detection time multiplier: a session fails after this many intervals of silence
}

// The bounds of BFD.Interval and BFD.Multiplier: the control packet's
// intervals are 32 bits of microseconds (RFC 5880, 4.1), its multiplier
// 8 bits and not 0; GoBGP's BFD runs on Go timers, and below 10 ms a busy
// machine's scheduling delays look like failures.
const (
	MinBFDInterval   = 10 * time.Millisecond
	MaxBFDInterval   = (1<<32 - 1) * time.Microsecond
	MaxBFDMultiplier = 255
)

// String describes BFD: "off", or "100ms x3": the interval and the
// multiplier.
func (b BFD) String() string {
	if !b.On {
		return "off"
	}
	return fmt.Sprintf("%v x%d", b.Interval, b.Multiplier)
}

// Detection returns how long a router waits, hearing nothing, before it
// takes the session down: the multiplier times the interval (RFC 5880,
// 6.8.4, with the router's intervals no longer than l4lb's).
func (b BFD) Detection() time.Duration { return time.Duration(b.Multiplier) * b.Interval }

// A Peer is a router l4lb announces its VIPs to.
type Peer struct {
	Addr netip.Addr
	ASN  uint32
}

func (p Peer) String() string { return fmt.Sprintf("%v (AS %d)", p.Addr, p.ASN) }

// ParsePeer parses a peer: ADDR,ASN (198.18.0.1,65000). The address is
// unmapped.
func ParsePeer(s string) (Peer, error) {
	addr, asn, ok := strings.Cut(s, ",")
	if !ok {
		return Peer{}, fmt.Errorf("%q: ADDR,ASN (198.18.0.1,65000)", s)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return Peer{}, err
	}
	n, err := ParseASN(asn)
	if err != nil {
		return Peer{}, err
	}
	return Peer{Addr: a.Unmap(), ASN: n}, nil
}

// ParseASN parses an AS number in [1, 2^32-1].
func ParseASN(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("AS %q: not a number in [1, 4294967295]", s)
	}
	return uint32(n), nil
}

// MaxRestartTime is the longest restart time the graceful restart
// capability carries: 12 bits of seconds.
const MaxRestartTime = 4095 * time.Second

// String describes the speaker: "AS 65001 (router ID 198.18.0.3) to
// 198.18.1.1 (AS 65000), hold 9s, graceful restart 120s, drain 2s", and
// ", BFD 100ms x3" with BFD.
func (b Config) String() string {
	var ps []string
	for _, p := range b.Peers {
		ps = append(ps, p.String())
	}
	gr := "no graceful restart"
	if b.Restart > 0 {
		gr = fmt.Sprintf("graceful restart %gs", b.Restart.Seconds())
	}
	bfd := ""
	if b.BFD.On {
		bfd = ", BFD " + b.BFD.String()
	}
	return fmt.Sprintf("AS %d (router ID %v) to %s, hold %v, %s, drain %v%s", b.ASN, b.RouterID, strings.Join(ps, ", "), b.Hold, gr, b.Drain, bfd)
}

// LogAttrs returns the speaker's settings as a log record's attributes:
// asn, router_id, peers ("198.18.1.1 (AS 65000)" each), hold, restart
// (0s: no graceful restart), drain and bfd ("off", or "100ms x3").
func (b Config) LogAttrs() []any {
	ps := make([]string, 0, len(b.Peers))
	for _, p := range b.Peers {
		ps = append(ps, p.String())
	}
	return []any{"asn", b.ASN, "router_id", b.RouterID.String(), "peers", ps,
		"hold", b.Hold.String(), "restart", b.Restart.String(), "drain", b.Drain.String(), "bfd", b.BFD.String()}
}

// A Speaker is l4lb's BGP: an embedded GoBGP server with a session to
// each peer, announcing each VIP it is told is healthy as a host route
// (/32 or /128) whose next hop is l4lb's address on the session, and
// withdrawing it when it is told it is not. set records what a VIP should
// be and waits for nothing; a goroutine of the speaker makes GoBGP's
// routing table agree, so that the pool, which calls set with its locks
// held, never waits on BGP.
//
// Its sessions negotiate graceful restart (RFC 4724) unless the restart
// time is 0, and l4lb opens them as a restarting speaker: a router that
// kept the paths of the l4lb before this one, as stale, keeps forwarding
// on them until this one's End-of-RIB, which follows its announcements.
// How it ends is one of: restart (SIGINT, SIGTERM: the sessions end with
// no NOTIFICATION, so that the routers keep the paths for the restart
// time; with BFD, or without graceful restart, as retire), retire (POST
// /drain-lb: withdraw every VIP, drain, then a Cease) or stopServer (an
// error at start). With BFD, a BFD session with each peer (watchBFD
// records them) lets a router drop a dead l4lb's paths in a detection
// time rather than the hold time.
//
// A speaker is safe for concurrent use by multiple goroutines. mu guards
// the VIPs' states and is never held across a call into GoBGP; rmu
// serializes the calls that change GoBGP's table (reconcile), which wait
// on no network.
type Speaker struct {
	cfg      Config
	s        *server.BgpServer
	log      *slog.Logger // the records of the sessions and the announcements
	reg      metric.Registration
	kick     chan struct{} // a VIP's wish changed
	quit     chan struct{} // closed by endLoop
	loopDone chan struct{} // closed when the goroutine has ended
	retired  chan struct{} // closed by retire once drained: the load balancer is out of service
	quitOnce sync.Once     // of endLoop
	stopped  chan struct{} // closed by StopServer: GoBGP is stopped
	stopOnce sync.Once     // of stopServer
	rmu      sync.Mutex    // serializes reconcile

	mu     sync.Mutex // guards the fields below
	vips   map[netip.Prefix]*announced
	peer   map[netip.Addr]*peerState
	leave  string    // why every VIP is withdrawn ("": l4lb is in service)
	leftAt time.Time // when l4lb began to leave, for /debug/maglev
}

// peerState is a session's state, from GoBGP's events. The speaker's mu
// guards it.
type peerState struct {
	state string // idle, connect, active, opensent, openconfirm or established
	gr    bool   // graceful restart negotiated: the router advertised it on the session
	// With BFD, its session as watchBFD last saw it: down, init, up or
	// admin_down, and the control packets received and sent.
	bfd          string
	bfdRx, bfdTx uint64
}

// announced is one VIP's route. The speaker's mu guards it.
type announced struct {
	wishes map[xdpmaglev.Service]wish // of the VIP's services
	want   bool                       // a service of the VIP has a healthy backend
	why    string                     // why want is what it is, for the log and the admin API
	path   uuid.UUID                  // GoBGP's path, if announced
	on     bool                       // in GoBGP's table, so announced to every established peer
	since  time.Time                  // of the last change of on
	family bgp.Family
	// announces and withdraws count the changes of on, for
	// maglev.l4lb.bgp.updates.
	announces, withdraws int64
}

// vipPrefix is the host route of a VIP: a /32 or a /128.
func vipPrefix(vip netip.Addr) netip.Prefix {
	vip = vip.Unmap()
	return netip.PrefixFrom(vip, vip.BitLen())
}

// New starts GoBGP by cfg, logging its records, and GoBGP's
// warnings and errors (with from=gobgp), to log, and recording through mp;
// it opens no session until connect, and announces nothing until set.
func New(cfg Config, meter metric.Meter, log *slog.Logger) (*Speaker, error) {
	lvl := &slog.LevelVar{}
	lvl.Set(slog.LevelWarn) // l4lb logs the transitions itself
	logger := slog.New(minLevel{log.Handler(), lvl}).With("from", "gobgp")
	sp := &Speaker{cfg: cfg, log: log, kick: make(chan struct{}, 1), quit: make(chan struct{}), loopDone: make(chan struct{}),
		retired: make(chan struct{}), stopped: make(chan struct{}), s: server.NewBgpServer(server.LoggerOption(logger, lvl)),
		vips: map[netip.Prefix]*announced{}, peer: map[netip.Addr]*peerState{}}
	go sp.s.Serve()
	ctx := context.Background()
	if err := sp.s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: cfg.ASN, RouterId: cfg.RouterID.String(), ListenPort: int32(cfg.ListenPort),
	}}); err != nil {
		return nil, fmt.Errorf("bgp: %w", err) // not started: nothing to stop
	}
	// What the routers send is kept in GoBGP's table and used for nothing
	// (a global import policy would refuse l4lb's own paths too): the
	// routers should export nothing to l4lb (docs/l4lb-howto-bgp.md).
	if err := sp.s.WatchEvent(ctx, server.WatchEventMessageCallbacks{OnPeerUpdate: sp.peerEvent}, server.WatchPeer()); err != nil {
		sp.StopServer(false)
		return nil, fmt.Errorf("bgp: %w", err)
	}
	for _, p := range cfg.Peers {
		sp.peer[p.Addr] = &peerState{state: "idle"}
		if cfg.BFD.On {
			sp.peer[p.Addr].bfd = "down"
		}
	}
	if err := sp.metrics(meter); err != nil {
		sp.StopServer(false)
		return nil, err
	}
	go sp.loop()
	if cfg.BFD.On {
		go sp.watchBFD()
	}
	return sp, nil
}

// bfdPoll is how often watchBFD reads the BFD sessions' states.
const bfdPoll = 100 * time.Millisecond

// watchBFD records each peer's BFD session, as GoBGP has it, every
// bfdPoll until StopServer, and logs its changes to and from up. GoBGP
// tells of no change of a BFD session but by its logs: this is what the
// admin API shows, and the records say. GoBGP acts on a failure itself
// (it resets the BGP session), at once, whatever this sees.
func (sp *Speaker) watchBFD() {
	t := time.NewTicker(bfdPoll)
	defer t.Stop()
	for {
		select {
		case <-sp.stopped:
			return
		case <-t.C:
		}
		type seen struct {
			state  string
			rx, tx uint64
		}
		now := map[netip.Addr]seen{}
		sp.s.ListBfdPeer(context.Background(), func(addr string, st *api.BfdPeerState) {
			a, err := netip.ParseAddr(addr)
			if err != nil {
				return
			}
			v := seen{state: strings.ToLower(strings.TrimPrefix(st.SessionState.String(), "BFD_SESSION_STATE_"))}
			if st.BfdAsync != nil {
				v.rx, v.tx = st.BfdAsync.ReceivedPackets, st.BfdAsync.TransmittedPackets
			}
			now[a.Unmap()] = v
		})
		type change struct {
			peer     netip.Addr
			old, new string
		}
		var cs []change
		sp.mu.Lock()
		for addr, ps := range sp.peer {
			v, ok := now[addr]
			if !ok {
				v.state = "down" // not yet (or no longer) a BFD peer of GoBGP's
			}
			if (v.state == "up") != (ps.bfd == "up") {
				cs = append(cs, change{addr, ps.bfd, v.state})
			}
			ps.bfd, ps.bfdRx, ps.bfdTx = v.state, v.rx, v.tx
		}
		sp.mu.Unlock()
		for _, c := range cs {
			if c.new == "up" {
				sp.log.Info("bgp: bfd up", "peer", c.peer.String())
			} else {
				sp.log.Warn("bgp: bfd down", "peer", c.peer.String(), "state", c.new)
			}
		}
	}
}

// Connect puts every VIP set has been told of in GoBGP's table, then
// opens a session to each peer. Call it once every service has told set
// its first state: with graceful restart, a router that kept the paths of
// the l4lb before this one drops the stale ones that the first
// End-of-RIB does not follow, and GoBGP sends its End-of-RIB right after
// the table it has when the session comes up.
func (sp *Speaker) Connect() error {
	sp.reconcile()
	hold := uint64(sp.cfg.Hold / time.Second)
	restart := uint32(sp.cfg.Restart / time.Second)
	for _, p := range sp.cfg.Peers {
		f := &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
		if !p.Addr.Is4() {
			f.Afi = api.Family_AFI_IP6
		}
		peer := &api.Peer{
			Conf: &api.PeerConf{NeighborAddress: p.Addr.String(), PeerAsn: p.ASN},
			// A retry every 5 s, so that a router that comes back is
			// peered again soon (GoBGP's default is 120 s).
			Timers:   &api.Timers{Config: &api.TimersConfig{HoldTime: hold, KeepaliveInterval: hold / 3, ConnectRetry: 5}},
			AfiSafis: []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: f, Enabled: true}}},
		}
		if restart > 0 {
			// The family's forwarding state preserved (the F bit, which
			// GoBGP sets while local-restarting), and the R bit: the
			// router keeps the stale paths of an earlier l4lb until this
			// one's End-of-RIB, which GoBGP sends once it has every
			// router's, or one deferral time (1 s) after a session came
			// up without them: l4lb uses no route of theirs.
			peer.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: restart, DeferralTime: 1, LocalRestarting: true}
			peer.AfiSafis[0].MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
		if b := sp.cfg.BFD; b.On {
			// Single-hop BFD (RFC 5881) from a port in [49152, 65535] to
			// the router's 3784, TTL 255; GoBGP's server answers on 3784.
			us := uint32(b.Interval / time.Microsecond)
			peer.Bfd = &api.BfdPeerConfig{Enabled: true, DesiredMinimumTxInterval: us, RequiredMinimumReceive: us, DetectionMultiplier: uint32(b.Multiplier)}
		}
		if err := sp.s.AddPeer(context.Background(), &api.AddPeerRequest{Peer: peer}); err != nil {
			return fmt.Errorf("bgp: peer %v: %w", p, err)
		}
	}
	return nil
}

// metrics registers the speaker's instruments.
func (sp *Speaker) metrics(meter metric.Meter) error {
	var errs []error
	ann, err := meter.Int64ObservableGauge("maglev.l4lb.bgp.announced",
		metric.WithDescription("1 while the VIP's host route is announced to the BGP peers (the service has a healthy backend), 0 while it is withdrawn."))
	errs = append(errs, err)
	est, err := meter.Int64ObservableGauge("maglev.l4lb.bgp.peer.established",
		metric.WithDescription("1 while the BGP session with the peer is established, 0 otherwise."))
	errs = append(errs, err)
	updates, err := meter.Int64ObservableCounter("maglev.l4lb.bgp.updates", metric.WithUnit("{update}"),
		metric.WithDescription("Changes of a VIP's route, by action (announce or withdraw), while a service has the VIP."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bgp metrics: %w", err)
	}
	sp.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		for p, a := range sp.vips {
			v := int64(0)
			if a.on {
				v = 1
			}
			vip := attribute.String("maglev.vip", p.String())
			o.ObserveInt64(ann, v, metric.WithAttributes(vip))
			if a.announces > 0 {
				o.ObserveInt64(updates, a.announces, metric.WithAttributes(vip, attribute.String("maglev.action", "announce")))
			}
			if a.withdraws > 0 {
				o.ObserveInt64(updates, a.withdraws, metric.WithAttributes(vip, attribute.String("maglev.action", "withdraw")))
			}
		}
		for addr, ps := range sp.peer {
			v := int64(0)
			if ps.state == "established" {
				v = 1
			}
			o.ObserveInt64(est, v, metric.WithAttributes(attribute.String("maglev.peer", addr.String())))
		}
		return nil
	}, ann, est, updates)
	if err != nil {
		return fmt.Errorf("bgp metrics: %w", err)
	}
	return nil
}

// peerEvent records a peer's session state, and prints its changes.
func (sp *Speaker) peerEvent(e *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
	if e.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	addr := e.Peer.State.NeighborAddress.Unmap()
	state := strings.ToLower(strings.TrimPrefix(e.Peer.State.SessionState.String(), "BGP_FSM_"))
	gr := false
	for _, c := range e.Peer.State.RemoteCap {
		if _, ok := c.(*bgp.CapGracefulRestart); ok {
			gr = sp.cfg.Restart > 0
		}
	}
	sp.mu.Lock()
	ps := sp.peer[addr]
	var old string
	if ps != nil {
		old = ps.state
		ps.state = state
		if state == "established" {
			ps.gr = gr
		}
	}
	sp.mu.Unlock()
	if ps == nil || old == state || (state != "established" && old != "established") {
		return
	}
	switch {
	case state == "established" && sp.cfg.Restart > 0 && !gr:
		sp.log.Warn("bgp: peer established without graceful restart, which the router does not offer: a restart of l4lb withdraws its paths from this router", "peer", addr.String())
	case state == "established":
		sp.log.Info("bgp: peer established", "peer", addr.String())
	default: // an established session lost
		sp.log.Warn("bgp: peer session lost", "peer", addr.String(), "state", state)
	}
}

// Set records whether svc has a healthy backend, and why; the speaker's
// goroutine announces or withdraws its VIP's route accordingly: a VIP is
// announced while a service of it (of any port and protocol) has one. It
// waits for nothing.
func (sp *Speaker) Set(svc xdpmaglev.Service, healthy bool, why string) {
	sp.wish(svc, &wish{healthy: healthy, why: why})
}

// Forget drops svc's wish, as if it had no healthy backend, for a service
// that stopped: its VIP is withdrawn unless another service of it has a
// healthy backend.
func (sp *Speaker) Forget(svc xdpmaglev.Service) { sp.wish(svc, nil) }

// wish records svc's wish, or drops it (w nil), and kicks the goroutine if
// the VIP's changed.
func (sp *Speaker) wish(svc xdpmaglev.Service, w *wish) {
	p := vipPrefix(svc.VIP.Addr())
	sp.mu.Lock()
	a := sp.vips[p]
	if a == nil {
		f := bgp.RF_IPv4_UC
		if !p.Addr().Is4() {
			f = bgp.RF_IPv6_UC
		}
		a = &announced{family: f, wishes: map[xdpmaglev.Service]wish{}}
		sp.vips[p] = a
	}
	if w != nil {
		a.wishes[svc] = *w
	} else {
		delete(a.wishes, svc)
	}
	healthy, why := false, "no service"
	for _, w := range a.wishes {
		healthy = healthy || w.healthy
	}
	var whys []string // of the services that decide
	for s, w := range a.wishes {
		switch {
		case len(a.wishes) == 1:
			whys = append(whys, w.why)
		case w.healthy == healthy:
			whys = append(whys, fmt.Sprintf("%v: %s", s, w.why))
		}
	}
	if len(whys) > 0 {
		slices.Sort(whys)
		why = strings.Join(whys, "; ")
	}
	// A VIP no service has any more goes once withdrawn (reconcile).
	changed := a.want != healthy || len(a.wishes) == 0
	a.want, a.why = healthy, why
	sp.mu.Unlock()
	if changed {
		select {
		case sp.kick <- struct{}{}:
		default: // a kick is pending already
		}
	}
}

// A wish is what one service of a VIP wants of its route.
type wish struct {
	healthy bool   // the service has a healthy backend
	why     string // why healthy is what it is
}

// loop makes GoBGP's table agree with the VIPs' wishes, until endLoop.
func (sp *Speaker) loop() {
	defer close(sp.loopDone)
	for {
		select {
		case <-sp.quit:
			return
		case <-sp.kick:
		}
		sp.reconcile()
	}
}

// endLoop ends the speaker's goroutine, once, and waits for it: after it,
// only the caller changes GoBGP's table.
func (sp *Speaker) endLoop() {
	sp.quitOnce.Do(func() { close(sp.quit) })
	<-sp.loopDone
}

// reconcile announces each VIP that should be and is not, and withdraws
// each that is and should not be (every VIP, once l4lb leaves). It prints
// a record for each change. No lock but rmu is held across GoBGP's
// calls.
func (sp *Speaker) reconcile() {
	sp.rmu.Lock()
	defer sp.rmu.Unlock()
	type change struct {
		p    netip.Prefix
		a    *announced
		on   bool
		why  string
		path uuid.UUID
	}
	sp.mu.Lock()
	var cs []change
	for p, a := range sp.vips {
		want := a.want && sp.leave == ""
		if want != a.on {
			why := a.why
			if sp.leave != "" {
				why = sp.leave
			}
			cs = append(cs, change{p: p, a: a, on: want, why: why, path: a.path})
		}
	}
	sp.mu.Unlock()
	slices.SortFunc(cs, func(x, y change) int { return x.p.Addr().Compare(y.p.Addr()) })
	for _, c := range cs {
		var id uuid.UUID
		var err error
		if c.on {
			id, err = sp.announce(c.p, c.a.family)
		} else {
			err = sp.s.DeletePath(apiutil.DeletePathRequest{UUIDs: []uuid.UUID{c.path}})
		}
		if err != nil {
			msg := map[bool]string{true: "bgp: announcing failed", false: "bgp: withdrawing failed"}[c.on]
			sp.log.Error(msg, "prefix", c.p.String(), "err", err)
			continue
		}
		sp.mu.Lock()
		c.a.on, c.a.path, c.a.since = c.on, id, time.Now()
		if c.on {
			c.a.announces++
		} else {
			c.a.withdraws++
		}
		sp.mu.Unlock()
		if c.on {
			sp.log.Info("bgp: announcing", "prefix", c.p.String(), "reason", c.why)
		} else {
			sp.log.Warn("bgp: withdrew", "prefix", c.p.String(), "reason", c.why)
		}
	}
	// A VIP that no service has any more, withdrawn, is forgotten: its
	// series leave the metrics, and /debug/maglev lists it no more.
	sp.mu.Lock()
	for p, a := range sp.vips {
		if len(a.wishes) == 0 && !a.on {
			delete(sp.vips, p)
		}
	}
	sp.mu.Unlock()
}

// withdrawAll withdraws every VIP, for why, and keeps them withdrawn
// whatever set is told after. It returns false if l4lb was leaving
// already, and withdraws nothing more then.
func (sp *Speaker) withdrawAll(why string) bool {
	sp.mu.Lock()
	first := sp.leave == ""
	if first {
		sp.leave, sp.leftAt = why, time.Now()
	}
	sp.mu.Unlock()
	if first {
		sp.endLoop()
		sp.reconcile()
	}
	return first
}

// announce adds p to GoBGP's table, with next hop unspecified, which GoBGP
// sends as its own address on each session, and returns the path's ID.
func (sp *Speaker) announce(p netip.Prefix, f bgp.Family) (uuid.UUID, error) {
	nlri, err := bgp.NewIPAddrPrefix(p)
	if err != nil {
		return uuid.UUID{}, err
	}
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	if f == bgp.RF_IPv4_UC {
		nh, err := bgp.NewPathAttributeNextHop(netip.IPv4Unspecified())
		if err != nil {
			return uuid.UUID{}, err
		}
		attrs = append(attrs, nh)
	} else {
		mp, err := bgp.NewPathAttributeMpReachNLRI(f, []bgp.PathNLRI{{NLRI: nlri}}, netip.IPv6Unspecified())
		if err != nil {
			return uuid.UUID{}, err
		}
		attrs = append(attrs, mp)
	}
	rs, err := sp.s.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{{Family: f, Nlri: nlri, Attrs: attrs}}})
	if err != nil {
		return uuid.UUID{}, err
	}
	return rs[0].UUID, rs[0].Error
}

// Restart ends the speaker for a restart of l4lb (SIGINT, SIGTERM), the
// data plane staying attached. With graceful restart, it closes the
// sessions with no NOTIFICATION and leaves every path in place: a router
// that negotiated graceful restart keeps them, as stale, for the restart
// time, until the next l4lb's session announces them again and sends its
// End-of-RIB (a router that did not is sent a Cease and drops them).
// Without graceful restart (-bgp-restart-time 0, or no established
// session that negotiated it) a router drops the paths when the session
// ends, so restart first withdraws every VIP and drains, as retire does.
// So it does with BFD: a router drops the paths when l4lb's BFD session
// falls silent, graceful restart or not (BIRD ends a graceful restart at
// "BFD session down"), a detection time after l4lb's end.
func (sp *Speaker) Restart() {
	sp.mu.Lock()
	gr := false
	for _, ps := range sp.peer {
		gr = gr || (ps.gr && ps.state == "established")
	}
	sp.mu.Unlock()
	switch {
	case sp.cfg.BFD.On:
		sp.drainAndStop("l4lb is stopping, and with BFD no router keeps its paths (its BFD session falls silent)")
		return
	case !gr:
		sp.drainAndStop("l4lb is stopping, and no router keeps its paths (no graceful restart)")
		return
	}
	sp.endLoop()
	sp.StopServer(true)
	sp.log.Info("bgp: sessions closed for a restart: the routers keep l4lb's paths for the restart time", "restart", sp.cfg.Restart.String())
}

// Retire takes the load balancer out of service (POST /drain-lb): it
// withdraws every VIP and returns; in the background it waits the drain
// time, closes the sessions, and closes the channel outOfService returns,
// on which run detaches the data plane and returns. It returns false if
// l4lb was leaving already.
func (sp *Speaker) Retire() bool {
	if !sp.withdrawAll("l4lb is out of service (POST /drain-lb)") {
		return false
	}
	go func() {
		sp.drain()
		sp.StopServer(false)
		sp.log.Info("bgp: sessions closed")
		close(sp.retired)
	}()
	return true
}

// OutOfService returns a channel closed once retire has drained and
// closed the sessions; nil (never ready) without BGP.
func (sp *Speaker) OutOfService() <-chan struct{} {
	if sp == nil {
		return nil
	}
	return sp.retired
}

// drainAndStop withdraws every VIP, for why, waits the drain time so that
// the routers move the traffic to the other load balancers, then closes
// the sessions. The routes are withdrawn by UPDATE messages on sessions
// that stay up, so a router moves the traffic at once, not when the
// session ends.
func (sp *Speaker) drainAndStop(why string) {
	sp.withdrawAll(why)
	sp.drain()
	sp.StopServer(false)
	sp.log.Info("bgp: sessions closed")
}

// drain waits the drain time, saying so.
func (sp *Speaker) drain() {
	if sp.cfg.Drain > 0 {
		sp.log.Info("bgp: draining", "drain", sp.cfg.Drain.String())
		time.Sleep(sp.cfg.Drain)
	}
}

// StopServer ends the sessions and GoBGP, once (it returns at once
// after): with graceful, the sessions that negotiated graceful restart
// end with no NOTIFICATION (the TCP connection closed: the routers keep
// l4lb's paths as stale), else with a Cease (the routers drop them).
func (sp *Speaker) StopServer(graceful bool) {
	sp.stopOnce.Do(func() {
		close(sp.stopped)
		if err := sp.s.StopBgp(context.Background(), &api.StopBgpRequest{AllowGracefulRestart: graceful}); err != nil {
			sp.log.Error("bgp: stopping failed", "err", err)
		}
		if sp.reg != nil {
			_ = sp.reg.Unregister() // its error is the SDK shut down already
		}
	})
}

// Status is the speaker's part of /debug/maglev.
type Status struct {
	ASN         uint32        `json:"asn"`
	RouterID    string        `json:"router_id"`
	Peers       []PeerStatus  `json:"peers"`
	VIPs        []RouteStatus `json:"vips"`
	RestartTime string        `json:"restart_time"`            // the graceful restart time advertised; "0s": none
	BFD         string        `json:"bfd,omitempty"`           // with -bgp-bfd: its interval and multiplier, "100ms x3"
	Drain       string        `json:"drain"`                   // -bgp-drain
	Leaving     string        `json:"leaving,omitempty"`       // why every VIP is withdrawn, once l4lb leaves
	LeftAt      string        `json:"leaving_since,omitempty"` // since when
}

type PeerStatus struct {
	Addr            string `json:"addr"`
	ASN             uint32 `json:"asn"`
	State           string `json:"state"`            // the session: idle, connect, active, opensent, openconfirm or established
	GracefulRestart bool   `json:"graceful_restart"` // negotiated on the established session
	// With -bgp-bfd: the peer's BFD session (down, init, up or
	// admin_down), and the control packets received from the router and
	// sent to it.
	BFD         string `json:"bfd,omitempty"`
	BFDReceived uint64 `json:"bfd_received,omitempty"`
	BFDSent     uint64 `json:"bfd_sent,omitempty"`
}

type RouteStatus struct {
	Prefix    string `json:"prefix"`
	Announced bool   `json:"announced"`
	Reason    string `json:"reason"` // why it is announced or withdrawn
	Since     string `json:"since,omitempty"`
}

// Status returns what /debug/maglev shows of the speaker.
func (sp *Speaker) Status() *Status {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	st := &Status{ASN: sp.cfg.ASN, RouterID: sp.cfg.RouterID.String(), RestartTime: fmt.Sprintf("%gs", sp.cfg.Restart.Seconds()), Drain: sp.cfg.Drain.String(), Leaving: sp.leave}
	if sp.cfg.BFD.On {
		st.BFD = sp.cfg.BFD.String()
	}
	if !sp.leftAt.IsZero() {
		st.LeftAt = sp.leftAt.UTC().Format(time.RFC3339)
	}
	for _, p := range sp.cfg.Peers {
		ps := sp.peer[p.Addr]
		st.Peers = append(st.Peers, PeerStatus{Addr: p.Addr.String(), ASN: p.ASN, State: ps.state, GracefulRestart: ps.gr && ps.state == "established",
			BFD: ps.bfd, BFDReceived: ps.bfdRx, BFDSent: ps.bfdTx})
	}
	for p, a := range sp.vips {
		r := RouteStatus{Prefix: p.String(), Announced: a.on, Reason: a.why}
		if sp.leave != "" && !a.on {
			r.Reason = sp.leave
		}
		if !a.since.IsZero() {
			r.Since = a.since.UTC().Format(time.RFC3339)
		}
		st.VIPs = append(st.VIPs, r)
	}
	slices.SortFunc(st.VIPs, func(x, y RouteStatus) int { return strings.Compare(x.Prefix, y.Prefix) })
	return st
}
