package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/bgp"
	"github.com/maglevlb/maglev/xdpmaglev"
)

func TestParse(t *testing.T) {
	c, err := parse(strings.Fields("-iface eth1 -vip [2001:db8::1]:53 -proto udp -backend 2001:db8::11 -backend 2001:db8::12=02:00:00:00:00:12 -m 251 -seed 7 -mode generic -admin :0"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Iface != "eth1" || c.Service.Svc.String() != "udp/[2001:db8::1]:53" || c.Service.Fwd.M != 251 || c.Opts.Seed != 7 ||
		c.Opts.Mode != xdpmaglev.AttachGeneric || c.Admin != ":0" || len(c.Service.Backends) != 2 ||
		c.Service.Backends[0].HW != nil || c.Service.Backends[1].HW.String() != "02:00:00:00:00:12" || c.Service.Backends[1].Weight != 1 {
		t.Errorf("parsed %+v", c)
	}
	for _, bad := range []string{
		"-vip 198.19.0.1:80",
		"-iface eth0",
		"-iface eth0 -vip 198.19.0.1",
		"-iface eth0 -vip 198.19.0.1:80 -proto sctp",
		"-iface eth0 -vip 198.19.0.1:80 -mode offload",
		"-iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.300",
		"-iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.3=02:00",
		"-iface eth0 -vip 198.19.0.1:80 -etcd http://127.0.0.1:2379",
		"-iface eth0 -vip 198.19.0.1:80 -etcd-prefix svc",
		"-iface eth0 -vip 198.19.0.1:80 -etcd http://127.0.0.1:2379 -etcd-prefix svc -backend 198.18.0.3",
		"-iface eth0 -vip 198.19.0.1:80 -drain 198.18.0.300",
		"-iface eth0 -vip 198.19.0.1:80 -drain-timeout -1s",
	} {
		if _, err := parse(strings.Fields(bad), io.Discard); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	c, err = parse(strings.Fields("-iface eth0 -vip 198.19.0.1:80 -etcd http://a:2379,http://b:2379 -etcd-prefix services/l4 -drain 198.18.0.11 -drain 198.18.0.12 -drain-timeout 5s"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Service.Src.String() != "etcd prefix services/l4" || len(c.Service.Drained) != 2 ||
		c.Service.Drained[1] != netip.MustParseAddr("198.18.0.12") || c.Service.Timeout != 5*time.Second {
		t.Errorf("parsed %+v", c)
	}
	if _, err := parse([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// TestParseBGP: the BGP flags, parsed; -bgp-peer takes ADDR,ASN.
func TestParseBGP(t *testing.T) {
	for _, tc := range []struct {
		args string
		want bgp.Config
	}{
		{"", bgp.Config{}},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 198.18.0.1,65000",
			bgp.Config{ASN: 65001, RouterID: netip.MustParseAddr("198.18.0.3"), ListenPort: 179, Hold: 9 * time.Second, Restart: 120 * time.Second, Drain: 2 * time.Second,
				Peers: []bgp.Peer{{Addr: netip.MustParseAddr("198.18.0.1"), ASN: 65000}}}},
		{"-bgp-asn 4200000000 -bgp-router-id 10.0.0.1 -bgp-peer 198.18.0.1,65000 -bgp-peer 198.18.0.2,4200000001 -bgp-peer ::ffff:198.18.0.4,1 -bgp-listen-port -1 -bgp-hold 0s -bgp-restart-time 0s -bgp-drain 0s",
			bgp.Config{ASN: 4200000000, RouterID: netip.MustParseAddr("10.0.0.1"), ListenPort: -1,
				Peers: []bgp.Peer{{Addr: netip.MustParseAddr("198.18.0.1"), ASN: 65000}, {Addr: netip.MustParseAddr("198.18.0.2"), ASN: 4200000001}, {Addr: netip.MustParseAddr("198.18.0.4"), ASN: 1}}}},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 198.18.0.1,65000 -bgp-restart-time 4095s -bgp-hold 3s",
			bgp.Config{ASN: 65001, RouterID: netip.MustParseAddr("198.18.0.3"), ListenPort: 179, Hold: 3 * time.Second, Restart: 4095 * time.Second, Drain: 2 * time.Second,
				Peers: []bgp.Peer{{Addr: netip.MustParseAddr("198.18.0.1"), ASN: 65000}}}},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 198.18.0.1,65000 -bgp-bfd",
			bgp.Config{ASN: 65001, RouterID: netip.MustParseAddr("198.18.0.3"), ListenPort: 179, Hold: 9 * time.Second, Restart: 120 * time.Second, Drain: 2 * time.Second,
				Peers: []bgp.Peer{{Addr: netip.MustParseAddr("198.18.0.1"), ASN: 65000}}, BFD: bgp.BFD{On: true, Interval: 100 * time.Millisecond, Multiplier: 3}}},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 198.18.0.1,65000 -bgp-bfd -bgp-bfd-interval 10ms -bgp-bfd-multiplier 255",
			bgp.Config{ASN: 65001, RouterID: netip.MustParseAddr("198.18.0.3"), ListenPort: 179, Hold: 9 * time.Second, Restart: 120 * time.Second, Drain: 2 * time.Second,
				Peers: []bgp.Peer{{Addr: netip.MustParseAddr("198.18.0.1"), ASN: 65000}}, BFD: bgp.BFD{On: true, Interval: 10 * time.Millisecond, Multiplier: 255}}},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 198.18.0.1,65000 -bgp-bfd=false",
			bgp.Config{ASN: 65001, RouterID: netip.MustParseAddr("198.18.0.3"), ListenPort: 179, Hold: 9 * time.Second, Restart: 120 * time.Second, Drain: 2 * time.Second,
				Peers: []bgp.Peer{{Addr: netip.MustParseAddr("198.18.0.1"), ASN: 65000}}}},
	} {
		c, err := parse(append(strings.Fields("-iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.11"), strings.Fields(tc.args)...), io.Discard)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if fmt.Sprint(c.BGP) != fmt.Sprint(tc.want) || c.BGP.ListenPort != tc.want.ListenPort || c.BGP.BFD != tc.want.BFD {
			t.Errorf("%q: %+v, want %+v", tc.args, c.BGP, tc.want)
		}
	}
	c, err := parse(strings.Fields("-iface eth0 -vip [2001:db8::1]:80 -backend 2001:db8::11 -bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 2001:db8::ff,65000 -bgp-peer 2001:db8::fe,65002"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.BGP.String(), "AS 65001 (router ID 198.18.0.3) to 2001:db8::ff (AS 65000), 2001:db8::fe (AS 65002), hold 9s, graceful restart 120s, drain 2s"; got != want {
		t.Errorf("IPv6 peers: %q, want %q", got, want)
	}
	c, err = parse(strings.Fields("-iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.11 -bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 198.18.0.1,65000 -bgp-bfd -bgp-bfd-interval 50ms"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.BGP.String(), "AS 65001 (router ID 198.18.0.3) to 198.18.0.1 (AS 65000), hold 9s, graceful restart 120s, drain 2s, BFD 50ms x3"; got != want {
		t.Errorf("BFD: %q, want %q", got, want)
	}
	if got := c.BGP.BFD.Detection(); got != 150*time.Millisecond {
		t.Errorf("BFD 50ms x3 detects in %v, want 150ms", got)
	}
}

// TestParseBGPRefused: each bad value or combination of the BGP flags is
// refused with an error that names the flag.
func TestParseBGPRefused(t *testing.T) {
	ok := " -bgp-router-id 198.18.0.3 -bgp-peer 198.18.0.1,65000"
	for _, tc := range []struct{ args, want string }{
		{"-bgp-peer 198.18.0.1,65000", "-bgp-peer needs -bgp-asn"},
		{"-bgp-drain 1s", "-bgp-drain needs -bgp-asn"},
		{"-bgp-asn 0" + ok, `-bgp-asn: AS "0": not a number in [1, 4294967295]`},
		{"-bgp-asn 4294967296" + ok, `-bgp-asn: AS "4294967296": not a number`},
		{"-bgp-asn AS65001" + ok, `-bgp-asn: AS "AS65001": not a number`},
		{"-bgp-asn 65001 -bgp-peer 198.18.0.1,65000", `-bgp-router-id "": an IPv4 address`},
		{"-bgp-asn 65001 -bgp-router-id 2001:db8::1 -bgp-peer 198.18.0.1,65000", `-bgp-router-id "2001:db8::1": an IPv4 address`},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3", "-bgp-asn needs a -bgp-peer ADDR,ASN"},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 198.18.0.1", `invalid value "198.18.0.1" for flag -bgp-peer: "198.18.0.1": ADDR,ASN (198.18.0.1,65000)`},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 198.18.0.1:65000", `invalid value "198.18.0.1:65000" for flag -bgp-peer: "198.18.0.1:65000": ADDR,ASN`},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 198.18.0.1,0", `invalid value "198.18.0.1,0" for flag -bgp-peer: AS "0"`},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 198.18.0.1,0", `invalid value "198.18.0.1,0" for flag -bgp-peer: AS "0"`},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 198.18.0.1,", `invalid value "198.18.0.1," for flag -bgp-peer: AS ""`},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 198.18.0.1,65000,65001", `invalid value "198.18.0.1,65000,65001" for flag -bgp-peer: AS "65000,65001"`},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer router,65000", `invalid value "router,65000" for flag -bgp-peer: `},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer router@65000", `invalid value "router@65000" for flag -bgp-peer: `},
		{"-bgp-asn 65001" + ok + " -bgp-peer 198.18.0.1,65002", `invalid value "198.18.0.1,65002" for flag -bgp-peer: 198.18.0.1: given twice`},
		{"-bgp-asn 65001" + ok + " -bgp-peer ::ffff:198.18.0.1,65002", `invalid value "::ffff:198.18.0.1,65002" for flag -bgp-peer: 198.18.0.1: given twice`},
		{"-bgp-asn 65001 -bgp-router-id 198.18.0.3 -bgp-peer 2001:db8::1,65000", "-bgp-peer 2001:db8::1 (AS 65000): not of the VIP's family (198.19.0.1)"},
		{"-bgp-asn 65001" + ok + " -bgp-listen-port 0", "-bgp-listen-port 0: a port in [1, 65535], or -1 for none"},
		{"-bgp-asn 65001" + ok + " -bgp-listen-port 65536", "-bgp-listen-port 65536: a port in [1, 65535], or -1 for none"},
		{"-bgp-asn 65001" + ok + " -bgp-hold 2s", "-bgp-hold 2s: 0 or whole seconds in [3s, 65535s]"},
		{"-bgp-asn 65001" + ok + " -bgp-hold 3500ms", "-bgp-hold 3.5s: 0 or whole seconds in [3s, 65535s]"},
		{"-bgp-asn 65001" + ok + " -bgp-drain -1s", "-bgp-drain -1s: must not be negative"},
		{"-bgp-restart-time 60s", "-bgp-restart-time needs -bgp-asn"},
		{"-bgp-asn 65001" + ok + " -bgp-restart-time -1s", "-bgp-restart-time -1s: 0 (no graceful restart) or whole seconds in [1s, 4095s]"},
		{"-bgp-asn 65001" + ok + " -bgp-restart-time 500ms", "-bgp-restart-time 0.5s: 0 (no graceful restart) or whole seconds"},
		{"-bgp-asn 65001" + ok + " -bgp-restart-time 1.5s", "-bgp-restart-time 1.5s: 0 (no graceful restart) or whole seconds"},
		{"-bgp-asn 65001" + ok + " -bgp-restart-time 4096s", "-bgp-restart-time 4096s: 0 (no graceful restart) or whole seconds in [1s, 4095s] (RFC 4724's 12 bits)"},
		{"-bgp-bfd", "-bgp-bfd needs -bgp-asn"},
		{"-bgp-asn 65001" + ok + " -bgp-bfd-interval 50ms", "-bgp-bfd-interval needs -bgp-bfd"},
		{"-bgp-asn 65001" + ok + " -bgp-bfd=false -bgp-bfd-multiplier 5", "-bgp-bfd-multiplier needs -bgp-bfd"},
		{"-bgp-asn 65001" + ok + " -bgp-bfd -bgp-bfd-interval 9ms", "-bgp-bfd-interval 9ms: whole microseconds in [10ms, 4294.967295s] (RFC 5880's 32 bits of microseconds"},
		{"-bgp-asn 65001" + ok + " -bgp-bfd -bgp-bfd-interval 0s", "-bgp-bfd-interval 0s: whole microseconds in [10ms, "},
		{"-bgp-asn 65001" + ok + " -bgp-bfd -bgp-bfd-interval 2h", "-bgp-bfd-interval 2h0m0s: whole microseconds in [10ms, "},
		{"-bgp-asn 65001" + ok + " -bgp-bfd -bgp-bfd-interval 100000001ns", "-bgp-bfd-interval 100.000001ms: whole microseconds in [10ms, "},
		{"-bgp-asn 65001" + ok + " -bgp-bfd -bgp-bfd-multiplier 0", "-bgp-bfd-multiplier 0: a number in [1, 255] (RFC 5880's 8 bits, not 0)"},
		{"-bgp-asn 65001" + ok + " -bgp-bfd -bgp-bfd-multiplier 256", "-bgp-bfd-multiplier 256: a number in [1, 255]"},
	} {
		_, err := parse(append(strings.Fields("-iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.11"), strings.Fields(tc.args)...), io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q...", tc.args, err, tc.want)
		}
	}
	_, err := parseDecap("-iface eth0 -vip 198.18.255.1 -decap-sources any -bgp-asn 65001 -bgp-peer 198.18.0.1,65000")
	if want := "flag provided but not defined: -bgp-asn"; err == nil || err.Error() != want {
		t.Errorf("l4lb decap -bgp-asn: %v; want %q", err, want)
	}
}

// TestParseK8s: -k8s-service and -kubeconfig, alone and with the other
// sources. Errors are unprefixed: main prints them after "l4lb: ".
func TestParseK8s(t *testing.T) {
	c, err := parse(strings.Fields("-iface eth0 -vip 198.19.0.1:80 -k8s-service prod/web:http -kubeconfig /tmp/kc -drain-timeout 5s"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Service.Src.String() != "Kubernetes service prod/web:http" || c.Service.Src.Name() != "-k8s-service" ||
		len(c.Service.Backends) != 0 || c.Service.Timeout != 5*time.Second {
		t.Errorf("parsed %+v", c)
	}
	c, err = parse(strings.Fields("-iface eth0 -vip [2001:db8::1]:80 -k8s-service prod/web:8080"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Service.Src.String() != "Kubernetes service prod/web:8080" {
		t.Errorf("parsed %+v", c)
	}
	if c, err = parse(strings.Fields("-iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.3"), io.Discard); err != nil || c.Service.Src.Dynamic() {
		t.Errorf("-backend alone: %+v, %v", c, err)
	}
	for bad, want := range map[string]string{
		"-k8s-service prod/web:http -backend 198.18.0.3":                          "bad membership source: -k8s-service cannot be used with -backend",
		"-k8s-service prod/web:http -etcd http://127.0.0.1:2379 -etcd-prefix svc": "bad membership source: -etcd and -k8s-service: use one source of backends",
		"-k8s-service prod/web:http -etcd-prefix svc":                             "bad membership source: -etcd-prefix needs -etcd",
		"-kubeconfig /tmp/kc":                           "bad membership source: -kubeconfig needs -k8s-service",
		"-kubeconfig /tmp/kc -backend 198.18.0.3":       "bad membership source: -kubeconfig needs -k8s-service",
		"-k8s-service web:http":                         "bad membership source: -k8s-service: k8smaglev: ",
		"-k8s-service prod/web":                         "bad membership source: -k8s-service: k8smaglev: ",
		"-k8s-service prod/web:0":                       "bad membership source: -k8s-service: k8smaglev: ",
		"-k8s-service /web:http":                        "bad membership source: -k8s-service: k8smaglev: ",
		"-k8s-service prod/Web:http":                    "bad membership source: -k8s-service: k8smaglev: ",
		"-k8s-service prod/web:http -drain-timeout -1s": "-drain-timeout must not be negative",
		"-dns web.internal:80 -backend 198.18.0.3":      "bad membership source: -dns cannot be used with -backend",
		"-dns-srv _l4._tcp.web.internal":                "flag provided but not defined: -dns-srv",
	} {
		_, err := parse(append(strings.Fields("-iface eth0 -vip 198.19.0.1:80"), strings.Fields(bad)...), io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v; want %q...", bad, err, want)
		}
	}
}

func TestParsePin(t *testing.T) {
	base := "-iface eth0 -vip 198.19.0.1:80 -backend 198.18.0.11 "
	c, err := parse(strings.Fields(base), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Pin.Dir != DefaultPinDir || c.Pin.Explicit || c.Pin.Rebuild {
		t.Fatalf("defaults: %+v", c.Pin)
	}
	// The default outside a BPF filesystem: a warning, and no pins.
	var stderr bytes.Buffer
	got := c.Pin.Path("eth0", slog.New(slog.NewTextHandler(&stderr, nil)))
	if inBPFFS(DefaultPinDir) {
		if got != filepath.Join(DefaultPinDir, "eth0") || stderr.Len() != 0 {
			t.Errorf("the default in a BPF filesystem: %q, warning %q", got, stderr.String())
		}
	} else if got != "" || !strings.Contains(stderr.String(), "is not in a BPF filesystem") {
		t.Errorf("the default outside a BPF filesystem: %q, warning %q", got, stderr.String())
	}
	// One given is used as given (Load refuses it outside a BPF filesystem).
	c, err = parse(append(strings.Fields(base), "-pin-dir", "/run/l4lb/", "-rebuild"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if got := c.Pin.Path("eth1", slog.New(slog.NewTextHandler(&stderr, nil))); got != "/run/l4lb/eth1" || !c.Pin.Rebuild || stderr.Len() != 0 {
		t.Errorf("-pin-dir /run/l4lb/ -rebuild: %q, %+v, %q", got, c.Pin, stderr.String())
	}
	c, err = parse(append(strings.Fields(base), "-pin-dir", ""), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Pin.Path("eth0", slog.New(slog.NewTextHandler(&stderr, nil))); got != "" {
		t.Errorf("-pin-dir \"\": %q", got)
	}
	d, err := parseDetach("-iface eth0 -pin-dir /run/l4lb")
	if err != nil || d.Iface != "eth0" || d.PinDir != "/run/l4lb" {
		t.Fatalf("l4lb detach: %+v, %v", d, err)
	}
	if _, err := parse(strings.Fields(base+"-rebuild -pin-dir="), io.Discard); err == nil || !strings.Contains(err.Error(), "-rebuild needs a -pin-dir") {
		t.Errorf("-rebuild -pin-dir=: %v, want an error saying -rebuild needs a -pin-dir", err)
	}
	for _, bad := range []struct{ args, want string }{
		{"", "l4lb detach needs -iface"},
		{"-iface eth0 -vip 198.19.0.1:80", "flag provided but not defined: -vip"},
		{"-iface eth0 -rebuild", "flag provided but not defined: -rebuild"},
		{"-iface eth0 -pin-dir=", "l4lb detach needs the -pin-dir l4lb ran with"},
	} {
		if _, err := parseDetach(bad.args); err == nil || err.Error() != bad.want {
			t.Errorf("l4lb detach %s: %v, want %q", bad.args, err, bad.want)
		}
	}
	if _, err := parseDecap("-iface eth0 -vip 198.19.0.1 -decap-sources any -pin-dir /run/l4lb"); err == nil || err.Error() != "flag provided but not defined: -pin-dir" {
		t.Errorf("l4lb decap -pin-dir: %v, want -pin-dir not defined", err)
	}
}

// TestConfigPin: pin-dir is a key of the file's top, a setting a reload
// cannot change, and -rebuild goes beside -config.
func TestConfigPin(t *testing.T) {
	file := filepath.Join(t.TempDir(), "l4lb.yaml")
	write := func(pinDir string) {
		t.Helper()
		b := "iface: eth0\npin-dir: " + pinDir + "\nservices:\n  - name: web\n    vip: 198.19.0.1:80\n    backends: [198.18.0.11]\n"
		if err := os.WriteFile(file, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("/run/l4lb")
	g, svcs, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if g.Pin.Dir != "/run/l4lb" || !g.Pin.Explicit || len(svcs) != 1 {
		t.Fatalf("pin-dir from the file: %+v", g.Pin)
	}
	write("/run/other")
	g2, _, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := SameGlobal(g, g2); err == nil || !strings.Contains(err.Error(), "pin-dir") {
		t.Fatalf("a reload with another pin-dir: %v, want it refused", err)
	}
	c, err := parse([]string{"-config", file, "-rebuild"}, io.Discard)
	if err != nil || !c.Pin.Rebuild {
		t.Fatalf("-config FILE -rebuild: %v, rebuild %v", err, c.Pin.Rebuild)
	}
	if _, err := parse([]string{"-config", file, "-rebuild", "-seed", "3"}, io.Discard); err == nil {
		t.Fatal("-config FILE -rebuild -seed 3: no error")
	}
}

// TestParseLogFormat: -log-format takes text and json, and a file's
// log-format key the same; a reload may not change it.
func TestParseLogFormat(t *testing.T) {
	for _, f := range []string{"text", "json"} {
		c, err := parse([]string{"-iface", "eth0", "-vip", "198.19.0.1:80", "-log-format", f}, io.Discard)
		if err != nil || c.LogFormat != f {
			t.Errorf("-log-format %s: %q, %v", f, c.LogFormat, err)
		}
	}
	if _, err := parse([]string{"-iface", "eth0", "-vip", "198.19.0.1:80", "-log-format", "logfmt"}, io.Discard); err == nil || err.Error() != `-log-format "logfmt": text or json` {
		t.Errorf("-log-format logfmt: %v", err)
	}
	g, _, err := Parse([]byte("iface: eth0\nlog-format: json\nservices:\n  - name: web\n    vip: 198.19.0.1:80\n"))
	if err != nil || g.LogFormat != "json" {
		t.Fatalf("log-format: json in a file: %q, %v", g.LogFormat, err)
	}
	text, _, err := Parse([]byte("iface: eth0\nservices:\n  - name: web\n    vip: 198.19.0.1:80\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := SameGlobal(text, g); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "log-format: json, running with text") {
		t.Errorf("a reload changing log-format: %v", err)
	}
}
