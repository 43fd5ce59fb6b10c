package k8stest_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/httpmaglev"
	"github.com/maglevlb/maglev/k8smaglev"
	"github.com/maglevlb/maglev/k8smaglev/k8stest"
	"github.com/maglevlb/maglev/membership"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func TestMain(m *testing.M) {
	code := k8stest.Main(m)
	removeL4LB()
	os.Exit(code)
}

const backendPort = 8080

// A backend is a real HTTP server on its own 198.18.0.0/15 address in the
// test's namespace. It answers every request with its address; /slow
// answers after holding the request 2 s.
type backend struct {
	addr     string // IP:PORT, its name in every table
	ip       string
	requests atomic.Int64
	inflight atomic.Int64
}

func startBackend(t *testing.T, ip string) *backend {
	t.Helper()
	k8stest.AddAddr(t, ip)
	b := &backend{ip: ip, addr: net.JoinHostPort(ip, fmt.Sprint(backendPort))}
	lis, err := net.Listen("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.requests.Add(1)
		b.inflight.Add(1)
		defer b.inflight.Add(-1)
		if r.URL.Path == "/slow" {
			time.Sleep(2 * time.Second)
		}
		io.WriteString(w, b.addr) //nolint:errcheck // the client's fault
	})}
	go srv.Serve(lis) //nolint:errcheck // ends with Close
	t.Cleanup(func() { _ = srv.Close() })
	return b
}

// startBackends starts n backends on 198.18.<net>.1, .2, ...
func startBackends(t *testing.T, net, n int) []*backend {
	bs := make([]*backend, n)
	for i := range bs {
		bs[i] = startBackend(t, fmt.Sprintf("198.18.%d.%d", net, i+1))
	}
	return bs
}

// createService creates a headless Service without a selector (no
// controller runs: the tests write its EndpointSlices), with the port
// "http" on 8080 and "grpc" on 9090.
func createService(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
				{Name: "grpc", Port: 9090, Protocol: corev1.ProtocolTCP},
			},
		},
	}
	if _, err := cs.CoreV1().Services(ns).Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// state is an endpoint's conditions in a slice.
type state int

const (
	ready    state = iota
	notReady       // not ready, not serving, not terminating: a failing readiness probe
	draining       // terminating, still serving: a pod being deleted
)

type ep struct {
	ip string
	st state
}

// putSlice creates or replaces EndpointSlice name of Service svc, with
// the endpoints eps on port "http" (8080) and "grpc" (port grpcPort, if
// not 0).
func putSlice(t *testing.T, cs kubernetes.Interface, ns, svc, name string, grpcPort int32, eps ...ep) {
	t.Helper()
	httpName, grpcName, httpPort := "http", "grpc", int32(backendPort)
	proto := corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &httpName, Port: &httpPort, Protocol: &proto}},
	}
	if grpcPort != 0 {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: &grpcName, Port: &grpcPort, Protocol: &proto})
	}
	for _, e := range eps {
		r, sv, te := e.st == ready, e.st != notReady, e.st == draining
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{e.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: &r, Serving: &sv, Terminating: &te},
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	api := cs.DiscoveryV1().EndpointSlices(ns)
	old, err := api.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, s, metav1.CreateOptions{})
	case err == nil:
		s.ResourceVersion = old.ResourceVersion
		_, err = api.Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func readyEPs(bs ...*backend) []ep {
	eps := make([]ep, len(bs))
	for i, b := range bs {
		eps[i] = ep{ip: b.ip, st: ready}
	}
	return eps
}

// A proxy is a Transport fed by a Watcher, with a client of its own.
type proxy struct {
	tr *httpmaglev.Transport
	w  *membership.Watcher
}

