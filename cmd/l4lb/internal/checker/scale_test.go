package checker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/internal/health"
	"github.com/maglevlb/maglev/xdpmaglev"
	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// The health checker at scale: n backends, each an address of a network
// namespace's loopback (198.18.64.1 and up, made local by one route), served
// by a real TCP listener that accepts and closes, and a real HTTP server
// answering GETs. The checker runs in a process of its own in that
// namespace (this test binary again, as TestHealthScaleChild), so that its
// CPU time (getrusage) and Go heap are the checker's alone: the servers run
// in the test's process. Run by TestHealthScale (1,000 backends, in CI) and
// BenchmarkHealthScale (10,000, the figures of docs/l4lb-howto-health.md).

// scaleProfileEnv names the environment variable that, set to a file
// name, has each run of BenchmarkHealthScale write a CPU profile of the
// checker process's window to that name, the kind and the number of
// backends appended (NAME.tcp.10000).
const scaleProfileEnv = "L4LB_HEALTH_SCALE_CPUPROFILE"

// scaleEnv names the environment variable that makes this test binary the
// checker process of a scale run: its value is the run's scaleConfig, as
// JSON.
const scaleEnv = "L4LB_HEALTH_SCALE_CHILD"

// The scale run's ports in its namespace: the TCP listener's, the HTTP
// server's.
const scaleTCPPort, scaleHTTPPort = 8080, 8081

// scaleConfig is one scale run: N backends probed by Kind every Interval;
// the figures are those of Window intervals after Warm ones.
type scaleConfig struct {
	Kind     string
	N        int
	Interval time.Duration
	Timeout  time.Duration
	Warm     int
	Window   int
	Profile  string // if set, the file of a CPU profile of the window
}

// scaleResult is what the checker process measured over the window.
type scaleResult struct {
	Backends    int           // probed
	MinProbes   int           // the fewest probes of one backend in the window
	MaxProbes   int           // the most
	Probes      int           // of every backend, in the window
	Failed      int           // probes failed in the window, by the checker's metrics
	Failing     int           // backends with a failed probe since the start
	FirstErr    string        // the error of one of them
	Down        int           // backends down at the end
	Transitions int           // calls of changed in the window
	Warming     int           // calls of changed before it
	CPU         time.Duration // user and system time, in the window
	Sys         time.Duration // system time, of CPU
	Wall        time.Duration // the window's
	HeapLive    uint64        // bytes of Go heap live after a collection at the window's end
	Alloc       uint64        // bytes allocated in the window
	Mallocs     uint64        // heap objects allocated in the window
	GCs         uint32        // collections in the window
	Goroutines  int           // at the window's end
	FDs         int           // open file descriptors at the window's end
	RSS         uint64        // bytes of resident memory at the window's end (VmRSS)
	Servers     float64       // cores the backends' servers used, over the checker process's life
	// The namespace's counts (TcpExt of /proc/net/netstat), over its life:
	// connections the listeners' queues had no room for, SYNs sent again.
	ListenOverflows, SynRetrans string
}

// scaleAddrs returns the backends' addresses: 198.18.64.1 and up.
func scaleAddrs(n int) []netip.Addr {
	addrs := make([]netip.Addr, n)
	a := netip.MustParseAddr("198.18.64.1")
	for i := range addrs {
		addrs[i], a = a, a.Next()
	}
	return addrs
}

// maxScaleBackends is the size of scaleAddrs's range, 198.18.64.0/18, less
// its first address.
const maxScaleBackends = 1<<14 - 1

// raiseNoFile raises the soft limit of open files to the hard one (Go
// does so at start, but not for the processes it starts), and fails
// unless that allows n: under keep-alive, the servers and the checker each
// hold a connection per backend.
func raiseNoFile(n uint64) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return err
		}
	}
	if l.Cur < n {
		return fmt.Errorf("open files limited to %d (ulimit -Hn), %d needed", l.Cur, n)
	}
	return nil
}

