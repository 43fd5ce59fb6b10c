package quiclb_test

import (
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/maglevlb/maglev/quiclb"
)

// The worked example of the draft: a server ID and nonce encrypted in four
// passes, and a load balancer reading the server ID back.
func ExampleEncoder() {
	key, _ := hex.DecodeString("fdf726a9893ec05c0632d3956680baf0")
	c := quiclb.Config{ID: 0, ServerIDLen: 3, NonceLen: 4, Key: key, EncodeLength: true}
	id, _ := quiclb.ParseServerID("31441a")
	e, err := quiclb.NewEncoder(c, id)
	if err != nil {
		panic(err)
	}
	nonce, _ := hex.DecodeString("9c69c275")
	cid, _ := e.Append(nil, nonce, 0)
	fmt.Printf("connection ID: %x\n", cid)

	d, _ := quiclb.NewDecoder(c)
	got, err := d.Decode(cid)
	fmt.Println("server ID:", got, err)
	// Output:
	// connection ID: 0767947d29be054a
	// server ID: 31441a <nil>
}

// A key rotation: the load balancer decodes the old configuration and the
// new one while the servers move to the new; an ID of the unroutable
// codepoint, or of a configuration it does not have, goes by its fallback.
func ExampleDecoder() {
	oldKey, newKey := make([]byte, quiclb.KeyLen), make([]byte, quiclb.KeyLen)
	newKey[0] = 1
	old := quiclb.Config{ID: 0, ServerIDLen: 2, NonceLen: 8, Key: oldKey}
	cur := quiclb.Config{ID: 1, ServerIDLen: 2, NonceLen: 8, Key: newKey}
	d, err := quiclb.NewDecoder(old, cur)
	if err != nil {
		panic(err)
	}
	id, _ := quiclb.ParseServerID("0a0b")
	for _, c := range []quiclb.Config{old, cur} {
		g, _ := quiclb.NewGenerator(c, id) // a server's: fresh nonces
		cid, _ := g.Append(nil)
		got, err := d.Decode(cid)
		fmt.Printf("configuration %d: server %v, %v\n", c.ID, got, err)
	}
	unroutable, _ := quiclb.AppendUnroutable(nil, 8)
	_, err = d.Decode(unroutable)
	fmt.Println(errors.Is(err, quiclb.ErrUnroutable), err)
	_, err = d.Decode([]byte{2 << 5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	fmt.Println(errors.Is(err, quiclb.ErrUnknownConfig), err)
	// Output:
	// configuration 0: server 0a0b, <nil>
	// configuration 1: server 0a0b, <nil>
	// true quiclb: unroutable connection ID
	// true quiclb: unknown configuration
}
