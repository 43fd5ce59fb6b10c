package config

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maglevlb/maglev/quiclb"
)

// TestConfigQUIC: a QUIC-LB service's settings, from a file and from the
// flags: the backends' server IDs, the configuration's defaults (a
// 2-octet server ID and a 14-octet nonce: one AES block), the key read
// from its file (and a new key in the same file makes the service
// another, for a reload), the warning of a backend without a server ID.
func TestConfigQUIC(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "quic.key")
	if err := os.WriteFile(key, []byte("8f95f09245765f80256934e50c66207f\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := "iface: eth0\nservices:\n  - name: h3\n    vip: 198.19.0.1:443\n    proto: udp\n    forward: gue\n    quic-lb: true\n    quic-lb-config-id: 2\n    quic-lb-key-file: " + key +
		"\n    backends: [198.18.0.11@0a0b, {addr: 198.18.0.12, server-id: 0A0C}, 198.18.0.13]\n"
	g, svcs, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	q := svcs[0].QUIC
	if q == nil || q.Config.ID != 2 || q.Config.ServerIDLen != 2 || q.Config.NonceLen != 14 || q.Config.Mode() != quiclb.SinglePass || q.KeyFile != key ||
		len(q.ServerIDs) != 2 || q.ServerIDs[netip.MustParseAddr("198.18.0.12")].String() != "0a0c" {
		t.Fatalf("QUIC %+v", q)
	}
	if len(g.Warnings) != 2 || !strings.Contains(g.Warnings[1], "198.18.0.13 has no server ID") {
		t.Fatalf("warnings %q", g.Warnings)
	}
	if err := os.WriteFile(key, []byte("00000000000000000000000000000001"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, again, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Settings == svcs[0].Settings {
		t.Fatal("a new key in the key file leaves the service the same: a reload would not rotate it")
	}

	c, err := parse(strings.Fields("-iface eth0 -vip 198.19.0.1:443 -proto udp -quic-lb -quic-lb-server-id-length 3 -quic-lb-nonce-length 6 -backend 198.18.0.11*2@0a0b0c -backend 198.18.0.12=02:00:00:00:00:12@0a0b0d"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	q = c.Service.QUIC
	if q.Config.Mode() != quiclb.Plaintext || q.Config.NonceLen != 6 || q.ServerIDs[netip.MustParseAddr("198.18.0.11")].String() != "0a0b0c" ||
		c.Service.Backends[0].Weight != 2 || c.Service.Backends[1].HW.String() != "02:00:00:00:00:12" {
		t.Fatalf("parsed %+v, QUIC %+v", c.Service, q)
	}
	if c, err := parse(strings.Fields("-iface eth0 -vip 198.19.0.1:443 -proto udp -quic-lb -quic-lb-server-id-length 14"), io.Discard); err != nil || c.Service.QUIC.Config.NonceLen != 4 {
		t.Fatalf("a 14-octet server ID's default nonce: %v, %v", c.Service.QUIC, err)
	}
}

// TestConfigQUICErrors: each bad QUIC-LB setting is refused, at its line
// in a file.
func TestConfigQUICErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("8f95f09245765f80256934e50c66207f00"), 0o600); err != nil {
		t.Fatal(err)
	}
	const svc = "iface: eth0\nservices:\n  - name: h3\n    vip: 198.19.0.1:443\n    proto: udp\n"
	for _, tc := range []struct {
		file string
		want []string
	}{
		{svc + "    quic-lb: true\n    backends: [198.18.0.11@0a0b, 198.18.0.12@0a0b]\n", []string{"7: ", "-backend: xdpmaglev: bad backend udp/198.19.0.1:443: QUIC configuration 0: server ID 0a0b given to 198.18.0.11 and 198.18.0.12"}},
		{svc + "    quic-lb: true\n    backends: [198.18.0.11@0a0b0c]\n", []string{"7: ", "-backend: xdpmaglev: bad backend udp/198.19.0.1:443: QUIC configuration 0: server ID 0a0b0c of 198.18.0.11 is 3 octets, and the configuration's 2"}},
		{svc + "    quic-lb: true\n    backends: [198.18.0.11@0a0]\n", []string{"7: ", `server-id "0a0"`}},
		{svc + "    backends: [198.18.0.11@0a0b]\n", []string{"6: ", "a server ID is for -quic-lb"}},
		{svc + "    quic-lb-config-id: 1\n    backends: [198.18.0.11]\n", []string{"6: ", "-quic-lb-config-id needs -quic-lb"}},
		{svc + "    quic-lb: true\n    quic-lb-config-id: 7\n", []string{"7: ", "-quic-lb-config-id 7: 0 to 6"}},
		{svc + "    quic-lb: true\n    quic-lb-server-id-length: 16\n", []string{"7: ", "-quic-lb-server-id-length 16"}},
		{svc + "    quic-lb: true\n    quic-lb-nonce-length: 3\n", []string{"7: ", "-quic-lb-nonce-length 3"}},
		{svc + "    quic-lb: true\n    quic-lb-server-id-length: 12\n    quic-lb-nonce-length: 8\n", []string{"8: ", "-quic-lb-nonce-length 8", "19 at most"}},
		{svc + "    quic-lb: true\n    quic-lb-key-file: " + filepath.Join(dir, "none") + "\n", []string{"7: ", "-quic-lb-key-file", "no such file"}},
		{svc + "    quic-lb: true\n    quic-lb-key-file: " + bad + "\n", []string{"7: ", "-quic-lb-key-file " + bad, "16 octets in hexadecimal"}},
		{"iface: eth0\nservices:\n  - name: h3\n    vip: 198.19.0.1:443\n    quic-lb: true\n", []string{"5: ", "-quic-lb: xdpmaglev: bad service tcp/198.19.0.1:443: QUIC-LB routes UDP"}},
	} {
		_, _, err := Parse([]byte(tc.file))
		if err == nil {
			t.Errorf("%q: no error", tc.file)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want[0]) {
			t.Errorf("%q: %v, want it at line %s", tc.file, err, tc.want[0])
		}
		for _, w := range tc.want[1:] {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %v, want it to say %q", tc.file, err, w)
			}
		}
		if strings.Contains(err.Error(), "e50c66207f") {
			t.Errorf("the error shows the key: %v", err)
		}
	}
	if _, _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, ErrConfig) {
		t.Errorf("Load of no file: %v", err)
	}
}
