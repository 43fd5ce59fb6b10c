package etcdmaglev_test

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

// testEtcd is a real single-member etcd (go.etcd.io/etcd/server/v3/embed, the
// server's own code at the client's version) on loopback, on free ports and a
// temporary data directory. It can be stopped and started again on the same
// ports and data, as an etcd restart is.
type testEtcd struct {
	t         *testing.T
	dir       string
	clientURL url.URL
	peerURL   url.URL
	e         *embed.Etcd
}

// freePort returns a loopback port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// startEtcd starts etcd and stops it, and removes its data, at the test's end.
func startEtcd(t *testing.T) *testEtcd {
	t.Helper()
	s := &testEtcd{t: t, dir: filepath.Join(t.TempDir(), "etcd")}
	s.clientURL = url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", itoa(freePort(t)))}
	s.peerURL = url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", itoa(freePort(t)))}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func itoa(n int) string { return strconv.Itoa(n) }

// start starts (or restarts) the server and waits until it serves.
func (s *testEtcd) start() {
	s.t.Helper()
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
	// The port may still be held by the previous server's sockets for a
	// moment after a stop.
	deadline := time.Now().Add(10 * time.Second)
	for {
		e, err = embed.StartEtcd(cfg)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(20 * time.Second):
		e.Close()
		s.t.Fatal("etcd did not become ready in 20s")
	}
	s.e = e
}

// stop stops the server, if it runs.
func (s *testEtcd) stop() {
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

// endpoint is the client URL.
func (s *testEtcd) endpoint() string { return s.clientURL.String() }

// client returns a client of the server, closed at the test's end.
func (s *testEtcd) client(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.endpoint()}, DialTimeout: 5 * time.Second, DialOptions: fastReconnect, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// fastReconnect makes a client retry a lost connection to etcd within half
// a second (grpc's default backoff grows to two minutes).
var fastReconnect = []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
	MinConnectTimeout: 5 * time.Second,
})}
