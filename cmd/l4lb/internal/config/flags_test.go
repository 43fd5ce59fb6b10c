package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/checker"
	"github.com/maglevlb/maglev/xdpmaglev"
)

// TestParseForward: -forward, -encap-src, -gue-port and -flood-rate
// reach the options the pool and Load get (a GUE service with second
// chance, its default).
func TestParseForward(t *testing.T) {
	for _, tc := range []struct {
		args  string
		want  xdpmaglev.ServiceOptions
		flood int
	}{
		{"-vip 198.19.0.1:80 -backend 198.18.0.11", xdpmaglev.ServiceOptions{}, 0},
		{"-vip 198.19.0.1:80 -backend 198.18.0.11=02:00:00:00:00:11 -forward l2", xdpmaglev.ServiceOptions{}, 0},
		{"-vip 198.19.0.1:80 -backend 198.18.0.11 -forward ipip", xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardIPIP}, 0},
		{"-vip 198.19.0.1:80 -backend 198.18.0.11 -forward ipip -encap-src 198.18.0.3 -flood-rate -1",
			xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardIPIP, Source: netip.MustParseAddr("198.18.0.3")}, -1},
		{"-vip 198.19.0.1:80 -backend 198.18.0.11 -forward gue", xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardGUE, GUEPort: 6080, SecondChance: 10 * time.Minute}, 0},
		{"-vip [2001:db8::1]:80 -backend 2001:db8::11 -forward gue -gue-port 7000 -encap-src 2001:db8::3 -flood-rate 1000",
			xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardGUE, Source: netip.MustParseAddr("2001:db8::3"), GUEPort: 7000, SecondChance: 10 * time.Minute}, 1000},
		{"-vip 198.19.0.1:80 -etcd http://127.0.0.1:2379 -etcd-prefix svc -forward gue -encap-src ::ffff:198.18.0.3",
			xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardGUE, Source: netip.MustParseAddr("198.18.0.3"), GUEPort: 6080, SecondChance: 10 * time.Minute}, 0},
		{"-vip 198.19.0.1:80 -backend 198.18.0.11 -forward ipip -encap-src 198.18.200.0/24",
			xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardIPIP, Source: netip.MustParseAddr("198.18.200.0"), SourceBits: 8}, 0},
		{"-vip [2001:db8::1]:80 -backend 2001:db8::11 -forward gue -encap-src 2001:db8:c8::/112",
			xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardGUE, Source: netip.MustParseAddr("2001:db8:c8::"), SourceBits: 16, GUEPort: 6080, SecondChance: 10 * time.Minute}, 0},
		{"-vip 198.19.0.1:80 -backend 198.18.0.11 -forward ipip -encap-src 198.18.0.3/32",
			xdpmaglev.ServiceOptions{Forward: xdpmaglev.ForwardIPIP, Source: netip.MustParseAddr("198.18.0.3")}, 0},
	} {
		c, err := parse(append([]string{"-iface", "eth0"}, strings.Fields(tc.args)...), io.Discard)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if c.Service.Fwd != tc.want || c.Opts.FloodRate != tc.flood {
			t.Errorf("%q: options %+v, flood rate %d; want %+v, %d", tc.args, c.Service.Fwd, c.Opts.FloodRate, tc.want, tc.flood)
		}
	}
}

