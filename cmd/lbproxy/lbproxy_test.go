package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/httpmaglev"
	"github.com/maglevlb/maglev/internal/servertest"
)

// The end-to-end test runs the proxy in front of real backends on
// 127.0.0.1, with health rounds testInterval apart: a few hundred requests
// and about a second in all.
const (
	testInterval = 100 * time.Millisecond
	testKeys     = 150
	keyHeader    = "X-Session-Id"
)

// harness is a proxy in front of backends b0, b1, ..., each a demoBackend
// on its own httptest server.
type harness struct {
	t        *testing.T
	p        *proxy
	backends []*demoBackend
	servers  []*httptest.Server
	front    *httptest.Server // the proxy
	admin    *httptest.Server // its admin handler
	client   *http.Client
	log      *servertest.Log
}

func newHarness(t *testing.T, n int, change func(*config)) *harness {
	t.Helper()
	h := &harness{t: t, log: new(servertest.Log)}
	var specs []string
	for i := range n {
		d := &demoBackend{id: fmt.Sprintf("b%d", i), healthPath: "/healthz"}
		srv := httptest.NewServer(d)
		t.Cleanup(srv.Close)
		h.backends = append(h.backends, d)
		h.servers = append(h.servers, srv)
		specs = append(specs, d.id+"="+srv.URL)
	}
	cfg := config{
		Backends: specs,
		Key:      "header:" + keyHeader,
		HTTP: httpmaglev.Config{
			HealthPath:     "/healthz",
			HealthInterval: testInterval,
			HealthTimeout:  testInterval,
			Fall:           2,
			Rise:           2,
			TableSize:      maglev.DefaultSize,
			EjectAfter:     3,
		},
	}
	if change != nil {
		change(&cfg)
	}
	p, err := newProxy(cfg, log.New(h.log, "", log.Lmicroseconds))
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	t.Cleanup(p.close)
	h.front = httptest.NewServer(p)
	t.Cleanup(h.front.Close)
	h.admin = httptest.NewServer(p.adminHandler())
	t.Cleanup(h.admin.Close)
	h.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(h.client.CloseIdleConnections)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("proxy log:\n%s", h.log)
		}
	})
	return h
}

// do sends a request for key ("" for none) through the proxy and returns
// the status, the backend that answered and the body.
func (h *harness) do(method, key, body string, header ...string) (status int, backend, text string) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.front.URL+"/path", strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(keyHeader, key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s key %q: %v", method, key, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("%s key %q: reading body: %v", method, key, err)
	}
	return resp.StatusCode, resp.Header.Get("X-Backend"), string(b)
}

// get sends a GET for key and fails the test unless it succeeds.
func (h *harness) get(key string) string {
	h.t.Helper()
	status, backend, text := h.do(http.MethodGet, key, "")
	if status != http.StatusOK {
		h.t.Fatalf("GET key %q: %d %q, want 200", key, status, text)
	}
	return backend
}

// waitTable waits until the proxy's table has want's backends, and checks
// that it is want, slot for slot, through the slot counts the proxy
// reports. It returns the proxy's state.
// waitChange is waitTable for a change the health checker must act on
// within rounds health rounds: before the change it had started r0 rounds
// (State.HealthRounds), so the table must have been built by round
// r0+rounds. It counts rounds, not time, so a slow machine cannot fail it.
func (h *harness) waitChange(want *maglev.Table, r0, rounds int64) debugState {
	h.t.Helper()
	st := h.waitTable(want)
	if st.RebuildRound > r0+rounds {
		h.t.Errorf("table over %v built in health round %d, want by round %d", serving(want), st.RebuildRound, r0+rounds)
	}
	return st
}

func (h *harness) waitTable(want *maglev.Table) debugState {
	h.t.Helper()
	deadline := time.Now().Add(40 * testInterval)
	for {
		st := h.p.state()
		var healthy []string
		for _, b := range st.Backends {
			if b.Healthy {
				healthy = append(healthy, b.Name)
			}
		}
		if slices.Equal(healthy, serving(want)) {
			for _, b := range st.Backends {
				if i := want.Index(b.Name); i >= 0 && b.Slots != want.Counts()[i] {
					h.t.Fatalf("table over %v: %s owns %d slots, an independent build %d", healthy, b.Name, b.Slots, want.Counts()[i])
				}
			}
			return st
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("table still over %v after %v, want %v", healthy, 40*testInterval, serving(want))
		}
		time.Sleep(testInterval / 20)
	}
}

