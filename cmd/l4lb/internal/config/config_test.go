package config

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
)

// TestConfigExample loads example.yaml, the file docs/l4lb-howto-deploy.md shows: the
// top's settings are the load balancer's, a service's key at the top is
// every service's default, and a source's default serves only the
// services of that source.
func TestConfigExample(t *testing.T) {
	g, svcs, err := Load("../../example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if g.Iface != "eth0" || g.Opts.Seed != 7 || g.Admin != "127.0.0.1:9180" || g.Opts.MaxServices != 64 ||
		g.BGP.ASN != 65001 || len(g.BGP.Peers) != 1 || g.BGP.Peers[0] != (bgp.Peer{Addr: netip.MustParseAddr("10.0.0.1"), ASN: 65000}) ||
		g.BGP.Restart != 120*time.Second || g.File != "../../example.yaml" ||
		!reflect.DeepEqual(g.Handoff, Handoff{StateFile: "/var/lib/l4lb/eth0.json", Listen: "10.0.0.5:9181", Peers: []string{"10.0.0.6:9181"}}) {
		t.Errorf("global %+v", g)
	}
	if len(svcs) != 4 {
		t.Fatalf("%d services, want 4", len(svcs))
	}
	web, tls, api, dns := svcs[0], svcs[1], svcs[2], svcs[3]
	if web.Name != "web" || web.Svc.String() != "tcp/203.0.113.1:80" || len(web.Backends) != 3 ||
		web.Backends[1].Weight != 2 || web.Backends[0].Weight != 1 || web.Backends[2].HW.String() != "02:00:00:00:00:13" ||
		web.Health.Kind != "tcp" || web.Health.Interval != 2*time.Second || web.Timeout != time.Minute || web.Src.Dynamic() {
		t.Errorf("web: %+v", web)
	}
	if tls.Fwd.M != 251 || tls.Health.Kind != "http" || tls.Health.Port != 8080 || tls.Health.Path != "/healthz" || web.Fwd.M != 0 {
		t.Errorf("web-tls: %+v", tls)
	}
	if api.Fwd.Forward != xdpmaglev.ForwardIPIP || api.Src.String() != "etcd prefix services/api" {
		t.Errorf("api: %+v", api)
	}
	if dns.Svc.Proto != xdpmaglev.UDP || dns.Health.Kind != "" || dns.Src.Name() != "-k8s-service" {
		t.Errorf("dns: %+v (the top's etcd must not reach a Kubernetes service)", dns)
	}
	if web.Settings == tls.Settings || api.SrcSettings == "" || web.SrcSettings != "" {
		t.Error("settings do not tell services apart")
	}
}

// TestConfigErrors: a bad file is refused with an error that wraps
// ErrConfig and names the line, the service and the setting.
func TestConfigErrors(t *testing.T) {
	const svc = "services:\n  - name: web\n    vip: 198.19.0.1:80\n    backends: [198.18.0.11]\n"
	for _, tc := range []struct {
		file string
		want []string // in the error
	}{
		{"iface: eth0\n" + svc + "    health-interval: 0s\n    health: tcp\n", []string{":6:", `service "web"`, "-health-interval 0s"}},
		{"iface: eth0\n" + svc + "    colour: blue\n", []string{":6:", `unknown key "colour"`}},
		{"iface: eth0\ncolour: blue\n" + svc, []string{":2:", `unknown key "colour"`}},
		{"iface: eth0\n" + svc + "  - name: web\n    vip: 198.19.0.2:80\n    backends: [198.18.0.11]\n", []string{":6:", `service "web": the name of the service at line 3`}},
		{"iface: eth0\n" + svc + "  - name: web2\n    vip: 198.19.0.1:80\n    backends: [198.18.0.12]\n", []string{":6:", `tcp/198.19.0.1:80 is service "web"'s too`}},
		{"iface: eth0\nvip: 198.19.0.1:80\n" + svc, []string{":2:", "vip is a service's own"}},
		{"iface: eth0\nservices:\n  - name: web\n    vip: 198.19.0.1:80\n    seed: 3\n    backends: [198.18.0.11]\n", []string{":5:", "seed is the load balancer's"}},
		{"iface: eth0\nservices:\n  - vip: 198.19.0.1:80\n", []string{":3:", "needs a name"}},
		{"iface: eth0\nservices:\n  - name: a b\n", []string{":3:", `name "a b"`}},
		{"iface: eth0\n", []string{":1:", "services: a list of at least one service"}},
		{"iface: eth0\nservices: []\n", []string{":2:", "services: a list"}},
		{"iface: [eth0, eth1]\n" + svc, []string{":1:", "iface: one value, not a list"}},
		{"iface: eth0\n" + svc + "    m: 1000\n", []string{":6:", `service "web"`, "-m 1000"}},
		{"iface: eth0\nservices:\n  - name: web\n    vip: 198.19.0.1:80\n    backends: [{addr: 198.18.0.11, colour: red}]\n", []string{":5:", `backends: unknown key "colour"`}},
		{"iface: eth0\n" + svc + "    etcd-prefix: x\n", []string{":6:", `service "web"`, "-etcd-prefix needs -etcd"}},
		{"iface: eth0\n\tservices:\n", []string{":2:", "tab"}},
		// yaml.v3 counts its parser's lines from 0, its scanner's from 1:
		// each error is at the line that has it.
		{"iface: eth0\n" + svc + "   drain: 198.18.0.12\n", []string{":6:", "did not find expected '-' indicator"}},
		{"iface: eth0\n" + svc + "    drain: [198.18.0.12]]\n", []string{":6:", "did not find expected key"}},
		{"iface: eth0\nseed: 7\nadmin: {x: 1\n" + svc, []string{":3:", "did not find expected ',' or '}'"}},
		{"iface: eth0\nservices:\n  - name: web\n    backends: [198.18.0.11\n    vip: 198.19.0.1:80\n", []string{":4:", "did not find expected ',' or ']'"}},
		{"iface: eth0\nservices:\n  - name: web\n - name: api\n", []string{":4:", "did not find expected key"}},
		{"iface: eth0\n" + svc + "    vip: @x\n", []string{":6:", "found character that cannot start any token"}},
		{"iface: eth0\n" + svc + "    name: \"web\n", []string{":6:", "found unexpected end of stream"}},
		{"", []string{":1:", "empty"}},
		{"iface: eth0\nhealth-interval: 0s\nhealth: tcp\n" + svc, []string{":2:", `service "web"`, "-health-interval 0s"}},
		{"iface: eth0\n" + svc + "    proto: sctp\n", []string{":6:", `-proto "sctp"`}},
	} {
		path := filepath.Join(t.TempDir(), "l4lb.yaml")
		if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := Load(path)
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%q: %v, want ErrConfig", tc.file, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %v, want %q in it", tc.file, err, w)
			}
		}
	}
}

