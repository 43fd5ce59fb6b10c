package main

// The fleet test: real etcd (embedded in the test process), real backend
// processes that register themselves with etcdmaglev.Register, and three
// lbproxy processes on one prefix. It checks the Maglev property with
// processes that share nothing but etcd: every proxy sends a key to the
// same backend, the library's owner over the registered Addrs, through
// registrations, crashes, graceful exits and an etcd outage.
//
//	go test -run TestFleet -v ./cmd/lbproxy
//
// prints the measured times (registration to routing, keep-alive stopped
// to removal) that docs/membership.md reports.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/etcdmaglev/etcdtest"
	"github.com/maglevlb/maglev/httpmaglev"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

const (
	// fleetBackendEnv, set in the environment of the test binary, makes it
	// a fleet backend instead of running tests: "ETCD_URL PREFIX".
	fleetBackendEnv = "LBPROXY_FLEET_BACKEND"

	fleetPrefix = "services/fleet"
	fleetTTL    = 2 * time.Second // the backends' lease TTL: etcd's minimum by default
	fleetDrain  = time.Second     // a backend's drain between Deregister and its server's Shutdown
	fleetKeys   = 1000
	fleetSettle = 20 * time.Second // bound of every wait that is not a timing assertion
	fleetHeader = "X-Key"
)

func TestMain(m *testing.M) {
	if v := os.Getenv(fleetBackendEnv); v != "" {
		os.Exit(fleetBackend(v))
	}
	os.Exit(m.Run())
}

// etcdDialOptions make a client reconnect to a restarted etcd within half
// a second.
var etcdDialOptions = []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
	MinConnectTimeout: 5 * time.Second,
})}

// fleetBackend is a backend process: an HTTP server on 127.0.0.1 that
// answers every request with its address (and /healthz with 200),
// registered under the prefix with a lease of fleetTTL. It prints "ready
// ADDR" once registered. On SIGTERM it leaves gracefully: Deregister, a
// drain, then the server's Shutdown; SIGKILL is a crash.
func fleetBackend(env string) int {
	etcdURL, prefix, _ := strings.Cut(env, " ")
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		logger.Error("listen", "err", err)
		return 1
	}
	addr := l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, "ok\n")
			return
		}
		_, _ = io.WriteString(w, addr)
	})}
	go func() { _ = srv.Serve(l) }()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: etcdDialOptions})
	if err != nil {
		logger.Error("etcd", "err", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg, err := etcdmaglev.Register(ctx, c, prefix, endpoints.Endpoint{Addr: addr}, etcdmaglev.RegisterOptions{TTL: fleetTTL, Logger: logger})
	if err != nil {
		logger.Error("register", "err", err)
		return 1
	}
	fmt.Printf("ready %s\n", addr)
	<-sig
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := reg.Deregister(ctx); err != nil {
		logger.Error("deregister", "err", err)
		return 1
	}
	fmt.Println("deregistered")
	time.Sleep(fleetDrain) // requests already routed here still arrive
	if err := srv.Shutdown(ctx); err != nil {
		logger.Error("shutdown", "err", err)
		return 1
	}
	return 0
}

// A proc is a child process whose output the test reads line by line.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  []string      // every line so far
	more chan struct{} // signalled on each new line
	done chan struct{} // closed when the process has exited
}

// startProc starts a process, ended (SIGKILL) at the end of the test if it
// still runs; its output is logged if the test fails.
func startProc(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, more: make(chan struct{}, 1), done: make(chan struct{})}
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out = append(p.out, sc.Text())
			p.mu.Unlock()
			select {
			case p.more <- struct{}{}:
			default:
			}
		}
	}()
	go func() {
		_ = cmd.Wait() // the test looks at what the process did, not how it ended
		_ = w.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // it may have exited already
		<-p.done
		if t.Failed() {
			p.mu.Lock()
			t.Logf("%s output:\n%s", name, strings.Join(p.out, "\n"))
			p.mu.Unlock()
		}
	})
	return p
}

// wait waits for a line matching re and returns its submatches.
func (p *proc) wait(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	find := func() []string {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, line := range p.out {
			if m := re.FindStringSubmatch(line); m != nil {
				return m
			}
		}
		return nil
	}
	deadline := time.After(fleetSettle)
	for {
		if m := find(); m != nil {
			return m
		}
		select {
		case <-p.more:
		case <-p.done:
			// One last look at what it printed before it exited.
			if m := find(); m != nil {
				return m
			}
			t.Fatalf("%s exited without printing %v", p.name, re)
		case <-deadline:
			t.Fatalf("%s did not print %v within %v", p.name, re, fleetSettle)
		}
	}
}

// A fleet is etcd, the backends and the proxies.
type fleet struct {
	t        *testing.T
	etcd     *etcdtest.Server
	bin      string           // the lbproxy binary
	backends map[string]*proc // the running backends, by address
	started  int              // backends started
	proxies  []fleetProxy
	client   *http.Client
}

type fleetProxy struct {
	url, admin string
}

