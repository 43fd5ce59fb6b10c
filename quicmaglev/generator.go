// Package quicmaglev makes a quic-go server issue QUIC-LB connection IDs
// (draft-ietf-quic-load-balancers, package quiclb): each carries the
// server's ID, so that a QUIC-LB load balancer (xdpmaglev, l4lb) sends a
// connection's packets to this server from whatever address the client
// moves to. A server adds one import:
//
//	import "github.com/maglevlb/maglev/quicmaglev"
//
// and gives its quic.Transport a Generator:
//
//	gen, err := quicmaglev.NewGenerator(cfg, serverID) // the load balancer's configuration, this server's ID
//	if err != nil {
//		return err // quiclb: ... (errors.Is-matchable)
//	}
//	tr := &quic.Transport{Conn: udpConn, ConnectionIDGenerator: gen}
//	ln, err := tr.Listen(tlsConf, quicConf) // or tr.ListenEarly, or http3.Server{...}.ServeListener
//
// Every connection ID the server issues, its first (the source connection
// ID of its Initial) and those of NEW_CONNECTION_ID frames, a client's
// spare IDs for migration, is then the Generator's. A key rotation is
// [Generator.Rotate]: new IDs use the new configuration while the load
// balancer decodes both. docs/quic.md has the whole setup.
package quicmaglev

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/maglevlb/maglev/quiclb"
	"github.com/quic-go/quic-go"
)

// A Generator is a quic.ConnectionIDGenerator that issues QUIC-LB
// connection IDs of one server: quiclb.Generator's, of the configuration
// set last. When a configuration's nonces run out (a key and nonces
// shorter than 8 octets: after 2^(8·NonceLen) IDs), it issues unroutable
// IDs (the codepoint 0b111, which the load balancer routes by the
// 4-tuple) until Rotate gives it another configuration, and counts them.
//
// A Generator is safe for concurrent use by multiple goroutines: quic-go
// calls it from its connections' goroutines.
type Generator struct {
	n          int                              // the IDs' length, for the Transport's lifetime
	cur        atomic.Pointer[quiclb.Generator] // the configuration IDs are issued under
	unroutable atomic.Uint64                    // unroutable IDs issued
	next       func(*quiclb.Generator, []byte) ([]byte, error)
}

var _ quic.ConnectionIDGenerator = (*Generator)(nil)

// NewGenerator returns the Generator of server ID id under configuration
// c, or quiclb.NewGenerator's error (wrapping quiclb.ErrConfig or
// quiclb.ErrServerID).
func NewGenerator(c quiclb.Config, id quiclb.ServerID) (*Generator, error) {
	g, err := quiclb.NewGenerator(c, id)
	if err != nil {
		return nil, err
	}
	gen := &Generator{n: c.Len(), next: (*quiclb.Generator).Append}
	gen.cur.Store(g)
	return gen, nil
}

// GenerateConnectionID returns a new connection ID: quic-go calls it for
// each one the server issues. It costs what quiclb.Generator.Append
// costs, and one allocation.
func (g *Generator) GenerateConnectionID() (quic.ConnectionID, error) {
	var buf [quiclb.MaxConnIDLen]byte
	b, err := g.next(g.cur.Load(), buf[:0])
	if errors.Is(err, quiclb.ErrNoncesExhausted) {
		g.unroutable.Add(1)
		b, err = quiclb.AppendUnroutable(buf[:0], g.n)
	}
	if err != nil {
		return quic.ConnectionID{}, err
	}
	return quic.ConnectionIDFromBytes(b), nil
}

// ConnectionIDLen returns the length of the Generator's connection IDs:
// the configuration's Len.
func (g *Generator) ConnectionIDLen() int { return g.n }

// Rotate makes the Generator issue IDs of server ID id under
// configuration c from now on: the connections that exist go on with the
// IDs they have, and get the new configuration's as they ask for more (a
// load balancer decodes both while it has both). The IDs' length is the
// Transport's for its lifetime, so c.Len must be the old configuration's;
// Rotate returns an error wrapping quiclb.ErrConfig otherwise, or
// quiclb.NewGenerator's, and keeps the old configuration.
func (g *Generator) Rotate(c quiclb.Config, id quiclb.ServerID) error {
	if c.Len() != g.n {
		return fmt.Errorf("%w: connection IDs of %d octets, and the Transport's are %d: quic-go keeps a Transport's length", quiclb.ErrConfig, c.Len(), g.n)
	}
	next, err := quiclb.NewGenerator(c, id)
	if err != nil {
		return err
	}
	g.cur.Store(next)
	return nil
}

// Config returns the configuration the Generator issues IDs under (its
// key a copy), and the server ID.
func (g *Generator) Config() (quiclb.Config, quiclb.ServerID) {
	cur := g.cur.Load()
	return cur.Config(), cur.ServerID()
}

// Unroutable returns the number of unroutable IDs the Generator issued
// because its configuration's nonces ran out.
func (g *Generator) Unroutable() uint64 { return g.unroutable.Load() }
