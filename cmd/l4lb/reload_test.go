package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestReload runs l4lb run -config with three services, then changes the file
// and reloads it by SIGHUP and by POST /reload: a service added, one
// removed, one changed, one left alone. Each service's table is the one
// its backends make, the service left alone is not updated again (its
// updates counter stays at 1), a bad file is refused naming the service
// and the setting with the running services as they were, and a change of
// the load balancer's own settings is refused.
func TestReload(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	ns := xdptest.VethNS(t, "l4lbr")
	path := filepath.Join(t.TempDir(), "l4lb.yaml")
	write := func(services string) {
		t.Helper()
		file := "iface: v0\nseed: 5\nadmin: 127.0.0.1:9180\nm: 251\nservices:\n" + services
		if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	be := func(i int) string { return fmt.Sprintf("198.18.0.%d=02:00:00:00:00:%02x", 10+i, 10+i) }
	svc := func(name, vip string, m int, backends ...int) string {
		var bs []string
		for _, i := range backends {
			bs = append(bs, be(i))
		}
		s := fmt.Sprintf("  - name: %s\n    vip: %s\n    backends: [%s]\n", name, vip, strings.Join(bs, ", "))
		if m != 0 {
			s += fmt.Sprintf("    m: %d\n", m)
		}
		return s
	}
	write(svc("web", "198.19.0.1:80", 0, 1, 2) + svc("old", "198.19.0.1:443", 0, 3) + svc("same", "198.19.0.2:53", 1021, 1, 2, 3))
	p := start(t, ns, bin, "run", "-config", path)
	p.await("admin listening")

	// check says the running services are want, name to backends and M,
	// each with the table its backends make.
	check := func(want map[string][]int, sizes map[string]int) {
		t.Helper()
		body, err := request(ns, "GET", "/debug/maglev/services")
		if err != nil {
			t.Fatal(err)
		}
		var got []backendsStatus
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		if len(got) != len(want) {
			t.Fatalf("%d services running, want %d: %s", len(got), len(want), body)
		}
		for _, s := range got {
			idx, ok := want[s.Name]
			if !ok {
				t.Fatalf("service %q runs, and is not in the file: %s", s.Name, body)
			}
			var bs []maglev.Backend
			for _, i := range idx {
				bs = append(bs, maglev.Backend{Name: fmt.Sprintf("198.18.0.%d", 10+i), Weight: 1})
			}
			m := sizes[s.Name]
			if m == 0 {
				m = 251
			}
			tb, err := maglev.NewWeighted(bs, m, nil)
			if err != nil {
				t.Fatal(err)
			}
			d := tb.Digest()
			if s.Digest != hex.EncodeToString(d[:]) || len(s.Backends) != len(idx) {
				t.Errorf("service %q: digest %s, %d backends; want %x, %d", s.Name, s.Digest, len(s.Backends), d, len(idx))
			}
		}
	}
	check(map[string][]int{"web": {1, 2}, "old": {3}, "same": {1, 2, 3}}, map[string]int{"same": 1021})
	updates := func() map[string]int {
		t.Helper()
		body, err := request(ns, "GET", "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		re := regexp.MustCompile(`(?m)^maglev_l4lb_service_updates_total\{maglev_service="([^"]+)".*\} (\d+)$`)
		for _, m := range re.FindAllStringSubmatch(string(body), -1) {
			n, _ := strconv.Atoi(m[2])
			out[m[1]] = n
		}
		return out
	}
	if u := updates(); u["udp/198.19.0.2:53"] != 0 || u["tcp/198.19.0.2:53"] != 1 || u["tcp/198.19.0.1:80"] != 1 {
		t.Errorf("updates after start: %v", u)
	}

	// SIGHUP: web gains a backend and a larger table, old leaves, new
	// comes, same stays.
	write(svc("web", "198.19.0.1:80", 1021, 1, 2, 4) + svc("new", "198.19.0.3:80", 0, 5) + svc("same", "198.19.0.2:53", 1021, 1, 2, 3))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.await("reloaded", "file", path, "applied.services", "3", "applied.added", "[new]", "applied.changed", "[web]", "applied.removed", "[old]", "applied.unchanged", "1")
	check(map[string][]int{"web": {1, 2, 4}, "new": {5}, "same": {1, 2, 3}}, map[string]int{"web": 1021, "same": 1021})
	u := updates()
	if u["tcp/198.19.0.2:53"] != 1 || u["tcp/198.19.0.1:80"] != 2 || u["tcp/198.19.0.3:80"] != 1 {
		t.Errorf("updates after the reload: %v; want same 1 (untouched), web 2, new 1", u)
	}
	body, err := request(ns, "GET", "/debug/maglev")
	if err != nil {
		t.Fatal(err)
	}
	var st status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Services) != 3 || len(st.Stats.Services) != 3 {
		t.Errorf("/debug/maglev: %d services, the data plane %d; want 3: %s", len(st.Services), len(st.Stats.Services), body)
	}

	// A bad file, by POST /reload: refused whole, naming the service and
	// the setting; nothing changes.
	write(svc("web", "198.19.0.1:80", 0, 1) + svc("same", "198.19.0.2:53", 1021, 1, 2, 3) + "    health: tcp\n    health-rise: 0\n")
	// request's error holds the reply's status and body.
	if _, err = request(ns, "POST", "/reload"); err == nil || !strings.Contains(err.Error(), "400") ||
		!strings.Contains(err.Error(), `:14: service "same": -health-rise 0: at least 1`) || !strings.Contains(err.Error(), "bad configuration file") {
		t.Errorf("POST /reload of a bad file: %v", err)
	}
	if r := p.await("reload refused, the running configuration stays", "file", path); !strings.Contains(r.Attrs["err"], `:14: service "same": -health-rise 0: at least 1`) {
		t.Errorf("the refusal's record %+v", r)
	}
	check(map[string][]int{"web": {1, 2, 4}, "new": {5}, "same": {1, 2, 3}}, map[string]int{"web": 1021, "same": 1021})

	// The load balancer's own settings take a restart.
	if err := os.WriteFile(path, []byte("iface: v0\nseed: 6\nadmin: 127.0.0.1:9180\nservices:\n"+svc("web", "198.19.0.1:80", 0, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err = request(ns, "POST", "/reload"); err == nil || !strings.Contains(err.Error(), "seed: 6, running with 5") {
		t.Errorf("POST /reload with a new seed: %v", err)
	}
	check(map[string][]int{"web": {1, 2, 4}, "new": {5}, "same": {1, 2, 3}}, map[string]int{"web": 1021, "same": 1021})
	p.stop()
}

// TestReloadMetrics runs l4lb run -config with two services, each with a
// health check that fails (its backends are not there: a down transition
// each, then failing open) and announced by BGP (to a router that is not
// there: GoBGP's table is announced, then withdrawn), then reloads a file
// without one of them: no series of /metrics names the removed service's
// VIP or backend any more (its data plane's counters, its updates, its
// health and transitions, its VIP's route and changes), and the other's
// are still there.
func TestReloadMetrics(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	ns := xdptest.VethNS(t, "l4lbrm")
	path := filepath.Join(t.TempDir(), "l4lb.yaml")
	const top = "iface: v0\nadmin: 127.0.0.1:9186\npin-dir: \"\"\nm: 251\n" +
		"bgp-asn: 65001\nbgp-router-id: 198.18.0.3\nbgp-peer: 198.18.0.1,65000\nbgp-listen-port: -1\nbgp-drain: 0s\n" +
		"health: tcp\nhealth-interval: 200ms\nhealth-timeout: 100ms\nhealth-fall: 1\nservices:\n" +
		"  - name: keep\n    vip: 198.19.0.1:80\n    backends: [198.18.0.11=02:00:00:00:00:11]\n"
	const retired = "  - name: retired\n    vip: 198.19.0.2:80\n    backends: [198.18.0.21=02:00:00:00:00:21]\n"
	if err := os.WriteFile(path, []byte(top+retired), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, ns, bin, "run", "-config", path)
	p.await("admin listening")
	metrics := func() string {
		t.Helper()
		body, err := requestAt(ns, "127.0.0.1:9186", "GET", "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return string(body)
	}
	// naming returns the series of m (not the comments) that hold any of
	// names.
	naming := func(m string, names ...string) []string {
		var out []string
		for l := range strings.Lines(m) {
			if strings.HasPrefix(l, "#") {
				continue
			}
			for _, n := range names {
				if strings.Contains(l, n) {
					out = append(out, strings.TrimSpace(l))
					break
				}
			}
		}
		return out
	}
	// Each series of each service: once both backends went down and the
	// VIPs were announced, then withdrawn.
	for _, s := range []struct{ vip, backend string }{{"198.19.0.1", "198.18.0.11"}, {"198.19.0.2", "198.18.0.21"}} {
		want := []string{
			`maglev_l4lb_service_updates_total{maglev_service="tcp/` + s.vip + `:80"`,
			`maglev_l4lb_health_up{maglev_backend="` + s.backend + `",maglev_service="tcp/` + s.vip + `:80"`,
			`maglev_l4lb_health_transitions_total{maglev_backend="` + s.backend + `",maglev_service="tcp/` + s.vip + `:80",maglev_state="down"`,
			`maglev_l4lb_health_fail_open{maglev_service="tcp/` + s.vip + `:80"`,
			`maglev_l4lb_bgp_announced{maglev_vip="` + s.vip + `/32"`,
			`maglev_l4lb_bgp_updates_total{maglev_action="withdraw",maglev_vip="` + s.vip + `/32"`,
			`maglev_xdp_packets_total{maglev_backend="` + s.backend + `",maglev_service="tcp/` + s.vip + `:80"`,
			`maglev_xdp_service_packets_total{maglev_service="tcp/` + s.vip + `:80"`,
		}
		var m string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			m = metrics()
			missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return strings.Contains(m, w) })
			if len(missing) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("before the reload, /metrics lacks %q:\n%s", missing, m)
			}
		}
	}

	if err := os.WriteFile(path, []byte(top), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.await("reloaded", "file", path, "applied.services", "1", "applied.added", "[]", "applied.changed", "[]", "applied.removed", "[retired]", "applied.unchanged", "1")
	// The VIP's route is forgotten by BGP's goroutine, a moment after the
	// reload: a few scrapes, for at most 5 s.
	var m string
	var left []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		m = metrics()
		if left = naming(m, "198.19.0.2", "198.18.0.21", "retired"); len(left) == 0 {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("after the reload removed it, series name the service:\n%s", strings.Join(left, "\n"))
	}
	for _, w := range []string{
		`maglev_l4lb_service_updates_total{maglev_service="tcp/198.19.0.1:80"`,
		`maglev_l4lb_health_transitions_total{maglev_backend="198.18.0.11",maglev_service="tcp/198.19.0.1:80",maglev_state="down"`,
		`maglev_l4lb_bgp_updates_total{maglev_action="withdraw",maglev_vip="198.19.0.1/32"`,
		`maglev_xdp_packets_total{maglev_backend="198.18.0.11",maglev_service="tcp/198.19.0.1:80"`,
		`maglev_l4lb_health_probe_duration_seconds_count{maglev_outcome="fail",`,
	} {
		if !strings.Contains(m, w) {
			t.Errorf("after the reload, /metrics lacks %s", w)
		}
	}
	p.stop()
}
