package main

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// testEtcd is a real single-member etcd (go.etcd.io/etcd/server/v3/embed,
// the server at the client's version) in the test process, on loopback, on
// free ports and a temporary data directory. It can be stopped and started
// again on the same ports and data, as an etcd restart is.
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
	defer func() { _ = l.Close() }() // only probed
	return l.Addr().(*net.TCPAddr).Port
}

// startEtcd starts etcd and stops it, and removes its data, at the test's
// end.
func startEtcd(t *testing.T) *testEtcd {
	t.Helper()
	s := &testEtcd{t: t, dir: filepath.Join(t.TempDir(), "etcd")}
	s.clientURL = url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
	s.peerURL = url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
	s.start()
	t.Cleanup(s.stop)
	return s
}

// start starts (or restarts) the server and waits until it serves.
func (s *testEtcd) start() {
	s.t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "fleet"
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
