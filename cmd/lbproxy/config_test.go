package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/httpmaglev"
)

func TestParseBackend(t *testing.T) {
	tests := []struct{ spec, name, url string }{
		{"http://127.0.0.1:9001", "127.0.0.1:9001", "http://127.0.0.1:9001"},
		{"http://127.0.0.1:9001/", "127.0.0.1:9001", "http://127.0.0.1:9001"},
		{"https://backend.example:8443", "backend.example:8443", "https://backend.example:8443"},
		{"web1=http://127.0.0.1:9001", "web1", "http://127.0.0.1:9001"},
		{"10.0.0.1:80=http://127.0.0.1:9001", "10.0.0.1:80", "http://127.0.0.1:9001"}, // a host:port name
		{"http://[::1]:9001", "[::1]:9001", "http://[::1]:9001"},
	}
	for _, tt := range tests {
		name, u, err := parseBackend(tt.spec)
		if err != nil || name != tt.name || u.String() != tt.url {
			t.Errorf("parseBackend(%q) = %q, %v, %v; want %q, %s", tt.spec, name, u, err, tt.name, tt.url)
		}
	}
	for _, spec := range []string{
		"", "127.0.0.1:9001", "ftp://127.0.0.1", "http://", "=http://127.0.0.1:9001",
		"http://127.0.0.1:9001/api", "http://127.0.0.1:9001?a=b", "http://u:p@127.0.0.1:9001", "web1=",
	} {
		if _, _, err := parseBackend(spec); err == nil {
			t.Errorf("parseBackend(%q) succeeded, want an error", spec)
		}
	}
}

func TestParseFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "backends")
	const text = "# the web tier\nhttp://127.0.0.1:9003\n\n  web4=http://127.0.0.1:9004  # canary\n"
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{
		"-backend", "http://127.0.0.1:9001, http://127.0.0.1:9002",
		"-backend", "web5=http://127.0.0.1:9005",
		"-backends-file", file,
		"-key", "header:X-Session-Id",
		"-health-interval", "250ms",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"http://127.0.0.1:9001", "http://127.0.0.1:9002", "web5=http://127.0.0.1:9005",
		"http://127.0.0.1:9003", "web4=http://127.0.0.1:9004",
	}
	if !slices.Equal(o.cfg.Backends, want) {
		t.Errorf("backends %q, want %q", o.cfg.Backends, want)
	}
	if o.cfg.Key != "header:X-Session-Id" || o.cfg.HTTP.HealthInterval != 250*time.Millisecond || o.cfg.HTTP.Fall != 2 || o.listen != "127.0.0.1:8080" {
		t.Errorf("options %+v", o)
	}
	for _, args := range [][]string{
		{},                                    // no backends
		{"-backends-file", file + ".missing"}, // no such file
		{"-demo", "2", "extra"},               // stray argument
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) succeeded, want an error", args)
		}
	}
	if _, err := parseFlags([]string{"-demo", "3"}); err != nil {
		t.Errorf("parseFlags(-demo 3): %v", err)
	}
}

// TestFlagsCoverConfig: every field of httpmaglev.Config that lbproxy does
// not fill in itself has a flag, so a field added to the library and not
// here fails this test: parsed with every flag set, no such field is left
// at its zero value.
func TestFlagsCoverConfig(t *testing.T) {
	o, err := parseFlags([]string{"-backend", "http://127.0.0.1:9001",
		"-health-path", "/up", "-health-interval", "3s", "-health-timeout", "1s", "-health-fall", "4", "-health-rise", "5",
		"-eject-after", "6", "-consecutive-5xx", "9", "-ejection-time", "7s", "-max-ejection-time", "70s", "-max-retry-body", "8",
		"-no-retries", "-trust-forwarded-for", "-m", "65537", "-balance-factor", "1.5"})
	if err != nil {
		t.Fatal(err)
	}
	filled := map[string]bool{"Backends": true, "Key": true, "Hasher": true, "NewTable": true, "Base": true, "Logger": true, "MeterProvider": true}
	v := reflect.ValueOf(o.cfg.HTTP)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !filled[f.Name] && v.Field(i).IsZero() {
			t.Errorf("httpmaglev.Config.%s has no flag", f.Name)
		}
	}
	want := httpmaglev.Config{HealthPath: "/up", HealthInterval: 3 * time.Second, HealthTimeout: time.Second, Fall: 4, Rise: 5,
		EjectAfter: 6, Consecutive5xx: 9, EjectionTime: 7 * time.Second, MaxEjectionTime: 70 * time.Second, MaxRetryBody: 8,
		DisableRetries: true, TrustForwardedFor: true, TableSize: 65537, BalanceFactor: 1.5}
	if !reflect.DeepEqual(o.cfg.HTTP, want) {
		t.Errorf("config %+v, want %+v", o.cfg.HTTP, want)
	}
}

// TestHealthFlagNames: the health check's rise and fall are -health-rise
// and -health-fall, as l4lb's; -rise and -fall, their names before
// v0.1.0, are refused with an error naming the flag now, and -h lists
// them no more.
func TestHealthFlagNames(t *testing.T) {
	o, err := parseFlags([]string{"-backend", "http://127.0.0.1:9001", "-health-fall", "4", "-health-rise", "5"})
	if err != nil || o.cfg.HTTP.Fall != 4 || o.cfg.HTTP.Rise != 5 {
		t.Errorf("-health-fall 4 -health-rise 5: fall %d, rise %d, %v; want 4, 5", o.cfg.HTTP.Fall, o.cfg.HTTP.Rise, err)
	}
	o, err = parseFlags([]string{"-backend", "http://127.0.0.1:9001"})
	if err != nil || o.cfg.HTTP.Fall != 2 || o.cfg.HTTP.Rise != 2 {
		t.Errorf("defaults: fall %d, rise %d, %v; want 2, 2", o.cfg.HTTP.Fall, o.cfg.HTTP.Rise, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-fall", "4"}, "lbproxy: -fall is -health-fall, the name l4lb has too"},
		{[]string{"-health-fall", "4", "--rise=5"}, "lbproxy: -rise is -health-rise, the name l4lb has too"},
		{[]string{"-rise", "5", "-fall", "4"}, "lbproxy: -rise is -health-rise, the name l4lb has too"},
	} {
		if _, err := parseFlags(append([]string{"-backend", "http://127.0.0.1:9001"}, tc.args...)); err == nil || err.Error() != tc.want {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, err := parseFlags([]string{"-backend", "http://127.0.0.1:9001", "--", "-rise"}); err == nil || strings.Contains(err.Error(), "health-rise") {
		t.Errorf("-- -rise: %v, want the argument refused as an argument", err)
	}
	help := helpText(t)
	for _, want := range []string{"\n  -health-fall int\n", "\n  -health-rise int\n"} {
		if !strings.Contains(help, want) {
			t.Errorf("-h lacks %q:\n%s", want, help)
		}
	}
	for _, old := range []string{"\n  -fall ", "\n  -rise ", "deprecated"} {
		if strings.Contains(help, old) {
			t.Errorf("-h has %q:\n%s", old, help)
		}
	}
}

// helpText returns what lbproxy -h prints.
func helpText(t *testing.T) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w // the flag set's output, read when it prints
	_, perr := parseFlags([]string{"-h"})
	os.Stderr = stderr
	_ = w.Close()
	help, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(perr, flag.ErrHelp) {
		t.Fatalf("-h: %v", perr)
	}
	return string(help)
}
