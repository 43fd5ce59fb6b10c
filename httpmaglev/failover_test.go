package httpmaglev_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/httpmaglev"
	"github.com/maglevlb/maglev/internal/servertest"
)

// TestRetryTarget kills a backend that nothing has noticed yet (no active
// checks, no ejection): an idempotent request for one of its keys is
// retried on the key's owner in the table without it (Table.Without),
// which is where the key goes once the backend is ejected
// (TestEjectionMovesOnlyItsKeys); a POST is not retried.
func TestRetryTarget(t *testing.T) {
	servers := startServers(t, 4)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectAfter: -1}, servers)
	client := &http.Client{Transport: tr}
	all := table(t, "s0", "s1", "s2", "s3")
	without := tableWithout(t, all, "s1")
	servers[1].srv.Close()
	var onS1 []string
	for _, k := range keys(400) {
		if all.Lookup(k) == "s1" {
			onS1 = append(onS1, k)
		}
	}
	if len(onS1) < 50 {
		t.Fatalf("only %d keys on s1", len(onS1))
	}
	for i, k := range onS1 {
		method := []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions}[i%5]
		status, got, err := get(t, client, "http://x", method, k)
		if err != nil || status != http.StatusOK || got != without.Lookup(k) {
			t.Fatalf("%s key %q on dead s1: %d from %s, %v; want 200 from %s", method, k, status, got, err, without.Lookup(k))
		}
	}
	if st := tr.State(); st.Retries != int64(len(onS1)) {
		t.Errorf("%d retries, want %d", st.Retries, len(onS1))
	}
	// Not idempotent: one attempt, a BackendError naming s1.
	k := onS1[0]
	_, _, err := get(t, client, "http://x", http.MethodPost, k, "X-Request-Id", "post-1")
	var be *httpmaglev.BackendError
	if !errors.As(err, &be) || be.Backend != "s1" || !strings.HasPrefix(be.Error(), "httpmaglev: backend s1: ") {
		t.Errorf("POST on dead s1: %v, want a BackendError for s1", err)
	}
	for _, s := range servers {
		if n := s.count("post-1"); n != 0 {
			t.Errorf("POST reached %s %d times, want never", s.name, n)
		}
	}
	// With an Idempotency-Key, a POST's body is buffered and replayed.
	req, _ := http.NewRequest(http.MethodPost, "http://x/item", strings.NewReader("hello, maglev"))
	req.Header.Set(keyHeader, k)
	req.Header.Set("Idempotency-Key", "42")
	req.GetBody = nil // as a server's incoming request has it
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if want := without.Lookup(k) + " POST 13"; body != want {
		t.Errorf("POST with Idempotency-Key on dead s1: %q, want %q", body, want)
	}

	// Dropping s1 from the membership is not a failure: the table is then
	// built over the others, as for any membership change.
	if err := tr.SetBackends(backendsOf([]*server{servers[0], servers[2], servers[3]})); err != nil {
		t.Fatal(err)
	}
	rest := table(t, "s0", "s2", "s3")
	for _, k := range keys(400) {
		if b, _ := tr.Lookup(k); b.Name != rest.Lookup(k) {
			t.Errorf("after dropping s1: key %q on %s, want %s", k, b.Name, rest.Lookup(k))
		}
	}
}

// TestRetryBodyLimit checks that a body over MaxRetryBody is sent once,
// whole, and not retried.
func TestRetryBodyLimit(t *testing.T) {
	servers := startServers(t, 2)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectAfter: -1, MaxRetryBody: 8}, servers)
	all := table(t, "s0", "s1")
	var k string
	for _, c := range keys(100) {
		if all.Lookup(c) == "s0" {
			k = c
			break
		}
	}
	for _, tc := range []struct {
		body  string
		chunk bool // unknown length
		want  bool // retried
	}{{"12345678", false, true}, {"12345678", true, true}, {"123456789", false, false}, {"123456789", true, false}} {
		servers[0].srv.Close()
		req := httptest.NewRequest(http.MethodPut, "http://x/item", strings.NewReader(tc.body))
		req.RequestURI = ""
		req.Header.Set(keyHeader, k)
		if tc.chunk {
			req.ContentLength = -1
		}
		resp, err := tr.RoundTrip(req)
		if tc.want {
			if err != nil || readAll(t, resp) != fmt.Sprintf("s1 PUT %d", len(tc.body)) {
				t.Errorf("PUT of %d bytes (chunked %t): %v, want a retry on s1", len(tc.body), tc.chunk, err)
			}
		} else if err == nil {
			t.Errorf("PUT of %d bytes (chunked %t) retried, want not", len(tc.body), tc.chunk)
		}
	}
}