// TestConfigBGP: the BGP keys of a file, a peer in each of its forms, and
// BFD's.
func TestConfigBGP(t *testing.T) {
	const file = `iface: eth0
bgp-asn: 65001
bgp-router-id: 198.18.0.3
bgp-peer:
  - 198.18.0.1,65000
  - 198.18.0.2,65002
  - {addr: 198.18.0.4, asn: 65004}
bgp-restart-time: 30s
bgp-drain: 1s
services:
  - name: web
    vip: 198.19.0.1:80
    backends: [198.18.0.11]
`
	path := filepath.Join(t.TempDir(), "l4lb.yaml")
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	g, _, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "AS 65001 (router ID 198.18.0.3) to 198.18.0.1 (AS 65000), 198.18.0.2 (AS 65002), 198.18.0.4 (AS 65004), hold 9s, graceful restart 30s, drain 1s"
	if got := g.BGP.String(); got != want {
		t.Errorf("bgp: %q, want %q", got, want)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(file, "30s", "5000s", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(path); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "-bgp-restart-time 5000s") {
		t.Errorf("bgp-restart-time 5000s: %v", err)
	}
	bfd := strings.Replace(file, "bgp-drain: 1s\n", "bgp-drain: 1s\nbgp-bfd: true\nbgp-bfd-interval: 50ms\nbgp-bfd-multiplier: 5\n", 1)
	if err := os.WriteFile(path, []byte(bfd), 0o644); err != nil {
		t.Fatal(err)
	}
	if g, _, err := Load(path); err != nil || !strings.HasSuffix(g.BGP.String(), ", drain 1s, BFD 50ms x5") {
		t.Errorf("BFD: %v, %v", g.BGP, err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(bfd, "50ms", "5ms", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(path); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "-bgp-bfd-interval 5ms: whole microseconds in [10ms, 4294.967295s]") {
		t.Errorf("bgp-bfd-interval 5ms: %v", err)
	}
}

// TestConfigFlag: -config takes no other flag.
func TestConfigFlag(t *testing.T) {
	if _, err := parse([]string{"-config", "x.yaml", "-iface", "eth0"}, nil); err == nil || !strings.Contains(err.Error(), "-config takes no other flag") {
		t.Errorf("-config with -iface: %v", err)
	}
	c, err := parse([]string{"-config", "x.yaml"}, nil)
	if err != nil || c.File != "x.yaml" {
		t.Errorf("-config alone: %+v, %v", c, err)
	}
}

// TestSameGlobal: a reload refuses a change of the load balancer's own
// settings, naming it; a service's settings, at the top too, may change.
func TestSameGlobal(t *testing.T) {
	const svc = "services:\n  - name: web\n    vip: 198.19.0.1:80\n    backends: [198.18.0.11]\n"
	const bgpTop = "bgp-asn: 65001\nbgp-router-id: 198.18.0.3\n"
	load := func(top string) Global {
		t.Helper()
		g, _, err := Parse([]byte("iface: eth0\nadmin: :9180\n" + top + svc))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a := load("")
	if err := SameGlobal(a, load("drain-timeout: 5s\nhealth: tcp\n")); err != nil {
		t.Fatalf("a service's settings at the top changed: %v", err)
	}
	if err := SameGlobal(a, load("seed: 9\n")); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "seed: 9, running with 0") {
		t.Errorf("seed changed: %v", err)
	}
	a = load(bgpTop + "bgp-peer: [\"198.18.0.1,1\"]\n")
	if err := SameGlobal(a, load(bgpTop+"bgp-peer: [\"198.18.0.2,1\"]\n")); err == nil || !strings.Contains(err.Error(), "bgp-peer: [198.18.0.2 (AS 1)], running with [198.18.0.1 (AS 1)]") {
		t.Errorf("bgp changed: %v", err)
	}
	if err := SameGlobal(a, load(bgpTop+"bgp-peer: [\"198.18.0.1,1\"]\n")); err != nil {
		t.Errorf("the same peer, written otherwise: %v", err)
	}
}

// TestConfigSecondChance: second-chance, second-chance-window and
// conntrack in a file, in a service or at the top as every service's
// default (the top's window serves the GUE services and is ignored by the
// others); an error names the line, the service and the setting; a
// reload may change them, the load balancer's own settings unchanged.
func TestConfigSecondChance(t *testing.T) {
	const file = `iface: eth0
second-chance-window: 5m
services:
  - name: web
    vip: 198.19.0.1:80
    forward: gue
    backends: [198.18.0.11]
  - name: api
    vip: 198.19.0.1:443
    forward: gue
    conntrack: false
    second-chance-window: 2m
    backends: [198.18.0.11]
  - name: db
    vip: 198.19.0.1:5432
    forward: gue
    second-chance: false
    conntrack: false
    backends: [198.18.0.11]
  - name: dns
    vip: 198.19.0.1:53
    proto: udp
    forward: ipip
    backends: [198.18.0.11]
  - name: l2
    vip: 198.19.0.1:25
    conntrack: false
    backends: [198.18.0.11]
`
	g, svcs, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		window time.Duration
		mode   xdpmaglev.ConntrackMode
	}{{5 * time.Minute, xdpmaglev.ConntrackOn}, {2 * time.Minute, xdpmaglev.ConntrackOff}, {0, xdpmaglev.ConntrackOff}, {0, xdpmaglev.ConntrackOn}, {0, xdpmaglev.ConntrackOff}}
	if len(svcs) != len(want) {
		t.Fatalf("%d services, want %d", len(svcs), len(want))
	}
	for i, w := range want {
		if f := svcs[i].Fwd; f.SecondChance != w.window || f.Conntrack != w.mode {
			t.Errorf("service %q: window %v, conntrack %v; want %v, %v", svcs[i].Name, f.SecondChance, f.Conntrack, w.window, w.mode)
		}
	}

	// A reload: web stateless with a window of 20 minutes, api with
	// connection tracking and no second chance.
	changed := strings.Replace(file, "second-chance-window: 5m\n", "second-chance-window: 20m\nconntrack: false\n", 1)
	changed = strings.Replace(changed, "    conntrack: false\n    second-chance-window: 2m\n", "    second-chance: false\n    conntrack: true\n", 1)
	g2, svcs2, err := Parse([]byte(changed))
	if err != nil {
		t.Fatal(err)
	}
	if err := SameGlobal(g, g2); err != nil {
		t.Errorf("a reload changing second chance and conntrack: %v", err)
	}
	if f := svcs2[0].Fwd; f.SecondChance != 20*time.Minute || f.Conntrack != xdpmaglev.ConntrackOff || svcs2[0].Settings == svcs[0].Settings {
		t.Errorf("web reloaded: %+v", svcs2[0])
	}
	if f := svcs2[1].Fwd; f.SecondChance != 0 || f.Conntrack != xdpmaglev.ConntrackOn || svcs2[1].Settings == svcs[1].Settings {
		t.Errorf("api reloaded: %+v", svcs2[1])
	}

	const svc = "services:\n  - name: web\n    vip: 198.19.0.1:80\n    backends: [198.18.0.11]\n"
	for _, tc := range []struct {
		file string
		want string
	}{
		{"iface: eth0\n" + svc + "    forward: ipip\n    second-chance: true\n", `7: service "web": -second-chance with -forward ipip: xdpmaglev: bad service tcp/198.19.0.1:80: second chance needs ForwardGUE, not ipip: only GUE's header carries the second hop`},
		{"iface: eth0\nsecond-chance: true\n" + svc, `2: service "web": -second-chance with -forward l2: xdpmaglev: `},
		{"iface: eth0\n" + svc + "    forward: gue\n    second-chance-window: 0s\n", `7: service "web": -second-chance-window 0s: must be positive`},
		{"iface: eth0\n" + svc + "    second-chance-window: 10\n", `6: service "web": second-chance-window "10": not a duration`},
		{"iface: eth0\n" + svc + "    conntrack: off\n", `6: service "web": conntrack "off": not a boolean (true or false)`},
	} {
		if _, _, err := Parse([]byte(tc.file)); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q...", tc.file, err, tc.want)
		}
	}
}

// TestConfigHandoff: state-file, handoff-listen and handoff-peers, by
// file and by flags; a peer that is not HOST:PORT, or given twice, is
// refused at its line; a reload may change the peers (they are asked at
// start only), not the state file or the listener.
func TestConfigHandoff(t *testing.T) {
	const svc = "services:\n  - name: web\n    vip: 198.19.0.1:80\n    backends: [198.18.0.11]\n"
	top := "iface: eth0\nstate-file: /var/lib/l4lb/../l4lb/eth0.json\nhandoff-listen: 198.18.0.3:9181\nhandoff-peers: [198.18.0.4:9181, \"lb3.example:9181\", \"[2001:db8::5]:9181\"]\n"
	g, _, err := Parse([]byte(top + svc))
	if err != nil {
		t.Fatal(err)
	}
	want := Handoff{StateFile: "/var/lib/l4lb/eth0.json", Listen: "198.18.0.3:9181", Peers: []string{"198.18.0.4:9181", "lb3.example:9181", "[2001:db8::5]:9181"}}
	if !reflect.DeepEqual(g.Handoff, want) {
		t.Errorf("from a file: %+v, want %+v", g.Handoff, want)
	}
	c, err := parse(strings.Fields("-iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.11 -state-file /run/x.json -handoff-listen :9181 -handoff-peer 198.18.0.4:9181 -handoff-peer 198.18.0.5:9181"), io.Discard)
	if err != nil || c.Handoff.StateFile != "/run/x.json" || c.Handoff.Listen != ":9181" || !slices.Equal(c.Handoff.Peers, []string{"198.18.0.4:9181", "198.18.0.5:9181"}) {
		t.Errorf("from flags: %+v, %v", c.Handoff, err)
	}
	g, _, err = Parse([]byte("iface: eth0\n" + svc))
	if err != nil || !reflect.DeepEqual(g.Handoff, Handoff{}) {
		t.Errorf("the defaults: %+v, %v; want none", g.Handoff, err)
	}
	for _, bad := range []struct{ line, want string }{
		{"handoff-peers: [198.18.0.4]", `handoff-peers "198.18.0.4": not HOST:PORT`},
		{"handoff-peers: [\"198.18.0.4:0\"]", `port "0" is not in [1, 65535]`},
		{"handoff-peers: [\"198.18.0.4:http\"]", `port "http" is not in [1, 65535]`},
		{"handoff-peers: [\":9181\"]", `":9181": not HOST:PORT`},
		{"handoff-peers: [198.18.0.4:9181, 198.18.0.4:9181]", "198.18.0.4:9181: given twice"},
		{"handoff-listen: 198.18.0.3", `-handoff-listen "198.18.0.3": not [HOST]:PORT`},
	} {
		_, _, err := Parse([]byte("iface: eth0\n" + bad.line + "\n" + svc))
		if err == nil || !strings.HasPrefix(err.Error(), "2: ") || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want line 2 and %q", bad.line, err, bad.want)
		}
	}
	a, _, err := Parse([]byte(top + svc))
	if err != nil {
		t.Fatal(err)
	}
	for _, change := range []struct {
		from, to string
		ok       bool
	}{
		{"handoff-peers: [198.18.0.4:9181", "handoff-peers: [198.18.0.6:9181", true},
		{"state-file: /var/lib/l4lb/../l4lb/eth0.json", "state-file: /var/lib/l4lb/eth1.json", false},
		{"handoff-listen: 198.18.0.3:9181", "handoff-listen: 198.18.0.3:9182", false},
	} {
		b, _, err := Parse([]byte(strings.Replace(top, change.from, change.to, 1) + svc))
		if err != nil {
			t.Fatal(err)
		}
		if err := SameGlobal(a, b); (err == nil) != change.ok {
			t.Errorf("%s: SameGlobal: %v", change.to, err)
		}
	}
}

// TestSummary: what l4lb check says a configuration holds: its services
// by name, sorted, counted in the singular for one, and a controller's
// class and pool.
func TestSummary(t *testing.T) {
	pool := []netip.Prefix{netip.MustParsePrefix("198.19.40.0/28")}
	for _, c := range []struct {
		g    Global
		svcs []Service
		want string
	}{
		{Global{Iface: "eth0"}, []Service{{Name: "web"}, {Name: "dns"}}, "2 services (dns, web) on eth0"},
		{Global{Iface: "eth0"}, []Service{{Name: "web"}}, "1 service (web) on eth0"},
		{Global{Iface: "v0", K8s: K8s{Pool: pool, Class: DefaultK8sLBClass}}, nil, "0 services, and the Services of class maglevlb.io/l4lb from [198.19.40.0/28] on v0"},
	} {
		if got := Summary(c.g, c.svcs); got != c.want {
			t.Errorf("Summary: %q, want %q", got, c.want)
		}
	}
}
