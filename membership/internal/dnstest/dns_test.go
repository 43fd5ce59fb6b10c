package dnstest_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/httpmaglev"
	"github.com/maglevlb/maglev/internal/servertest"
	"github.com/maglevlb/maglev/membership"
	"github.com/miekg/dns"
)

// interval is the watchers' interval in the tests: short, so that changes
// show quickly. settle bounds every wait; it is generous, since the
// machines that run the tests may be slow and loaded, and is no timing
// assertion.
const (
	interval = 20 * time.Millisecond
	settle   = 15 * time.Second
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(settle)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, settle)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startBackends starts an HTTP server on each of the given addresses
// ("127.0.0.2:0", ...), answering every request with its own address,
// stopped at the end of the test; it returns the addresses listened on.
func startBackends(t *testing.T, addrs ...string) []string {
	t.Helper()
	out := make([]string, len(addrs))
	for i, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, addr)
		})}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		out[i] = addr
	}
	return out
}

// checkOwners fails the test unless 300 keys reach, through tr, the
// backends that own them in maglev.New(names); addr maps a name to the
// address of the server it reaches.
func checkOwners(t *testing.T, tr *httpmaglev.Transport, names []string, addr func(string) string) {
	t.Helper()
	tb, err := maglev.New(names, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	for i := range 300 {
		key := fmt.Sprintf("user-%d", i)
		req, err := http.NewRequestWithContext(t.Context(), "GET", "http://backends/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("key %s: %v", key, err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("key %s: %d %v", key, resp.StatusCode, err)
		}
		if want := addr(tb.Lookup(key)); string(body) != want {
			t.Fatalf("key %s reached %s, its owner over %v is %s", key, body, names, want)
		}
	}
}

func names(eps []membership.Endpoint) string {
	s := make([]string, len(eps))
	for i, e := range eps {
		s[i] = e.Name
	}
	return strings.Join(s, " ")
}

func newTransport(t *testing.T, rt http.RoundTripper) *httpmaglev.Transport {
	t.Helper()
	tr, err := httpmaglev.NewTransport(httpmaglev.Config{Key: httpmaglev.HeaderKey("X-Key"), Base: rt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// TestWatchDNS follows the A records of a name on a real DNS server: keys
// reach their owners over IP:PORT; an added address is routed to; an
// answer with the same addresses, in any order, is the same list by
// membership.Equal and causes no call of set; failures and NXDOMAIN keep
// the last good answer; after Close, set is not called.
func TestWatchDNS(t *testing.T) {
	z := startZone(t)
	addrs := startBackends(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(addrs[0])
	addrs = append(addrs, startBackends(t, "127.0.0.2:"+port, "127.0.0.3:"+port, "127.0.0.4:"+port)...)
	a := func(ips ...string) []string {
		rrs := make([]string, len(ips))
		for i, ip := range ips {
			rrs[i] = "web.test. 1 IN A " + ip
		}
		return rrs
	}
	z.set(t, "web.test.", "A", a("127.0.0.3", "127.0.0.1", "127.0.0.2")...)

	// The first lookup fails: no such name.
	if _, err := membership.WatchDNS(t.Context(), "nothing.test.:"+port, func([]membership.Endpoint) error { return nil }, membership.DNSOptions{Resolver: z.resolver(), Interval: interval}); !errors.Is(err, membership.ErrDNS) {
		t.Fatalf("WatchDNS of a missing name: %v, want ErrDNS", err)
	}

	tr := newTransport(t, nil)
	var logs servertest.Log
	w, err := membership.WatchDNS(t.Context(), "web.test.:"+port, tr.SetEndpoints, membership.DNSOptions{Resolver: z.resolver(), Interval: interval, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	if got, want := names(w.Endpoints()), strings.Join(addrs[:3], " "); got != want {
		t.Fatalf("backends %q, want %q", got, want)
	}
	same := func(name string) string { return name }
	checkOwners(t, tr, addrs[:3], same)

	z.set(t, "web.test.", "A", a("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")...)
	waitFor(t, "the fourth address in the table", func() bool { return tr.State().Healthy == 4 })
	checkOwners(t, tr, addrs, same)

	// The same addresses in another order, then failures: no call of set,
	// and so no rebuild.
	rebuilds, sets := tr.State().Rebuilds, w.Sets()
	z.set(t, "web.test.", "A", a("127.0.0.4", "127.0.0.2", "127.0.0.3", "127.0.0.1")...)
	n, _ := w.Lookups()
	waitFor(t, "two lookups", func() bool { m, _ := w.Lookups(); return m >= n+2 })
	for _, rcode := range []int{dns.RcodeServerFailure, dns.RcodeNameError, dns.RcodeRefused} {
		z.setRcode(rcode)
		_, f := w.Lookups()
		waitFor(t, "two failed lookups", func() bool { _, g := w.Lookups(); return g >= f+2 })
		checkOwners(t, tr, addrs, same)
	}
	z.setRcode(dns.RcodeSuccess)
	z.set(t, "web.test.", "A") // no records
	_, f := w.Lookups()
	waitFor(t, "two failed lookups", func() bool { _, g := w.Lookups(); return g >= f+2 })
	if got := tr.State().Rebuilds; got != rebuilds {
		t.Errorf("%d rebuilds for answers that change no backend", got-rebuilds)
	}
	if got := w.Sets(); got != sets {
		t.Errorf("%d calls of set for answers that change no endpoint", got-sets)
	}
	if got := names(w.Endpoints()); got != strings.Join(addrs, " ") {
		t.Errorf("after failures: %q", got)
	}
	if !strings.Contains(logs.String(), "DNS lookup failed") || !strings.Contains(logs.String(), "web.test.:"+port) {
		t.Errorf("no log of the failed lookups; logs:\n%s", logs.String())
	}
	checkOwners(t, tr, addrs, same)

	// A good answer again.
	z.set(t, "web.test.", "A", a("127.0.0.2", "127.0.0.4")...)
	waitFor(t, "the answer after the failures", func() bool { return tr.State().Healthy == 2 })
	checkOwners(t, tr, []string{addrs[1], addrs[3]}, same)

	// Close waits for the lookups to stop; a second Close is harmless;
	// an answer after Close reaches no one.
	for range 2 {
		if err := w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	sets = w.Sets()
	n, _ = w.Lookups()
	z.set(t, "web.test.", "A", a("127.0.0.1")...)
	time.Sleep(10 * interval)
	if m, _ := w.Lookups(); m != n || w.Sets() != sets {
		t.Errorf("after Close: %d more lookups, %d more calls of set", m-n, w.Sets()-sets)
	}
}

// TestWatchDNSBoth: A and AAAA answers together, IPv6 names in brackets,
// one endpoint per address (an address answered twice is one), each of
// weight 1 and reached at http://IP:PORT.
func TestWatchDNSBoth(t *testing.T) {
	z := startZone(t)
	z.set(t, "both.test.", "A", "both.test. 1 IN A 192.0.2.1", "both.test. 1 IN A 192.0.2.1")
	z.set(t, "both.test.", "AAAA", "both.test. 1 IN AAAA 2001:db8::1")
	var got []membership.Endpoint
	w, err := membership.WatchDNS(t.Context(), "both.test.:8080", func(bs []membership.Endpoint) error {
		got = bs
		return nil
	}, membership.DNSOptions{Resolver: z.resolver(), Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	want := []string{"192.0.2.1:8080 192.0.2.1 8080", "[2001:db8::1]:8080 2001:db8::1 8080"}
	if len(got) != len(want) {
		t.Fatalf("endpoints %v, want %v", got, want)
	}
	for i, e := range got {
		if s := fmt.Sprintf("%s %s %d", e.Name, e.Host, e.Port); s != want[i] || e.Weight != 1 || e.Meta != nil {
			t.Errorf("endpoint %d: %s weight %d meta %v, want %s weight 1, no meta", i, s, e.Weight, e.Meta, want[i])
		}
	}
	bs, err := httpmaglev.FromEndpoints("http", got)
	if err != nil {
		t.Fatal(err)
	}
	wantURL := []string{"192.0.2.1:8080 http://192.0.2.1:8080", "[2001:db8::1]:8080 http://[2001:db8::1]:8080"}
	for i, b := range bs {
		if s := b.Name + " " + b.URL.String(); s != wantURL[i] {
			t.Errorf("backend %d: %s, want %s", i, s, wantURL[i])
		}
	}
}

// TestWatchSRV follows SRV records: the lowest priority's targets, named
// TARGET:PORT, reached through a dialer that resolves the targets. A
// record's priority and weight are the endpoint's Meta: a change of an SRV
// weight alone is a new list (membership.Equal compares Meta), passed to
// set, which builds no new table for it.
func TestWatchSRV(t *testing.T) {
	z := startZone(t)
	addrs := startBackends(t, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	port := func(i int) string { _, p, _ := net.SplitHostPort(addrs[i]); return p }
	for _, h := range []string{"a", "b", "c", "d"} {
		z.set(t, h+".test.", "A", h+".test. 1 IN A 127.0.0.1")
	}
	const name = "_http._tcp.web.test."
	srv := func(prio int, target string, i int) string {
		return fmt.Sprintf("%s 1 IN SRV %d 10 %s %s.", name, prio, port(i), target)
	}
	srvWeight := func(prio, weight int, target string, i int) string {
		return fmt.Sprintf("%s 1 IN SRV %d %d %s %s.", name, prio, weight, port(i), target)
	}
	z.set(t, name, "SRV", srv(10, "a.test", 0), srv(10, "b.test", 1), srv(20, "c.test", 2))

	r := z.resolver()
	rt := http.DefaultTransport.(*http.Transport).Clone()
	rt.DialContext = (&net.Dialer{Resolver: r}).DialContext
	tr := newTransport(t, rt)
	w, err := membership.WatchSRV(t.Context(), name, tr.SetEndpoints, membership.DNSOptions{Resolver: r, Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	nameOf := func(target string, i int) string { return target + ":" + port(i) }
	byName := map[string]string{}
	for i, h := range []string{"a.test", "b.test", "c.test", "d.test"} {
		byName[nameOf(h, i)] = addrs[i]
	}
	addr := func(name string) string { return byName[name] }
	want := []string{nameOf("a.test", 0), nameOf("b.test", 1)}
	if got := names(w.Endpoints()); got != strings.Join(want, " ") {
		t.Fatalf("backends %q, want %q (the priority-20 record is a backup)", got, strings.Join(want, " "))
	}
	checkOwners(t, tr, want, addr)
	for _, e := range w.Endpoints() {
		if e.Weight != 1 || e.Meta["priority"] != "10" || e.Meta["weight"] != "10" {
			t.Errorf("%s: weight %d, meta %v; want weight 1, priority 10 and weight 10", e.Name, e.Weight, e.Meta)
		}
	}

	z.set(t, name, "SRV", srv(10, "a.test", 0), srv(10, "b.test", 1), srv(10, "d.test", 3), srv(20, "c.test", 2))
	want = append(want, nameOf("d.test", 3))
	waitFor(t, "the new target", func() bool { return names(w.Endpoints()) == strings.Join(want, " ") })
	checkOwners(t, tr, want, addr)

	sets, rebuilds := w.Sets(), tr.State().Rebuilds
	z.set(t, name, "SRV", srv(10, "a.test", 0), srvWeight(10, 30, "b.test", 1), srv(10, "d.test", 3), srv(20, "c.test", 2))
	waitFor(t, "the new SRV weight", func() bool { return w.Endpoints()[1].Meta["weight"] == "30" })
	if n := w.Sets() - sets; n != 1 {
		t.Errorf("%d calls of set for a new SRV weight, want 1", n)
	}
	if tr.State().Rebuilds != rebuilds {
		t.Error("a new SRV weight rebuilt the table")
	}
	checkOwners(t, tr, want, addr)

	// Only backups left: they are the lowest priority now.
	z.set(t, name, "SRV", srv(20, "c.test", 2))
	waitFor(t, "the backup alone", func() bool { return names(w.Endpoints()) == nameOf("c.test", 2) })
	checkOwners(t, tr, []string{nameOf("c.test", 2)}, addr)
}

// watcherGoroutines returns how many goroutines membership.Watch (which
// WatchDNS and WatchSRV run) started are still there, started or not yet
// (a goroutine not yet run shows its go statement's wrapper, not the
// Watcher's loop). A running Watcher has two.
func watcherGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "created by github.com/maglevlb/maglev/membership.Watch in ")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// watcherGoroutinesSettle returns watcherGoroutines once it is want, or
// what it is after a second: a goroutine that closed the channel Watch
// waits for is still on its way out for a moment after Watch returns
// (long enough to be seen under the race detector).
func watcherGoroutinesSettle(want int) int {
	n := watcherGoroutines()
	for deadline := time.Now().Add(time.Second); n != want && time.Now().Before(deadline); n = watcherGoroutines() {
		time.Sleep(time.Millisecond)
	}
	return n
}

// TestWatchFirstSetFails: when set rejects the first answer, WatchDNS and
// WatchSRV return an error wrapping set's (and not ErrDNS), and leave
// nothing running.
func TestWatchFirstSetFails(t *testing.T) {
	z := startZone(t)
	z.set(t, "web.test.", "A", "web.test. 1 IN A 192.0.2.1")
	const srvName = "_http._tcp.web.test."
	z.set(t, srvName, "SRV", srvName+" 1 IN SRV 10 10 8080 web.test.")
	fail := errors.New("rejected")
	watches := []struct {
		name  string
		watch func(set func([]membership.Endpoint) error) (*membership.DNSWatcher, error)
	}{
		{"WatchDNS", func(set func([]membership.Endpoint) error) (*membership.DNSWatcher, error) {
			return membership.WatchDNS(t.Context(), "web.test.:80", set, membership.DNSOptions{Resolver: z.resolver(), Interval: interval})
		}},
		{"WatchSRV", func(set func([]membership.Endpoint) error) (*membership.DNSWatcher, error) {
			return membership.WatchSRV(t.Context(), srvName, set, membership.DNSOptions{Resolver: z.resolver(), Interval: interval})
		}},
	}
	for _, c := range watches {
		var mu sync.Mutex
		calls := 0
		before := watcherGoroutines()
		w, err := c.watch(func([]membership.Endpoint) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			return fail
		})
		if w != nil {
			_ = w.Close()
		}
		if w != nil || !errors.Is(err, fail) || errors.Is(err, membership.ErrDNS) {
			t.Errorf("%s with a set that fails returned a watcher (%t) and error %v; want none and an error wrapping %q, not ErrDNS", c.name, w != nil, err, fail)
			continue
		}
		if !strings.HasPrefix(err.Error(), "membership: ") || !strings.Contains(err.Error(), "web.test.") {
			t.Errorf("%s: error %q does not start with membership: and name the name", c.name, err)
		}
		if after := watcherGoroutinesSettle(before); after != before {
			t.Errorf("%s: %d watcher goroutines after the failed call, %d before", c.name, after, before)
		}
		mu.Lock()
		if calls != 1 {
			t.Errorf("%s: set called %d times, want 1", c.name, calls)
		}
		mu.Unlock()

		// The count sees a watcher that runs.
		w, err = c.watch(func([]membership.Endpoint) error { return nil })
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n := watcherGoroutines(); n != before+2 {
			t.Errorf("%s: %d watcher goroutines with one running, want %d", c.name, n, before+2)
		}
		_ = w.Close()
	}
}

// TestWatchDNSSetFails: a later answer that set rejects is offered again
// after a backoff (100 ms, then doubling), not at each lookup (every
// 20 ms), until set accepts it, and Endpoints keeps the last list set
// accepted meanwhile.
func TestWatchDNSSetFails(t *testing.T) {
	const rejections = 3
	z := startZone(t)
	z.set(t, "web.test.", "A", "web.test. 1 IN A 192.0.2.1")
	fail := errors.New("rejected")
	var mu sync.Mutex
	var offered []string // the names of each list set was called with
	var at []time.Time   // when
	set := func(bs []membership.Endpoint) error {
		mu.Lock()
		defer mu.Unlock()
		offered = append(offered, names(bs))
		at = append(at, time.Now())
		if n := len(offered); n > 1 && n <= 1+rejections {
			return fail
		}
		return nil
	}
	calls := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(offered)
	}
	var logs servertest.Log
	w, err := membership.WatchDNS(t.Context(), "web.test.:80", set, membership.DNSOptions{Resolver: z.resolver(), Interval: interval, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()

	z.set(t, "web.test.", "A", "web.test. 1 IN A 192.0.2.1", "web.test. 1 IN A 192.0.2.2")
	waitFor(t, "the answer rejected once", func() bool { return calls() >= 2 })
	// Endpoints first: if it has the new list, set accepted it, and calls
	// counts that call.
	if got := names(w.Endpoints()); got != "192.0.2.1:80" && calls() <= 1+rejections {
		t.Errorf("Endpoints() = %q while set rejects the new answer, want the last accepted", got)
	}
	const want = "192.0.2.1:80 192.0.2.2:80"
	waitFor(t, "the answer accepted after it was rejected", func() bool { return names(w.Endpoints()) == want })
	mu.Lock()
	got, times := slices.Clone(offered), slices.Clone(at)
	mu.Unlock()
	// The retries wait at least 100, 200 and 400 ms: timers never fire
	// early, so these are lower bounds no slow machine breaks.
	for i, wait := 0, 100*time.Millisecond; i+2 < len(times); i, wait = i+1, 2*wait {
		if gap := times[i+2].Sub(times[i+1]); gap < wait {
			t.Errorf("retry %d came %v after the call before, want at least %v", i+1, gap, wait)
		}
	}
	if len(got) != 2+rejections {
		t.Errorf("set called %d times, want %d: %q", len(got), 2+rejections, got)
	}
	for i, l := range got[1:] {
		if l != want {
			t.Errorf("call %d of set: %q, want %q", i+2, l, want)
		}
	}
	if n := strings.Count(logs.String(), "set endpoints failed"); n != rejections {
		t.Errorf("%d rejections logged, want %d; logs:\n%s", n, rejections, logs.String())
	}
}
