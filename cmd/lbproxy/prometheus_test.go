package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestPrometheus: a real Prometheus server (Debian's prometheus), started
// here with a scrape config pointing at the proxy's admin listener,
// scrapes /metrics while clients send load through the proxy; a PromQL
// query through Prometheus's HTTP API then returns, for each backend, the
// count of requests the backend itself served.
func TestPrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no prometheus binary under CI: .ci/run installs Debian's prometheus")
		}
		t.Skip("no prometheus binary: apt-get install prometheus")
	}
	h := newHarness(t, 3, nil)
	admin, err := url.Parse(h.admin.URL)
	if err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(t, bin, admin.Host)

	// Load: 4 clients, 150 requests each, over a dozen scrapes or so.
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for i := range 150 {
				h.get(fmt.Sprintf("client-%d-key-%d", c, i))
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	total := int64(0)
	for _, b := range h.backends {
		total += b.served.Load()
	}
	if total != 600 {
		t.Fatalf("the backends served %d requests, want 600", total)
	}

	// Prometheus has every request once a scrape that began after the last
	// one has landed: wait until its total says so.
	const q = `sum by (maglev_backend) (maglev_http_requests_total{maglev_outcome="ok"})`
	var got map[string]float64
	deadline := time.Now().Add(30 * time.Second)
	for {
		got = prom.query(t, q)
		sum := 0.0
		for _, v := range got {
			sum += v
		}
		if sum == float64(total) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus's per-backend counts %v add up to %v, not %d, after 30 s", got, sum, total)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, b := range h.backends {
		if got[b.id] != float64(b.served.Load()) {
			t.Errorf("%s: Prometheus says %v requests, the backend served %d", b.id, got[b.id], b.served.Load())
		}
		if b.served.Load() == 0 {
			t.Errorf("%s served nothing: the keys should spread", b.id)
		}
	}
	// The table's slots as Prometheus sees them.
	slots := prom.query(t, `maglev_table_slots`)
	sum := 0.0
	for _, v := range slots {
		sum += v
	}
	if len(slots) != 3 || sum != float64(h.p.t.Table().Size()) {
		t.Errorf("maglev_table_slots %v, want 3 backends owning %d slots", slots, h.p.t.Table().Size())
	}
}

// promServer is a Prometheus server the test started.
type promServer struct {
	base string // http://127.0.0.1:PORT
}

// startPrometheus starts Prometheus on a free loopback port, scraping
// target's /metrics every 100 ms, with its data in the test's temporary
// directory, and stops it when the test ends.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: 100ms
  scrape_timeout: 100ms
scrape_configs:
  - job_name: lbproxy
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // Prometheus listens there next
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", b)
		}
	})
	p := &promServer{base: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.base + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-done:
			t.Fatal("prometheus exited before it was ready")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("prometheus not ready within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// query runs an instant PromQL query whose result is a vector and returns
// each sample's value by its maglev_backend label ("" for none).
func (p *promServer) query(t *testing.T, q string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Status string
		Error  string
		Data   struct {
			ResultType string
			Result     []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Status != "success" || body.Data.ResultType != "vector" {
		t.Fatalf("query %q: %s %s (%s)", q, body.Status, body.Error, body.Data.ResultType)
	}
	out := map[string]float64{}
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("query %q: value %v", q, r.Value)
		}
		out[r.Metric["maglev_backend"]] = v
	}
	return out
}