// scaleNS creates the namespace of a scale run of n backends, hsc-PID, with lo up and
// 198.18.64.0/18 local on it, and the backends' servers in it: the TCP
// listener on scaleTCPPort and the HTTP server on scaleHTTPPort, every
// address of the namespace. Everything is removed at the end of tb.
func scaleNS(tb testing.TB, n int) string {
	tb.Helper()
	xdptest.Need(tb)
	if err := raiseNoFile(uint64(n) + 1000); err != nil {
		tb.Fatal(err)
	}
	ns := xdptest.NewNS(tb, "hsc") // hsc-PID, stale ones swept
	xdptest.IP(tb, "-n", ns, "route", "add", "local", "198.18.64.0/18", "dev", "lo")

	listen := func(port int) net.Listener {
		l, err := xdptest.In(ns, func() (net.Listener, error) { return net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port)) })
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = l.Close() })
		return l
	}
	tl := listen(scaleTCPPort)
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}), ReadHeaderTimeout: 10 * time.Second}
	hl := listen(scaleHTTPPort)
	go func() { _ = srv.Serve(hl) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return ns
}

// runScale runs the checker process of cfg in namespace ns (made by
// scaleNS) and returns what it measured.
func runScale(tb testing.TB, ns string, cfg scaleConfig) scaleResult {
	tb.Helper()
	if cfg.N > maxScaleBackends {
		tb.Fatalf("%d backends: at most %d", cfg.N, maxScaleBackends)
	}
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	bound := time.Duration(cfg.Warm+cfg.Window)*cfg.Interval + time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, exe, "-test.run", "^TestHealthScaleChild$", "-test.v", "-test.count", "1")
	cmd.Env = append(os.Environ(), scaleEnv+"="+string(js))
	cpu0, t0 := cpuTime(tb), time.Now()
	out, err := cmd.CombinedOutput()
	servers := (cpuTime(tb) - cpu0).Seconds() / time.Since(t0).Seconds()
	if err != nil {
		tb.Fatalf("the checker process: %v:\n%s", err, out)
	}
	st, err := xdptest.In(ns, func() (string, error) {
		b, err := os.ReadFile("/proc/thread-self/net/netstat")
		return string(b), err
	})
	if err != nil {
		tb.Fatal(err)
	}
	kernel := tcpExt(st, "ListenOverflows", "TCPSynRetrans")
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "health scale result: "); ok {
			var r scaleResult
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				tb.Fatalf("%v: %s", err, rest)
			}
			r.Servers, r.ListenOverflows, r.SynRetrans = servers, kernel["ListenOverflows"], kernel["TCPSynRetrans"]
			return r
		}
	}
	tb.Fatalf("the checker process printed no result:\n%s", out)
	return scaleResult{}
}

// checkScale fails tb unless r shows every backend of cfg probed in each
// interval of the window (Window-1 to Window+1 probes: the window's edges
// cut a backend's period anywhere), and none of these healthy backends
// changed in the window or down at its end. A probe may fail on a loaded
// machine (its deadline passes before the process runs again), and is
// counted, not failed; so are the transitions before the window.
func checkScale(tb testing.TB, cfg scaleConfig, r scaleResult) {
	tb.Helper()
	if r.Backends != cfg.N || r.MinProbes < cfg.Window-1 || r.MaxProbes > cfg.Window+1 {
		tb.Errorf("%s, %d backends: %d probed, %d to %d probes each in %d intervals, want %d backends, %d to %d each (%s)",
			cfg.Kind, cfg.N, r.Backends, r.MinProbes, r.MaxProbes, cfg.Window, cfg.N, cfg.Window-1, cfg.Window+1, r.figures())
	}
	if r.Down != 0 || r.Transitions != 0 {
		tb.Errorf("%s, %d healthy backends: %d down, %d transitions; want none (%s)",
			cfg.Kind, cfg.N, r.Down, r.Transitions, r.figures())
	}
}

// figures summarizes r's measurements.
func (r scaleResult) figures() string {
	return fmt.Sprintf("%.3f cores (%.3f of them system), %d probes in %v (%d failed; %d backends failed one since the start, the last error %q; %d transitions before), %.0f B and %.1f allocations a probe, heap %.1f MiB live, resident %.1f MiB, %d goroutines, %d fds; the servers %.3f cores; listen overflows %s, SYNs sent again %s",
		r.CPU.Seconds()/r.Wall.Seconds(), r.Sys.Seconds()/r.Wall.Seconds(), r.Probes, r.Wall.Round(time.Millisecond), r.Failed, r.Failing, r.FirstErr, r.Warming, float64(r.Alloc)/float64(r.Probes),
		float64(r.Mallocs)/float64(r.Probes), float64(r.HeapLive)/(1<<20), float64(r.RSS)/(1<<20), r.Goroutines, r.FDs, r.Servers, r.ListenOverflows, r.SynRetrans)
}