// wireState is /debug/maglev's JSON, spelled out independently of
// debugState.
type wireState struct {
	Backends []struct {
		Name     string `json:"name"`
		URL      string `json:"url"`
		Healthy  bool   `json:"healthy"`
		Slots    int    `json:"slots"`
		InFlight int64  `json:"in_flight"`
		Capacity int64  `json:"capacity"`
		Spilled  uint64 `json:"spilled"`
	} `json:"backends"`
	Healthy     int       `json:"healthy"`
	TableSize   int       `json:"table_size"`
	Key         string    `json:"key"`
	LastRebuild time.Time `json:"last_rebuild"`
	LastChurn   struct {
		Slots    int     `json:"slots"`
		Fraction float64 `json:"fraction"`
	} `json:"last_churn"`
	Rebuilds      int64   `json:"rebuilds"`
	Retries       int64   `json:"retries"`
	BalanceFactor float64 `json:"balance_factor"`
	Requests      int64   `json:"requests"`
	InFlight      int64   `json:"in_flight"`
	Spilled       uint64  `json:"spilled"`
}

// checkDebug fetches /debug/maglev and checks it against want, the
// expected table built independently, and the rest of the expected state.
func (h *harness) checkDebug(want *maglev.Table, churn int, rebuilds int64, since time.Time) {
	h.t.Helper()
	resp, err := h.client.Get(h.admin.URL + "/debug/maglev")
	if err != nil {
		h.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/json" {
		h.t.Fatalf("/debug/maglev: %s, Content-Type %q", resp.Status, ct)
	}
	var got wireState
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		h.t.Fatalf("/debug/maglev: %v", err)
	}
	m := maglev.DefaultSize
	if got.TableSize != m || got.Healthy != len(serving(want)) || got.Key != "header:"+keyHeader {
		h.t.Errorf("/debug/maglev: table_size %d, healthy %d, key %q; want %d, %d, %q",
			got.TableSize, got.Healthy, got.Key, m, len(serving(want)), "header:"+keyHeader)
	}
	if len(got.Backends) != len(h.backends) {
		h.t.Fatalf("/debug/maglev: %d backends, want %d", len(got.Backends), len(h.backends))
	}
	counts, sum := want.Counts(), 0
	for i, b := range got.Backends {
		wantSlots := 0
		if j := want.Index(b.Name); j >= 0 {
			wantSlots = counts[j]
		}
		if b.Name != h.backends[i].id || b.URL != h.servers[i].URL || b.Healthy != (wantSlots > 0) || b.Slots != wantSlots {
			h.t.Errorf("/debug/maglev: backend %d: %+v, want %s at %s, healthy %t, %d slots",
				i, b, h.backends[i].id, h.servers[i].URL, wantSlots > 0, wantSlots)
		}
		// Between requests nothing is in flight; bounded loads are off.
		if b.InFlight != 0 || b.Capacity != 0 || b.Spilled != 0 {
			h.t.Errorf("/debug/maglev: backend %s: in flight %d, capacity %d, spilled %d; want all 0",
				b.Name, b.InFlight, b.Capacity, b.Spilled)
		}
		sum += b.Slots
	}
	st := h.p.state()
	if got.BalanceFactor != 0 || got.InFlight != 0 || got.Spilled != 0 || got.Requests != st.Requests {
		h.t.Errorf("/debug/maglev: balance_factor %v, in_flight %d, spilled %d, requests %d; want 0, 0, 0, %d",
			got.BalanceFactor, got.InFlight, got.Spilled, got.Requests, st.Requests)
	}
	if len(serving(want)) > 0 && sum != m {
		h.t.Errorf("/debug/maglev: slots sum to %d, want %d", sum, m)
	}
	if got.LastChurn.Slots != churn || got.LastChurn.Fraction != float64(churn)/float64(m) {
		h.t.Errorf("/debug/maglev: last_churn %+v, want %d slots, fraction %g", got.LastChurn, churn, float64(churn)/float64(m))
	}
	if got.Rebuilds != rebuilds || got.Retries != st.Retries {
		h.t.Errorf("/debug/maglev: rebuilds %d, retries %d; want %d, %d", got.Rebuilds, got.Retries, rebuilds, st.Retries)
	}
	if got.LastRebuild.Before(since) || got.LastRebuild.After(time.Now()) {
		h.t.Errorf("/debug/maglev: last_rebuild %v, want between %v and now", got.LastRebuild, since)
	}
}

