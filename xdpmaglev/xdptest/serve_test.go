//go:build linux

package xdptest_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev/xdptest"
)

// TestServe: a NameEcho server in a namespace says its name and echoes;
// stop closes a connection still open and the listener, and may be
// called again.
func TestServe(t *testing.T) {
	xdptest.Need(t)
	ns := xdptest.VethNS(t, "xdptest-serve")
	stop := xdptest.Serve(t, ns, "tcp4", "198.18.0.3:8080", time.Minute, xdptest.NameEcho("node-a"))
	c, err := xdptest.In(ns, func() (net.Conn, error) { return net.DialTimeout("tcp4", "198.18.0.3:8080", 5*time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if name, err := r.ReadString('\n'); err != nil || name != "node-a\n" {
		t.Fatalf("first line %q, %v; want node-a", name, err)
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if echo, err := r.ReadString('\n'); err != nil || echo != "ping\n" {
		t.Fatalf("echo %q, %v", echo, err)
	}
	stop()
	stop()
	if _, err := r.ReadString('\n'); err == nil {
		t.Errorf("the connection is open after stop")
	}
	if _, err := xdptest.In(ns, func() (net.Conn, error) { return net.DialTimeout("tcp4", "198.18.0.3:8080", time.Second) }); err == nil {
		t.Errorf("a connection accepted after stop")
	}
}
