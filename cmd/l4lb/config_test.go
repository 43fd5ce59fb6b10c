package main

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
)

// TestConfigExample loads example.yaml, the file docs/l4lb.md shows: the
// top's settings are the load balancer's, a service's key at the top is
// every service's default, and a source's default serves only the
// services of that source.
func TestConfigExample(t *testing.T) {
	g, svcs, err := loadFile("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if g.iface != "eth0" || g.opts.Seed != 7 || g.admin != "127.0.0.1:9180" || g.opts.MaxServices != 64 ||
		g.bgp.ASN != 65001 || len(g.bgp.Peers) != 1 || g.bgp.Peers[0] != (bgp.Peer{Addr: netip.MustParseAddr("10.0.0.1"), ASN: 65000}) ||
		g.bgp.Restart != 120*time.Second || g.file != "example.yaml" {
		t.Errorf("global %+v", g)
	}
	if len(svcs) != 4 {
		t.Fatalf("%d services, want 4", len(svcs))
	}
	web, tls, api, dns := svcs[0], svcs[1], svcs[2], svcs[3]
	if web.name != "web" || web.svc.String() != "tcp/203.0.113.1:80" || len(web.backends) != 3 ||
		web.backends[1].Weight != 2 || web.backends[0].Weight != 1 || web.backends[2].HW.String() != "02:00:00:00:00:13" ||
		web.health.Kind != "tcp" || web.health.Interval != 2*time.Second || web.timeout != time.Minute || web.src.Dynamic() {
		t.Errorf("web: %+v", web)
	}
	if tls.fwd.M != 251 || tls.health.Kind != "http" || tls.health.Port != 8080 || tls.health.Path != "/healthz" || web.fwd.M != 0 {
		t.Errorf("web-tls: %+v", tls)
	}
	if api.fwd.Forward != xdpmaglev.ForwardIPIP || api.src.String() != "etcd prefix services/api" {
		t.Errorf("api: %+v", api)
	}
	if dns.svc.Proto != xdpmaglev.UDP || dns.health.Kind != "" || dns.src.Name() != "-k8s-service" {
		t.Errorf("dns: %+v (the top's etcd must not reach a Kubernetes service)", dns)
	}
	if web.settings == tls.settings || api.srcSettings == "" || web.srcSettings != "" {
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
		_, _, err := loadFile(path)
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

// TestConfigBGP: the BGP keys of a file, a peer in each of its forms.
func TestConfigBGP(t *testing.T) {
	const file = `iface: eth0
bgp-asn: 65001
bgp-router-id: 198.18.0.3
bgp-peer:
  - 198.18.0.1,65000
  - 198.18.0.2@65002
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
	g, _, err := loadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "AS 65001 (router ID 198.18.0.3) to 198.18.0.1 (AS 65000), 198.18.0.2 (AS 65002), 198.18.0.4 (AS 65004), hold 9s, graceful restart 30s, drain 1s"
	if got := g.bgp.String(); got != want {
		t.Errorf("bgp: %q, want %q", got, want)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(file, "30s", "5000s", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadFile(path); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "-bgp-restart-time 5000s") {
		t.Errorf("bgp-restart-time 5000s: %v", err)
	}
}

// TestConfigFlag: -config takes no other flag.
func TestConfigFlag(t *testing.T) {
	if _, err := parse([]string{"-config", "x.yaml", "-iface", "eth0"}, nil); err == nil || !strings.Contains(err.Error(), "-config takes no other flag") {
		t.Errorf("-config with -iface: %v", err)
	}
	c, err := parse([]string{"-config", "x.yaml"}, nil)
	if err != nil || c.file != "x.yaml" {
		t.Errorf("-config alone: %+v, %v", c, err)
	}
}

// TestSameGlobal: a reload refuses a change of the load balancer's own
// settings, naming it.
func TestSameGlobal(t *testing.T) {
	a := global{iface: "eth0", admin: ":9180"}
	b := a
	if err := sameGlobal(a, b); err != nil {
		t.Fatal(err)
	}
	b.opts.Seed = 9
	if err := sameGlobal(a, b); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "seed: 9, running with 0") {
		t.Errorf("seed changed: %v", err)
	}
	b = a
	b.bgp.Peers = []bgp.Peer{{Addr: netip.MustParseAddr("198.18.0.1"), ASN: 1}}
	if err := sameGlobal(a, b); err == nil || !strings.Contains(err.Error(), "bgp-*") {
		t.Errorf("bgp changed: %v", err)
	}
}
