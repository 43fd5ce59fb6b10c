package main

import (
	"encoding/json"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestLogText runs the built l4lb with the default -log-format: every
// line of its standard error is a record in slog's text format, with its
// time (RFC 3339), level and message, and the record's variable parts as
// attributes; its standard output is empty.
func TestLogText(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	ns := xdptest.VethNS(t, "l4lbt")
	p := start(t, ns, bin, "run", "-iface", "v0", "-vip", "198.19.0.1:80", "-backend", "198.18.0.11=02:00:00:00:00:11",
		"-m", "251", "-admin", "127.0.0.1:9184", "-pin-dir", "")
	p.await("admin listening")
	p.stop()
	record := regexp.MustCompile(`^time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+\S* level=(INFO|WARN|ERROR) msg=`)
	lines := strings.Split(strings.TrimSuffix(p.stderr.String(), "\n"), "\n")
	for _, l := range lines {
		if !record.MatchString(l) {
			t.Errorf("not a text record with time= and level=: %q", l)
		}
	}
	rs := p.logged()
	if len(rs) < 4 || !rs[0].Is("service started", "service", "default", "vip", "tcp/198.19.0.1:80", "iface", "v0", "mode", "native", "forward", "l2", "backends", "1") ||
		rs[0].Level != "INFO" || !rs[len(rs)-1].Is("detached", "iface", "v0") {
		t.Errorf("records %+v", rs)
	}
	if p.stdout.Len() != 0 {
		t.Errorf("standard output %q, want nothing: it is for command output", p.stdout.String())
	}
	t.Logf("l4lb's records, -log-format text:\n%s", p.stderr.String())
}

// TestLogJSON runs the built l4lb with -log-format json: every line of
// its standard error is a JSON object with time, level and msg, and the
// record's variable parts as its other members, from the first record to
// the last; an error that ends it is a record at ERROR too, with the
// error as err.
func TestLogJSON(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	ns := xdptest.VethNS(t, "l4lbj")
	p := start(t, ns, bin, "run", "-iface", "v0", "-vip", "198.19.0.1:80", "-backend", "198.18.0.11=02:00:00:00:00:11",
		"-m", "251", "-admin", "127.0.0.1:9185", "-pin-dir", "", "-log-format", "json")
	p.await("admin listening", "url", "http://127.0.0.1:9185/debug/maglev")
	p.stop()
	type record struct {
		Time    time.Time `json:"time"`
		Level   string    `json:"level"`
		Msg     string    `json:"msg"`
		Service string    `json:"service"`
		Live    *int      `json:"live"`
		Err     string    `json:"err"`
	}
	check := func(out string) []record {
		t.Helper()
		var rs []record
		for l := range strings.Lines(out) {
			var r record
			if err := json.Unmarshal([]byte(l), &r); err != nil || r.Time.IsZero() || r.Level == "" || r.Msg == "" {
				t.Errorf("not a JSON record with time, level and msg: %q (%v)", l, err)
			}
			rs = append(rs, r)
		}
		return rs
	}
	rs := check(p.stderr.String())
	if len(rs) < 4 || rs[0].Msg != "service started" || rs[0].Service != "default" || rs[0].Level != "INFO" ||
		rs[1].Msg != "backends applied" || rs[1].Live == nil || *rs[1].Live != 1 ||
		rs[len(rs)-1].Msg != "detached" || time.Since(rs[0].Time) > time.Minute {
		t.Errorf("records %+v", rs)
	}
	t.Logf("l4lb's records, -log-format json:\n%s", p.stderr.String())

	// An error: the interface does not exist.
	cmd := exec.Command("ip", "netns", "exec", ns, bin, "run", "-iface", "nonesuch", "-vip", "198.19.0.1:80", "-backend", "198.18.0.11",
		"-admin", "", "-pin-dir", "", "-log-format", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("l4lb run -iface nonesuch: %v, want exit status 1", err)
	}
	if rs := check(stderr.String()); len(rs) != 1 || rs[0].Level != "ERROR" || rs[0].Msg != "l4lb stopped" || !strings.Contains(rs[0].Err, "nonesuch") {
		t.Errorf("l4lb run -iface nonesuch: records %+v, want one ERROR, its err naming the interface", rs)
	}
}