// TestParseRefused: each bad value or combination of the new flags, and
// the careless operator's repeated -backend, is refused with an error
// that names the flag.
func TestParseRefused(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"-forward vxlan", `-forward "vxlan": l2, ipip or gue`},
		{"-forward IPIP", `-forward "IPIP": l2, ipip or gue`},
		{"-encap-src 198.18.0.3", "-encap-src needs -forward ipip or gue"},
		{"-forward l2 -encap-src 198.18.0.3", "-encap-src needs -forward ipip or gue"},
		{"-forward ipip -encap-src 198.18.0.300", "-encap-src: ParseAddr"},
		{"-forward ipip -encap-src 2001:db8::3", "-encap-src 2001:db8::3: xdpmaglev: bad service tcp/198.19.0.1:80: Source 2001:db8::3 is not an address of the VIP's family"},
		{"-forward gue -encap-src 0.0.0.0", "-encap-src 0.0.0.0: not a unicast address"},
		{"-forward gue -encap-src 224.0.0.1", "-encap-src 224.0.0.1: not a unicast address"},
		{"-forward gue -encap-src 127.0.0.1", "-encap-src 127.0.0.1: not a unicast address"},
		{"-forward ipip -encap-src 198.18.200.1/24", "-encap-src 198.18.200.1/24: xdpmaglev: bad service tcp/198.19.0.1:80: Source 198.18.200.1 has bits set in its lowest 8 (SourceBits), which vary per flow: give the prefix's first address"},
		{"-forward ipip -encap-src 198.18.0.0/15", "-encap-src 198.18.0.0/15: xdpmaglev: bad service tcp/198.19.0.1:80: SourceBits 17: at most 16"},
		{"-forward ipip -encap-src 198.18.200.0/33", "-encap-src: netip.ParsePrefix"},
		{"-forward gue -gue-port 0", "-gue-port 0: not a port in [1, 65535]"},
		{"-forward gue -gue-port 65536", "-gue-port 65536: not a port in [1, 65535]"},
		{"-forward gue -gue-port -1", "-gue-port -1: not a port in [1, 65535]"},
		{"-forward ipip -gue-port 7000", "-gue-port needs -forward gue (or l4lb decap), not -forward ipip"},
		{"-gue-port 6080", "-gue-port needs -forward gue (or l4lb decap), not -forward l2"},
		{"-flood-rate -2", "-flood-rate -2: xdpmaglev: bad options: FloodRate -2 not -1 (off) or in [1, 2^31]"},
		{"-flood-rate 4294967296", "-flood-rate 4294967296: xdpmaglev: bad options: FloodRate 4294967296 not -1 (off) or in [1, 2^31]"},
		{"-flood-rate many", `invalid value "many" for flag -flood-rate`},
		{"-backend 198.18.0.11 -backend 198.18.0.12 -backend 198.18.0.11", "-backend: xdpmaglev: bad backend 198.18.0.11: listed twice"},
		{"-backend 198.18.0.11 -backend ::ffff:198.18.0.11", "-backend: xdpmaglev: bad backend 198.18.0.11: listed twice"},
		{"-backend 198.18.0.11=02:00:00:00:00:11 -backend 198.18.0.11=02:00:00:00:00:12", "-backend: xdpmaglev: bad backend 198.18.0.11: listed twice"},
		{"-forward ipip -backend 198.18.0.11=02:00:00:00:00:11", "-backend 198.18.0.11=02:00:00:00:00:11: a MAC is for -forward l2"},
		{"-forward gue -backend 2001:db8::11", "-backend: xdpmaglev: bad backend 2001:db8::11: gue encapsulates IPv4 in IPv4 and IPv6 in IPv6, and the VIP is 198.19.0.1"},
	} {
		_, err := parse(append(strings.Fields("-iface eth0 -vip 198.19.0.1:80"), strings.Fields(tc.args)...), io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q...", tc.args, err, tc.want)
		}
	}
}

