package etcdtest_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/etcdmaglev/etcdtest"
	"github.com/maglevlb/maglev/membership"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

// watchers returns how many goroutines run a Watcher's loops: the etcd
// source's Run, and the one that calls set.
func watchers() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "etcdmaglev.(*source).Run(") + strings.Count(string(buf), "membership.(*Watcher).deliver(")
}

// TestClientCloseStopsWatcher: closing the etcd client ends the Watcher's
// goroutines, instead of leaving them to retry a closed client until
// Close.
func TestClientCloseStopsWatcher(t *testing.T) {
	s := etcdtest.Start(t)
	c := s.Client(t)
	before := watchers()
	w, err := etcdmaglev.Watch(t.Context(), c, "services/web", func([]membership.Endpoint) error { return nil }, etcdmaglev.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, settle, "the Watcher's goroutines", func() bool { return watchers() == before+2 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the Watcher's goroutines to end after its client closed", func() bool { return watchers() == before })
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
	r, err := etcdmaglev.Register(t.Context(), c, "services/web", endpoints.Endpoint{Addr: "127.0.0.1:8080"}, etcdmaglev.RegisterOptions{TTL: 5 * time.Second})
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
