//go:build linux

package xdptest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Serve runs handle for each connection to a listener on network and
// addr ("tcp4", ":80") in namespace ns, each connection's deadline bound
// from its accept (a bound, not a check), until stop or the end of the
// test: either closes the listener and every connection still open (a
// client that went elsewhere would wait for its deadline) and waits for
// the handlers; stop may be called again. An error listening fails tb.
func Serve(tb testing.TB, ns, network, addr string, bound time.Duration, handle func(net.Conn)) (stop func()) {
	tb.Helper()
	ln, err := In(ns, func() (net.Listener, error) { return net.Listen(network, addr) })
	if err != nil {
		tb.Fatalf("xdptest: listening on %s %s in %s: %v", network, addr, ns, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	stop = sync.OnceFunc(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	tb.Cleanup(stop)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					_ = c.Close()
				}()
				_ = c.SetDeadline(time.Now().Add(bound))
				handle(c)
			})
		}
	})
	return stop
}

// NameEcho is a handler for Serve of a backend that says who it is: it
// sends name and a newline, then echoes what it reads.
func NameEcho(name string) func(net.Conn) {
	return func(c net.Conn) {
		if _, err := io.WriteString(c, name+"\n"); err != nil {
			return
		}
		_, _ = io.Copy(c, c)
	}
}

// AttachXDP attaches prog to dev in namespace ns natively (the driver's
// XDP) until the end of the test; an error fails tb. On a veth, XDP_TX
// needs a program on the peer: XDP_PASS is enough.
func AttachXDP(tb testing.TB, ns, dev string, prog *ebpf.Program) {
	tb.Helper()
	l, err := In(ns, func() (link.Link, error) {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return nil, err
		}
		return link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index, Flags: link.XDPDriverMode})
	})
	if err != nil {
		tb.Fatalf("xdptest: attaching XDP to %s in %s: %v", dev, ns, err)
	}
	tb.Cleanup(func() { _ = l.Close() })
}