// TestParseSecondChance: -second-chance, -second-chance-window and
// -conntrack reach the service's options: second chance on by default
// for -forward gue alone, with a window of 10 minutes; -conntrack=false
// stateless, with second chance or without, whatever the forwarding.
func TestParseSecondChance(t *testing.T) {
	const win = 10 * time.Minute
	for _, tc := range []struct {
		args   string
		window time.Duration
		mode   xdpmaglev.ConntrackMode
	}{
		{"-forward gue", win, xdpmaglev.ConntrackOn},
		{"-forward gue -second-chance", win, xdpmaglev.ConntrackOn},
		{"-forward gue -second-chance=false", 0, xdpmaglev.ConntrackOn},
		{"-forward gue -second-chance-window 2m", 2 * time.Minute, xdpmaglev.ConntrackOn},
		{"-forward gue -second-chance=true -second-chance-window 1h30m -conntrack=true", 90 * time.Minute, xdpmaglev.ConntrackOn},
		{"-forward gue -conntrack=false", win, xdpmaglev.ConntrackOff},
		{"-forward gue -conntrack=false -second-chance=false", 0, xdpmaglev.ConntrackOff},
		{"-forward gue -second-chance=false -second-chance-window 1m", 0, xdpmaglev.ConntrackOn}, // ignored, second chance off
		{"", 0, xdpmaglev.ConntrackOn},
		{"-forward l2 -conntrack=false", 0, xdpmaglev.ConntrackOff},
		{"-forward ipip", 0, xdpmaglev.ConntrackOn},
		{"-forward ipip -second-chance=false -conntrack=false", 0, xdpmaglev.ConntrackOff},
		{"-forward ipip -second-chance-window 20m", 0, xdpmaglev.ConntrackOn}, // ignored, second chance off
	} {
		c, err := parse(append(strings.Fields("-iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.11"), strings.Fields(tc.args)...), io.Discard)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if f := c.Service.Fwd; f.SecondChance != tc.window || f.Conntrack != tc.mode {
			t.Errorf("%q: window %v, conntrack %v; want %v, %v", tc.args, f.SecondChance, f.Conntrack, tc.window, tc.mode)
		}
	}
}

// TestParseSecondChanceRefused: second chance asked of a forwarding
// other than GUE, and a window that is no positive duration of at most
// a year, are refused with an error that names the flag.
func TestParseSecondChanceRefused(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"-forward ipip -second-chance", "-second-chance with -forward ipip: xdpmaglev: bad service tcp/198.19.0.1:80: second chance needs ForwardGUE, not ipip: only GUE's header carries the second hop"},
		{"-forward ipip -second-chance=true -conntrack=false", "-second-chance with -forward ipip: xdpmaglev: "},
		{"-second-chance", "-second-chance with -forward l2: xdpmaglev: "},
		{"-forward gue -second-chance-window 0s", "-second-chance-window 0s: must be positive, and at most 8760h0m0s (a year)"},
		{"-forward gue -second-chance-window -1m", "-second-chance-window -1m0s: must be positive"},
		{"-forward gue -second-chance-window 8761h", "-second-chance-window 8761h0m0s: must be positive, and at most 8760h0m0s"},
		{"-forward gue -second-chance=false -second-chance-window 0s", "-second-chance-window 0s: must be positive"},
		{"-forward gue -second-chance-window 10", `invalid value "10" for flag -second-chance-window: not a duration`},
		{"-forward gue -second-chance=maybe", `invalid boolean value "maybe" for -second-chance`},
		{"-conntrack=off", `invalid boolean value "off" for -conntrack`},
	} {
		_, err := parse(append(strings.Fields("-iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.11"), strings.Fields(tc.args)...), io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q...", tc.args, err, tc.want)
		}
	}
	for _, f := range []string{"-conntrack=false", "-second-chance"} {
		_, err := parseDecap("-iface eth0 -vip 198.18.255.1 -decap-sources any " + f)
		if want := "flag provided but not defined: " + strings.TrimSuffix(f, "=false"); err == nil || err.Error() != want {
			t.Errorf("l4lb decap %s: %v; want %q", f, err, want)
		}
	}
}