// TestKilledUnderLoad kills a backend while clients send requests through
// a reverse proxy: every idempotent request is answered 200, and no
// non-idempotent request reaches a backend twice (counted at the
// servers). Passive ejection then drops the backend.
func TestKilledUnderLoad(t *testing.T) {
	servers := startServers(t, 4)
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectAfter: 3, EjectionTime: time.Hour}, servers)
	var proxyErrs sync.Map // request id → the transport's error, for the failure's message
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(&url.URL{Scheme: "http", Host: "backends"}) },
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			proxyErrs.Store(r.Header.Get("X-Request-Id"), err)
			httpmaglev.ErrorHandler(w, r, err)
		},
	})
	defer proxy.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()

	const clients, perClient = 8, 90
	var sent atomic.Int64
	var killed sync.Once
	var mu sync.Mutex
	var failures []string
	posts := map[string]int{} // request id → status
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				if sent.Add(1) == clients*perClient/3 {
					go killed.Do(servers[2].srv.Close) // Close waits for its requests
				}
				k := fmt.Sprintf("user-%d", (c*perClient+i)%300)
				method := http.MethodGet
				id := fmt.Sprintf("req-%d-%d", c, i)
				if i%3 == 0 {
					method = http.MethodPost
				}
				status, _, err := get(t, client, proxy.URL, method, k, "X-Request-Id", id)
				mu.Lock()
				switch {
				case method == http.MethodPost:
					posts[id] = status
				case err != nil || status != http.StatusOK:
					perr, _ := proxyErrs.Load(id)
					failures = append(failures, fmt.Sprintf("GET %s: %d %v (the transport: %v)", k, status, err, perr))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Errorf("%d GETs failed, want none; first: %s", len(failures), failures[0])
	}
	failedPosts := 0
	for id, status := range posts {
		n := 0
		for _, s := range servers {
			n += s.count(id)
		}
		if n > 1 {
			t.Errorf("POST %s reached the backends %d times, want at most once", id, n)
		}
		if status == http.StatusOK && n != 1 {
			t.Errorf("POST %s answered 200 but reached the backends %d times", id, n)
		}
		if status != http.StatusOK {
			failedPosts++
		}
	}
	waitFor(t, "s2 ejected", func() bool { return !slices.Contains(healthyNames(tr), "s2") })
	st := tr.State()
	for _, b := range st.Backends {
		if b.Name == "s2" && (!b.Ejected || b.Healthy) {
			t.Errorf("s2 after its death: %+v, want ejected", b)
		}
	}
	t.Logf("%d requests, %d retried, %d POSTs got 502", clients*perClient, st.Retries, failedPosts)
	if st.Retries == 0 {
		t.Error("no request was retried: s2 died with nothing on its way to it?")
	}
}

