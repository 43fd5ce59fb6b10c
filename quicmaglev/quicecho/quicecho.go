// Package quicecho is a QUIC echo service on quic-go whose server issues
// QUIC-LB connection IDs, and a client whose connections migrate: what
// quicmaglev's examples, the quicecho command and the tests of the load
// balancers (xdpmaglev, l4lb) run on each backend and client. A server
// answers each line a client sends on a stream with its own name and the
// line, so that the client knows which backend holds its connection.
package quicecho

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// ALPN is the service's application protocol.
const ALPN = "maglev-echo"

// Config is the QUIC configuration of both ends: path MTU discovery off,
// since its probes, with the 28 or 48 octets of a GUE load balancer's
// outer headers, outgrow a link of 1500 (docs/quic.md, "MTU").
func Config() *quic.Config {
	return &quic.Config{DisablePathMTUDiscovery: true, MaxIdleTimeout: 30 * time.Second, HandshakeIdleTimeout: 5 * time.Second}
}

// SelfSigned returns a new self-signed certificate for the server.
func SelfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), DNSNames: []string{"quicecho"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// A Server answers the connections of one quic.Transport.
type Server struct {
	name  string
	ln    *quic.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex // guards conns
	conns map[*quic.Conn]bool
}

// Serve serves the echo service on tr (whose ConnectionIDGenerator is a
// quicmaglev.Generator, for a QUIC-LB load balancer) as name, with a
// self-signed certificate, until Close.
func Serve(tr *quic.Transport, name string) (*Server, error) {
	cert, err := SelfSigned()
	if err != nil {
		return nil, err
	}
	ln, err := tr.Listen(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{ALPN}}, Config())
	if err != nil {
		return nil, err
	}
	s := &Server{name: name, ln: ln, conns: map[*quic.Conn]bool{}}
	s.wg.Go(s.accept)
	return s, nil
}

func (s *Server) accept() {
	for {
		c, err := s.ln.Accept(context.Background())
		if err != nil {
			return
		}
		s.wg.Go(func() { s.serve(c) })
	}
}

func (s *Server) serve(c *quic.Conn) {
	s.mu.Lock()
	s.conns[c] = true
	s.mu.Unlock()
	defer func() {
		_ = c.CloseWithError(0, "")
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	for {
		st, err := c.AcceptStream(context.Background())
		if err != nil {
			return
		}
		s.wg.Go(func() {
			defer func() { _ = st.Close() }()
			r := bufio.NewReader(st)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if _, err := io.WriteString(st, s.name+" "+line); err != nil {
					return
				}
			}
		})
	}
}

// Close stops accepting connections, closes those open, and waits for
// the server's goroutines.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.CloseWithError(0, "server closing")
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// A Client is a connection to an echo server with one stream.
type Client struct {
	conn   *quic.Conn
	stream *quic.Stream
	r      *bufio.Reader
	trs    []*quic.Transport // the connection's, the first it dialled from
}

// cidLen is the length of the clients' own connection IDs.
const cidLen = 8

// Dial connects from pc to the server at addr and opens the stream.
func Dial(ctx context.Context, pc net.PacketConn, addr net.Addr) (*Client, error) {
	tr := &quic.Transport{Conn: pc, ConnectionIDLength: cidLen}
	conn, err := tr.Dial(ctx, addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{ALPN}}, Config()) //nolint:gosec // a test service's self-signed certificate
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	st, err := conn.OpenStreamSync(ctx)
	if err != nil {
		_ = conn.CloseWithError(0, "")
		_ = tr.Close()
		return nil, err
	}
	return &Client{conn: conn, stream: st, r: bufio.NewReader(st), trs: []*quic.Transport{tr}}, nil
}

// Echo sends line and returns the name of the server that answered, with
// ctx's deadline for both.
func (c *Client) Echo(ctx context.Context, line string) (string, error) {
	if d, ok := ctx.Deadline(); ok {
		_ = c.stream.SetDeadline(d)
	}
	if _, err := io.WriteString(c.stream, line+"\n"); err != nil {
		return "", err
	}
	reply, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	name, got, ok := strings.Cut(strings.TrimSuffix(reply, "\n"), " ")
	if !ok || got != line {
		return "", fmt.Errorf("quicecho: the reply %q is no echo of %q", reply, line)
	}
	return name, nil
}

// ErrNotMigrated means the connection's path probe on the new socket got
// no answer: the server that holds the connection did not see it.
var ErrNotMigrated = errors.New("quicecho: the new path was not validated")

// Migrate moves the connection to pc, as a client does when its address
// changes: it probes the new path (from one of the spare connection IDs
// the server issued), waiting for the answer within ctx, and switches to
// it. The old socket is left to the caller: closing it is the client
// leaving its old address. It returns an error wrapping ErrNotMigrated
// when the probe went unanswered.
func (c *Client) Migrate(ctx context.Context, pc net.PacketConn) error {
	tr := &quic.Transport{Conn: pc, ConnectionIDLength: cidLen}
	c.trs = append(c.trs, tr)
	p, err := c.conn.AddPath(tr)
	if err != nil {
		return err
	}
	if err := p.Probe(ctx); err != nil {
		_ = p.Close()
		return fmt.Errorf("%w: %w", ErrNotMigrated, err)
	}
	return p.Switch()
}

// Close closes the connection and the client's transports (not their
// sockets, which are the caller's).
func (c *Client) Close() error {
	err := c.conn.CloseWithError(0, "")
	for _, tr := range c.trs {
		_ = tr.Close()
	}
	return err
}