func newProxy(t *testing.T, cs kubernetes.Interface, svc k8smaglev.Service) *proxy {
	t.Helper()
	tr, err := httpmaglev.NewTransport(httpmaglev.Config{Key: httpmaglev.HeaderKey("X-Key"), DisableRetries: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	w, err := k8smaglev.Watch(ctx, cs, svc, tr.SetEndpoints, k8smaglev.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return &proxy{tr: tr, w: w}
}

// get sends GET path with key through p and returns the backend that
// answered.
func (p *proxy) get(key, path string) (string, error) {
	req, _ := http.NewRequest("GET", "http://web"+path, nil)
	req.Header.Set("X-Key", key)
	resp, err := (&http.Client{Transport: p.tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return string(body), nil
}

func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("user-%d", i)
	}
	return ks
}

// owners returns each key's owner in maglev.New over names: the table
// every process that knows those backends computes.
func owners(t *testing.T, names []string, ks []string) map[string]string {
	t.Helper()
	tab, err := maglev.New(names, maglev.DefaultSize, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]string, len(ks))
	for _, k := range ks {
		m[k] = tab.Lookup(k)
	}
	return m
}

func addrsOf(bs ...*backend) []string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = b.addr
	}
	return s
}

// checkRouting sends every key through every proxy, with 8 requests at a
// time, and fails t unless each reaches its owner in want.
func checkRouting(t *testing.T, ps []*proxy, want map[string]string) {
	t.Helper()
	type job struct {
		p int
		k string
	}
	jobs := make(chan job)
	var mu sync.Mutex
	var bad []string
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for j := range jobs {
				got, err := ps[j.p].get(j.k, "/")
				if err != nil || got != want[j.k] {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("proxy %d, key %s: %q %v, want %s", j.p, j.k, got, err, want[j.k]))
					mu.Unlock()
				}
			}
		})
	}
	for k := range want {
		for i := range ps {
			jobs <- job{i, k}
		}
	}
	close(jobs)
	wg.Wait()
	if len(bad) > 0 {
		slices.Sort(bad)
		t.Fatalf("%d of %d requests missed their owner; first: %s", len(bad), len(want)*len(ps), strings.Join(bad[:min(5, len(bad))], "; "))
	}
}

// waitFor polls cond every millisecond until it holds, and returns how
// long that took; it fails t after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

// names returns the names of a Watcher's backends, with "(drained)" after
// a drained one.
func names(eps []membership.Endpoint) string {
	s := make([]string, len(eps))
	for i, b := range eps {
		s[i] = b.Name
		if b.Weight == 0 {
			s[i] += "(drained)"
		}
	}
	return strings.Join(s, " ")
}

// A forwarder relays TCP connections from its own address to the API
// server's, and can cut them: the tests cut a Watcher off, as a network
// partition would, while the API server stays up for the test's client.
type forwarder struct {
	addr string
	lis  net.Listener

	mu    sync.Mutex // guards cut and conns
	cut   bool
	conns map[net.Conn]bool
}

func startForwarder(t *testing.T, port int) *forwarder {
	t.Helper()
	f := &forwarder{addr: net.JoinHostPort(k8stest.APIServerIP, fmt.Sprint(port)), conns: make(map[net.Conn]bool)}
	var err error
	if f.lis, err = net.Listen("tcp", f.addr); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := f.lis.Accept()
			if err != nil {
				return
			}
			go f.relay(c)
		}
	}()
	t.Cleanup(func() { _ = f.lis.Close(); f.setCut(true) })
	return f
}

func (f *forwarder) relay(c net.Conn) {
	f.mu.Lock()
	if f.cut {
		f.mu.Unlock()
		_ = c.Close()
		return
	}
	f.conns[c] = true
	f.mu.Unlock()
	up, err := net.Dial("tcp", net.JoinHostPort(k8stest.APIServerIP, "6443"))
	if err != nil {
		_ = c.Close()
		return
	}
	f.mu.Lock()
	f.conns[up] = true
	f.mu.Unlock()
	go func() { io.Copy(up, c); up.Close() }() //nolint:errcheck // ends when either side closes
	io.Copy(c, up)                             //nolint:errcheck // ends when either side closes
	_ = c.Close()
}

// setCut cuts every connection and refuses new ones (true), or relays
// again (false).
func (f *forwarder) setCut(cut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = cut
	if cut {
		for c := range f.conns {
			_ = c.Close()
		}
		clear(f.conns)
	}
}