// TestActiveHealth checks that a backend failing Fall checks leaves the
// table, comes back after Rise passes, and that with none healthy a proxy
// answers 503.
func TestActiveHealth(t *testing.T) {
	servers := startServers(t, 3)
	tr := newTransport(t, httpmaglev.Config{
		Key:        httpmaglev.HeaderKey(keyHeader),
		HealthPath: "/healthz",
		// Probes get the whole interval: on a loaded machine a short
		// timeout would fail healthy backends.
		HealthInterval: 200 * time.Millisecond,
		HealthTimeout:  200 * time.Millisecond,
		Fall:           2,
		Rise:           3,
	}, servers)
	three := table(t, "s0", "s1", "s2")
	two := tableWithout(t, three, "s1") // a failure: only s1's keys move
	servers[1].down.Store(true)
	waitFor(t, "s1 dropped", func() bool { return slices.Equal(healthyNames(tr), []string{"s0", "s2"}) })
	client := &http.Client{Transport: tr}
	for _, k := range keys(100) {
		if _, got, err := get(t, client, "http://x", http.MethodGet, k); err != nil || got != two.Lookup(k) {
			t.Fatalf("s1 down: key %q reached %s (%v), want %s", k, got, err, two.Lookup(k))
		}
	}
	servers[1].down.Store(false)
	waitFor(t, "s1 back", func() bool { return len(healthyNames(tr)) == 3 })
	for _, k := range keys(100) {
		if b, _ := tr.Lookup(k); b.Name != three.Lookup(k) {
			t.Fatalf("s1 back: key %q on %s, want %s", k, b.Name, three.Lookup(k))
		}
	}

	// None healthy: ErrNoHealthyBackend, and 503 through a proxy.
	for _, s := range servers {
		s.down.Store(true)
	}
	waitFor(t, "all dropped", func() bool { return len(healthyNames(tr)) == 0 })
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:      func(pr *httputil.ProxyRequest) { pr.SetURL(&url.URL{Scheme: "http", Host: "backends"}) },
		Transport:    tr,
		ErrorHandler: httpmaglev.ErrorHandler,
	})
	defer proxy.Close()
	resp, err := http.Get(proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusServiceUnavailable || body != "no healthy backend\n" || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("proxy with none healthy: %d %q, want 503 %q", resp.StatusCode, body, "no healthy backend\n")
	}
	if _, _, err := get(t, client, "http://x", http.MethodGet, "k"); !errors.Is(err, httpmaglev.ErrNoHealthyBackend) {
		t.Errorf("client with none healthy: %v, want ErrNoHealthyBackend", err)
	}
}

