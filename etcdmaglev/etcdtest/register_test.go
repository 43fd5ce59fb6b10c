package etcdtest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/etcdmaglev/etcdtest"
	"github.com/maglevlb/maglev/internal/servertest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

func TestRegisterArguments(t *testing.T) {
	c := &clientv3.Client{}
	ep := endpoints.Endpoint{Addr: "10.0.0.1:80"}
	cases := []struct {
		name   string
		c      *clientv3.Client
		prefix string
		ep     endpoints.Endpoint
		ttl    time.Duration
	}{
		{"nil client", nil, "svc", ep, time.Second},
		{"empty prefix", c, "", ep, time.Second},
		{"empty Addr", c, "svc", endpoints.Endpoint{}, time.Second},
		{"TTL under 1s", c, "svc", ep, 999 * time.Millisecond},
		{"negative TTL", c, "svc", ep, -time.Second},
	}
	for _, tc := range cases {
		r, err := etcdmaglev.Register(t.Context(), tc.c, tc.prefix, tc.ep, etcdmaglev.RegisterOptions{TTL: tc.ttl})
		if r != nil || !errors.Is(err, etcdmaglev.ErrInvalidConfig) {
			t.Errorf("%s: Register = %v, %v; want ErrInvalidConfig", tc.name, r, err)
		}
	}
}

// ttl is the registrations' TTL in the tests: etcd's minimum with its
// default timing.
const ttl = 2 * time.Second

// TestRegister registers endpoints under leases against real etcd: a
// Watcher sees them, the keep-alive holds them past the TTL, a lost lease
// is replaced, a backend that stops renewing leaves within the TTL, and
// Deregister deletes the key at once.
func TestRegister(t *testing.T) {
	s := etcdtest.Start(t)
	c := s.Client(t)
	const prefix = "services/web"
	var r recorder
	w, err := etcdmaglev.Watch(t.Context(), c, prefix, r.set, etcdmaglev.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()

	var logs servertest.Log
	a, err := etcdmaglev.Register(t.Context(), c, prefix+"/", endpoints.Endpoint{Addr: "10.0.0.1:80"}, etcdmaglev.RegisterOptions{TTL: ttl, Logger: debugLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	if a.Key() != prefix+"/10.0.0.1:80" {
		t.Errorf("Key() = %q", a.Key())
	}
	// The value is what etcd's endpoints.Manager reads.
	em, err := endpoints.NewManager(c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	eps, err := em.List(t.Context())
	if err != nil || len(eps) != 1 || eps[a.Key()].Addr != "10.0.0.1:80" {
		t.Fatalf("endpoints.Manager lists %v, %v", eps, err)
	}
	resp, err := c.Get(t.Context(), a.Key())
	if err != nil || len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != a.Lease() {
		t.Fatalf("key %s: %v, %v; want it under lease %x", a.Key(), resp, err, a.Lease())
	}
	waitFor(t, settle, "the registration", func() bool { return r.names() == "10.0.0.1:80" })

	// A second backend, on its own client, which it loses as a crashed
	// process does: its keep-alive stops, its key is not deleted.
	bc := s.Client(t)
	b, err := etcdmaglev.Register(t.Context(), bc, prefix, endpoints.Endpoint{Addr: "10.0.0.2:80"}, etcdmaglev.RegisterOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, settle, "the second registration", func() bool { return r.names() == "10.0.0.1:80 10.0.0.2:80" })

	// The keep-alive holds both past twice the TTL.
	end := time.Now().Add(2 * ttl)
	for time.Now().Before(end) {
		if got := r.names(); got != "10.0.0.1:80 10.0.0.2:80" {
			t.Fatalf("%q while both leases are kept alive", got)
		}
		time.Sleep(50 * time.Millisecond)
	}

	_ = bc.Close()
	waitFor(t, ttl+settle, "the crashed backend's removal", func() bool { return r.names() == "10.0.0.1:80" })
	if b.Lease() == 0 {
		t.Error("no lease")
	}

	// A lease lost anyway (here revoked from outside) is replaced.
	old := a.Lease()
	if _, err := c.Revoke(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settle, "the registration under a new lease", func() bool {
		resp, err := c.Get(t.Context(), a.Key())
		return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Lease != int64(old) && clientv3.LeaseID(resp.Kvs[0].Lease) == a.Lease()
	})
	waitFor(t, settle, "the backend back", func() bool { return r.names() == "10.0.0.1:80" })

	// Deregister deletes the key and revokes the lease before returning.
	lease := a.Lease()
	if err := a.Deregister(t.Context()); err != nil {
		t.Fatal(err)
	}
	resp, err = c.Get(t.Context(), a.Key())
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("after Deregister: %v, %v", resp, err)
	}
	ttlResp, err := c.TimeToLive(t.Context(), lease)
	if err != nil || ttlResp.TTL != -1 {
		t.Fatalf("lease after Deregister: %+v, %v; want revoked (TTL -1)", ttlResp, err)
	}
	waitFor(t, settle, "the deregistration", func() bool { return r.names() == "" })
	if err := a.Deregister(t.Context()); err != nil {
		t.Errorf("second Deregister: %v", err)
	}
}

// TestDeregisterKeepsAnotherLease: a Registration deletes its key only if
// its own lease still holds it, not a newer registration's of the same
// Addr.
func TestDeregisterKeepsAnotherLease(t *testing.T) {
	s := etcdtest.Start(t)
	c := s.Client(t)
	ep := endpoints.Endpoint{Addr: "10.0.0.1:80"}
	a, err := etcdmaglev.Register(t.Context(), c, "svc", ep, etcdmaglev.RegisterOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	b, err := etcdmaglev.Register(t.Context(), c, "svc", ep, etcdmaglev.RegisterOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Deregister(t.Context()) }()
	if err := a.Deregister(t.Context()); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(t.Context(), b.Key())
	if err != nil || len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != b.Lease() {
		t.Fatalf("after the old registration's Deregister: %v, %v; want the key under lease %x", resp, err, b.Lease())
	}
}
