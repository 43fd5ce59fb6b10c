package quiclb

import (
	"bytes"
	"testing"
)

// benchConfigs are a configuration of each mode: plaintext, the single
// pass, four passes with the server ID in left_0 (three to decode) and
// with a server ID longer than the nonce (four).
var benchConfigs = []struct {
	name string
	c    Config
}{
	{"plaintext", Config{ServerIDLen: 3, NonceLen: 6}},
	{"single-pass", Config{ServerIDLen: 3, NonceLen: 13, Key: bytes.Repeat([]byte{5}, KeyLen)}},
	{"four-pass/3", Config{ServerIDLen: 3, NonceLen: 6, Key: bytes.Repeat([]byte{5}, KeyLen)}},
	{"four-pass/4", Config{ServerIDLen: 6, NonceLen: 4, Key: bytes.Repeat([]byte{5}, KeyLen)}},
}

var sinkID ServerID

// BenchmarkDecode measures a load balancer's decoding of one connection
// ID, in each mode.
func BenchmarkDecode(b *testing.B) {
	for _, bc := range benchConfigs {
		b.Run(bc.name, func(b *testing.B) {
			id, _ := MakeServerID(bytes.Repeat([]byte{0x42}, bc.c.ServerIDLen))
			g, err := NewGenerator(bc.c, id)
			if err != nil {
				b.Fatal(err)
			}
			cid, _ := g.Append(nil)
			d, _ := NewDecoder(bc.c)
			b.ReportAllocs()
			for b.Loop() {
				sinkID, _ = d.Decode(cid)
			}
			if sinkID != id {
				b.Fatalf("decoded %v", sinkID)
			}
		})
	}
}

var sinkCID []byte

// BenchmarkGenerator measures a server's issuing of one connection ID,
// in each mode: the nonce (crypto/rand, or a counter), the encoding.
func BenchmarkGenerator(b *testing.B) {
	for _, bc := range benchConfigs {
		b.Run(bc.name, func(b *testing.B) {
			id, _ := MakeServerID(bytes.Repeat([]byte{0x42}, bc.c.ServerIDLen))
			g, err := NewGenerator(bc.c, id)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 0, MaxConnIDLen)
			b.ReportAllocs()
			for b.Loop() {
				sinkCID, _ = g.Append(buf[:0])
			}
		})
	}
}
