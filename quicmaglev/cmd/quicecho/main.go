// Command quicecho is a QUIC echo server that issues QUIC-LB connection
// IDs: the example server of docs/quic.md, to run on each backend behind
// a QUIC-LB load balancer (l4lb with quic-lb on). It answers every line a
// client sends on a stream with its name and the line.
//
//	quicecho -listen :443 -name backend-a -config-id 1 -server-id 0a0b0c -nonce-length 6 -key-file /etc/l4lb/quic.key
//
// The configuration is the load balancer's (quic-lb-config-id,
// quic-lb-server-id-length, which is -server-id's length,
// quic-lb-nonce-length, quic-lb-key-file); -server-id is this backend's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/maglevlb/maglev/quiclb"
	"github.com/maglevlb/maglev/quicmaglev"
	"github.com/maglevlb/maglev/quicmaglev/quicecho"
	"github.com/quic-go/quic-go"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		log.Fatal(err)
	}
}

// run serves until ctx ends; ready, if not nil, receives the address
// served.
func run(ctx context.Context, args []string, stderr io.Writer, ready chan<- net.Addr) error {
	fs := flag.NewFlagSet("quicecho", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":4433", "the UDP `address` to serve on")
	name := fs.String("name", "", "the name the server answers with (default: the host's name)")
	cfgID := fs.Uint("config-id", 0, "the QUIC-LB configuration's `codepoint`, 0 to 6")
	sidHex := fs.String("server-id", "", "this server's QUIC-LB server ID, in `hex` (its length is the configuration's server ID length)")
	nonceLen := fs.Int("nonce-length", 6, "the configuration's nonce `length` in octets, 4 to 18")
	keyFile := fs.String("key-file", "", "a `file` holding the configuration's 16-octet key in hex (none: plaintext server IDs)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" {
		*name, _ = os.Hostname()
	}
	if *sidHex == "" {
		return errors.New("quicecho: -server-id is required")
	}
	id, err := quiclb.ParseServerID(*sidHex)
	if err != nil {
		return err
	}
	c := quiclb.Config{ID: uint8(min(*cfgID, 255)), ServerIDLen: id.Len(), NonceLen: *nonceLen}
	if *keyFile != "" {
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			return fmt.Errorf("quicecho: %w", err)
		}
		if c.Key, err = quiclb.ParseKey(string(b)); err != nil {
			return fmt.Errorf("quicecho: %s: %w", *keyFile, err)
		}
	}
	gen, err := quicmaglev.NewGenerator(c, id)
	if err != nil {
		return err
	}
	conn, err := net.ListenPacket("udp", *listen)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	tr := &quic.Transport{Conn: conn, ConnectionIDGenerator: gen}
	defer func() { _ = tr.Close() }()
	srv, err := quicecho.Serve(tr, *name)
	if err != nil {
		return err
	}
	defer func() { _ = srv.Close() }()
	_, _ = fmt.Fprintf(stderr, "quicecho: %s serving on %v, server ID %v, configuration %d (%v)\n", *name, conn.LocalAddr(), id, c.ID, c.Mode())
	if ready != nil {
		ready <- conn.LocalAddr()
	}
	<-ctx.Done()
	return nil
}
