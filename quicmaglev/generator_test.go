package quicmaglev

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev/quiclb"
	"github.com/maglevlb/maglev/quicmaglev/quicecho"
	"github.com/quic-go/quic-go"
)

var key = bytes.Repeat([]byte{7}, quiclb.KeyLen)

func sid(t testing.TB, s string) quiclb.ServerID {
	t.Helper()
	id, err := quiclb.ParseServerID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestGenerator: the IDs decode to the server ID, in every mode; Rotate
// switches new IDs to another configuration of the same length, and
// refuses another length; an exhausted configuration gives unroutable
// IDs, counted.
func TestGenerator(t *testing.T) {
	for _, c := range []quiclb.Config{
		{ID: 1, ServerIDLen: 3, NonceLen: 6},
		{ID: 2, ServerIDLen: 4, NonceLen: 12, Key: key},
		{ID: 3, ServerIDLen: 2, NonceLen: 7, Key: key, EncodeLength: true},
	} {
		id := sid(t, "0a0b0c0d"[:2*c.ServerIDLen])
		g, err := NewGenerator(c, id)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := quiclb.NewDecoder(c)
		if g.ConnectionIDLen() != c.Len() {
			t.Fatalf("ConnectionIDLen %d, want %d", g.ConnectionIDLen(), c.Len())
		}
		seen := map[string]bool{}
		for range 1000 {
			cid, err := g.GenerateConnectionID()
			if err != nil || cid.Len() != c.Len() {
				t.Fatalf("%v, %v", cid, err)
			}
			if got, err := d.Decode(cid.Bytes()); err != nil || got != id {
				t.Fatalf("%v decodes to %v, %v", cid, got, err)
			}
			seen[string(cid.Bytes())] = true
		}
		if len(seen) != 1000 {
			t.Fatalf("%d distinct IDs of 1000", len(seen))
		}
	}

	old := quiclb.Config{ID: 0, ServerIDLen: 2, NonceLen: 6, Key: key}
	cur := quiclb.Config{ID: 1, ServerIDLen: 2, NonceLen: 6, Key: bytes.Repeat([]byte{8}, 16)}
	g, err := NewGenerator(old, sid(t, "0001"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Rotate(quiclb.Config{ID: 1, ServerIDLen: 2, NonceLen: 7}, sid(t, "0001")); !errors.Is(err, quiclb.ErrConfig) {
		t.Fatalf("Rotate to another length: %v", err)
	}
	if err := g.Rotate(cur, sid(t, "0002")); err != nil {
		t.Fatal(err)
	}
	if c, id := g.Config(); c.ID != 1 || id.String() != "0002" || !bytes.Equal(c.Key, cur.Key) {
		t.Fatalf("Config after Rotate: %+v, %v", c, id)
	}
	d, _ := quiclb.NewDecoder(old, cur)
	cid, _ := g.GenerateConnectionID()
	if got, err := d.Decode(cid.Bytes()); err != nil || got.String() != "0002" || cid.Bytes()[0]>>5 != 1 {
		t.Fatalf("after Rotate: %v decodes to %v, %v", cid, got, err)
	}

	if _, err := NewGenerator(quiclb.Config{ServerIDLen: 2, NonceLen: 3}, sid(t, "0001")); !errors.Is(err, quiclb.ErrConfig) {
		t.Fatalf("a bad configuration: %v", err)
	}
	if _, err := NewGenerator(old, sid(t, "01")); !errors.Is(err, quiclb.ErrServerID) {
		t.Fatalf("a server ID of another length: %v", err)
	}

	// The nonces run out: unroutable IDs of the same length.
	g.next = func(*quiclb.Generator, []byte) ([]byte, error) { return nil, quiclb.ErrNoncesExhausted }
	for range 3 {
		cid, err := g.GenerateConnectionID()
		if err != nil || cid.Len() != old.Len() || cid.Bytes()[0]>>5 != quiclb.Unroutable {
			t.Fatalf("exhausted: %v, %v", cid, err)
		}
		if _, err := d.Decode(cid.Bytes()); !errors.Is(err, quiclb.ErrUnroutable) {
			t.Fatalf("exhausted: %v decodes: %v", cid, err)
		}
	}
	if g.Unroutable() != 3 {
		t.Fatalf("Unroutable %d, want 3", g.Unroutable())
	}
}

// observer is a UDP relay between clients and a server on loopback that
// reads the destination connection ID of every client packet as a QUIC-LB
// load balancer does: each client address gets a socket of its own
// toward the server, so that a client that moves to another socket is a
// new 4-tuple to the server.
type observer struct {
	front  *net.UDPConn
	server *net.UDPAddr
	d      *quiclb.Decoder
	mu     sync.Mutex
	up     map[string]*net.UDPConn
	counts map[string]int // by what the DCID was: the server's, the client's (Initial), or other
	dcids  map[string]bool
	done   sync.WaitGroup
}

func newObserver(t *testing.T, server *net.UDPAddr, d *quiclb.Decoder, want quiclb.ServerID) *observer {
	t.Helper()
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	o := &observer{front: front, server: server, d: d, up: map[string]*net.UDPConn{}, counts: map[string]int{}, dcids: map[string]bool{}}
	o.done.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := front.ReadFromUDP(buf)
			if err != nil {
				return
			}
			p := buf[:n]
			o.mu.Lock()
			kind := "other"
			dcid := p[1:] // a short header's
			switch {
			case p[0]&0xb0 == 0x80: // a version 1 Initial: the client's ID
				kind, dcid = "initial", nil
			case p[0]&0xb0 == 0xa0: // a Handshake: the server's ID
				dcid = p[6:]
			case p[0]&0x80 != 0:
				dcid = nil
			}
			if id, err := d.Decode(dcid); dcid != nil && err == nil && id == want {
				kind = "server"
				o.dcids[string(dcid[:want.Len()+7])] = true
			}
			o.counts[kind]++
			up := o.up[from.String()]
			if up == nil {
				if up, err = net.DialUDP("udp", nil, server); err != nil {
					o.mu.Unlock()
					t.Error(err)
					return
				}
				o.up[from.String()] = up
				o.done.Go(func() {
					b := make([]byte, 2048)
					for {
						m, err := up.Read(b)
						if err != nil {
							return
						}
						_, _ = front.WriteToUDP(b[:m], from)
					}
				})
			}
			o.mu.Unlock()
			_, _ = up.Write(p)
		}
	})
	t.Cleanup(func() {
		_ = front.Close()
		o.mu.Lock()
		for _, u := range o.up {
			_ = u.Close()
		}
		o.mu.Unlock()
		o.done.Wait()
	})
	return o
}