var readyLine = regexp.MustCompile(`^ready (\S+)$`)

// startBackend starts a backend process and returns its address, once it
// has registered.
func (f *fleet) startBackend() string {
	f.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fleetBackendEnv+"="+f.etcd.Endpoint()+" "+fleetPrefix)
	f.started++
	p := startProc(f.t, fmt.Sprintf("backend %d", f.started), cmd)
	addr := p.wait(f.t, readyLine)[1]
	f.backends[addr] = p
	return addr
}

// state returns a proxy's /debug/maglev.
func (f *fleet) state(p fleetProxy) httpmaglev.State {
	f.t.Helper()
	resp, err := f.client.Get(p.admin)
	if err != nil {
		f.t.Fatalf("%s: %v", p.admin, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var s httpmaglev.State
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		f.t.Fatalf("%s: %v", p.admin, err)
	}
	return s
}

// members returns the backends in a proxy's table (healthy), sorted.
func (f *fleet) members(p fleetProxy) []string {
	var names []string
	for _, b := range f.state(p).Backends {
		if b.Healthy {
			names = append(names, b.Name)
		}
	}
	return names
}

// known reports whether a proxy has addr in its membership, healthy or
// not.
func (f *fleet) known(p fleetProxy, addr string) bool {
	return slices.ContainsFunc(f.state(p).Backends, func(b httpmaglev.BackendState) bool { return b.Name == addr })
}

// waitAll polls every proxy until cond holds for each, and returns how long
// after start each first held.
func (f *fleet) waitAll(what string, start time.Time, limit time.Duration, cond func(fleetProxy) bool) []time.Duration {
	f.t.Helper()
	took := make([]time.Duration, len(f.proxies))
	left := len(f.proxies)
	for left > 0 {
		for i, p := range f.proxies {
			if took[i] == 0 && cond(p) {
				took[i] = time.Since(start)
				left--
			}
		}
		if time.Since(start) > limit {
			f.t.Fatalf("%s: not on every proxy within %v (took %v)", what, limit, took)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return took
}

// get sends key through a proxy and returns the backend that answered.
func (f *fleet) get(p fleetProxy, key string) (string, error) {
	req, err := http.NewRequest("GET", p.url+"/", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set(fleetHeader, key)
	resp, err := f.client.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	return string(body), nil
}

// checkOwners sends fleetKeys keys through every proxy: each must reach its
// owner in maglev.New(members); it returns the owners by key.
func (f *fleet) checkOwners(members []string) map[string]string {
	f.t.Helper()
	tb := table(f.t, members)
	owners := make(map[string]string, fleetKeys)
	for i := range fleetKeys {
		key := fmt.Sprintf("user-%d", i)
		want := tb.Lookup(key)
		for j, p := range f.proxies {
			got, err := f.get(p, key)
			if err != nil {
				f.t.Fatalf("proxy %d, key %s: %v", j, key, err)
			}
			if got != want {
				f.t.Fatalf("proxy %d sent key %s to %s; its owner over %v is %s", j, key, got, members, want)
			}
		}
		owners[key] = want
	}
	return owners
}

func table(t *testing.T, members []string) *maglev.Table {
	t.Helper()
	tb, err := maglev.New(members, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func sorted(m map[string]*proc) []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
}

func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, 8 backend processes and 3 proxy processes: not in -short")
	}
	if raceEnabled {
		// The proxies are the lbproxy built here, without -race: under the
		// detector the test checks nothing the plain run (the README's
		// test command, in CI too) has not, and takes 50 s of the race
		// step. The proxy's in-process tests run under the detector.
		t.Skip("runs the built lbproxy, which -race does not instrument: the plain run covers it")
	}
	f := &fleet{t: t, etcd: etcdtest.Start(t), backends: map[string]*proc{}, client: &http.Client{Timeout: 10 * time.Second}}
	f.bin = filepath.Join(t.TempDir(), "lbproxy")
	if out, err := exec.Command("go", "build", "-o", f.bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for range 5 {
		f.startBackend()
	}
	proxyLine := regexp.MustCompile(`proxy on (http://\S+), keyed`)
	adminLine := regexp.MustCompile(`admin on (http://\S+/debug/maglev)`)
	for i := range 3 {
		cmd := exec.Command(f.bin, "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0",
			"-etcd", f.etcd.Endpoint(), "-etcd-prefix", fleetPrefix, "-key", "header:"+fleetHeader,
			"-health-interval", "500ms", "-health-timeout", "250ms")
		p := startProc(t, fmt.Sprintf("lbproxy %d", i), cmd)
		f.proxies = append(f.proxies, fleetProxy{url: p.wait(t, proxyLine)[1], admin: p.wait(t, adminLine)[1]})
	}
	members := sorted(f.backends)
	same := func(want []string) func(fleetProxy) bool {
		return func(p fleetProxy) bool { return slices.Equal(f.members(p), want) }
	}
	f.waitAll("five backends", time.Now(), fleetSettle, same(members))

	// 1. Every key reaches the same backend through every proxy: the
	// library's owner over the registered Addrs.
	before := f.checkOwners(members)

	// 2. A sixth backend registers: within a second every proxy routes by
	// the new table, and only the keys whose slots Changes lists move.
	start := time.Now()
	sixth := f.startBackend() // returns once Register has
	registered := time.Now()
	members = sorted(f.backends)
	took := f.waitAll("the sixth backend", registered, time.Second, same(members))
	t.Logf("registration to routing, 3 proxies: %v after Register returned (the backend process started %v before)",
		took, registered.Sub(start).Round(time.Millisecond))
	after := f.checkOwners(members)
	old, next := table(t, sorted(without(f.backends, sixth))), table(t, members)
	changed := map[int]bool{}
	for slot := range old.Changes(next) {
		changed[slot] = true
	}
	moved, toSixth := 0, 0
	for key, o := range before {
		slot := int(next.Hasher().HashString(key) % uint64(next.Size()))
		if (after[key] != o) != changed[slot] {
			t.Fatalf("key %s (slot %d) went from %s to %s; Changes lists its slot: %v", key, slot, o, after[key], changed[slot])
		}
		if after[key] != o {
			moved++
			if after[key] == sixth {
				toSixth++
			}
		}
	}
	// Maglev's disruption is near-minimal, not minimal: a few slots change
	// hands between the old backends too, and Changes lists them.
	t.Logf("the sixth backend: %d of %d keys moved (%d to it), exactly those in the slots Changes lists; Diff = %d of %d slots",
		moved, fleetKeys, toSixth, old.Diff(next), next.Size())

	// 3. A backend is killed, with its lease keep-alive: within the TTL
	// plus a second it is out of every proxy's membership.
	victim := members[0]
	if err := f.backends[victim].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-f.backends[victim].done
	delete(f.backends, victim)
	took = f.waitAll("the killed backend's removal", killed, fleetTTL+time.Second, func(p fleetProxy) bool { return !f.known(p, victim) })
	t.Logf("killed backend out of every proxy's membership (TTL %v): %v", fleetTTL, took)
	members = sorted(f.backends)
	f.waitAll("the table without the killed backend", killed, fleetSettle, same(members))
	f.checkOwners(members)

	// 4. A backend leaves gracefully under a steady load through every
	// proxy: no request fails.
	leaving := members[1]
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 * len(f.proxies) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				if _, err := f.get(f.proxies[i%len(f.proxies)], fmt.Sprintf("user-%d", rng.IntN(fleetKeys))); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	waitSent := func(n int64) {
		for deadline := time.Now().Add(fleetSettle); sent.Load() < n; {
			if time.Now().After(deadline) {
				t.Fatalf("load: only %d requests", sent.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitSent(500)
	lp := f.backends[leaving]
	if err := lp.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	lp.wait(t, regexp.MustCompile(`^deregistered$`))
	f.waitAll("the leaving backend's removal", time.Now(), fleetSettle, func(p fleetProxy) bool { return !f.known(p, leaving) })
	select {
	case <-lp.done:
	case <-time.After(fleetSettle):
		t.Fatal("the leaving backend did not exit")
	}
	if lp.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("the leaving backend exited with %v", lp.cmd.ProcessState)
	}
	delete(f.backends, leaving)
	waitSent(sent.Load() + 500) // the load goes on after it exited
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed during a graceful deregistration; the first: %v", failed.Load(), sent.Load(), firstErr.Load())
	}
	t.Logf("graceful deregistration under load: %d requests through 3 proxies, 0 failed", sent.Load())
	members = sorted(f.backends)
	f.checkOwners(members)

	// 5. etcd stops for a few seconds: the proxies keep routing with the
	// last set; when it is back, they watch again.
	f.etcd.Stop()
	down := time.Now()
	rounds := 0
	for time.Since(down) < 3*time.Second {
		f.checkOwners(members)
		rounds++
	}
	for _, p := range f.proxies {
		if got := f.members(p); !slices.Equal(got, members) {
			t.Fatalf("with etcd down, a proxy's table is over %v, want %v", got, members)
		}
	}
	f.etcd.Restart()
	up := time.Now()
	t.Logf("etcd down %v: %d rounds of %d keys through 3 proxies, every key to its owner over the last set",
		up.Sub(down).Round(time.Millisecond), rounds, fleetKeys)
	f.startBackend()
	registered = time.Now()
	members = sorted(f.backends)
	took = f.waitAll("a registration after etcd's restart", registered, fleetSettle, same(members))
	t.Logf("after etcd's restart: a new backend registered %v after etcd was up, in every proxy's table %v later",
		registered.Sub(up).Round(time.Millisecond), took)
	f.checkOwners(members)
}

// without returns the keys of m but k.
func without(m map[string]*proc, k string) map[string]*proc {
	out := make(map[string]*proc, len(m))
	for key, v := range m {
		if key != k {
			out[key] = v
		}
	}
	return out
}
