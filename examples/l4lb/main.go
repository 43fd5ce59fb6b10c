// Command l4lb is a layer-4 load balancer: xdpmaglev's XDP program
// attached to one interface, sending one service's packets to its
// backends by layer-2 direct server return.
//
//	l4lb -iface eth0 -vip 203.0.113.1:80 -backend 10.0.0.11 -backend 10.0.0.12=02:00:00:00:00:12
//
// Each backend must be on the interface's segment and hold the VIP on its
// loopback device (see docs/xdp.md). A backend's MAC comes from the
// neighbour table when not given. l4lb prints the attach mode, serves the
// table's summary and the counters as JSON at /debug/maglev on the admin
// address, and detaches on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/maglevlb/maglev/xdpmaglev"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "l4lb:", err)
		os.Exit(1)
	}
}

// config is the command line, parsed.
type config struct {
	iface    string
	svc      xdpmaglev.Service
	backends []xdpmaglev.Backend
	opts     xdpmaglev.Options
	admin    string
}

// backendFlags collects -backend IP[=MAC] flags.
type backendFlags []xdpmaglev.Backend

func (b *backendFlags) String() string { return fmt.Sprint(len(*b), " backends") }

func (b *backendFlags) Set(s string) error {
	addr, mac, hasMAC := strings.Cut(s, "=")
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return fmt.Errorf("backend %q: %v", s, err)
	}
	be := xdpmaglev.Backend{Addr: a, Weight: 1}
	if hasMAC {
		if be.HW, err = net.ParseMAC(mac); err != nil || len(be.HW) != 6 {
			return fmt.Errorf("backend %q: %q is not an Ethernet address", s, mac)
		}
	}
	*b = append(*b, be)
	return nil
}

func parse(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("l4lb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var bs backendFlags
	var vip, proto, mode string
	var m int
	var seed uint64
	fs.StringVar(&c.iface, "iface", "", "the interface to attach to (required)")
	fs.StringVar(&vip, "vip", "", "the service's VIP:PORT (required)")
	fs.StringVar(&proto, "proto", "tcp", "the service's protocol: tcp or udp")
	fs.Var(&bs, "backend", "a backend, IP or IP=MAC (repeat the flag for each)")
	fs.IntVar(&m, "m", 0, "the table size, a prime (default 65537)")
	fs.Uint64Var(&seed, "seed", 0, "the flow hash seed (load balancers that should agree share it)")
	fs.StringVar(&mode, "mode", "auto", "the attach mode: auto, native or generic")
	fs.StringVar(&c.admin, "admin", "127.0.0.1:9180", "the admin address serving /debug/maglev (empty: none)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.iface == "" || vip == "" {
		return c, errors.New("-iface and -vip are required")
	}
	var err error
	if c.svc.VIP, err = netip.ParseAddrPort(vip); err != nil {
		return c, fmt.Errorf("-vip: %v", err)
	}
	switch proto {
	case "tcp":
		c.svc.Proto = xdpmaglev.TCP
	case "udp":
		c.svc.Proto = xdpmaglev.UDP
	default:
		return c, fmt.Errorf("-proto %q: tcp or udp", proto)
	}
	switch mode {
	case "auto":
		c.opts.Mode = xdpmaglev.AttachAuto
	case "native":
		c.opts.Mode = xdpmaglev.AttachNative
	case "generic":
		c.opts.Mode = xdpmaglev.AttachGeneric
	default:
		return c, fmt.Errorf("-mode %q: auto, native or generic", mode)
	}
	c.opts.M, c.opts.Seed, c.backends = m, seed, bs
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parse(args, stderr)
	if err != nil {
		return err
	}
	lb, err := xdpmaglev.Load(c.iface, c.opts)
	if err != nil {
		return err
	}
	defer func() { _ = lb.Close() }() // on an error; the normal path closes it below
	if err := lb.SetService(c.svc, c.backends); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(stdout, "l4lb: %v attached to %s (%v), %d backends\n", c.svc, c.iface, lb.Mode(), len(c.backends))

	if c.admin != "" {
		ln, err := net.Listen("tcp", c.admin)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/debug/maglev", handler(lb, c))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }() // ends with Shutdown
		defer func() { _ = srv.Shutdown(context.Background()) }()
		_, _ = fmt.Fprintf(stdout, "l4lb: admin on http://%s/debug/maglev\n", ln.Addr())
	}
	<-ctx.Done()
	if err := lb.Close(); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(stdout, "l4lb: detached from %s\n", c.iface)
	return nil
}