// TestServer: a quic-go echo server with a Generator answers a client
// through a relay that reads every client packet's destination connection
// ID: every short header packet carries an ID that decodes to the
// server's ID, before and after the client migrates to another socket
// (where it uses one of the spare IDs the server issued), and the
// connection goes on.
func TestServer(t *testing.T) {
	c := quiclb.Config{ID: 2, ServerIDLen: 3, NonceLen: 6, Key: key}
	id := sid(t, "abcdef")
	g, err := NewGenerator(c, id)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Close() }()
	tr := &quic.Transport{Conn: pc, ConnectionIDGenerator: g}
	defer func() { _ = tr.Close() }()
	srv, err := quicecho.Serve(tr, "backend-1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	d, _ := quiclb.NewDecoder(c)
	o := newObserver(t, pc.LocalAddr().(*net.UDPAddr), d, id)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sock := func() net.PacketConn {
		s, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	cl, err := quicecho.Dial(ctx, sock(), o.front.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.Close() }()
	if name, err := cl.Echo(ctx, "before"); err != nil || name != "backend-1" {
		t.Fatalf("echo: %q, %v", name, err)
	}
	o.mu.Lock()
	first := len(o.dcids)
	o.mu.Unlock()
	if err := cl.Migrate(ctx, sock()); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if name, err := cl.Echo(ctx, "after"); err != nil || name != "backend-1" {
			t.Fatalf("echo %d after migrating: %q, %v", i, name, err)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts["other"] != 0 || o.counts["server"] == 0 || o.counts["initial"] == 0 || len(o.up) != 2 {
		t.Fatalf("client packets by destination ID %v over %d 4-tuples: want the server's ID's, and an Initial's", o.counts, len(o.up))
	}
	if len(o.dcids) <= first {
		t.Fatalf("%d destination IDs before migrating, %d in all: the new path used none of the spare IDs", first, len(o.dcids))
	}
}
