package config

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// TestK8sGlobal: vip-pool and the k8s-* settings of a file, which may
// list no service with vip-pool, and their errors.
func TestK8sGlobal(t *testing.T) {
	g, svcs, err := Parse([]byte("iface: eth0\nkubeconfig: /etc/l4lb/kc\nvip-pool: [198.19.0.0/28, 2001:db8::/120]\nk8s-lb-default: true\nservices: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := K8s{Pool: []netip.Prefix{netip.MustParsePrefix("198.19.0.0/28"), netip.MustParsePrefix("2001:db8::/120")},
		Class: DefaultK8sLBClass, Default: true, Lease: DefaultK8sLease, Kubeconfig: "/etc/l4lb/kc"}
	if len(svcs) != 0 || !g.K8s.On() || g.K8s.Class != want.Class || g.K8s.Default != want.Default || g.K8s.Lease != want.Lease ||
		g.K8s.Kubeconfig != want.Kubeconfig || len(g.K8s.Pool) != 2 || g.K8s.Pool[0] != want.Pool[0] || g.K8s.Pool[1] != want.Pool[1] {
		t.Fatalf("got %+v, %d services; want %+v, none", g.K8s, len(svcs), want)
	}
	if ns, name := g.K8s.LeaseName(); ns != "l4lb-system" || name != "l4lb-vip-allocator" {
		t.Errorf("LeaseName() = %q, %q", ns, name)
	}
	if _, _, err := Parse([]byte("iface: eth0\nvip-pool: 198.19.0.0/28\n")); err != nil {
		t.Errorf("no services key with vip-pool: %v", err)
	}
	for file, want := range map[string]string{
		"iface: eth0\nvip-pool: 198.19.0.1/28\nservices: []\n":                                "not a prefix's first address (198.19.0.0/28)",
		"iface: eth0\nvip-pool: [198.19.0.0/28, 198.19.0.8/29]\nservices: []\n":               "198.19.0.8/29 overlaps 198.19.0.0/28",
		"iface: eth0\nvip-pool: 224.0.0.0/28\nservices: []\n":                                 "not of unicast addresses",
		"iface: eth0\nvip-pool: 198.19.0.0/28\nk8s-lease: nons\nservices: []\n":               `-k8s-lease "nons": NAMESPACE/NAME`,
		"iface: eth0\nvip-pool: 198.19.0.0/28\nk8s-lb-class: x\nservices: []\n":               `-k8s-lb-class "x"`,
		"iface: eth0\nk8s-lb-default: true\nservices:\n  - name: w\n    vip: 198.19.0.1:80\n": "-k8s-lb-default needs -vip-pool",
		"iface: eth0\nk8s-lease: a/b\nservices:\n  - name: w\n    vip: 198.19.0.1:80\n":       "-k8s-lease needs -vip-pool",
		"iface: eth0\nservices: []\n":                                                         "services: a list",
	} {
		if _, _, err := Parse([]byte(file)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", file, err, want)
		}
	}
}

// TestK8sService: a Kubernetes Service's port as an l4lb service, the
// file's defaults overridden by annotations, and the overrides refused.
func TestK8sService(t *testing.T) {
	g, _, err := Parse([]byte("iface: eth0\nvip-pool: 198.19.0.0/28\nforward: gue\nhealth-interval: 5s\nservices: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddrPort("198.19.0.1:80")
	nodes := []netip.Addr{netip.MustParseAddr("198.18.0.11"), netip.MustParseAddr("198.18.0.12")}
	c, err := g.K8sService("k8s/ns/web/http", vip, "tcp", nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "k8s/ns/web/http" || c.Svc != (xdpmaglev.Service{VIP: vip, Proto: xdpmaglev.TCP}) || len(c.Backends) != 2 ||
		c.Fwd.Forward != xdpmaglev.ForwardGUE || c.Fwd.SecondChance == 0 || c.Health.Kind != "" {
		t.Errorf("defaults: got %+v", c)
	}
	c, err = g.K8sService("k8s/ns/web/http", vip, "udp", nodes, map[string]string{"forward": "ipip", "health": "http", "health-port": "30123"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Svc.Proto != xdpmaglev.UDP || c.Fwd.Forward != xdpmaglev.ForwardIPIP || c.Health.Kind != "http" || c.Health.Port != 30123 ||
		c.Health.Interval.Seconds() != 5 || c.Health.Path != "/healthz" {
		t.Errorf("overridden: got %+v", c)
	}
	for _, tc := range []struct {
		over    map[string]string
		setting string // SettingOf the error; "" for ErrOverride
	}{
		{map[string]string{"forward": "carrier-pigeon"}, "forward"},
		{map[string]string{"health": "http", "health-interval": "-1s"}, "health-interval"},
		{map[string]string{"m": "abc"}, "m"},
		{map[string]string{"backends": "198.18.0.13"}, ""},
		{map[string]string{"proto": "udp"}, ""},
		{map[string]string{"seed": "1"}, ""},
		{map[string]string{"etcd": "http://x"}, ""},
		{map[string]string{"colour": "blue"}, ""},
		{map[string]string{"quic-lb-key-file": "/etc/l4lb/quic.key"}, ""},
	} {
		_, err := g.K8sService("k8s/ns/web/http", vip, "tcp", nodes, tc.over)
		switch {
		case err == nil:
			t.Errorf("%v: no error", tc.over)
		case tc.setting == "" && !errors.Is(err, ErrOverride):
			t.Errorf("%v: %v, want ErrOverride", tc.over, err)
		case tc.setting != "" && (setting.SettingOf(err) == nil || setting.SettingOf(err).KeyName() != tc.setting):
			t.Errorf("%v: %v, want an error of %s", tc.over, err, tc.setting)
		}
	}
}
