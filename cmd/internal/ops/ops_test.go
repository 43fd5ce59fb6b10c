package ops

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"maps"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
)

// TestCheck: the source flags' rules, each broken once, and the ones
// that pass.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		args   string
		static string
		want   string // "" for no error, else a part of it
		dyn    string // the named source's String, when it passes
	}{
		{"", "", "", ""},
		{"", "-backend", "", ""},
		{"-etcd http://e:2379 -etcd-prefix services/web", "", "", "etcd prefix services/web"},
		{"-dns web.internal:80", "", "", "DNS web.internal:80"},
		{"-dns-srv _http._tcp.web", "", "", "DNS SRV _http._tcp.web"},
		{"-k8s-service prod/web:http -kubeconfig k", "", "", "Kubernetes service prod/web:http"},
		{"-etcd http://e:2379", "", "-etcd needs -etcd-prefix", ""},
		{"-etcd http://e:2379 -etcd-prefix /", "", "-etcd needs -etcd-prefix", ""},
		{"-etcd-prefix p", "", "-etcd-prefix needs -etcd", ""},
		{"-kubeconfig k", "", "-kubeconfig needs -k8s-service", ""},
		{"-k8s-service web", "", "-k8s-service: ", ""},
		{"-dns web", "", `-dns "web": want NAME:PORT`, ""},
		{"-dns web:80 -dns-srv s", "", "-dns and -dns-srv", ""},
		{"-dns web:80 -dns-interval 0s", "", "-dns-interval must be positive", ""},
		{"-etcd http://e:2379 -etcd-prefix p -dns web:80", "", "-etcd and -dns: use one source of backends", ""},
		{"-dns web:80", "-backend", "-dns cannot be used with -backend", ""},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		s := RegisterSources(fs, "prog", AllSources)
		if err := fs.Parse(strings.Fields(c.args)); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		err := s.Check(c.static)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "prog: ") || !errors.Is(err, ErrSources)):
			t.Errorf("%q: %v, want an ErrSources starting prog: and saying %q", c.args, err, c.want)
		case c.want == "" && (s.String() != c.dyn || s.Dynamic() != (c.dyn != "")):
			t.Errorf("%q: String %q, Dynamic %v; want %q", c.args, s.String(), s.Dynamic(), c.dyn)
		}
	}
}

