package etcdmaglev

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/maglevlb/maglev/etcdmaglev/etcdtest"
	"github.com/maglevlb/maglev/httpmaglev"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

// TestClientCloseStopsWatcher: closing the etcd client ends the Watcher's
// goroutine, instead of leaving it to retry a closed client until Close.
func TestClientCloseStopsWatcher(t *testing.T) {
	s := etcdtest.Start(t)
	c := s.Client(t)
	w, err := Watch(t.Context(), c, "services/web", func([]httpmaglev.Backend) error { return nil }, WatchOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the Watcher's goroutine still runs 10 s after its client was closed")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDeregisterLeaseGone: Deregister succeeds when the registration's
// lease is already gone (revoked here, as expiry during an outage would
// end it): the key is gone, which is what Deregister is for.
func TestDeregisterLeaseGone(t *testing.T) {
	s := etcdtest.Start(t)
	c := s.Client(t)
	r, err := Register(t.Context(), c, "services/web", endpoints.Endpoint{Addr: "127.0.0.1:8080"}, RegisterOptions{TTL: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(t.Context(), r.Lease()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := r.Deregister(ctx); err != nil {
		t.Fatalf("Deregister after the lease was revoked: %v", err)
	}
	resp, err := c.Get(ctx, r.Key())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("%s is still registered after Deregister", r.Key())
	}
}