// TestPassiveEjection checks that EjectAfter consecutive failures eject a
// backend, and that it is readmitted: with active checks off after
// EjectionTime, with them on (its health path still passing) after Rise
// passed checks.
func TestPassiveEjection(t *testing.T) {
	for _, active := range []bool{false, true} {
		t.Run(fmt.Sprintf("active=%t", active), func(t *testing.T) {
			servers := startServers(t, 3)
			logs := new(servertest.Log)
			cfg := httpmaglev.Config{
				Key:            httpmaglev.HeaderKey(keyHeader),
				EjectAfter:     2,
				EjectionTime:   50 * time.Millisecond,
				HealthInterval: 100 * time.Millisecond,
				HealthTimeout:  100 * time.Millisecond,
				DisableRetries: true,
				Logger:         slog.New(slog.NewTextHandler(logs, nil)),
			}
			if active {
				cfg.HealthPath = "/healthz"
				cfg.EjectionTime = time.Hour
			}
			tr := newTransport(t, cfg, servers)
			var onS0 []string
			for _, k := range keys(200) {
				if b, _ := tr.Lookup(k); b.Name == "s0" {
					onS0 = append(onS0, k)
				}
			}
			client := &http.Client{Transport: tr}
			servers[0].broken.Store(true) // drops requests, answers /healthz
			for _, k := range onS0[:2] {
				if _, _, err := get(t, client, "http://x", http.MethodGet, k); err == nil {
					t.Fatalf("GET to the broken backend succeeded")
				}
			}
			// The ejection's rebuild, then the readmission's (polling
			// for the moment s0 is out could miss it on a busy machine).
			waitFor(t, "s0 ejected", func() bool { return tr.State().Rebuilds >= 1 })
			if !strings.Contains(logs.String(), `msg="httpmaglev: backend ejected" backend=s0 failures=2`) {
				t.Errorf("log lacks s0's ejection:\n%s", logs)
			}
			servers[0].broken.Store(false)
			waitFor(t, "s0 readmitted", func() bool { return tr.State().Rebuilds >= 2 && len(healthyNames(tr)) == 3 })
			if !strings.Contains(logs.String(), `msg="httpmaglev: ejected backend readmitted" backend=s0`) {
				t.Errorf("log lacks s0's readmission:\n%s", logs)
			}
			if _, got, err := get(t, client, "http://x", http.MethodGet, onS0[0]); err != nil || got != "s0" {
				t.Errorf("after readmission: key %q reached %s, %v; want s0", onS0[0], got, err)
			}
		})
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRetryThenEjection: failures never build a table. Retries away from a
// failing backend, 30 at once, go to the owner of their key in the table
// without it (Table.Without); its ejection then publishes that table, so
// the keys stay where the retries sent them. A retry away from a second
// backend, with the first ejected, goes to the table without both.
func TestRetryThenEjection(t *testing.T) {
	servers := startServers(t, 4)
	var calls atomic.Int64
	hook := func(backends []maglev.Backend, size int) (*maglev.Table, error) {
		calls.Add(1)
		return maglev.NewWeighted(backends, size, nil)
	}
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), NewTable: hook, EjectAfter: 40, EjectionTime: time.Hour}, servers)
	if n := calls.Load(); n != 1 {
		t.Fatalf("NewTransport built %d tables, want 1", n)
	}
	all := table(t, "s0", "s1", "s2", "s3")
	without := tableWithout(t, all, "s1")
	servers[1].broken.Store(true)
	var onS1, onS2 []string
	for _, k := range keys(400) {
		switch all.Lookup(k) {
		case "s1":
			onS1 = append(onS1, k)
		case "s2":
			onS2 = append(onS2, k)
		}
	}
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for _, k := range onS1[:30] { // fewer than EjectAfter, all at once
		wg.Go(func() {
			_, got, err := get(t, client, "http://x", http.MethodGet, k)
			if err != nil || got != without.Lookup(k) {
				t.Errorf("key %q on broken s1: from %q, %v; want %s", k, got, err, without.Lookup(k))
			}
		})
	}
	wg.Wait()
	// Ten more failures eject s1.
	for _, k := range onS1[30:40] {
		if _, _, err := get(t, client, "http://x", http.MethodGet, k); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "s1 out of the table", func() bool { return tr.State().Healthy == 3 })
	if n := calls.Load(); n != 1 {
		t.Errorf("%d tables built after retries and an ejection, want 1: failures take backends out with Without", n)
	}
	for _, k := range onS1 {
		if b, _ := tr.Lookup(k); b.Name != without.Lookup(k) {
			t.Errorf("after s1's ejection: key %q on %s, want %s", k, b.Name, without.Lookup(k))
		}
	}
	// s2 fails too: its keys are retried on the table without s1 and s2.
	both := tableWithout(t, without, "s2")
	servers[2].broken.Store(true)
	for _, k := range onS2[:10] {
		if _, got, err := get(t, client, "http://x", http.MethodGet, k); err != nil || got != both.Lookup(k) {
			t.Errorf("key %q on broken s2, s1 ejected: from %q, %v; want %s", k, got, err, both.Lookup(k))
		}
	}
}

// TestRetryManyFailing: with 17 of 20 backends failing one after another
// under one table, each retry goes to the owner of its key in the table
// without the backend that failed, and nothing is built: there is no cap
// and no second rule.
func TestRetryManyFailing(t *testing.T) {
	servers := startServers(t, 20)
	var calls atomic.Int64
	hook := func(backends []maglev.Backend, size int) (*maglev.Table, error) {
		calls.Add(1)
		return maglev.NewWeighted(backends, size, nil)
	}
	tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), NewTable: hook, EjectAfter: -1}, servers)
	client := &http.Client{Transport: tr}
	tab := tr.Table()
	for i, s := range servers[:17] {
		var k string
		for _, key := range keys(2000) {
			if tab.Lookup(key) == s.name {
				k = key
				break
			}
		}
		want := tableWithout(t, tab, s.name).Lookup(k)
		s.broken.Store(true)
		_, got, err := get(t, client, "http://x", http.MethodGet, k)
		s.broken.Store(false)
		if err != nil || got != want {
			t.Fatalf("backend %d of 17 failing: key %q retried on %q, %v; want %s", i+1, k, got, err, want)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d tables built, want 1: the table, and none for retries", n)
	}
}