// healthy returns the names of the backends in the proxy's table.
func (h *harness) healthy() []string {
	var names []string
	for _, b := range h.p.state().Backends {
		if b.Healthy {
			names = append(names, b.Name)
		}
	}
	return names
}

// newTable builds the table the proxy should hold over backends.
func newTable(t *testing.T, backends ...string) *maglev.Table {
	t.Helper()
	table, err := maglev.New(backends, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// tableWithout returns tab.Without(names...): the table the proxy holds over
// tab's backends while names are out of service (failed, not deregistered).
func tableWithout(t *testing.T, tab *maglev.Table, names ...string) *maglev.Table {
	t.Helper()
	w, err := tab.Without(names...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// serving returns the names of tab's backends in service: those of
// weight above 0.
func serving(tab *maglev.Table) []string {
	var names []string
	for i, w := range tab.Weights() {
		if w > 0 {
			names = append(names, tab.Backend(i))
		}
	}
	return names
}

func TestEndToEnd(t *testing.T) {
	began := time.Now()
	h := newHarness(t, 4, nil)
	fall, rise := int64(h.p.cfg.HTTP.Fall), int64(h.p.cfg.HTTP.Rise) // health rounds to drop, and to readmit, a backend
	keys := make([]string, testKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("session-%03d", i)
	}
	// Failures take backends out of the table of the four with Without:
	// only their keys move.
	all := newTable(t, "b0", "b1", "b2", "b3")
	three := tableWithout(t, all, "b1")     // after b1 dies
	two := tableWithout(t, all, "b1", "b3") // while b3 fails its health check
	none := tableWithout(t, all, all.Backends()...)
	m := maglev.DefaultSize

	// 1. Stable membership: every key reaches its backend in the table,
	// every time; a request without the key header goes by client IP.
	h.waitTable(all)
	h.checkDebug(all, 0, 0, began)
	first := make(map[string]string)
	for pass := range 2 {
		for _, k := range keys {
			got := h.get(k)
			if want := all.Lookup(k); got != want {
				t.Fatalf("pass %d: key %q reached %s, want %s", pass, k, got, want)
			}
			first[k] = got
		}
	}
	if got, want := h.get(""), all.Lookup("127.0.0.1"); got != want {
		t.Errorf("request without %s reached %s, want %s, the client IP's backend", keyHeader, got, want)
	}

	// 2. b1 dies while the checker runs. Every GET keeps succeeding (those
	// for b1's keys by retry), and the table drops b1, by passive
	// ejection or by the health checks.
	r0 := h.p.state().HealthRounds
	died := time.Now()
	h.servers[1].Close()
	dropped := func() bool { return !slices.Contains(h.healthy(), "b1") }
	for i := 0; !dropped() && time.Since(died) < 40*testInterval; i++ {
		if i >= testKeys {
			time.Sleep(testInterval / 20)
			continue
		}
		k := keys[i]
		if got := h.get(k); got != three.Lookup(k) && (got != first[k] || got == "b1") {
			t.Fatalf("while b1 dies: key %q reached %s, want %s or, before the drop, %s", k, got, three.Lookup(k), first[k])
		}
	}
	st := h.waitChange(three, r0, fall)
	if st.LastChurn.Slots != all.Diff(three) {
		t.Errorf("churn %d slots, want %d", st.LastChurn.Slots, all.Diff(three))
	}
	// The rebuild logs its line just after it publishes the table that
	// waitTable saw: wait for the line too.
	logLine := fmt.Sprintf("healthy=3 backends=4 change=-b1 moved=%d slots=%d", all.Diff(three), m)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(h.log.String(), logLine); time.Sleep(testInterval / 20) {
		if time.Now().After(deadline) {
			t.Errorf("log lacks %q", logLine)
			break
		}
	}
	h.checkDebug(three, all.Diff(three), 1, died)

	// Only b1's keys move: a failure takes it out with Without.
	moved, survivors := 0, 0
	for _, k := range keys {
		got := h.get(k)
		if got != three.Lookup(k) {
			t.Fatalf("after b1's drop: key %q reached %s, want %s", k, got, three.Lookup(k))
		}
		if first[k] != "b1" {
			survivors++
			if got != first[k] {
				moved++
			}
		}
	}
	b1Slots := all.Counts()[all.Index("b1")]
	collateral := all.Diff(three) - b1Slots
	if moved != 0 || collateral != 0 {
		t.Errorf("b1 dropped: %d of %d keys and %d of %d slots of surviving backends moved, want none",
			moved, survivors, collateral, m-b1Slots)
	}

	// 3. b3 fails its health check while it still serves: it is dropped,
	// and re-added when it passes again; its keys come back.
	r0 = h.p.state().HealthRounds
	flipped := time.Now()
	h.backends[3].down.Store(true)
	h.waitChange(two, r0, fall)
	h.checkDebug(two, three.Diff(two), 2, flipped)
	for _, k := range keys[:20] {
		if got := h.get(k); got != two.Lookup(k) {
			t.Errorf("while b3 is down: key %q reached %s, want %s", k, got, two.Lookup(k))
		}
	}
	r0 = h.p.state().HealthRounds
	flipped = time.Now()
	h.backends[3].down.Store(false)
	h.waitChange(three, r0, rise)
	h.checkDebug(three, two.Diff(three), 3, flipped)
	for _, k := range keys {
		if got := h.get(k); got != three.Lookup(k) {
			t.Errorf("after b3 is back: key %q reached %s, want %s", k, got, three.Lookup(k))
		}
	}

	// 4. All backends down: 503 with a plain-text body.
	r0 = h.p.state().HealthRounds
	stopped := time.Now()
	for _, i := range []int{0, 2, 3} {
		h.servers[i].Close()
	}
	st = h.waitChange(none, r0, fall)
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		if status, _, text := h.do(method, "session-000", ""); status != http.StatusServiceUnavailable || text != "no healthy backend\n" {
			t.Errorf("%s with no healthy backend: %d %q, want 503 %q", method, status, text, "no healthy backend\n")
		}
	}
	// b0, b2 and b3 may have been dropped in one round or in several.
	h.checkDebug(none, st.LastChurn.Slots, st.Rebuilds, stopped)
	if st.Rebuilds < 4 || st.Rebuilds > 6 || st.LastChurn.Slots != m {
		t.Errorf("all down after %d rebuilds, the last moving %d slots; want 4 to 6, the last moving all %d", st.Rebuilds, st.LastChurn.Slots, m)
	}
}

// TestRetries kills a backend the health checker has not noticed (rounds
// a minute apart) and with passive ejection off: idempotent requests for
// its keys reach the key's backend in the table without it (Without), with
// their bodies; a POST gets 502 and reaches no backend.
func TestRetries(t *testing.T) {
	h := newHarness(t, 3, func(c *config) {
		c.HTTP.HealthInterval = time.Minute
		c.HTTP.EjectAfter = -1
	})
	all := newTable(t, "b0", "b1", "b2")
	without := tableWithout(t, all, "b2")
	h.waitTable(all)
	h.servers[2].Close()
	var onB2 []string
	for i := range testKeys {
		if k := fmt.Sprintf("session-%03d", i); all.Lookup(k) == "b2" {
			onB2 = append(onB2, k)
			if got := h.get(k); got != without.Lookup(k) {
				t.Errorf("GET key %q on dead b2 reached %s, want %s", k, got, without.Lookup(k))
			}
		}
	}
	if len(onB2) == 0 {
		t.Fatal("no key on b2")
	}
	k := onB2[0]
	if status, _, text := h.do(http.MethodPost, k, "order"); status != http.StatusBadGateway || text != "bad gateway\n" {
		t.Errorf("POST key %q on dead b2: %d %q, want 502", k, status, text)
	}
	status, got, text := h.do(http.MethodPost, k, "order", "Idempotency-Key", "42")
	if status != http.StatusOK || got != without.Lookup(k) || !strings.HasSuffix(text, "(5 bytes)\n") {
		t.Errorf("POST with Idempotency-Key, key %q on dead b2: %d from %s %q, want 200 from %s with 5 bytes", k, status, got, text, without.Lookup(k))
	}
	status, got, text = h.do(http.MethodPut, k, "hello, maglev")
	if status != http.StatusOK || got != without.Lookup(k) || !strings.HasSuffix(text, "(13 bytes)\n") {
		t.Errorf("PUT key %q on dead b2: %d from %s %q, want 200 from %s with 13 bytes", k, status, got, text, without.Lookup(k))
	}
	if n := h.p.state().Retries; n != int64(len(onB2))+2 {
		t.Errorf("%d retries, want %d", n, len(onB2)+2)
	}
}
