package httpmaglev_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/httpmaglev"
)

// keys returns n keys.
func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("user-%04d", i)
	}
	return ks
}

// TestRouting checks that with every backend healthy each of 1,000 keys
// reaches the backend the library's table names, through a client and
// through a reverse proxy, with equal weights and with weights.
func TestRouting(t *testing.T) {
	servers := startServers(t, 5)
	names := []string{"s0", "s1", "s2", "s3", "s4"}
	weighted := []maglev.Backend{{Name: "s0", Weight: 1}, {Name: "s1", Weight: 2}, {Name: "s2", Weight: 3}, {Name: "s3", Weight: 1}, {Name: "s4", Weight: 5}}
	wantEqual := table(t, names...)
	wantWeighted, err := maglev.NewWeighted(weighted, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		weights []uint32
		want    *maglev.Table
	}{
		{"equal", nil, wantEqual},
		{"weighted", []uint32{1, 2, 3, 1, 5}, wantWeighted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader)}, servers, tc.weights...)
			client := &http.Client{Transport: tr}
			proxy := httptest.NewServer(&httputil.ReverseProxy{
				Rewrite: func(pr *httputil.ProxyRequest) {
					pr.SetURL(&url.URL{Scheme: "http", Host: "backends"})
				},
				Transport:    tr,
				ErrorHandler: httpmaglev.ErrorHandler,
			})
			defer proxy.Close()
			counts := map[string]int{}
			for i, k := range keys(1000) {
				// Half through the client (the URL's host is replaced),
				// half through the proxy.
				base := "http://service.invalid"
				if i%2 == 1 {
					base = proxy.URL
				}
				status, got, err := get(t, client, base, http.MethodGet, k)
				if err != nil || status != http.StatusOK {
					t.Fatalf("key %q: %d, %v", k, status, err)
				}
				if want := tc.want.Lookup(k); got != want {
					t.Fatalf("key %q reached %s, want %s", k, got, want)
				}
				if b, ok := tr.Lookup(k); !ok || b.Name != got {
					t.Fatalf("Lookup(%q) = %v, %t; want %s", k, b, ok, got)
				}
				counts[got]++
			}
			if len(counts) != len(names) {
				t.Errorf("keys reached %d backends, want %d: %v", len(counts), len(names), counts)
			}
			st := tr.State()
			for i, b := range st.Backends {
				if want := tc.want.Counts()[tc.want.Index(b.Name)]; b.Slots != want || !b.Healthy {
					t.Errorf("state: backend %d: %+v, want %d slots, healthy", i, b, want)
				}
			}
		})
	}
}

// TestKeylessByClientIP checks that a request whose Key is empty is keyed
// by its client IP, and with TrustForwardedFor by X-Forwarded-For's first
// address.
func TestKeylessByClientIP(t *testing.T) {
	servers := startServers(t, 3)
	want := table(t, "s0", "s1", "s2")
	for _, trust := range []bool{false, true} {
		tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), TrustForwardedFor: trust}, servers)
		for _, ip := range []string{"192.0.2.1", "192.0.2.2", "198.51.100.7", "2001:db8::1"} {
			req := httptest.NewRequest(http.MethodGet, "http://proxy.example/x", nil)
			req.RequestURI = ""
			req.RemoteAddr = "203.0.113.9:5555"
			var wantKey string
			if trust {
				req.Header.Set("X-Forwarded-For", ip+", 10.0.0.1")
				wantKey = ip
			} else {
				req.RemoteAddr = bracket(ip) + ":4444"
				wantKey = ip
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if got := resp.Header.Get("X-Backend"); got != want.Lookup(wantKey) {
				t.Errorf("trust %t, client %s: reached %s, want %s", trust, ip, got, want.Lookup(wantKey))
			}
		}
	}
}

// bracket returns ip as RemoteAddr writes it: IPv6 in brackets.
func bracket(ip string) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]"
	}
	return ip
}