// TestWatchNone: with no source named, Watch does nothing and its stop
// may be called.
func TestWatchNone(t *testing.T) {
	s := RegisterSources(flag.NewFlagSet("test", flag.ContinueOnError), "prog", AllSources)
	stop, err := s.Watch(context.Background(), nil, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stop()
}

// TestKinds: a program's flags are those of the kinds of source it takes:
// without DNSSRV, -h lists no -dns-srv (and -dns-interval names -dns
// alone), and -dns-srv is refused as unknown; with every kind, -h lists
// each source's flags.
func TestKinds(t *testing.T) {
	help := func(kinds Kind) string {
		t.Helper()
		fs := flag.NewFlagSet("prog", flag.ContinueOnError)
		var out strings.Builder
		fs.SetOutput(&out)
		RegisterSources(fs, "prog", kinds)
		if err := fs.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("-h: %v", err)
		}
		return out.String()
	}
	all := help(AllSources)
	for _, f := range []string{"-etcd ", "-etcd-prefix ", "-dns ", "-dns-srv ", "-dns-interval ", "-k8s-service ", "-kubeconfig ", "lookups of -dns or -dns-srv"} {
		if !strings.Contains(all, f) {
			t.Errorf("every kind: -h lacks %q:\n%s", f, all)
		}
	}
	some := help(Etcd | DNS | Kubernetes)
	if strings.Contains(some, "dns-srv") || !strings.Contains(some, "-dns ") || !strings.Contains(some, "lookups of -dns (default 5s)") {
		t.Errorf("without DNSSRV: -h lists -dns-srv, or not -dns alone:\n%s", some)
	}
	if only := help(Etcd); strings.Contains(only, "dns") || strings.Contains(only, "k8s") {
		t.Errorf("Etcd alone: -h lists other kinds' flags:\n%s", only)
	}
	fs := flag.NewFlagSet("prog", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	RegisterSources(fs, "prog", Etcd|DNS|Kubernetes)
	if err := fs.Parse([]string{"-dns-srv", "_http._tcp.web"}); err == nil || !strings.Contains(err.Error(), "flag provided but not defined: -dns-srv") {
		t.Errorf("-dns-srv without DNSSRV: %v", err)
	}
}

// TestBuild: what a binary's build information says becomes the version
// line and the build_info labels: a release's tag, else the commit (its
// first 12 digits), whether the tree was modified and the commit's time;
// a pseudo-version or a tag's modified tree is no release.
func TestBuild(t *testing.T) {
	const rev = "a0db0abec50ef71dd50327e3c5fcb4ba4828eaac"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-12-07T05:23:54Z"}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name     string
		version  string // Main.Version
		settings []debug.BuildSetting
		line     string
		labels   map[string]string
	}{
		{"installed release", "v0.1.0", nil,
			"l4lb v0.1.0 (go1.26.0)",
			map[string]string{"version": "v0.1.0", "revision": "", "modified": "", "commit_time": "", "goversion": "go1.26.0"}},
		{"release checkout", "v0.1.0", vcs("false"),
			"l4lb v0.1.0 (commit a0db0abec50e, 2026-12-07T05:23:54Z, go1.26.0)",
			map[string]string{"version": "v0.1.0", "revision": "a0db0abec50e", "modified": "false", "commit_time": "2026-12-07T05:23:54Z", "goversion": "go1.26.0"}},
		{"pre-release", "v0.2.0-rc.1", nil, "l4lb v0.2.0-rc.1 (go1.26.0)", nil},
		{"devel with revision", "v0.0.0-20261207052354-a0db0abec50e", vcs("false"),
			"l4lb devel (commit a0db0abec50e, 2026-12-07T05:23:54Z, go1.26.0)",
			map[string]string{"version": "devel", "revision": "a0db0abec50e", "modified": "false", "commit_time": "2026-12-07T05:23:54Z", "goversion": "go1.26.0"}},
		{"after a tag", "v0.1.1-0.20261207052354-a0db0abec50e", vcs("false"), "l4lb devel (commit a0db0abec50e, 2026-12-07T05:23:54Z, go1.26.0)", nil},
		{"modified", "v0.0.0-20261207052354-a0db0abec50e+dirty", vcs("true"),
			"l4lb devel (commit a0db0abec50e, modified, 2026-12-07T05:23:54Z, go1.26.0)",
			map[string]string{"version": "devel", "revision": "a0db0abec50e", "modified": "true", "commit_time": "2026-12-07T05:23:54Z", "goversion": "go1.26.0"}},
		{"tag modified", "v0.1.0+dirty", vcs("true"), "l4lb devel (commit a0db0abec50e, modified, 2026-12-07T05:23:54Z, go1.26.0)", nil},
		{"nothing", "(devel)", nil,
			"l4lb devel (go1.26.0)",
			map[string]string{"version": "devel", "revision": "", "modified": "", "commit_time": "", "goversion": "go1.26.0"}},
		{"empty", "", nil, "l4lb devel (go1.26.0)", nil},
	} {
		b := buildOf(&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "example.com/l4lb", Version: tc.version}, Settings: tc.settings})
		if got := b.Line("l4lb"); got != tc.line {
			t.Errorf("%s: Line %q, want %q", tc.name, got, tc.line)
		}
		if got := b.labels(); tc.labels != nil && !maps.Equal(got, tc.labels) {
			t.Errorf("%s: labels %v, want %v", tc.name, got, tc.labels)
		}
	}
	for _, tc := range []struct {
		b    Build
		want string
	}{
		{Build{Version: "v0.1.0", Revision: "a0db0abec50e"}, "v0.1.0"},
		{Build{Revision: "a0db0abec50e"}, "a0db0abec50e"},
		{Build{Revision: "a0db0abec50e", Modified: true}, "a0db0abec50e+modified"},
		{Build{}, "devel"},
	} {
		if got := tc.b.Short(); got != tc.want {
			t.Errorf("%+v: Short %q, want %q", tc.b, got, tc.want)
		}
	}
	// A test binary: no module version, no VCS stamp.
	if b := ReadBuild(); b.Version != "" || b.GoVersion != runtime.Version() {
		t.Errorf("ReadBuild: %+v", b)
	}
}

