package etcdtest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/etcdmaglev"
	"github.com/maglevlb/maglev/etcdmaglev/etcdtest"
	"github.com/maglevlb/maglev/httpmaglev"
	"github.com/maglevlb/maglev/internal/servertest"
	"github.com/maglevlb/maglev/membership"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestWatchArguments(t *testing.T) {
	var r recorder
	cases := []struct {
		name   string
		c      *clientv3.Client
		prefix string
		set    func([]membership.Endpoint) error
	}{
		{"nil client", nil, "svc", r.set},
		{"empty prefix", &clientv3.Client{}, "", r.set},
		{"prefix /", &clientv3.Client{}, "/", r.set},
		{"nil set", &clientv3.Client{}, "svc", nil},
	}
	for _, c := range cases {
		w, err := etcdmaglev.Watch(t.Context(), c.c, c.prefix, c.set, etcdmaglev.WatchOptions{})
		if w != nil || !errors.Is(err, etcdmaglev.ErrInvalidConfig) {
			t.Errorf("%s: Watch = %v, %v; want ErrInvalidConfig", c.name, w, err)
		}
	}
	if r.calls() != 0 {
		t.Errorf("set called %d times", r.calls())
	}
}

// TestWatch follows a prefix through additions, deletions, rewrites that
// change nothing, bad values and duplicate addresses, against real etcd.
func TestWatch(t *testing.T) {
	s := etcdtest.Start(t)
	c := s.Client(t)
	const prefix = "services/web"
	addEndpoint(t, c, prefix, "10.0.0.2:80", nil)
	addEndpoint(t, c, prefix, "10.0.0.1:80", map[string]any{"zone": "a"})
	// Neither a sibling prefix nor the prefix itself is a member.
	addEndpoint(t, c, prefix+"2", "10.0.9.9:80", nil)
	if _, err := c.Put(t.Context(), prefix, `{"Addr":"10.0.9.8:80"}`); err != nil {
		t.Fatal(err)
	}

	var r recorder
	var logs servertest.Log
	w, err := etcdmaglev.Watch(t.Context(), c, prefix+"/", r.set, etcdmaglev.WatchOptions{Logger: debugLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	if got := r.names(); got != "10.0.0.1:80 10.0.0.2:80" {
		t.Fatalf("first list %q", got)
	}
	eps, rev := w.Endpoints(), w.Version()
	if names(eps) != r.names() || rev == 0 {
		t.Errorf("Endpoints() = %q at %d", names(eps), rev)
	}
	if e := r.last()[0]; e.Host != "10.0.0.1" || e.Port != 80 || e.Weight != 1 || len(e.Meta) != 1 || e.Meta["zone"] != "a" {
		t.Errorf("first endpoint %+v", e)
	}

	want := func(what, list string) {
		t.Helper()
		waitFor(t, settle, what, func() bool { return r.names() == list })
	}
	addEndpoint(t, c, prefix, "10.0.0.3:80", nil)
	want("an addition", "10.0.0.1:80 10.0.0.2:80 10.0.0.3:80")

	// Writing the same endpoints again, a bad value under a new key, and a
	// bad value over a good one change no backend: no call.
	n := r.calls()
	addEndpoint(t, c, prefix, "10.0.0.3:80", nil)
	for key, v := range map[string]string{prefix + "/junk": "{not json", prefix + "/path": `{"Addr":"http://10.0.0.5/x"}`, prefix + "/10.0.0.2:80": "garbage"} {
		if _, err := c.Put(t.Context(), key, v); err != nil {
			t.Fatal(err)
		}
	}
	// A second key for one Addr is one backend.
	addEndpoint(t, c, prefix+"/again", "10.0.0.1:80", nil)
	// A change that does change the backends.
	addEndpoint(t, c, prefix, "10.0.0.4:80", nil)
	want("an addition after no-op changes", "10.0.0.1:80 10.0.0.2:80 10.0.0.3:80 10.0.0.4:80")
	if got := r.calls(); got != n+1 {
		t.Errorf("%d calls of set for one change of backends, want 1", got-n)
	}
	for _, key := range []string{prefix + "/junk", prefix + "/path", prefix + "/10.0.0.2:80"} {
		if !strings.Contains(logs.String(), "key="+key+" ") {
			t.Errorf("no log names the bad value under %s; logs:\n%s", key, logs.String())
		}
	}

	// Deletions; a duplicate's deletion leaves the backend in.
	if _, err := c.Delete(t.Context(), prefix+"/10.0.0.3:80"); err != nil {
		t.Fatal(err)
	}
	want("a deletion", "10.0.0.1:80 10.0.0.2:80 10.0.0.4:80")
	if _, err := c.Delete(t.Context(), prefix+"/10.0.0.1:80"); err != nil {
		t.Fatal(err)
	}
	addEndpoint(t, c, prefix, "10.0.0.5:80", nil)
	want("a duplicate's deletion", "10.0.0.1:80 10.0.0.2:80 10.0.0.4:80 10.0.0.5:80")

	// An endpoint's weight; the others, with none, weigh 1.
	addEndpoint(t, c, prefix, "10.0.0.6:80", map[string]any{"weight": 5})
	want("a weighted endpoint", "10.0.0.1:80 10.0.0.2:80 10.0.0.4:80 10.0.0.5:80 10.0.0.6:80")
	for _, b := range r.last() {
		if want := map[bool]uint32{true: 5, false: 1}[b.Name == "10.0.0.6:80"]; b.Weight != want {
			t.Errorf("%s weighs %d, want %d", b.Name, b.Weight, want)
		}
	}
	// Weight 0 drains: the backend stays in the list with weight 0, which
	// a Transport keeps out of its table.
	addEndpoint(t, c, prefix, "10.0.0.6:80", map[string]any{"weight": 0})
	waitFor(t, time.Second*10, "the drained endpoint", func() bool {
		for _, b := range r.last() {
			if b.Name == "10.0.0.6:80" {
				return b.Weight == 0
			}
		}
		return false
	})

	// A registry that says there are no backends empties the list.
	if _, err := c.Delete(t.Context(), prefix+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	want("deleting every key", "")

	// After Close, set is not called.
	_ = w.Close()
	n = r.calls()
	addEndpoint(t, c, prefix, "10.0.0.7:80", nil)
	if _, err := c.Get(t.Context(), prefix, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if r.calls() != n {
		t.Errorf("set called after Close")
	}
}

// get requests key through client and returns the body: the backend's
// address.
func get(t *testing.T, client *http.Client, key string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", "http://backends/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("key %s: %v", key, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("key %s: %d %q %v", key, resp.StatusCode, b, err)
	}
	return string(b)
}

// checkOwners fails the test unless each of keys reaches, through client,
// its owner in maglev.New(addrs).
func checkOwners(t *testing.T, client *http.Client, addrs []string, keys int) {
	t.Helper()
	tb, err := maglev.New(addrs, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		key := fmt.Sprintf("user-%d", i)
		if got, want := get(t, client, key), tb.Lookup(key); got != want {
			t.Fatalf("key %s reached %s, its owner over %v is %s", key, got, addrs, want)
		}
	}
}

// newTransport returns a Transport keyed by X-Key, closed at the test's end.
func newTransport(t *testing.T) *httpmaglev.Transport {
	t.Helper()
	tr, err := httpmaglev.NewTransport(httpmaglev.Config{Key: httpmaglev.HeaderKey("X-Key")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// healthy returns the number of backends in tr's table.
func healthy(tr *httpmaglev.Transport) int { return tr.State().Healthy }

// TestWatchTransport feeds a Transport from etcd: keys reach their owners
// over the registered Addrs, before and after a change, and while etcd is
// stopped and after it restarts on the same data.
func TestWatchTransport(t *testing.T) {
	s := etcdtest.Start(t)
	c := s.Client(t)
	const prefix = "services/web"
	addrs := startBackends(t, 4)
	for _, a := range addrs[:3] {
		addEndpoint(t, c, prefix, a, nil)
	}
	tr := newTransport(t)
	var logs servertest.Log
	w, err := etcdmaglev.Watch(t.Context(), c, prefix, tr.SetEndpoints, etcdmaglev.WatchOptions{Logger: debugLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	client := &http.Client{Transport: tr}
	checkOwners(t, client, addrs[:3], 300)

	addEndpoint(t, c, prefix, addrs[3], nil)
	waitFor(t, settle, "the fourth backend in the table", func() bool { return healthy(tr) == 4 })
	checkOwners(t, client, addrs, 300)

	// etcd stops: the Transport keeps the last set and routes as before.
	rebuilds := tr.State().Rebuilds
	sets := w.Sets()
	s.Stop()
	checkOwners(t, client, addrs, 300)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err = c.Get(ctx, prefix)
	cancel()
	if err == nil {
		t.Fatal("a Get succeeded with etcd stopped")
	}
	checkOwners(t, client, addrs, 300)
	if w.Sets() != sets || tr.State().Rebuilds != rebuilds || healthy(tr) != 4 {
		t.Fatalf("with etcd stopped: %d sets, %d rebuilds, %d healthy; want %d, %d, 4",
			w.Sets(), tr.State().Rebuilds, healthy(tr), sets, rebuilds)
	}

	// etcd restarts on its data: the watch resumes and sees a deletion.
	s.Restart()
	if _, err := c.Delete(t.Context(), prefix+"/"+addrs[0]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, settle, "the deletion after etcd's restart", func() bool { return healthy(tr) == 3 })
	checkOwners(t, client, addrs[1:], 300)
}

// TestWatchCompacted cuts a Watcher off from etcd while the prefix changes
// and the history is compacted: when it can reach etcd again, it lists
// the prefix anew.
func TestWatchCompacted(t *testing.T) {
	s := etcdtest.Start(t)
	c := s.Client(t)
	g := newGate(t, strings.TrimPrefix(s.Endpoint(), "http://"))
	wc, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + g.addr}, DialTimeout: 5 * time.Second, DialOptions: etcdtest.FastReconnect, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = wc.Close() }()
	const prefix = "services/web"
	addEndpoint(t, c, prefix, "10.0.0.1:80", nil)
	addEndpoint(t, c, prefix, "10.0.0.2:80", nil)
	var r recorder
	var logs servertest.Log
	w, err := etcdmaglev.Watch(t.Context(), wc, prefix, r.set, etcdmaglev.WatchOptions{Logger: debugLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()

	g.setOpen(false)
	addEndpoint(t, c, prefix, "10.0.0.3:80", nil)
	if _, err := c.Delete(t.Context(), prefix+"/10.0.0.1:80"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Put(t.Context(), "unrelated", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(t.Context(), resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if got := r.names(); got != "10.0.0.1:80 10.0.0.2:80" || r.calls() != 1 {
		t.Fatalf("cut off from etcd: %d calls, last %q", r.calls(), got)
	}
	g.setOpen(true)
	waitFor(t, settle, "the list after the compaction", func() bool { return r.names() == "10.0.0.2:80 10.0.0.3:80" })
	if !strings.Contains(logs.String(), "compacted") {
		t.Errorf("no log of the compaction; logs:\n%s", logs.String())
	}
	// And it watches again from there.
	addEndpoint(t, c, prefix, "10.0.0.4:80", nil)
	waitFor(t, settle, "an addition after the re-list", func() bool { return r.names() == "10.0.0.2:80 10.0.0.3:80 10.0.0.4:80" })
}

// watcherGoroutines returns how many goroutines Watch started (through
// membership.Watch) are still there, started or not yet (a goroutine not
// yet run shows its go statement's wrapper, not the Watcher's loop). A
// running Watcher has two.
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

// TestWatchFirstSetFails: a first list that set rejects is Watch's error,
// wrapping set's, and nothing is left running.
func TestWatchFirstSetFails(t *testing.T) {
	s := etcdtest.Start(t)
	c := s.Client(t)
	const prefix = "services/web"
	addEndpoint(t, c, prefix, "10.0.0.1:80", nil)
	fail := errors.New("rejected")
	var mu sync.Mutex
	calls := 0
	set := func([]membership.Endpoint) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return fail
	}
	before := watcherGoroutines()
	w, err := etcdmaglev.Watch(t.Context(), c, prefix, set, etcdmaglev.WatchOptions{})
	if w != nil {
		_ = w.Close()
	}
	if w != nil || !errors.Is(err, fail) {
		t.Fatalf("Watch with a set that fails returned a Watcher (%t) and error %v; want none and an error wrapping %q", w != nil, err, fail)
	}
	if !strings.HasPrefix(err.Error(), "etcdmaglev: ") || !strings.Contains(err.Error(), prefix) {
		t.Errorf("error %q does not start with etcdmaglev: and name the prefix", err)
	}
	if after := watcherGoroutinesSettle(before); after != before {
		t.Errorf("%d Watcher goroutines after the failed Watch, %d before", after, before)
	}
	mu.Lock()
	if calls != 1 {
		t.Errorf("set called %d times, want 1", calls)
	}
	mu.Unlock()

	// The count sees a Watcher that runs.
	var r recorder
	w, err = etcdmaglev.Watch(t.Context(), c, prefix, r.set, etcdmaglev.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	if n := watcherGoroutines(); n != before+2 {
		t.Errorf("%d Watcher goroutines with one Watcher running, want %d", n, before+2)
	}
}

// TestWatchSetRetried: a list that set rejects is offered again, after a
// backoff, with no further change in etcd, until set accepts it; the
// Transport then routes over it, and Backends reports it at the revision
// of the change.
func TestWatchSetRetried(t *testing.T) {
	// The retries wait 100, 200 and 400 ms: the list arrives about 0.7 s
	// after the change. retried bounds the wait with a wide margin.
	const (
		rejections = 3
		retried    = 5 * time.Second
	)
	s := etcdtest.Start(t)
	c := s.Client(t)
	const prefix = "services/web"
	addEndpoint(t, c, prefix, "10.0.0.1:80", nil)
	tr := newTransport(t)
	fail := errors.New("rejected")
	var mu sync.Mutex
	var offered []string // the names of each list set was called with
	set := func(bs []membership.Endpoint) error {
		mu.Lock()
		defer mu.Unlock()
		offered = append(offered, names(bs))
		if n := len(offered); n > 1 && n <= 1+rejections {
			return fail
		}
		return tr.SetEndpoints(bs)
	}
	var logs servertest.Log
	w, err := etcdmaglev.Watch(t.Context(), c, prefix, set, etcdmaglev.WatchOptions{Logger: debugLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()

	addEndpoint(t, c, prefix, "10.0.0.2:80", nil)
	resp, err := c.Get(t.Context(), prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision // the change's: nothing is written after it
	waitFor(t, retried, "the list set accepts after it rejected it "+fmt.Sprint(rejections)+" times", func() bool {
		return healthy(tr) == 2
	})

	const want = "10.0.0.1:80 10.0.0.2:80"
	mu.Lock()
	got := slices.Clone(offered)
	mu.Unlock()
	if len(got) != 2+rejections {
		t.Errorf("set called %d times, want %d: %q", len(got), 2+rejections, got)
	}
	for i, l := range got[1:] {
		if l != want {
			t.Errorf("call %d of set: %q, want %q", i+2, l, want)
		}
	}
	if eps, r := w.Endpoints(), w.Version(); names(eps) != want || r != rev {
		t.Errorf("Endpoints() = %q at %d, want %q at %d", names(eps), r, want, rev)
	}
	if n := strings.Count(logs.String(), "set endpoints failed"); n != rejections {
		t.Errorf("%d rejections logged, want %d; logs:\n%s", n, rejections, logs.String())
	}
	resp, err = c.Get(t.Context(), prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision != rev {
		t.Fatalf("etcd changed during the test: revision %d, was %d", resp.Header.Revision, rev)
	}
}
