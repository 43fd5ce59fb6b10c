package main

import (
	"encoding/json"
	"errors"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestLogText runs the built l4lb with the default -log-format: every
// line of its standard error is a record in slog's text format, with its
// time (RFC 3339), level and message, and the record's variable parts as
// attributes; its standard output is empty.
func TestLogText(t *testing.T) {
	need(t)
	bin := build(t)
	ns := vethNS(t, "l4lbt")
	p := start(t, ns, bin, "-iface", "v0", "-vip", "198.19.0.1:80", "-backend", "198.18.0.11=02:00:00:00:00:11",
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
	need(t)
	bin := build(t)
	ns := vethNS(t, "l4lbj")
	p := start(t, ns, bin, "-iface", "v0", "-vip", "198.19.0.1:80", "-backend", "198.18.0.11=02:00:00:00:00:11",
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
	cmd := exec.Command("ip", "netns", "exec", ns, bin, "-iface", "nonesuch", "-vip", "198.19.0.1:80", "-backend", "198.18.0.11",
		"-admin", "", "-pin-dir", "", "-log-format", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("l4lb -iface nonesuch: %v, want exit status 1", err)
	}
	if rs := check(stderr.String()); len(rs) != 1 || rs[0].Level != "ERROR" || rs[0].Msg != "l4lb stopped" || !strings.Contains(rs[0].Err, "nonesuch") {
		t.Errorf("l4lb -iface nonesuch: records %+v, want one ERROR, its err naming the interface", rs)
	}
}

// TestVersion runs the built l4lb version, and the form before commands,
// -version, alone and with other flags (even ones that would not start
// it): it prints "l4lb VERSION (REVISION, GOVERSION)" on standard output,
// the revision the binary's build info records (go version -m), and
// exits 0.
func TestVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds l4lb: the run without -short covers it")
	}
	bin := build(t)
	info, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	rev := "unknown"
	if m := regexp.MustCompile(`(?m)^\s+build\s+vcs\.revision=(\S+)$`).FindSubmatch(info); m != nil {
		rev = string(m[1])
		if regexp.MustCompile(`(?m)^\s+build\s+vcs\.modified=true$`).Match(info) {
			rev += "+dirty"
		}
	}
	want := regexp.MustCompile(`^l4lb (\S+) \(` + regexp.QuoteMeta(rev) + `, ` + regexp.QuoteMeta(runtime.Version()) + `\)\n$`)
	for _, args := range [][]string{{"version"}, {"-version"}, {"-iface", "eth0", "-version", "-log-format", "json"}, {"-version", "-vip", "nonsense"}} {
		cmd := exec.Command(bin, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || !want.Match(out) || stderr.Len() != 0 {
			t.Errorf("l4lb %s: %v, standard output %q (want %v), standard error %q", strings.Join(args, " "), err, out, want, stderr.String())
		}
	}
}

// TestPlural: command output says "1 service", "2 services".
func TestPlural(t *testing.T) {
	for n, want := range map[int]string{0: "0 services", 1: "1 service", 2: "2 services"} {
		if got := plural(n, "service"); got != want {
			t.Errorf("plural(%d): %q, want %q", n, got, want)
		}
	}
}