// TestMembership checks that SetBackends moves exactly the keys whose
// owner differs between the tables before and after, and reports the
// churn the library's Diff and Changes compute.
func TestMembership(t *testing.T) {
	servers := startServers(t, 6)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader)}, servers[:5])
	client := &http.Client{Transport: tr}
	steps := []struct {
		name    string
		servers []*server
	}{
		{"add s5", servers},
		{"remove s2", []*server{servers[0], servers[1], servers[3], servers[4], servers[5]}},
		{"remove s0 and s5", []*server{servers[1], servers[3], servers[4]}},
	}
	before := table(t, "s0", "s1", "s2", "s3", "s4")
	ks := keys(500)
	at := func(t *testing.T) map[string]string {
		m := map[string]string{}
		for _, k := range ks {
			status, got, err := get(t, client, "http://x", http.MethodGet, k)
			if err != nil || status != http.StatusOK {
				t.Fatalf("key %q: %d, %v", k, status, err)
			}
			m[k] = got
		}
		return m
	}
	was := at(t)
	for _, step := range steps {
		if err := tr.SetBackends(backendsOf(step.servers)); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		var names []string
		for _, s := range step.servers {
			names = append(names, s.name)
		}
		after := table(t, names...)
		changed := map[int]bool{}
		for slot := range before.Changes(after) {
			changed[slot] = true
		}
		now := at(t)
		moved := 0
		for _, k := range ks {
			slot := int(after.Hasher().HashString(k) % uint64(after.Size()))
			if (now[k] != was[k]) != changed[slot] {
				t.Errorf("%s: key %q moved %s → %s, but its slot %d changed owner: %t", step.name, k, was[k], now[k], slot, changed[slot])
			}
			if now[k] != after.Lookup(k) {
				t.Errorf("%s: key %q reached %s, want %s", step.name, k, now[k], after.Lookup(k))
			}
			if now[k] != was[k] {
				moved++
			}
		}
		st := tr.State()
		if st.LastChurn.Slots != before.Diff(after) || len(changed) != before.Diff(after) {
			t.Errorf("%s: churn %d slots, Changes %d; want Diff %d", step.name, st.LastChurn.Slots, len(changed), before.Diff(after))
		}
		if moved == 0 {
			t.Errorf("%s: no key moved", step.name)
		}
		before, was = after, now
	}
	if st := tr.State(); st.Rebuilds != int64(len(steps)) {
		t.Errorf("%d rebuilds, want %d", st.Rebuilds, len(steps))
	}
}

// TestNewTableHook builds the table with a hook (maglev.New over FarmHash
// Fingerprint64): keys go where that table says, hashed with its Hasher.
func TestNewTableHook(t *testing.T) {
	servers := startServers(t, 4)
	var calls atomic.Int64 // the hook runs on several goroutines
	hook := func(backends []maglev.Backend, size int) (*maglev.Table, error) {
		calls.Add(1)
		names := make([]string, len(backends))
		for i, b := range backends {
			names[i] = b.Name
		}
		return maglev.New(names, size, maglev.Farm())
	}
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), NewTable: hook, TableSize: 4099}, servers)
	if n := calls.Load(); n != 1 { // the table; the tables a retry needs come later
		t.Errorf("NewTable called %d times, want 1", n)
	}
	want, err := maglev.New([]string{"s0", "s1", "s2", "s3"}, 4099, maglev.Farm())
	if err != nil {
		t.Fatal(err)
	}
	xxh3, err := maglev.New([]string{"s0", "s1", "s2", "s3"}, 4099, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	differ := 0
	for _, k := range keys(300) {
		_, got, err := get(t, client, "http://x", http.MethodGet, k)
		if err != nil {
			t.Fatal(err)
		}
		if got != want.Lookup(k) {
			t.Fatalf("key %q reached %s, want %s (the hook's table)", k, got, want.Lookup(k))
		}
		if got != xxh3.Lookup(k) {
			differ++
		}
	}
	if differ == 0 {
		t.Error("every key reached its XXH3 owner: the hook's hasher is not in use")
	}

	// A hook that fails, or builds the wrong table, is an ErrTable.
	for name, bad := range map[string]func([]maglev.Backend, int) (*maglev.Table, error){
		"fails": func([]maglev.Backend, int) (*maglev.Table, error) { return nil, fmt.Errorf("no") },
		"nil":   func([]maglev.Backend, int) (*maglev.Table, error) { return nil, nil },
		"wrong name": func([]maglev.Backend, int) (*maglev.Table, error) {
			return maglev.New([]string{"a", "b", "c", "d"}, 7, nil)
		},
	} {
		_, err := httpmaglev.NewTransport(httpmaglev.Config{Backends: backendsOf(servers), NewTable: bad})
		if !errors.Is(err, httpmaglev.ErrTable) || !errors.Is(err, httpmaglev.ErrInvalidBackends) {
			t.Errorf("hook that %s: %v, want ErrInvalidBackends and ErrTable", name, err)
		}
	}
}

