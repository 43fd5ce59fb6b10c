package main

import (
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/admin"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// runL4lb runs the built l4lb with args, in namespace ns (none if ""),
// and returns its standard output, its standard error and its exit
// status.
func runL4lb(t *testing.T, ns, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if ns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	}
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("l4lb %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// TestHelpCommand: l4lb help lists every command with its short help,
// and no other form; l4lb help COMMAND prints its
// usage line, its help and its flags; l4lb alone, an unknown command and
// help of one exit 2 or 1 with the list or a message.
func TestHelpCommand(t *testing.T) {
	bin := build(t)
	out, _, code := runL4lb(t, "", bin, "help")
	if code != 0 {
		t.Fatalf("l4lb help: exit %d", code)
	}
	for _, c := range commands {
		if !strings.Contains(out, "\t"+c.name+strings.Repeat(" ", 9-len(c.name))+c.short+"\n") {
			t.Errorf("l4lb help does not list %s (%q):\n%s", c.name, c.short, out)
		}
	}
	if strings.Contains(out, "Deprecated") || strings.Contains(out, "-config") {
		t.Errorf("l4lb help names a form other than the commands:\n%s", out)
	}
	out, _, code = runL4lb(t, "", bin, "help", "status")
	if code != 0 || !strings.HasPrefix(out, "usage: l4lb status [-admin ADDR] [-json]\n\nStatus asks the admin API") ||
		!strings.Contains(out, "\n  -json\n") || !strings.Contains(out, "\n  -admin address\n") {
		t.Errorf("l4lb help status: exit %d:\n%s", code, out)
	}
	out, _, _ = runL4lb(t, "", bin, "help", "run")
	for _, f := range []string{"\n  -iface interface\n", "\n  -health-rise int\n", "\n  -etcd URLs\n", "\n  -config file\n"} {
		if !strings.Contains(out, f) {
			t.Errorf("l4lb help run lacks %q:\n%s", f, out)
		}
	}
	if _, errOut, code := runL4lb(t, "", bin); code != 2 || !strings.Contains(errOut, "The commands are:") {
		t.Errorf("l4lb alone: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runL4lb(t, "", bin, "frob"); code != 2 || !strings.HasPrefix(errOut, "l4lb: unknown command \"frob\"\n") {
		t.Errorf("l4lb frob: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runL4lb(t, "", bin, "help", "frob"); code != 1 || errOut != "l4lb: unknown command \"frob\": l4lb help lists them\n" {
		t.Errorf("l4lb help frob: exit %d, %q", code, errOut)
	}
	want := "l4lb: a command comes first, then its flags: l4lb run -config l4lb.yaml\nRun 'l4lb help' for the commands.\n"
	if out, errOut, code := runL4lb(t, "", bin, "-config", "l4lb.yaml"); code != 2 || out != "" || errOut != want {
		t.Errorf("l4lb -config l4lb.yaml: exit %d, %q, %q; want exit 2, %q", code, out, errOut, want)
	}
}

// TestFlagFirst: a command line whose first argument is a flag (the form
// before commands, l4lb -config FILE, l4lb -decap ...) is refused, not
// read: a usage error that prints the command line meant, and runs
// nothing. -h prints the commands.
func TestFlagFirst(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the command line meant
	}{
		{[]string{"-config", "/etc/l4lb/l4lb.yaml"}, "l4lb run -config /etc/l4lb/l4lb.yaml"},
		{[]string{"-config=/etc/l4lb/l4lb.yaml", "-rebuild"}, "l4lb run -config=/etc/l4lb/l4lb.yaml -rebuild"},
		{[]string{"-iface", "eth0", "-vip", "203.0.113.1:80", "-backend", "10.0.0.11", "-pin-dir", ""}, "l4lb run -iface eth0 -vip 203.0.113.1:80 -backend 10.0.0.11 -pin-dir ''"},
		{[]string{"-decap", "-iface", "eth0", "-vip", "203.0.113.1", "-decap-sources", "10.0.1.5/32"}, "l4lb decap -iface eth0 -vip 203.0.113.1 -decap-sources 10.0.1.5/32"},
		{[]string{"-iface", "eth0", "--decap=true", "-vip", "203.0.113.1"}, "l4lb decap -iface eth0 -vip 203.0.113.1"},
		{[]string{"-detach", "-iface", "eth0", "-pin-dir", "/run/l4lb bpf"}, "l4lb detach -iface eth0 -pin-dir '/run/l4lb bpf'"},
		{[]string{"-iface", "eth0", "-detach"}, "l4lb detach -iface eth0"},
		{[]string{"-version"}, "l4lb version"},
		{[]string{"-iface", "eth0", "-version", "-log-format", "json"}, "l4lb version"},
		{[]string{"--version"}, "l4lb version"},
	} {
		var out, errOut strings.Builder
		err := run(t.Context(), tc.args, &out, &errOut)
		if !errors.Is(err, errFlagFirst) || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), ": "+tc.want) {
			t.Errorf("l4lb %q: %v; want errFlagFirst and errUsage naming %q", tc.args, err, tc.want)
		}
		if want := "l4lb: a command comes first, then its flags: " + tc.want + "\nRun 'l4lb help' for the commands.\n"; out.Len() != 0 || errOut.String() != want {
			t.Errorf("l4lb %q: printed %q and %q; want nothing and %q", tc.args, out.String(), errOut.String(), want)
		}
	}
	for _, h := range []string{"-h", "-help", "--help"} {
		var errOut strings.Builder
		if err := run(t.Context(), []string{h}, io.Discard, &errOut); err != errUsage || !strings.Contains(errOut.String(), "The commands are:") {
			t.Errorf("l4lb %s: %v, %q; want errUsage and the commands", h, err, errOut.String())
		}
	}
	if err := run(t.Context(), []string{"run", "-iface", "eth0", "-vip", "198.19.0.1:80", "extra"}, io.Discard, io.Discard); err == nil || err.Error() != `unexpected arguments ["extra"]` {
		t.Errorf("l4lb run ... extra: %v; want unexpected arguments", err)
	}
}

// TestCheckCommand: l4lb check of a good file prints one line of what it
// holds and exits 0; of a bad one, it exits 1 printing exactly the message
// a reload of the same file gives: POST /reload's and l4lb reload's, of a
// running l4lb whose file it is.
func TestCheckCommand(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	ns := xdptest.VethNS(t, "l4chk")
	path := filepath.Join(t.TempDir(), "l4lb.yaml")
	good := "iface: v0\nm: 251\nadmin: 127.0.0.1:9190\npin-dir: \"\"\nservices:\n" +
		"  - name: web\n    vip: 198.19.0.1:80\n    backends: [198.18.0.11=02:00:00:00:00:11]\n" +
		"  - name: dns\n    vip: 198.19.0.1:53\n    proto: udp\n    backends: [198.18.0.12=02:00:00:00:00:12]\n"
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runL4lb(t, "", bin, "check", path)
	if code != 0 || out != path+": ok: 2 services (dns, web) on v0\n" ||
		errOut != "l4lb: warning: service \"dns\": -proto udp: TCP packets to 198.19.0.1:53 pass to the kernel\n" {
		t.Errorf("l4lb check of a good file: exit %d, %q, %q", code, out, errOut)
	}
	// A file that serves a cluster's Services, and lists none of its own.
	k8s := filepath.Join(t.TempDir(), "k8s.yaml")
	if err := os.WriteFile(k8s, []byte("iface: v0\nvip-pool: [198.19.40.0/28, \"2001:db8:40::/120\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runL4lb(t, "", bin, "check", k8s); code != 0 || errOut != "" ||
		out != k8s+": ok: 0 services, and the Services of class maglevlb.io/l4lb from [198.19.40.0/28 2001:db8:40::/120] on v0\n" {
		t.Errorf("l4lb check of a controller's file: exit %d, %q, %q", code, out, errOut)
	}

	p := start(t, ns, bin, "run", "-config", path)
	p.await("admin listening")

	bad := strings.Replace(good, "    proto: udp\n", "    proto: udp\n    health: tcp\n    health-rise: 0\n", 1) // health-rise on line 13
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	want := "l4lb: bad configuration file: " + path + ":13: service \"dns\": -health-rise 0: at least 1"
	out, errOut, code = runL4lb(t, "", bin, "check", path)
	if code != 1 || out != "" || errOut != want+"\n" {
		t.Errorf("l4lb check of a bad file: exit %d, %q, %q; want 1, \"\", %q", code, out, errOut, want+"\n")
	}
	_, err := requestAt(ns, "127.0.0.1:9190", "POST", "/reload")
	if err == nil || !strings.HasSuffix(err.Error(), ": 400 Bad Request: "+want+"\n") {
		t.Errorf("POST /reload of the bad file: %v; want 400 and %q", err, want)
	}
	out, errOut, code = runL4lb(t, ns, bin, "reload", "-admin", "127.0.0.1:9190")
	if code != 1 || out != "" || errOut != want+"\n" {
		t.Errorf("l4lb reload of the bad file: exit %d, %q, %q; want 1, \"\", %q", code, out, errOut, want+"\n")
	}
	p.await("reload refused, the running configuration stays", "file", path, "err", strings.TrimPrefix(want, "l4lb: "))
	if _, errOut, code := runL4lb(t, "", bin, "check"); code != 2 || !strings.HasPrefix(errOut, "usage: l4lb check FILE\n") {
		t.Errorf("l4lb check without a file: exit %d, %q", code, errOut)
	}
	p.stop()
}

// TestStatusCommand runs l4lb run -config with two services and sends 3
// SYNs to one: l4lb status prints a table of the services and backends
// (state, weight, slots in the table in use, health, packets) and -json
// the same for scripts; l4lb drain drains a backend and prints its state,
// -undo takes it back, and an address that is no backend exits 1 with
// the admin API's message; l4lb reload applies a changed file and prints
// what it did.
func TestStatusCommand(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	ns := xdptest.VethNS(t, "l4st")
	path := filepath.Join(t.TempDir(), "l4lb.yaml")
	file := "iface: v0\nm: 251\nadmin: 127.0.0.1:9191\npin-dir: \"\"\nservices:\n" +
		"  - name: web\n    vip: 198.19.0.1:80\n    backends: [198.18.0.11=02:00:00:00:00:11, 198.18.0.12=02:00:00:00:00:12]\n" +
		"  - name: dns\n    vip: 198.19.0.1:53\n    proto: udp\n    backends: [198.18.0.13=02:00:00:00:00:13]\n"
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, ns, bin, "run", "-config", path)
	p.await("admin listening")
	sendSYNs(t, ns, 3)
	adminFlag := []string{"-admin", "127.0.0.1:9191"}

	// -json: the report, joined; the 3 SYNs counted by the time it shows
	// them (the program runs on them at once; a few tries bound the wait).
	var r admin.Report
	for range 50 {
		out, errOut, code := runL4lb(t, ns, bin, append([]string{"status", "-json"}, adminFlag...)...)
		if code != 0 {
			t.Fatalf("l4lb status -json: exit %d: %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if len(r.Services) == 2 && r.Services[1].Packets == 3 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.Attach != "native" || len(r.Services) != 2 || r.Services[0].Name != "dns" || r.Services[1].Name != "web" || r.Services[1].Packets != 3 ||
		len(r.Services[1].Backends) != 2 || r.Services[1].Backends[0].Slots+r.Services[1].Backends[1].Slots != 251 ||
		r.Services[1].Backends[0].Packets+r.Services[1].Backends[1].Packets != 3 || r.Services[1].Backends[0].State != "live" || r.Services[0].TableSize != 251 {
		t.Errorf("l4lb status -json: %+v", r)
	}

	out, _, code := runL4lb(t, ns, bin, append([]string{"status"}, adminFlag...)...)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 8 || lines[0] != "attach native, 2 services" || !strings.HasPrefix(lines[1], "SERVICE ") ||
		!strings.HasPrefix(lines[2], "  -> BACKEND ") || !strings.HasPrefix(lines[3], "udp/198.19.0.1:53  dns ") || !strings.HasPrefix(lines[5], "tcp/198.19.0.1:80  web ") {
		t.Fatalf("l4lb status: exit %d:\n%s", code, out)
	}
	web := r.Services[1].Backends
	for i, b := range web {
		f := strings.Fields(lines[6+i])
		if len(f) != 7 || f[1] != b.Addr || f[2] != "live" || f[3] != "1" || f[4] != strconv.Itoa(b.Slots) || f[5] != "-" || f[6] != strconv.Itoa(int(b.Packets)) {
			t.Errorf("l4lb status: the line of %s: %q, want its state, weight, slots, health and packets of -json", b.Addr, lines[6+i])
		}
	}

	// drain, -undo, and an address of no service.
	out, errOut, code := runL4lb(t, ns, bin, append([]string{"drain", "198.18.0.12", "-service", "web"}, adminFlag...)...)
	if code != 0 || !strings.HasPrefix(out, "l4lb: service \"web\": 198.18.0.12 draining (weight 0, ") || errOut != "" {
		t.Errorf("l4lb drain: exit %d, %q, %q", code, out, errOut)
	}
	if out, _, _ := runL4lb(t, ns, bin, append([]string{"status"}, adminFlag...)...); !regexp.MustCompile(`(?m)^  -> 198\.18\.0\.12 +draining \(\d`).MatchString(out) {
		t.Errorf("l4lb status after the drain:\n%s", out)
	}
	out, _, code = runL4lb(t, ns, bin, append([]string{"drain", "-undo", "198.18.0.12"}, adminFlag...)...)
	if code != 0 || out != "l4lb: service \"web\": 198.18.0.12 live (weight 1)\n" {
		t.Errorf("l4lb drain -undo: exit %d, %q", code, out)
	}
	_, errOut, code = runL4lb(t, ns, bin, append([]string{"drain", "198.18.0.99"}, adminFlag...)...)
	if want := "l4lb: 198.18.0.99 is no backend of any service (looked in dns, web): not a member, nor draining\n"; code != 1 || errOut != want {
		t.Errorf("l4lb drain of no backend: exit %d, %q; want 1, %q", code, errOut, want)
	}

	// reload: dns gets a backend more.
	file = strings.Replace(file, "[198.18.0.13=02:00:00:00:00:13]", "[198.18.0.13=02:00:00:00:00:13, 198.18.0.14=02:00:00:00:00:14]", 1)
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = runL4lb(t, ns, bin, append([]string{"reload"}, adminFlag...)...)
	if code != 0 || out != "l4lb: reloaded: 2 services: added none, changed dns, removed none, 1 unchanged\n" {
		t.Errorf("l4lb reload: exit %d, %q", code, out)
	}
	p.stop()
}

// sendSYNs sends n TCP SYNs to 198.19.0.1:80 into v1, v0's peer, in
// namespace ns.
func sendSYNs(t *testing.T, ns string, n int) {
	t.Helper()
	v0 := xdptest.Interface(t, ns, "v0").HardwareAddr
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = synFrame(v0, uint16(41000+i), 80)
	}
	xdptest.Send(t, ns, "v1", frames...)
}

// TestCommandForms: l4lb run, decap and detach, the commands, take what
// their forms before commands took (the other tests run those): run
// attaches and detaches at SIGTERM, decap decapsulates until SIGTERM,
// detach says there is nothing pinned; a flag of another command is
// refused as unknown (exit 1, with the usage).
func TestCommandForms(t *testing.T) {
	xdptest.Need(t)
	bin := build(t)
	ns := xdptest.VethNS(t, "l4form")
	p := start(t, ns, bin, "run", "-iface", "v0", "-vip", "198.19.0.1:80", "-backend", "198.18.0.11=02:00:00:00:00:11", "-m", "251", "-admin", "", "-pin-dir", "")
	if l := p.next(); !l.Is("service started", "service", "default", "vip", "tcp/198.19.0.1:80", "iface", "v0", "mode", "native", "backends", "1") {
		t.Fatalf("l4lb run: first record %+v", l)
	}
	if rest := p.stop(); len(rest) == 0 || !rest[len(rest)-1].Is("detached", "iface", "v0") {
		t.Errorf("l4lb run: last records %+v", rest)
	}
	p = start(t, ns, bin, "decap", "-iface", "v0", "-vip", "198.18.0.3", "-decap-sources", "any", "-admin", "")
	p.await("decapsulating IPIP and GUE", "gue_port", "6080", "vips", "[198.18.0.3]", "iface", "v0", "mode", "native", "sources", "any source")
	if rest := p.stop(); len(rest) == 0 || !rest[len(rest)-1].Is("detached", "iface", "v0") {
		t.Errorf("l4lb decap: last records %+v", rest)
	}
	dir := t.TempDir()
	if out, errOut, code := runL4lb(t, ns, bin, "detach", "-iface", "v0", "-pin-dir", dir); code != 0 || out != "l4lb: nothing pinned in "+filepath.Join(dir, "v0")+"\n" {
		t.Errorf("l4lb detach: exit %d, %q, %q", code, out, errOut)
	}
	if _, errOut, code := runL4lb(t, ns, bin, "decap", "-iface", "v0", "-vip", "198.18.0.3", "-backend", "198.18.0.11"); code != 1 || !strings.HasPrefix(errOut, "flag provided but not defined: -backend\nusage: l4lb decap ") {
		t.Errorf("l4lb decap -backend: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runL4lb(t, ns, bin, "decap", "-iface", "v0", "-vip", "198.18.0.3"); code != 1 || !strings.Contains(errOut, "l4lb decap needs -decap-sources: ") {
		t.Errorf("l4lb decap without -decap-sources: exit %d, %q", code, errOut)
	}
}

// TestVersion runs the built l4lb version: it prints "l4lb VERSION
// (DETAILS)" on standard output and exits 0, VERSION "devel" (a build of
// the repository is no release) and DETAILS what the binary's build
// information holds (ops.Build.Line; TestBuild has the cases). The test
// builds with -buildvcs=true, so in a git checkout the go command records
// the commit, and the line must name it; in a tree it cannot read (a
// tarball, or a git worktree, whose .git is a file) there is none.
func TestVersion(t *testing.T) {
	bin := build(t)
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	vcs := map[string]string{}
	for _, s := range info.Settings {
		vcs[s.Key] = s.Value
	}
	if st, err := os.Stat(filepath.Join(repoRoot(t), ".git")); err == nil && st.IsDir() {
		head, err := exec.Command("git", "rev-parse", "HEAD").Output()
		if err != nil {
			t.Fatal(err)
		}
		if got := vcs["vcs.revision"]; got != strings.TrimSpace(string(head)) {
			t.Errorf("built in a git checkout at %s: vcs.revision %q", head, got)
		}
	}
	want := regexp.QuoteMeta(runtime.Version()) + `\)\n$`
	if rev := vcs["vcs.revision"]; rev != "" {
		modified := ""
		if vcs["vcs.modified"] == "true" {
			modified = ", modified"
		}
		want = `commit ` + rev[:12] + modified + `, ` + regexp.QuoteMeta(vcs["vcs.time"]) + `, ` + want
	}
	re := regexp.MustCompile(`^l4lb devel \(` + want)
	out, errOut, code := runL4lb(t, "", bin, "version")
	if code != 0 || !re.MatchString(out) || errOut != "" {
		t.Errorf("l4lb version: exit %d, standard output %q (want %v), standard error %q", code, out, re, errOut)
	}
}

// repoRoot returns the repository's top directory, two above this
// module's.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
