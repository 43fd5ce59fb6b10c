package quicmaglev_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/maglevlb/maglev/quiclb"
	"github.com/maglevlb/maglev/quicmaglev"
	"github.com/maglevlb/maglev/quicmaglev/quicecho"
	"github.com/quic-go/quic-go"
)

// A QUIC server behind a QUIC-LB load balancer: its Transport issues the
// connection IDs of this server's ID under the load balancer's
// configuration, which the load balancer decodes from every packet of its
// connections.
func ExampleGenerator() {
	cfg := quiclb.Config{ID: 1, ServerIDLen: 3, NonceLen: 6, Key: make([]byte, quiclb.KeyLen)} // shared with the load balancer
	id, _ := quiclb.ParseServerID("0a0b0c")                                                    // this server's
	gen, err := quicmaglev.NewGenerator(cfg, id)
	if err != nil {
		panic(err)
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		panic(err)
	}
	defer func() { _ = conn.Close() }()
	tr := &quic.Transport{Conn: conn, ConnectionIDGenerator: gen}
	defer func() { _ = tr.Close() }()
	srv, err := quicecho.Serve(tr, "backend-a") // a QUIC server of tr's: quic-go's Listen, or http3
	if err != nil {
		panic(err)
	}
	defer func() { _ = srv.Close() }()

	// A client, and what the load balancer reads of an ID the server issues.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		panic(err)
	}
	defer func() { _ = client.Close() }()
	c, err := quicecho.Dial(ctx, client, conn.LocalAddr())
	if err != nil {
		panic(err)
	}
	defer func() { _ = c.Close() }()
	name, err := c.Echo(ctx, "hello")
	fmt.Println("answered by", name, err)

	cid, _ := gen.GenerateConnectionID()
	d, _ := quiclb.NewDecoder(cfg)
	got, err := d.Decode(cid.Bytes())
	fmt.Printf("a %d-octet connection ID of server %v, %v\n", cid.Len(), got, err)
	// Output:
	// answered by backend-a <nil>
	// a 10-octet connection ID of server 0a0b0c, <nil>
}
