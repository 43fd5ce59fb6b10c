package etcdtest_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev/internal/servertest"
	"github.com/maglevlb/maglev/membership"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
)

// Bounds of the tests' waits: generous, since the machines that run the
// tests may be slow and loaded. None is a timing assertion.
const (
	settle = 15 * time.Second // a change reaching a Watcher
	poll   = 5 * time.Millisecond
)

// waitFor polls cond until it holds, and fails the test if it does not
// within d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(poll)
	}
}

// recorder is a set function that keeps every list it is given.
type recorder struct {
	mu    sync.Mutex
	lists [][]membership.Endpoint
}

func (r *recorder) set(bs []membership.Endpoint) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists = append(r.lists, bs)
	return nil
}

// calls returns how many lists the recorder was given.
func (r *recorder) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lists)
}

// last returns the last list (nil before any).
func (r *recorder) last() []membership.Endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lists) == 0 {
		return nil
	}
	return r.lists[len(r.lists)-1]
}

// names returns the names of the last list, joined by " " ("<none>" before
// any list).
func (r *recorder) names() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lists) == 0 {
		return "<none>"
	}
	return names(r.lists[len(r.lists)-1])
}

func names(bs []membership.Endpoint) string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = b.Name
	}
	return strings.Join(s, " ")
}

// debugLogger returns a logger that writes every level to l.
func debugLogger(l *servertest.Log) *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// addEndpoint registers addr under prefix as etcd's endpoints.Manager does,
// with no lease.
func addEndpoint(t *testing.T, c *clientv3.Client, prefix, addr string, meta any) {
	t.Helper()
	em, err := endpoints.NewManager(c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := em.AddEndpoint(t.Context(), prefix+"/"+addr, endpoints.Endpoint{Addr: addr, Metadata: meta}); err != nil {
		t.Fatal(err)
	}
}

// startBackends starts n HTTP servers on 127.0.0.1 that answer every
// request with their own address, and returns the addresses, sorted.
func startBackends(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range n {
		s := httptest.NewUnstartedServer(nil)
		addr := s.Listener.Addr().String()
		s.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, addr)
		})
		s.Start()
		t.Cleanup(s.Close)
		addrs[i] = addr
	}
	slices.Sort(addrs)
	return addrs
}

// A gate is a TCP forwarder to etcd that the test can close, cutting a
// client off from etcd without stopping it, and open again.
type gate struct {
	t      *testing.T
	target string
	l      net.Listener
	addr   string

	mu    sync.Mutex
	open  bool
	conns []net.Conn
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{t: t, target: target, l: l, addr: l.Addr().String(), open: true}
	t.Cleanup(func() { _ = l.Close(); g.setOpen(false) })
	go g.serve()
	return g
}

func (g *gate) serve() {
	for {
		c, err := g.l.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		if !g.open {
			g.mu.Unlock()
			_ = c.Close()
			continue
		}
		var d net.Dialer
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		u, err := d.DialContext(ctx, "tcp", g.target)
		cancel()
		if err != nil {
			g.mu.Unlock()
			_ = c.Close()
			continue
		}
		g.conns = append(g.conns, c, u)
		g.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
		go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
	}
}

// setOpen opens or closes the gate; closing it also cuts every connection
// through it.
func (g *gate) setOpen(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = open
	if !open {
		for _, c := range g.conns {
			_ = c.Close()
		}
		g.conns = nil
	}
}
