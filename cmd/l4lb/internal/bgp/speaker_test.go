package bgp

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/nstest"
	"github.com/maglevlb/maglev/xdpmaglev"
	"go.opentelemetry.io/otel/metric/noop"
)

// TestParsePeer: a peer is ADDR,ASN, its address unmapped;
// anything else is refused, saying what is wanted.
func TestParsePeer(t *testing.T) {
	for s, want := range map[string]string{
		"198.18.0.1,65000":       "198.18.0.1 (AS 65000)",
		"198.18.0.1@65000":       `"198.18.0.1@65000": ADDR,ASN (198.18.0.1,65000)`,
		"::ffff:198.18.0.4,1":    "198.18.0.4 (AS 1)",
		"2001:db8::1,4294967295": "2001:db8::1 (AS 4294967295)",
		"198.18.0.1":             `"198.18.0.1": ADDR,ASN (198.18.0.1,65000)`,
		"198.18.0.1:65000":       `"198.18.0.1:65000": ADDR,ASN`,
		"198.18.0.1,0":           `AS "0": not a number in [1, 4294967295]`,
		"198.18.0.1,4294967296":  `AS "4294967296": not a number`,
		"198.18.0.1,65000,65001": `AS "65000,65001"`,
		"router,65000":           `ParseAddr("router")`,
		"198.18.0.1,":            `AS ""`,
	} {
		p, err := ParsePeer(s)
		got := p.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.HasPrefix(got, want) {
			t.Errorf("%q: %q, want %q...", s, got, want)
		}
	}
}

// TestConfigString: the speaker in a line, and as the attributes of its
// first record, without BFD and with.
func TestConfigString(t *testing.T) {
	c := Config{ASN: 65001, RouterID: netip.MustParseAddr("198.18.0.3"), Hold: 9 * time.Second, Restart: 120 * time.Second, Drain: 2 * time.Second,
		Peers: []Peer{{Addr: netip.MustParseAddr("198.18.0.1"), ASN: 65000}, {Addr: netip.MustParseAddr("198.18.0.2"), ASN: 65002}}}
	if got, want := c.String(), "AS 65001 (router ID 198.18.0.3) to 198.18.0.1 (AS 65000), 198.18.0.2 (AS 65002), hold 9s, graceful restart 120s, drain 2s"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	c.Restart = 0
	if got := c.String(); !strings.Contains(got, ", no graceful restart,") {
		t.Errorf("no graceful restart: %q", got)
	}
	got := fmt.Sprint(c.LogAttrs())
	if want := "[asn 65001 router_id 198.18.0.3 peers [198.18.0.1 (AS 65000) 198.18.0.2 (AS 65002)] hold 9s restart 0s drain 2s bfd off]"; got != want {
		t.Errorf("LogAttrs: %s, want %s", got, want)
	}
	c.BFD = BFD{On: true, Interval: 50 * time.Millisecond, Multiplier: 4}
	if got, want := c.String(), "AS 65001 (router ID 198.18.0.3) to 198.18.0.1 (AS 65000), 198.18.0.2 (AS 65002), hold 9s, no graceful restart, drain 2s, BFD 50ms x4"; got != want {
		t.Errorf("BFD: %q, want %q", got, want)
	}
	if got := fmt.Sprint(c.LogAttrs()); !strings.HasSuffix(got, " bfd 50ms x4]") {
		t.Errorf("BFD: LogAttrs %s, want bfd 50ms x4 last", got)
	}
	if got := c.BFD.Detection(); got != 200*time.Millisecond {
		t.Errorf("BFD 50ms x4: detection %v, want 200ms", got)
	}
}