// TestRequestNotModified checks that RoundTrip leaves the caller's request
// as it was.
func TestRequestNotModified(t *testing.T) {
	servers := startServers(t, 2)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader)}, servers)
	req, err := http.NewRequest(http.MethodGet, "http://service.invalid/a?b=c", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(keyHeader, "alice")
	url0, host0, header0 := *req.URL, req.Host, req.Header.Clone()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if *req.URL != url0 || req.Host != host0 || len(req.Header) != len(header0) || req.Header.Get(keyHeader) != "alice" {
		t.Errorf("request changed: %v %q %v; was %v %q %v", req.URL, req.Host, req.Header, &url0, host0, header0)
	}
	if resp.Request == req || resp.Request.URL.Host == "service.invalid" {
		t.Errorf("response's request is the caller's, or not addressed to a backend: %v", resp.Request.URL)
	}
	// A request without a URL is an error, not a panic.
	if _, err := tr.RoundTrip(&http.Request{Method: http.MethodGet, Header: http.Header{}}); err == nil || !strings.HasPrefix(err.Error(), "httpmaglev: ") {
		t.Errorf("RoundTrip of a request without a URL: %v, want an httpmaglev error", err)
	}
}

// TestSetBackendsUnchanged: a list equal to the membership, in any order,
// publishes nothing; a changed weight rebuilds.
func TestSetBackendsUnchanged(t *testing.T) {
	servers := startServers(t, 3)
	tr := newTransport(t, httpmaglev.Config{}, servers)
	before := tr.State()
	bs := backendsOf(servers)
	slices.Reverse(bs)
	if err := tr.SetBackends(bs); err != nil {
		t.Fatal(err)
	}
	if st := tr.State(); st.Rebuilds != before.Rebuilds || !st.LastRebuild.Equal(before.LastRebuild) {
		t.Errorf("the same backends: rebuilds %d → %d, built %v → %v; want no rebuild", before.Rebuilds, st.Rebuilds, before.LastRebuild, st.LastRebuild)
	}
	if err := tr.SetBackends(backendsOf(servers, 1, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if st := tr.State(); st.Rebuilds != before.Rebuilds+1 {
		t.Errorf("a changed weight: rebuilds %d → %d, want one more", before.Rebuilds, st.Rebuilds)
	}
}

// TestDrain: weight 0 drains a backend: it leaves the table (no new key
// goes to it, and the rest is the table without it), is still listed and
// checked, and its requests in flight finish. A backend given no weight
// weighs 1; one given 0 is drained even when every other is given none,
// and a list whose every weight is 0 routes to nothing.
func TestDrain(t *testing.T) {
	servers := startServers(t, 3)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), HealthPath: "/healthz"}, servers, 1, 1, 1)
	client := &http.Client{Transport: tr}
	s2 := servers[2]
	s2.gate = make(chan struct{})
	var onS2 string
	for _, k := range keys(100) {
		if table(t, "s0", "s1", "s2").Lookup(k) == "s2" {
			onS2 = k
			break
		}
	}
	done := make(chan error, 1)
	go func() {
		_, got, err := get(t, client, "http://x", http.MethodGet, onS2)
		if err == nil && got != "s2" {
			err = fmt.Errorf("the request in flight was answered by %s", got)
		}
		done <- err
	}()
	waitFor(t, "a request in flight on s2", func() bool { return s2.inflight.Load() == 1 })
	if err := tr.SetBackends(backendsOf(servers, 1, 1, 0)); err != nil {
		t.Fatal(err)
	}
	close(s2.gate)
	if err := <-done; err != nil {
		t.Errorf("the request in flight on the drained backend: %v", err)
	}
	without := table(t, "s0", "s1")
	for _, k := range keys(300) {
		if _, got, err := get(t, client, "http://x", http.MethodGet, k); err != nil || got != without.Lookup(k) {
			t.Fatalf("key %q after draining s2: from %s, %v; want %s", k, got, err, without.Lookup(k))
		}
	}
	st := tr.State()
	if len(st.Backends) != 3 || !st.Backends[2].Drained || st.Backends[2].Healthy || st.Backends[2].Slots != 0 || st.Healthy != 2 {
		t.Errorf("state after draining s2: %+v", st.Backends)
	}
	// No weights given: s2 is back, all equal, each reported at weight 1.
	if err := tr.SetBackends(backendsOf(servers)); err != nil {
		t.Fatal(err)
	}
	if st := tr.State(); st.Healthy != 3 || st.Backends[2].Drained || st.Backends[2].Weight != 1 {
		t.Errorf("an unweighted list: %d healthy, %+v", st.Healthy, st.Backends[2])
	}
	if tr.Table().Diff(table(t, "s0", "s1", "s2")) != 0 {
		t.Error("an unweighted list: the table is not maglev.New's")
	}
	// Weight 0 given to s2 alone, the others given none: s2 drained.
	bs := backendsOf(servers)
	bs[2].Weight = new(uint32(0))
	if err := tr.SetBackends(bs); err != nil {
		t.Fatal(err)
	}
	if st := tr.State(); st.Healthy != 2 || !st.Backends[2].Drained || st.Backends[2].Weight != 0 || tr.Table().Diff(without) != 0 {
		t.Errorf("s2 given weight 0 among unweighted backends: %d healthy, %+v", st.Healthy, st.Backends[2])
	}
	// Every weight 0: every backend drained, still listed, and no key
	// routed (where a list of only zeros was once read as unweighted).
	if err := tr.SetBackends(backendsOf(servers, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	st = tr.State()
	if st.Healthy != 0 || len(st.Backends) != 3 || tr.Table().NumBackends() != 0 {
		t.Errorf("every weight 0: %d healthy, %d listed, a table of %d backends; want 0, 3, 0", st.Healthy, len(st.Backends), tr.Table().NumBackends())
	}
	for _, b := range st.Backends {
		if !b.Drained || b.Weight != 0 || b.Status != httpmaglev.StatusDraining {
			t.Errorf("every weight 0: %+v, want drained", b)
		}
	}
	if _, got, err := get(t, client, "http://x", http.MethodGet, "k"); !errors.Is(err, httpmaglev.ErrNoHealthyBackend) {
		t.Errorf("every weight 0: a request answered by %q, %v; want ErrNoHealthyBackend", got, err)
	}
}

// TestTransportTable: Table is the table the Transport routes by, and
// changes with the membership.
func TestTransportTable(t *testing.T) {
	servers := startServers(t, 3)
	tr := newTransport(t, httpmaglev.Config{}, servers)
	tab := tr.Table()
	if want := table(t, "s0", "s1", "s2"); tab.Diff(want) != 0 || !slices.Equal(tab.Backends(), want.Backends()) {
		t.Fatalf("Table() is not the table over s0..s2")
	}
	if err := tr.SetBackends(backendsOf(servers[:2])); err != nil {
		t.Fatal(err)
	}
	if want := table(t, "s0", "s1"); tr.Table().Diff(want) != 0 || tr.Table().NumBackends() != 2 || tab.NumBackends() != 3 {
		t.Errorf("after SetBackends: Table() has %d backends, the old one %d", tr.Table().NumBackends(), tab.NumBackends())
	}
}
