package httpmaglev_test

import (
	"context"
	"log"
	"log/slog"
	"net/http"
	"time"

	"github.com/maglevlb/maglev/httpmaglev"
	"github.com/maglevlb/maglev/membership"
)

// A client whose backends are the addresses of a Kubernetes headless
// Service, looked up every five seconds: every client that does the same
// sends a user to the same pod. Any membership watcher (etcdmaglev.Watch,
// k8smaglev.Watch) feeds the Transport the same way.
func ExampleTransport_SetEndpoints() {
	t, err := httpmaglev.NewTransport(httpmaglev.Config{Key: httpmaglev.HeaderKey("X-User")})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = t.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := membership.WatchDNS(ctx, "web.default.svc.cluster.local:8080", t.SetEndpoints, membership.DNSOptions{Interval: 5 * time.Second, Logger: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	client := &http.Client{Transport: t}
	req, err := http.NewRequest("GET", "http://web/cart", nil)
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("X-User", "alice")
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	log.Print(resp.Status)
}
