package xdpmaglev

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestCompare is the end-to-end comparison, a measurement and not a
// check: it runs only with XDPMAGLEV_COMPARE=1 (as root, with wrk, iperf3
// and haproxy installed), and CI does not run it. In one topology (a
// client, the load balancer and two Go HTTP backends on one bridge, as
// TestEndToEnd's), it sends the same load, interleaved over several
// rounds, through the XDP load balancer (to the VIP), through HAProxy in
// TCP mode on the load balancer's namespace (balance source, hash-type
// consistent) and straight to one backend: short connections (wrk with
// "Connection: close", one request a connection) and bulk throughput
// (iperf3, one stream). It logs the medians: connections per second,
// Gbit/s, and CPU time per connection: the program's run time from the
// kernel's BPF statistics (kernel.bpf_stats_enabled=1) against HAProxy's
// process CPU time. XDPMAGLEV_COMPARE_ROUNDS (5) and
// XDPMAGLEV_COMPARE_SECONDS (3) set the rounds and each run's length.
// docs/testing-xdp.md ("End to end") has the figures.
func TestCompare(t *testing.T) {
	if os.Getenv("XDPMAGLEV_COMPARE") != "1" {
		t.Skip("a measurement: set XDPMAGLEV_COMPARE=1 to run it")
	}
	for _, tool := range []string{"wrk", "iperf3", "haproxy"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: apt-get install wrk iperf3 haproxy", tool)
		}
	}
	rounds, secs := envInt(t, "XDPMAGLEV_COMPARE_ROUNDS", 5), envInt(t, "XDPMAGLEV_COMPARE_SECONDS", 3)
	if rounds < 1 || rounds > 20 || secs < 1 || secs > 30 {
		t.Fatalf("%d rounds of %d s: want 1 to 20 rounds of 1 to 30 s", rounds, secs)
	}

	n := newTestNet(t, "xc")
	vip := "198.19.0.1"
	cl := n.addNS("cl")
	n.join(cl, "p-cl", "198.18.0.2/24")
	xdptest.IP(n.t, "-n", cl, "route", "add", vip+"/32", "via", "198.18.0.3")
	n.exec(cl, "ethtool", "-K", "eth0", "tx", "off")
	lbNS := n.addNS("lb")
	n.join(lbNS, "p-lb", "198.18.0.3/24")
	n.exec(lbNS, "ethtool", "-K", "eth0", "tx", "off")
	var backends []Backend
	for i := range 2 {
		ns := n.addNS(fmt.Sprintf("be%d", i))
		addr := fmt.Sprintf("198.18.0.%d", 11+i)
		n.join(ns, fmt.Sprintf("p-be%d", i), addr+"/24")
		xdptest.IP(n.t, "-n", ns, "addr", "add", vip+"/32", "dev", "lo")
		for _, dev := range []string{"all", "eth0"} {
			xdptest.Sysctl(n.t, ns, "net.ipv4.conf."+dev+".arp_ignore", "1")
			xdptest.Sysctl(n.t, ns, "net.ipv4.conf."+dev+".arp_announce", "2")
		}
		ln, err := xdptest.In(ns, func() (net.Listener, error) { return net.Listen("tcp4", ":80") })
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "ok\n") // an error is the client gone
		}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }() // ends with Close
		t.Cleanup(func() { _ = srv.Close() })
		iperf := exec.Command("ip", "netns", "exec", ns, "iperf3", "-s", "-p", "5201")
		if err := iperf.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = iperf.Process.Kill(); _ = iperf.Wait() })
		backends = append(backends, Backend{Addr: netip.MustParseAddr(addr), Weight: 1})
	}

	lb, err := xdptest.In(lbNS, func() (*LB, error) {
		return Load("eth0", Options{Mode: AttachNative, ConntrackSize: 1 << 20})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	peerPass(t, lb, n.sw, "p-lb")
	// iperf3's control and data connections are two flows, which a table
	// of two backends may send to different servers, each then waiting
	// for the other: its service has one backend.
	for port, bs := range map[string][]Backend{"80": backends, "5201": backends[:1]} {
		if err := lb.SetService(Service{VIP: netip.MustParseAddrPort(vip + ":" + port), Proto: TCP}, bs, ServiceOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// HAProxy on the load balancer's namespace: :8080 and :5202.
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	conf := `global
	maxconn 4000
defaults
	mode tcp
	timeout connect 5s
	timeout client 60s
	timeout server 60s
listen web
	bind 198.18.0.3:8080
	balance source
	hash-type consistent
	server be0 198.18.0.11:80
	server be1 198.18.0.12:80
listen bulk
	bind 198.18.0.3:5202
	balance source
	hash-type consistent
	server be0 198.18.0.11:5201
`
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	hap := exec.Command("ip", "netns", "exec", lbNS, "haproxy", "-db", "-f", cfg)
	hap.Stderr = os.Stderr
	if err := hap.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hap.Process.Kill(); _ = hap.Wait() })
	time.Sleep(500 * time.Millisecond) // haproxy binds

	old, err := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", old, 0o644) })

	type path struct{ name, web, bulkHost, bulkPort string }
	paths := []path{
		{"xdp", "http://" + vip + "/", vip, "5201"},
		{"haproxy", "http://198.18.0.3:8080/", "198.18.0.3", "5202"},
		{"direct", "http://198.18.0.11/", "198.18.0.11", "5201"},
	}
	connRate := map[string][]float64{}
	gbits := map[string][]float64{}
	cpuPerConn := map[string][]float64{} // ns
	for r := range rounds {
		for i := range paths {
			p := paths[(i+r)%len(paths)] // the order rotates each round
			before := cpuNS(t, p.name, lb, hap.Process.Pid)
			reqs, rate := runWrk(t, cl, p.web, secs)
			after := cpuNS(t, p.name, lb, hap.Process.Pid)
			connRate[p.name] = append(connRate[p.name], rate)
			if p.name != "direct" {
				cpuPerConn[p.name] = append(cpuPerConn[p.name], float64(after-before)/float64(reqs))
			}
			gbits[p.name] = append(gbits[p.name], runIperf(t, cl, p.bulkHost, p.bulkPort, secs))
		}
	}
	st, err := lb.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Forwarded == 0 || st.Dropped["no_backend"] != 0 {
		t.Errorf("the load balancer forwarded %d packets and dropped %d", st.Forwarded, st.Dropped["no_backend"])
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("%d rounds of %d s; load average %s", rounds, secs, strings.TrimSpace(string(load)))
	for _, p := range paths {
		t.Logf("%-8s %8.0f conn/s (median; all %v)  %6.2f Gbit/s (all %v)  CPU/conn %v",
			p.name, median(connRate[p.name]), round(connRate[p.name]), median(gbits[p.name]), round(gbits[p.name]), fmtNS(cpuPerConn[p.name]))
	}
	t.Logf("xdp/direct connection rate %.2f (goal ≥ 0.8); LB CPU/conn over HAProxy's %.4f (goal ≤ 0.05)",
		median(connRate["xdp"])/median(connRate["direct"]), median(cpuPerConn["xdp"])/median(cpuPerConn["haproxy"]))
}

var wrkRate = regexp.MustCompile(`(\d+) requests in`)

// runWrk runs wrk with one request a connection from namespace ns and
// returns the requests made and the rate.
func runWrk(t *testing.T, ns, url string, secs int) (int, float64) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "wrk", "-t2", "-c32", fmt.Sprintf("-d%ds", secs),
		"--timeout", "5s", "-H", "Connection: close", url).CombinedOutput()
	if err != nil {
		t.Fatalf("wrk %s: %v: %s", url, err, out)
	}
	if strings.Contains(string(out), "Socket errors") || strings.Contains(string(out), "Non-2xx") {
		t.Errorf("wrk %s: errors: %s", url, out)
	}
	m := wrkRate.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("wrk %s: no request count in %s", url, out)
	}
	reqs, _ := strconv.Atoi(m[1])
	if reqs == 0 {
		t.Fatalf("wrk %s: no requests: %s", url, out)
	}
	return reqs, float64(reqs) / float64(secs)
}