// TestAdminMetricsJSON: an admin listener on a real port serves a JSON
// reply and the Prometheus text of a counter counted through Metrics'
// provider, with the program's build_info, its resource (target_info)
// and the Go runtime's and the process's metrics, and Close stops it.
func TestAdminMetricsJSON(t *testing.T) {
	m, err := NewMetrics("ops-test", Build{Version: "v1.2.3", Revision: "a0db0abec50e", Time: "2026-12-07T05:23:54Z", GoVersion: "go1.26.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := m.Provider.Meter("ops_test").Int64Counter("ops.test.hits")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler)
	mux.HandleFunc("/j", func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, map[string]int{"a": 1}) })
	a, err := ServeAdmin("127.0.0.1:0", mux)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (string, string) {
		t.Helper()
		cl := &http.Client{Timeout: 5 * time.Second}
		res, err := cl.Get("http://" + a.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.Header.Get("Content-Type"), string(b)
	}
	ct, body := get("/j")
	var v map[string]int
	if ct != "application/json" || json.Unmarshal([]byte(body), &v) != nil || v["a"] != 1 || !strings.Contains(body, "\n  \"a\"") {
		t.Errorf("/j: %s %q", ct, body)
	}
	_, body = get("/metrics")
	if !strings.Contains(body, "ops_test_hits_total{") || !strings.Contains(body, "} 3") {
		t.Errorf("/metrics lacks the counter:\n%s", body)
	}
	for _, want := range []string{
		`ops_test_build_info{commit_time="2026-12-07T05:23:54Z",goversion="go1.26.0",modified="false",revision="a0db0abec50e",version="v1.2.3"} 1`,
		`service_name="ops-test"`, `service_version="v1.2.3"`,
		"\ngo_goroutines ", "\ngo_memstats_alloc_bytes ", "\nprocess_cpu_seconds_total ", "\nprocess_resident_memory_bytes ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "unknown_service") {
		t.Error("/metrics: target_info names an unknown_service")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := (&http.Client{Timeout: time.Second}).Get("http://" + a.Addr().String() + "/j"); err == nil {
		t.Error("the listener still answers after Close")
	}
}

// TestCheckNamesSetting: each of Check's errors is a setting.Error of
// the setting at fault (for a configuration file's line), and the
// sources read the values With gives them, as a file's reader sets them.
func TestCheckNamesSetting(t *testing.T) {
	s := NewSources("", AddrSources)
	byName := map[string]*setting.Setting{}
	for _, st := range s.Settings() {
		byName[st.Name] = st
		if st.Scope != setting.Source || !st.Reload {
			t.Errorf("%s: scope %q, reload %v: a source's setting, which a reload may change", st.Name, st.Scope, st.Reload)
		}
	}
	if byName["dns-srv"] != nil || byName["etcd-prefix"] == nil || !byName["k8s-service"].Own || byName["kubeconfig"].Needs != "k8s-service" {
		t.Fatalf("AddrSources' settings: %v", byName)
	}
	for _, c := range []struct {
		set    map[string]string
		static string
		want   string // the setting the error names
	}{
		{map[string]string{"etcd": "http://e:2379"}, "", "etcd"},
		{map[string]string{"etcd-prefix": "p"}, "", "etcd-prefix"},
		{map[string]string{"kubeconfig": "k"}, "", "kubeconfig"},
		{map[string]string{"k8s-service": "web"}, "", "k8s-service"},
		{map[string]string{"dns": "web"}, "", "dns"},
		{map[string]string{"dns": "web:80", "dns-interval": "0s"}, "", "dns-interval"},
		{map[string]string{"dns": "web:80", "k8s-service": "prod/web:http"}, "", "dns"},
		{map[string]string{"k8s-service": "prod/web:http"}, "-backend", "k8s-service"},
	} {
		var vs setting.Values
		for k, v := range c.set {
			if err := vs.Set(byName[k], v); err != nil {
				t.Fatal(err)
			}
		}
		err := s.With(&vs).Check(c.static)
		if st := setting.SettingOf(err); st == nil || st.Name != c.want || !errors.Is(err, ErrSources) {
			t.Errorf("%v %q: %v names %v, want %s", c.set, c.static, err, st, c.want)
		}
	}
	var vs setting.Values
	_ = vs.Set(byName["etcd"], "http://a:2379,http://b:2379")
	_ = vs.Set(byName["etcd-prefix"], "services/web")
	if w := s.With(&vs); w.Check("") != nil || !w.Dynamic() || w.String() != "etcd prefix services/web" || w.Name() != "-etcd" || s.Dynamic() {
		t.Errorf("With: %v %v %q %q; the declarations' own values: %v", w.Check(""), w.Dynamic(), w.String(), w.Name(), s.Dynamic())
	}
}

// TestCount: "1 service", "0 services", "2 services", of either kind of
// number.
func TestCount(t *testing.T) {
	for n, want := range map[int]string{0: "0 services", 1: "1 service", 2: "2 services"} {
		if got := Count(n, "service"); got != want {
			t.Errorf("Count(%d): %q, want %q", n, got, want)
		}
		if got := Count(uint64(n), "service"); got != want {
			t.Errorf("Count(uint64(%d)): %q, want %q", n, got, want)
		}
	}
}
