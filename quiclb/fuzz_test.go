package quiclb

import (
	"bytes"
	"testing"
)

// FuzzCodec derives a configuration, a server ID and a nonce from its
// input, and checks that the encoded ID decodes back to both; then it
// decodes the input's own octets as a connection ID, and checks Decode
// (three passes where it may stop early) against the whole four-pass
// decryption, and that no input panics.
func FuzzCodec(f *testing.F) {
	// Seeds: the draft's shapes (odd and even blocks, a server ID longer
	// than its nonce, the single pass), the bounds, and IDs of each
	// codepoint, the unroutable one among them.
	key := unhex(f, vectorKey)
	f.Add(uint8(0), uint8(3), uint8(4), true, []byte("\x31\x44\x1a\x9c\x69\xc2\x75"), key)
	f.Add(uint8(1), uint8(10), uint8(5), true, unhex(f, "2fcc381bc74cb4fbad2823a3d1f8fed2"), key)
	f.Add(uint8(2), uint8(8), uint8(8), false, unhex(f, "504dd2d05a7b0de9b2b9907afb5ecf8cc3"), key)
	f.Add(uint8(6), uint8(15), uint8(4), true, bytes.Repeat([]byte{0xff}, 20), key)
	f.Add(uint8(0), uint8(1), uint8(18), false, []byte{}, []byte{})
	f.Add(uint8(7), uint8(1), uint8(4), false, []byte{0xe7, 1, 2, 3, 4, 5, 6, 7}, []byte{})
	f.Fuzz(func(t *testing.T, id, sidLen, nonceLen uint8, encodeLen bool, data, key []byte) {
		c := Config{ID: id % Unroutable, ServerIDLen: 1 + int(sidLen)%MaxServerIDLen, EncodeLength: encodeLen}
		c.NonceLen = MinNonceLen + int(nonceLen)%(MaxBlockLen-c.ServerIDLen-MinNonceLen+1)
		if len(key) >= KeyLen {
			c.Key = key[:KeyLen]
		}
		d, err := NewDecoder(c)
		if err != nil {
			t.Fatal(err)
		}
		// The input's octets as an ID: no panic; a decoded server ID is
		// the whole decryption's.
		if got, err := d.Decode(data); err == nil {
			if len(data) < c.Len() || data[0]>>5 != c.ID {
				t.Fatalf("decoded %x (%d octets, codepoint %d) under %+v", data, len(data), data[0]>>5, c)
			}
			if want := plaintext(t, c, data)[:c.ServerIDLen]; !bytes.Equal(got.Append(nil), want) {
				t.Fatalf("%+v: Decode(%x) = %v, the whole decryption %x", c, data, got, want)
			}
		}
		// The input's octets as a server ID and nonce: a round trip.
		blk := make([]byte, c.ServerIDLen+c.NonceLen)
		copy(blk, data)
		sid, err := MakeServerID(blk[:c.ServerIDLen])
		if err != nil {
			t.Fatal(err)
		}
		e, err := NewEncoder(c, sid)
		if err != nil {
			t.Fatal(err)
		}
		cid, err := e.Append(nil, blk[c.ServerIDLen:], 0)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := d.Decode(cid); err != nil || got != sid {
			t.Fatalf("%+v: %v encoded as %x decodes to %v, %v", c, sid, cid, got, err)
		}
		if back := plaintext(t, c, cid); !bytes.Equal(back, blk) {
			t.Fatalf("%+v: %x encoded as %x decrypts to %x", c, blk, cid, back)
		}
	})
}
