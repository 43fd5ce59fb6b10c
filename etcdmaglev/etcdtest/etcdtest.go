// Package etcdtest runs a real etcd server in a test's own process, for
// tests of code that watches or registers in etcd:
//
//	s := etcdtest.Start(t)
//	c := s.Client(t) // a clientv3.Client of s, closed at the test's end
//
// The server is etcd's own (go.etcd.io/etcd/server/v3/embed, at the
// client's version), a single member on 127.0.0.1, on free ports and a
// temporary data directory. It can be stopped and started again on the same
// ports and data, as an etcd restart is, to test what a client does while
// etcd is away.
package etcdtest

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// A Server is one etcd server. Its methods are for the test goroutine.
type Server struct {
	t         testing.TB
	dir       string
	clientURL url.URL
	peerURL   url.URL
	e         *embed.Etcd // nil while stopped
}

// Start starts a server and waits until it serves; it is stopped, and its
// data removed, at the test's end. Start fails the test if etcd does not
// start within 30 seconds.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: filepath.Join(t.TempDir(), "etcd")}
	ports := freePorts(t, 2)
	s.clientURL = url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	s.peerURL = url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// freePorts returns n distinct loopback ports nobody listens on now: it
// holds each open until it has them all, so no two are the same.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Close() }() // only probed
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// Restart starts the server again after Stop, on the same ports and data,
// and waits until it serves. It does nothing while the server runs.
func (s *Server) Restart() {
	s.t.Helper()
	if s.e != nil {
		return
	}
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{s.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{s.clientURL}
	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	if _, err := os.Stat(s.dir); err == nil {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	var e *embed.Etcd
	var err error
	// The ports may be held by the previous server's sockets for a moment
	// after a stop.
	deadline := time.Now().Add(10 * time.Second)
	for {
		e, err = embed.StartEtcd(cfg)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("etcdtest: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(20 * time.Second):
		e.Close()
		s.t.Fatal("etcdtest: etcd did not become ready in 20s")
	}
	s.e = e
}

// Stop stops the server, if it runs, keeping its ports and data for
// Restart.
func (s *Server) Stop() {
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

// Endpoint returns the server's client URL, http://127.0.0.1:PORT.
func (s *Server) Endpoint() string { return s.clientURL.String() }

// Client returns a client of the server that logs nothing and reconnects
// within half a second of the server's return (FastReconnect), closed at
// the test's end.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint()}, DialTimeout: 5 * time.Second, DialOptions: FastReconnect, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() }) // the test is over: nothing to report to
	return c
}

// FastReconnect makes a gRPC client (an etcd client, or etcd's resolver's
// connection) retry a lost connection within half a second; grpc's default
// backoff grows to two minutes, longer than a test waits.
var FastReconnect = []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
	MinConnectTimeout: 5 * time.Second,
})}