// TestParseUDPWarning: -proto udp starts, with a warning that TCP to the
// VIP is not balanced; -proto tcp has none.
func TestParseUDPWarning(t *testing.T) {
	c, err := parse(strings.Fields("-iface eth0 -vip 198.19.0.1:53 -proto udp -backend 198.18.0.11"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := "-proto udp: TCP packets to 198.19.0.1:53 pass to the kernel"; len(c.Warnings) != 1 || c.Warnings[0] != want {
		t.Errorf("warnings %q, want [%q]", c.Warnings, want)
	}
	c, err = parse(strings.Fields("-iface eth0 -vip 198.19.0.1:53 -backend 198.18.0.11"), io.Discard)
	if err != nil || len(c.Warnings) != 0 {
		t.Errorf("-proto tcp: warnings %q, %v", c.Warnings, err)
	}
}

// TestParseDecap: l4lb decap takes -iface, addresses in -vip, the
// trusted -decap-sources (required), -gue-port, -mode and -admin, and
// not the load balancer's flags; l4lb run not -decap-sources.
func TestParseDecap(t *testing.T) {
	d, err := parseDecap("-iface eth1 -vip 198.18.255.1,2001:db8::1,::ffff:198.18.255.2 -decap-sources 198.18.2.0/24,2001:db8:2::/64,198.18.9.9 -gue-port 7000 -mode generic -admin :0")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("198.18.255.1"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("198.18.255.2")}
	if d.Iface != "eth1" || d.Admin != ":0" || d.Opts.GUEPort != 7000 || d.Opts.Mode != xdpmaglev.AttachGeneric ||
		len(d.Opts.VIPs) != 3 || d.Opts.VIPs[0] != want[0] || d.Opts.VIPs[1] != want[1] || d.Opts.VIPs[2] != want[2] || len(d.Opts.Hosts) != 0 ||
		fmt.Sprint(d.Opts.Sources) != "[198.18.2.0/24 2001:db8:2::/64 198.18.9.9/32]" {
		t.Errorf("parsed %+v", d)
	}
	// Prefixes: each of their addresses (a cluster's pool), IPv4-mapped
	// ones unmapped.
	d, err = parseDecap("-iface eth1 -vip 198.19.200.0/30,2001:db8::10/127,::ffff:198.19.201.0/127,198.18.255.1 -decap-sources any")
	if got := fmt.Sprint(d.Opts.VIPs); err != nil || got != "[198.19.200.0 198.19.200.1 198.19.200.2 198.19.200.3 2001:db8::10 2001:db8::11 198.19.201.0 198.19.201.1 198.18.255.1]" {
		t.Errorf("prefixes: %s, %v", got, err)
	}
	d, err = parseDecap("-iface eth1 -vip 198.18.255.1 -decap-sources any")
	if o := d.Opts; err != nil || o.GUEPort != xdpmaglev.DefaultGUEPort || o.Mode != xdpmaglev.AttachAuto || len(o.VIPs) != 1 ||
		fmt.Sprint(o.Sources) != "[0.0.0.0/0 ::/0]" {
		t.Errorf("defaults: %+v, %v", d.Opts, err)
	}

	for _, tc := range []struct{ args, want string }{
		{"-iface eth0 -vip 198.18.255.1", "l4lb decap needs -decap-sources: "},
		{"-iface eth0 -vip 198.18.255.1 -decap-sources 198.18.2.1/24", "-decap-sources 198.18.2.1/24: not a prefix's first address (198.18.2.0/24)"},
		{"-iface eth0 -vip 198.18.255.1 -decap-sources 198.18.2.0/24,lb1", `-decap-sources "lb1": neither a prefix nor an address`},
		{"-vip 198.18.255.1", "-iface and -vip are required"},
		{"-iface eth0", "-iface and -vip are required"},
		{"-iface eth0 -vip 198.18.255.1:80", `-vip "198.18.255.1:80": l4lb decap takes addresses, without a port`},
		{"-iface eth0 -vip 198.18.255.1,[2001:db8::1]:80", `-vip "[2001:db8::1]:80": l4lb decap takes addresses, without a port`},
		{"-iface eth0 -vip 198.18.255.1,", `-vip "": ParseAddr`},
		{"-iface eth0 -vip 198.18.255.300", `-vip "198.18.255.300": ParseAddr`},
		{"-iface eth0 -vip 198.18.255.1,198.18.255.1", "-vip 198.18.255.1: given twice"},
		{"-iface eth0 -vip 198.18.255.0/30,198.18.255.1", "-vip 198.18.255.1: given twice"},
		{"-iface eth0 -vip 198.18.255.1,198.18.255.0/30", "-vip 198.18.255.1: given twice"},
		{"-iface eth0 -vip 198.18.0.0/23", "-vip 198.18.0.0/23: a prefix of more than 256 addresses"},
		{"-iface eth0 -vip 198.18.0.0/24,198.19.0.0/32", "-vip: 257 addresses, at most 256"},
		{"-iface eth0 -vip fe80::1%eth0", "-vip fe80::1%eth0: an address without a zone"},
		{"-iface eth0 -vip 198.18.255.1 -gue-port 0", "-gue-port 0: not a port in [1, 65535]"},
		{"-iface eth0 -vip 198.18.255.1 -mode offload", `-mode "offload": auto, native or generic`},
		{"-iface eth0 -vip 198.18.255.1 -backend 198.18.0.11", "flag provided but not defined: -backend"},
		{"-iface eth0 -vip 198.18.255.1 -forward ipip", "flag provided but not defined: -forward"},
		{"-iface eth0 -vip 198.18.255.1 -forward l2", "flag provided but not defined: -forward"},
		{"-iface eth0 -vip 198.18.255.1 -encap-src 198.18.0.3", "flag provided but not defined: -encap-src"},
		{"-iface eth0 -vip 198.18.255.1 -etcd http://127.0.0.1:2379 -etcd-prefix svc", "flag provided but not defined: -etcd"},
		{"-iface eth0 -vip 198.18.255.1 -k8s-service prod/web:http -kubeconfig /tmp/kc", "flag provided but not defined: -k8s-service"},
		{"-iface eth0 -vip 198.18.255.1 -flood-rate -1", "flag provided but not defined: -flood-rate"},
		{"-iface eth0 -vip 198.18.255.1 -proto udp -seed 7 -m 251", "flag provided but not defined: -proto"},
		{"-iface eth0 -vip 198.18.255.1 -drain 198.18.0.11 -drain-timeout 5s", "flag provided but not defined: -drain"},
	} {
		_, err := parseDecap(tc.args)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("l4lb decap %s: %v; want %q...", tc.args, err, tc.want)
		}
	}
	_, err = parse(strings.Fields("-iface eth0 -vip 198.18.255.1:80 -decap-sources any"), io.Discard)
	if want := "flag provided but not defined: -decap-sources"; err == nil || err.Error() != want {
		t.Errorf("l4lb run -decap-sources: %v; want %q", err, want)
	}
}

// TestParseHealth: -health and the -health-* flags reach the service's
// health check, with their defaults; -health none (the default) checks
// nothing.
func TestParseHealth(t *testing.T) {
	for _, tc := range []struct {
		args string
		want checker.Config
	}{
		{"", checker.Config{}},
		{"-health none", checker.Config{}},
		{"-health tcp", checker.Config{Kind: "tcp", Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3}},
		{"-health http", checker.Config{Kind: "http", Path: "/healthz", Status: 200, Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3}},
		{"-health http -health-path /ready?deep=1 -health-status 204 -health-port 8080 -health-interval 500ms -health-timeout 500ms -health-rise 1 -health-fall 5",
			checker.Config{Kind: "http", Path: "/ready?deep=1", Status: 204, Port: 8080, Interval: 500 * time.Millisecond, Timeout: 500 * time.Millisecond, Rise: 1, Fall: 5}},
		{"-health tcp -health-port 22 -health-interval 10s -health-timeout 3s -health-rise 4 -health-fall 1",
			checker.Config{Kind: "tcp", Port: 22, Interval: 10 * time.Second, Timeout: 3 * time.Second, Rise: 4, Fall: 1}},
	} {
		c, err := parse(append(strings.Fields("-iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.11"), strings.Fields(tc.args)...), io.Discard)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if c.Service.Health != tc.want {
			t.Errorf("%q: %+v, want %+v", tc.args, c.Service.Health, tc.want)
		}
	}
}

// TestParseHealthRefused: each bad value or combination of the health
// flags is refused with an error that names the flag.
func TestParseHealthRefused(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"-health udp", `-health "udp": none, tcp or http`},
		{"-health HTTP", `-health "HTTP": none, tcp or http`},
		{"-health-path /ready", "-health-path needs -health tcp or http"},
		{"-health none -health-interval 1s", "-health-interval needs -health tcp or http"},
		{"-health-port 8080", "-health-port needs -health tcp or http"},
		{"-health-fall 2", "-health-fall needs -health tcp or http"},
		{"-health tcp -health-path /ready", "-health-path needs -health http, not -health tcp"},
		{"-health tcp -health-status 204", "-health-status needs -health http, not -health tcp"},
		{"-health http -health-path ready", `-health-path "ready": a path, starting with /`},
		{"-health http -health-path /a#b", `-health-path "/a#b": not a URL path (and query)`},
		{"-health http -health-path /%zz", `-health-path "/%zz": not a URL path (and query)`},
		{"-health http -health-status 99", "-health-status 99: not an HTTP status in [100, 599]"},
		{"-health http -health-status 600", "-health-status 600: not an HTTP status in [100, 599]"},
		{"-health http -health-status ok", `invalid value "ok" for flag -health-status`},
		{"-health tcp -health-port 0", "-health-port 0: not a port in [1, 65535]"},
		{"-health tcp -health-port 65536", "-health-port 65536: not a port in [1, 65535]"},
		{"-health tcp -health-interval 0s", "-health-interval 0s: must be positive"},
		{"-health tcp -health-interval -1s", "-health-interval -1s: must be positive"},
		{"-health tcp -health-interval 2", `invalid value "2" for flag -health-interval`},
		{"-health tcp -health-timeout 0s", "-health-timeout 0s: must be positive"},
		{"-health tcp -health-timeout 3s", "-health-timeout 3s: at most -health-interval (2s)"},
		{"-health tcp -health-interval 100ms -health-timeout 101ms", "-health-timeout 101ms: at most -health-interval (100ms)"},
		{"-health tcp -health-rise 0", "-health-rise 0: at least 1"},
		{"-health tcp -health-fall 0", "-health-fall 0: at least 1"},
		{"-health tcp -health-fall -3", "-health-fall -3: at least 1"},
	} {
		_, err := parse(append(strings.Fields("-iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.11"), strings.Fields(tc.args)...), io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q...", tc.args, err, tc.want)
		}
	}
	_, err := parseDecap("-iface eth0 -vip 198.18.255.1 -decap-sources any -health tcp")
	if want := "flag provided but not defined: -health"; err == nil || err.Error() != want {
		t.Errorf("l4lb decap -health tcp: %v; want %q", err, want)
	}
}

// TestHelpSources: l4lb run -h lists the membership sources it takes, and
// not -dns-srv, whose SRV targets are names where the data plane needs
// addresses (lbproxy takes it: cmd/lbproxy's TestHelpDNSSRV).
func TestHelpSources(t *testing.T) {
	var out strings.Builder
	if _, err := parse([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	help := out.String()
	for _, f := range []string{"\n  -etcd ", "\n  -etcd-prefix ", "\n  -dns ", "\n  -dns-interval ", "\n  -k8s-service ", "\n  -kubeconfig "} {
		if !strings.Contains(help, f) {
			t.Errorf("-h lacks %q", strings.TrimSpace(f))
		}
	}
	if strings.Contains(help, "dns-srv") {
		t.Errorf("-h lists -dns-srv, which l4lb does not take:\n%s", help)
	}
}
