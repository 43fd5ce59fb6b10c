package etcdtest_test

import (
	"context"
	"flag"
	"slices"
	"testing"
	"time"

	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/etcdmaglev/etcdtest"
	"github.com/maglevlb/maglev/httpmaglev"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

var measure = flag.Bool("measure", false, "run TestMeasure, which times membership changes for docs/membership.md")

// TestMeasure times, against embedded etcd on loopback, how long a
// Transport fed by a Watcher takes to route by a new table after a
// registration, after a Deregister, and after a crash (a lease no longer
// kept alive), and how long after an etcd restart the watch sees changes
// again. It runs only with -measure, and prints the figures; it fails if a
// crashed backend outlives its TTL by more than a second.
//
//	go test -run TestMeasure -measure -v ./etcdmaglev
func TestMeasure(t *testing.T) {
	if !*measure {
		t.Skip("measures times; run with -measure")
	}
	s := etcdtest.Start(t)
	c := s.Client(t)
	const prefix = "services/web"
	tr := newTransport(t)
	w, err := etcdmaglev.Watch(t.Context(), c, prefix, tr.SetEndpoints, etcdmaglev.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	addrs := startBackends(t, 6)
	for _, a := range addrs[:5] {
		if _, err := etcdmaglev.Register(t.Context(), c, prefix, endpoints.Endpoint{Addr: a}, etcdmaglev.RegisterOptions{TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, settle, "five backends", func() bool { return healthy(tr) == 5 })
	in := func(addr string) bool {
		return slices.ContainsFunc(tr.State().Backends, func(b httpmaglev.BackendState) bool { return b.Name == addr && b.Healthy })
	}
	const rounds = 10
	var reg, dereg, crash []time.Duration
	for range rounds {
		start := time.Now()
		r, err := etcdmaglev.Register(t.Context(), c, prefix, endpoints.Endpoint{Addr: addrs[5]}, etcdmaglev.RegisterOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, settle, "registration", func() bool { return in(addrs[5]) })
		reg = append(reg, time.Since(start))
		start = time.Now()
		if err := r.Deregister(t.Context()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, settle, "deregistration", func() bool { return !in(addrs[5]) })
		dereg = append(dereg, time.Since(start))
	}
	for range 3 {
		cc := s.Client(t)
		if _, err := etcdmaglev.Register(t.Context(), cc, prefix, endpoints.Endpoint{Addr: addrs[5]}, etcdmaglev.RegisterOptions{TTL: ttl}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, settle, "registration", func() bool { return in(addrs[5]) })
		start := time.Now()
		_ = cc.Close()
		waitFor(t, ttl+settle, "crash removal", func() bool { return !in(addrs[5]) })
		d := time.Since(start)
		crash = append(crash, d)
		if d > ttl+time.Second {
			t.Errorf("a crashed backend left the table %v after its keep-alive stopped; TTL %v", d, ttl)
		}
	}
	t.Logf("registration to routing (%d rounds): %s", rounds, summary(reg))
	t.Logf("Deregister to out of the table (%d rounds): %s", rounds, summary(dereg))
	t.Logf("keep-alive stopped to out of the table, TTL %v (3 rounds): %s", ttl, summary(crash))

	// etcd down for 3 s: nothing changes; then the first change after the
	// restart.
	sets := w.Sets()
	s.Stop()
	down := time.Now()
	for time.Since(down) < 3*time.Second {
		if healthy(tr) != 5 || w.Sets() != sets {
			t.Fatalf("while etcd is down: %d healthy, %d sets", healthy(tr), w.Sets()-sets)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Restart()
	up := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), settle)
	defer cancel()
	if _, err := c.Delete(ctx, prefix+"/"+addrs[0], clientv3.WithPrevKV()); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	waitFor(t, settle, "the deletion after the restart", func() bool { return healthy(tr) == 4 })
	t.Logf("etcd down %v: %d backends routed throughout, no set; after the restart, the first write took %v, and reached the table %v later",
		up.Sub(down).Round(time.Millisecond), 5, written.Sub(up).Round(time.Millisecond), time.Since(written).Round(time.Millisecond))
}

// summary returns the median and maximum of ds.
func summary(ds []time.Duration) string {
	ds = slices.Sorted(slices.Values(ds))
	return "median " + ds[len(ds)/2].Round(100*time.Microsecond).String() + ", max " + ds[len(ds)-1].Round(100*time.Microsecond).String()
}