// TestEjectionMovesOnlyItsKeys: an ejection moves exactly the ejected
// backend's keys, and its readmission moves exactly those back. Over 20,000
// keys, each key the victim did not own keeps its backend, each it owned
// goes to its owner in the table without it (Table.Without), and the churn
// is the victim's slots, no more; once it is readmitted every key is where
// it was, and the table is the first one again. Equal weights and weights;
// a sample of the keys is sent through HTTP to check that the servers that
// answer are those.
func TestEjectionMovesOnlyItsKeys(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights []uint32
	}{{"equal", nil}, {"weighted", []uint32{1, 2, 3, 1, 5}}} {
		t.Run(tc.name, func(t *testing.T) {
			servers := startServers(t, 5)
			// The victim is ejected by requests, and kept out by its failed
			// checks until they pass again: no timing in the test.
			tr := newTransport(t, httpmaglev.Config{Key: httpmaglev.HeaderKey(keyHeader), EjectAfter: 2, DisableRetries: true,
				HealthPath: "/healthz", HealthInterval: 50 * time.Millisecond, HealthTimeout: 50 * time.Millisecond}, servers, tc.weights...)
			base := tr.Table()
			ks := keys(20000)
			owners := func() map[string]string {
				m := make(map[string]string, len(ks))
				for _, k := range ks {
					b, _ := tr.Lookup(k)
					m[k] = b.Name
				}
				return m
			}
			before := owners()
			victim := servers[2]
			moved := tableWithout(t, base, victim.name)
			var onVictim []string
			for _, k := range ks {
				if before[k] == victim.name {
					onVictim = append(onVictim, k)
				}
			}
			if len(onVictim) < 1000 {
				t.Fatalf("only %d of %d keys on %s", len(onVictim), len(ks), victim.name)
			}
			victim.down.Store(true)
			victim.broken.Store(true)
			client := &http.Client{Transport: tr}
			for _, k := range onVictim[:2] {
				if _, _, err := get(t, client, "http://x", http.MethodGet, k); err == nil {
					t.Fatal("a GET to the broken backend succeeded")
				}
			}
			waitFor(t, victim.name+" out", func() bool { return tr.State().Healthy == 4 })
			after := owners()
			for _, k := range ks {
				want := before[k]
				if want == victim.name {
					want = moved.Lookup(k)
				}
				if after[k] != want {
					t.Fatalf("key %q: on %s before, %s after %s's ejection; want %s", k, before[k], after[k], victim.name, want)
				}
			}
			slots := base.Counts()[base.Index(victim.name)]
			if st := tr.State(); st.LastChurn.Slots != slots || tr.Table().Diff(base) != slots {
				t.Errorf("ejection moved %d slots (Diff %d), want %s's %d", st.LastChurn.Slots, tr.Table().Diff(base), victim.name, slots)
			}
			for i, k := range ks[:200] {
				if _, got, err := get(t, client, "http://x", http.MethodGet, k); err != nil || got != after[k] {
					t.Fatalf("GET %d, key %q: from %s, %v; want %s", i, k, got, err, after[k])
				}
			}

			victim.broken.Store(false)
			victim.down.Store(false)
			waitFor(t, victim.name+" back", func() bool { return tr.State().Healthy == 5 })
			if back := owners(); !maps.Equal(back, before) {
				t.Errorf("after %s's readmission keys are not where they were", victim.name)
			}
			if d := tr.Table().Diff(base); d != 0 {
				t.Errorf("after %s's readmission the table differs from the first in %d slots", victim.name, d)
			}
		})
	}
}