// runIperf runs one iperf3 stream from namespace ns and returns Gbit/s
// received.
func runIperf(t *testing.T, ns, host, port string, secs int) float64 {
	t.Helper()
	var out []byte
	var err error
	for range 5 { // the server takes one test at a time: busy for a moment after the last
		// Bounded: a run through the VIP was once seen never to end.
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+10)*time.Second)
		out, err = exec.CommandContext(ctx, "ip", "netns", "exec", ns, "iperf3", "-c", host, "-p", port, "-t", strconv.Itoa(secs), "-J").Output()
		cancel()
		if err == nil {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("iperf3 to %s:%s: %v: %s", host, port, err, out)
	}
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.End.SumReceived.BitsPerSecond == 0 {
		t.Fatalf("iperf3 to %s:%s: %v: %s", host, port, err, out)
	}
	return res.End.SumReceived.BitsPerSecond / 1e9
}

// cpuNS returns the CPU time the path's load balancer has used: the XDP
// program's run time from the kernel's BPF statistics, or HAProxy's
// process CPU time (user and system, from /proc).
func cpuNS(t *testing.T, name string, lb *LB, pid int) int64 {
	t.Helper()
	switch name {
	case "xdp":
		st, err := lb.objs.XdpMaglev.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st.Runtime.Nanoseconds()
	case "haproxy":
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		return (utime + stime) * int64(time.Second) / clockTicks
	}
	return 0
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on Linux.
const clockTicks = 100

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func round(v []float64) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = strconv.FormatFloat(x, 'g', 3, 64)
	}
	return out
}

func fmtNS(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f ns (median; all %v)", median(v), round(v))
}