// tcpExt returns the counters named of netstat, the text of
// /proc/net/netstat (a line of names, a line of values, for each group).
func tcpExt(netstat string, names ...string) map[string]string {
	lines := strings.Split(netstat, "\n")
	out := map[string]string{}
	for i := 0; i+1 < len(lines); i += 2 {
		keys, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		for j := range min(len(keys), len(vals)) {
			for _, n := range names {
				if keys[j] == n {
					out[n] = vals[j]
				}
			}
		}
	}
	return out
}

// failedProbes returns the probes failed so far, the count of
// maglev.l4lb.health.probe.duration with outcome fail in the metrics h
// serves.
func failedProbes(t *testing.T, h http.Handler) int {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	re := regexp.MustCompile(`(?m)^maglev_l4lb_health_probe_duration_seconds_count{maglev_outcome="fail"[^}]*} (\d+)$`)
	sub := re.FindStringSubmatch(w.Body.String())
	if sub == nil {
		return 0 // none failed yet: no series
	}
	n, err := strconv.Atoi(sub[1])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// cpuTime returns the process's CPU time so far, user and system
// (getrusage).
func cpuTime(tb testing.TB) time.Duration {
	user, sys := cpuTimes(tb)
	return user + sys
}

// cpuTimes returns the process's user and system CPU time so far.
func cpuTimes(tb testing.TB) (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// rss returns the process's resident memory, VmRSS of /proc/self/status.
func rss(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb uint64
			if _, err := fmt.Sscanf(rest, "%d kB", &kb); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// TestHealthScale probes 1,000 backends, real listeners and HTTP servers
// on addresses of a network namespace, every second, by TCP and HTTP:
// every backend is probed in every interval of a 3-interval window, and
// none of these healthy backends ever goes down or changes. The figures
// (CPU, heap) are logged; BenchmarkHealthScale reports them at 10,000.
func TestHealthScale(t *testing.T) {
	ns := scaleNS(t, 1000)
	xdptest.Exclusive(t) // it loads the CPUs: no test that times the built l4lb meanwhile
	for _, kind := range []string{"tcp", "http"} {
		cfg := scaleConfig{Kind: kind, N: 1000, Interval: time.Second, Timeout: 500 * time.Millisecond, Warm: 1, Window: 3}
		r := runScale(t, ns, cfg)
		checkScale(t, cfg, r)
		if r.Warming != 0 {
			t.Errorf("%s, %d healthy backends: %d transitions in the first interval, want none (%s)", kind, cfg.N, r.Warming, r.figures())
		}
		t.Logf("%s: %d backends every %v: %s", kind, cfg.N, cfg.Interval, r.figures())
	}
}

// scaleSizes are BenchmarkHealthScale's numbers of backends.
var scaleSizes = []int{1000, 10000}

// scaleBenchEnv names the environment variable that, set to 1, runs
// BenchmarkHealthScale: it takes a minute or more, so CI's run of every
// benchmark once leaves it out.
const scaleBenchEnv = "L4LB_HEALTH_SCALE"

// BenchmarkHealthScale probes 1,000 and 10,000 backends every second (an
// op is one interval, after three to warm up), by TCP and HTTP, and
// reports the checker process's CPU (cores: user and system time over wall
// time; sys-cores: system time), its CPU time a probe, its live Go heap,
// its resident memory, what it allocates a probe, the probes that failed
// in the window and the transitions before it (warm-transitions: on a
// loaded machine, the first round, every connection dialled and accepted
// at once, can miss deadlines). It creates a network namespace: run it as
// root with L4LB_HEALTH_SCALE=1 and -benchtime 10x, not beside other
// namespace tests (docs/l4lb-howto-health.md, "Health checks at scale").
func BenchmarkHealthScale(b *testing.B) {
	if os.Getenv(scaleBenchEnv) != "1" {
		b.Skip("set L4LB_HEALTH_SCALE=1 to run it (a minute or more)")
	}
	for _, kind := range []string{"tcp", "http"} {
		for _, n := range scaleSizes {
			b.Run(fmt.Sprintf("kind=%s/backends=%d", kind, n), func(b *testing.B) {
				ns := scaleNS(b, n)
				xdptest.Exclusive(b)
				cfg := scaleConfig{Kind: kind, N: n, Interval: time.Second, Timeout: 500 * time.Millisecond, Warm: 3, Window: b.N}
				if p := os.Getenv(scaleProfileEnv); p != "" {
					cfg.Profile = fmt.Sprintf("%s.%s.%d", p, kind, n)
				}
				r := runScale(b, ns, cfg)
				checkScale(b, cfg, r)
				b.ReportMetric(float64(r.Wall.Nanoseconds())/float64(b.N), "ns/op")
				b.ReportMetric(r.CPU.Seconds()/r.Wall.Seconds(), "cores")
				b.ReportMetric(r.Sys.Seconds()/r.Wall.Seconds(), "sys-cores")
				b.ReportMetric(float64(r.CPU.Nanoseconds())/float64(r.Probes), "cpu-ns/probe")
				b.ReportMetric(float64(r.HeapLive)/(1<<20), "heap-MiB")
				b.ReportMetric(float64(r.RSS)/(1<<20), "rss-MiB")
				b.ReportMetric(float64(r.Alloc)/float64(r.Probes), "B/probe")
				b.ReportMetric(float64(r.Mallocs)/float64(r.Probes), "allocs/probe")
				b.ReportMetric(float64(r.Failed), "failed")
				b.ReportMetric(float64(r.Warming), "warm-transitions")
			})
		}
	}
}

// TestHealthScaleChild is the checker process of a scale run (runScale
// starts it, in the run's namespace, with scaleEnv set); without scaleEnv
// it skips. It probes the backends of the configuration, measures the
// window, and prints the scaleResult as a line of JSON.
func TestHealthScaleChild(t *testing.T) {
	js := os.Getenv(scaleEnv)
	if js == "" {
		t.Skip("the checker process of TestHealthScale and BenchmarkHealthScale, started by them")
	}
	var cfg scaleConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := raiseNoFile(uint64(cfg.N) + 1000); err != nil {
		t.Fatal(err)
	}
	m, err := ops.NewMetrics("l4lb", ops.ReadBuild()) // the SDK l4lb records through
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	hc := Config{Kind: cfg.Kind, Path: "/healthz", Status: http.StatusOK, Port: scaleTCPPort,
		Interval: cfg.Interval, Timeout: cfg.Timeout, Rise: 2, Fall: 3}
	if cfg.Kind == "http" {
		hc.Port = scaleHTTPPort
	}
	var transitions atomic.Int64
	svc := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}
	c, err := New(svc, hc, m.Provider.Meter("github.com/maglevlb/maglev/cmd/l4lb"), slog.New(slog.DiscardHandler), func() { transitions.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addrs := scaleAddrs(cfg.N)
	c.Set(addrs)

	probes := func() map[netip.Addr]int {
		c.mu.Lock()
		defer c.mu.Unlock()
		n := make(map[netip.Addr]int, len(c.backends))
		for a, b := range c.backends {
			n[a] = b.probes
		}
		return n
	}
	time.Sleep(time.Duration(cfg.Warm) * cfg.Interval)
	var ms0, ms1 runtime.MemStats
	failed0, warming := failedProbes(t, m.Handler), int(transitions.Load())
	before, t0 := probes(), time.Now()
	user0, sys0 := cpuTimes(t)
	runtime.ReadMemStats(&ms0)
	if cfg.Profile != "" {
		f, err := os.Create(cfg.Profile)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Duration(cfg.Window) * cfg.Interval)
	after, t1 := probes(), time.Now()
	user1, sys1 := cpuTimes(t)
	runtime.ReadMemStats(&ms1)
	pprof.StopCPUProfile()
	failed1 := failedProbes(t, m.Handler)

	r := scaleResult{Backends: len(after), MinProbes: -1, CPU: user1 - user0 + sys1 - sys0, Sys: sys1 - sys0, Wall: t1.Sub(t0),
		Alloc: ms1.TotalAlloc - ms0.TotalAlloc, Mallocs: ms1.Mallocs - ms0.Mallocs, GCs: ms1.NumGC - ms0.NumGC,
		Goroutines: runtime.NumGoroutine(), Transitions: int(transitions.Load()) - warming, Warming: warming, Failed: failed1 - failed0}
	for a, n := range after {
		d := n - before[a]
		r.Probes += d
		if r.MinProbes < 0 || d < r.MinProbes {
			r.MinProbes = d
		}
		r.MaxProbes = max(r.MaxProbes, d)
	}
	c.mu.Lock()
	for _, b := range c.backends {
		if b.err != "" {
			r.Failing++
			r.FirstErr = b.err
		}
		if b.health.State() == health.Down {
			r.Down++
		}
	}
	c.mu.Unlock()
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		r.FDs = len(fds)
	}
	r.RSS = rss(t)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapLive = ms.HeapAlloc
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("health scale result: %s\n", out)
}

// serveEnv names the environment variable that makes this test binary the
// backends' server of BenchmarkProbe (TestHealthServeChild).
const serveEnv = "L4LB_HEALTH_SERVE_CHILD"

// serveBackend starts the server of BenchmarkProbe, this test binary again
// (TestHealthServeChild), in a process of its own, so that the
// benchmark's time and allocations are the checker's; it returns the ports
// of its TCP listener and HTTP server on 127.0.0.1. It is stopped at the
// end of tb.
func serveBackend(tb testing.TB) (tcpPort, httpPort uint16) {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^TestHealthServeChild$", "-test.count", "1")
	cmd.Env = append(os.Environ(), serveEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = stdin.Close() // it exits when its standard input ends
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if _, err2 := fmt.Sscanf(line, "health serve: %d %d", &tcpPort, &httpPort); err != nil || err2 != nil {
		tb.Fatalf("the server process: %q: %v %v", line, err, err2)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return tcpPort, httpPort
}

// TestHealthServeChild is the backends' server of BenchmarkProbe
// (serveBackend starts it with serveEnv set); without serveEnv it skips.
// It serves a TCP listener that accepts and closes and an HTTP server
// that answers 200, on 127.0.0.1, prints their ports, and returns when
// its standard input ends.
func TestHealthServeChild(t *testing.T) {
	if os.Getenv(serveEnv) == "" {
		t.Skip("the server process of BenchmarkProbe, started by it")
	}
	tl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tl.Close() }()
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	hl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(hl) }()
	defer func() { _ = srv.Close() }()
	fmt.Printf("health serve: %d %d\n", tl.Addr().(*net.TCPAddr).Port, hl.Addr().(*net.TCPAddr).Port)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// BenchmarkProbe is one backend's share of a probe round: a probe of a
// backend on 127.0.0.1 (served by another process) and its record, by TCP
// and HTTP. cpu-ns/op is the benchmark process's CPU time (user and
// system) an op; on loopback it includes the kernel's work for both ends
// of the connection. kind=tcp-syscalls is the floor of a TCP probe: its
// system calls alone (socket, a blocking connect, close), no Go
// networking.
func BenchmarkProbe(b *testing.B) {
	tcpPort, httpPort := serveBackend(b)
	for _, kind := range []string{"tcp", "http"} {
		b.Run("kind="+kind, func(b *testing.B) {
			hc := Config{Kind: kind, Path: "/healthz", Status: http.StatusOK, Port: tcpPort,
				Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 3}
			if kind == "http" {
				hc.Port = httpPort
			}
			m, err := ops.NewMetrics("l4lb", ops.ReadBuild())
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			svc := xdpmaglev.Service{Proto: xdpmaglev.TCP, VIP: netip.MustParseAddrPort("198.19.0.1:80")}
			c, err := New(svc, hc, m.Provider.Meter("github.com/maglevlb/maglev/cmd/l4lb"), slog.New(slog.DiscardHandler), func() {})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			a := netip.MustParseAddr("127.0.0.1")
			pb := c.newProbed(a) // probed here, with no timer
			c.backends[a] = pb
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				start := time.Now()
				err := c.probe(pb)
				c.record(pb, err, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			c.mu.Lock()
			delete(c.backends, a) // it has no timer for close to stop
			c.mu.Unlock()
			pb.cancel()
		})
	}
	b.Run("kind=tcp-syscalls", func(b *testing.B) {
		sa := &syscall.SockaddrInet4{Port: int(tcpPort), Addr: [4]byte{127, 0, 0, 1}}
		b.ReportAllocs()
		cpu0 := cpuTime(b)
		for b.Loop() {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			err = syscall.Connect(fd, sa)
			_ = syscall.Close(fd)
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
	})
}