// TestSpeakerVIPs runs a speaker (GoBGP in the test's process, no peer)
// and tells it the health of two services of one VIP and one of another:
// a VIP is announced while any service of it has a healthy backend, and
// withdrawn when none has, with the reasons of the services that decide;
// a VIP no service has any more is forgotten; Retire withdraws every VIP
// and keeps them withdrawn, and closes OutOfService.
func TestSpeakerVIPs(t *testing.T) {
	var log nstest.LogBuffer
	sp, err := New(Config{ASN: 65001, RouterID: netip.MustParseAddr("198.18.0.3"), ListenPort: -1}, noop.NewMeterProvider().Meter(""), slog.New(slog.NewJSONHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.StopServer(false) })
	if err := sp.Connect(); err != nil {
		t.Fatal(err)
	}
	web := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}
	tls := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:443")}
	dns := xdpmaglev.Service{Proto: xdpmaglev.UDP, VIP: netip.MustParseAddrPort("[2001:db8::53]:53")}
	await := func(what string, want map[string]bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := map[string]bool{}
			for _, r := range sp.Status().VIPs {
				got[r.Prefix] = r.Announced
			}
			if len(got) == len(want) && func() bool {
				for k, v := range want {
					if a, ok := got[k]; !ok || a != v {
						return false
					}
				}
				return true
			}() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: VIPs %v, want %v\n%s", what, got, want, log.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	sp.Set(web, true, "2 backends in service")
	sp.Set(tls, false, "no backend in service (none of weight > 0 up)")
	sp.Set(dns, true, "1 backends in service")
	await("web healthy, tls not, dns healthy", map[string]bool{"198.19.0.1/32": true, "2001:db8::53/128": true})
	sp.Set(web, false, "failing open: every backend is down by its health check")
	await("neither web nor tls healthy", map[string]bool{"198.19.0.1/32": false, "2001:db8::53/128": true})
	for _, r := range sp.Status().VIPs {
		if r.Prefix == "198.19.0.1/32" && (!strings.Contains(r.Reason, "tcp/198.19.0.1:80: failing open") || !strings.Contains(r.Reason, "tcp/198.19.0.1:443: no backend")) {
			t.Errorf("the reason names each service that decides: %q", r.Reason)
		}
	}
	sp.Set(tls, true, "1 backends in service")
	await("tls healthy", map[string]bool{"198.19.0.1/32": true, "2001:db8::53/128": true})
	sp.Forget(web)
	sp.Forget(tls)
	await("web and tls stopped", map[string]bool{"2001:db8::53/128": true})
	if !sp.Retire() || sp.Retire() {
		t.Error("Retire: true the first time, false after")
	}
	select {
	case <-sp.OutOfService():
	case <-time.After(5 * time.Second):
		t.Fatal("OutOfService not closed 5 s after Retire, with a drain of 0")
	}
	sp.Set(dns, true, "1 backends in service")
	st := sp.Status()
	if st.Leaving != "l4lb is out of service (POST /drain-lb)" || len(st.VIPs) != 1 || st.VIPs[0].Announced || st.VIPs[0].Reason != st.Leaving {
		t.Errorf("after Retire: %+v", st)
	}
	for _, want := range [][]string{
		{"bgp: announcing", "prefix", "198.19.0.1/32"},
		{"bgp: withdrew", "prefix", "198.19.0.1/32"},
		{"bgp: withdrew", "prefix", "2001:db8::53/128", "reason", "l4lb is out of service (POST /drain-lb)"},
	} {
		if !slices.ContainsFunc(log.Records(), func(r nstest.Record) bool { return r.Is(want[0], want[1:]...) }) {
			t.Errorf("the log lacks %q:\n%s", want, log.String())
		}
	}
}

// TestSpeakerRestartBFD: with BFD, a restart (SIGINT, SIGTERM) withdraws
// and drains as one without graceful restart does, graceful restart
// negotiated or not: a router with BFD on the session drops l4lb's paths
// once its BFD session falls silent. The status shows BFD, and each
// peer's BFD session down before it is up.
func TestSpeakerRestartBFD(t *testing.T) {
	var log nstest.LogBuffer
	cfg := Config{ASN: 65001, RouterID: netip.MustParseAddr("198.18.0.3"), ListenPort: -1, Restart: 120 * time.Second,
		Peers: []Peer{{Addr: netip.MustParseAddr("198.18.0.1"), ASN: 65000}}, BFD: BFD{On: true, Interval: 100 * time.Millisecond, Multiplier: 3}}
	sp, err := New(cfg, noop.NewMeterProvider().Meter(""), slog.New(slog.NewJSONHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.StopServer(false) })
	// No Connect: no session, and no BFD packet, leaves the test.
	web := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}
	sp.Set(web, true, "1 backend in service")
	log.AwaitRecord(t, "bgp: announcing", "prefix", "198.19.0.1/32")
	st := sp.Status()
	if st.BFD != "100ms x3" || len(st.Peers) != 1 || st.Peers[0].BFD != "down" {
		t.Errorf("status: %+v, want BFD 100ms x3 and the peer's BFD down", st)
	}
	sp.Restart()
	log.AwaitRecord(t, "bgp: withdrew", "prefix", "198.19.0.1/32", "reason", "l4lb is stopping, and with BFD no router keeps its paths (its BFD session falls silent)")
	log.AwaitRecord(t, "bgp: sessions closed")
	if got := sp.Status(); got.Leaving == "" || got.VIPs[0].Announced {
		t.Errorf("after Restart with BFD: %+v, want every VIP withdrawn", got)
	}
}
