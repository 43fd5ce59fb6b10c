package quiclb

import (
	"bytes"
	"crypto/aes"
	"encoding/hex"
	"errors"
	"testing"
)

// The test vectors of draft-ietf-quic-load-balancers-21, appendix B ("Load
// Balancer Test Vectors"), and the worked example of section 5.5.2.4
// ("Encryption Example"), reproduced byte for byte. "In all cases, the
// server is configured to encode the CID length." Each row is encoded
// from its server ID and nonce and compared with its connection ID, and
// the connection ID is decoded back to the server ID (and, by a full
// decryption, to the nonce). Where a row as printed is inconsistent, the
// test says how, and checks the consistent reading.

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vectorKey is the key of every encrypted row.
const vectorKey = "8f95f09245765f80256934e50c66207f"

type vector struct {
	name            string
	cr              uint8
	sid, nonce, cid string
	key             string
	mode            Mode
}

// checkVector encodes v's server ID and nonce and compares the result with
// v's connection ID, then decodes the connection ID back.
func checkVector(t *testing.T, v vector) {
	t.Helper()
	sid, nonce, want := unhex(t, v.sid), unhex(t, v.nonce), unhex(t, v.cid)
	c := Config{ID: v.cr, ServerIDLen: len(sid), NonceLen: len(nonce), EncodeLength: true}
	if v.key != "" {
		c.Key = unhex(t, v.key)
	}
	if c.Mode() != v.mode {
		t.Fatalf("%s: mode %v, want %v", v.name, c.Mode(), v.mode)
	}
	id, err := MakeServerID(sid)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEncoder(c, id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.Append(nil, nonce, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: encoded %x, want %x", v.name, got, want)
	}
	d, err := NewDecoder(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := d.Decode(want)
	if err != nil || back != id {
		t.Errorf("%s: decoded %v, %v; want %v", v.name, back, err, id)
	}
	if blk := plaintext(t, c, want); !bytes.Equal(blk, append(sid, nonce...)) {
		t.Errorf("%s: decrypted %x, want %x%x", v.name, blk, sid, nonce)
	}
}

// plaintext decrypts the whole block of connection ID cid of c: the
// server ID and the nonce.
func plaintext(t testing.TB, c Config, cid []byte) []byte {
	t.Helper()
	n := c.ServerIDLen + c.NonceLen
	blk := bytes.Clone(cid[1 : 1+n])
	switch c.Mode() {
	case Plaintext:
		return blk
	case SinglePass:
		b, err := aes.NewCipher(c.Key)
		if err != nil {
			t.Fatal(err)
		}
		b.Decrypt(blk, blk)
		return blk
	}
	b, err := aes.NewCipher(c.Key)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, n)
	new(scratch).decrypt4(b, blk, out, n, n) // all four passes
	return out
}

func TestDraftVectors(t *testing.T) {
	for _, v := range []vector{
		// B.1, unencrypted, row 1.
		{name: "plaintext 0", cr: 0, sid: "c4605e", nonce: "4504cc4f", cid: "07c4605e4504cc4f", mode: Plaintext},
		// B.2, encrypted, rows 1 to 3: four passes with the server ID
		// within left_0 (three to decrypt), four passes with a server ID
		// longer than the nonce (the fourth decryption pass), and the
		// 16-octet single pass.
		{name: "encrypted 0", cr: 0, sid: "ed793a", nonce: "ee080dbf", cid: "0720b1d07b359d3c", key: vectorKey, mode: FourPass},
		{name: "encrypted 1", cr: 1, sid: "ed793a51d49b8f5fab65", nonce: "ee080dbf48",
			cid: "2fcc381bc74cb4fbad2823a3d1f8fed2", key: vectorKey, mode: FourPass},
		{name: "encrypted 2", cr: 2, sid: "ed793a51d49b8f5f", nonce: "ee080dbf48c0d1e5",
			cid: "504dd2d05a7b0de9b2b9907afb5ecf8cc3", key: vectorKey, mode: SinglePass},
		// B.2, row 4, as printed: "3 ed793a51d49b8f5fab ee080dbf48c0d1e55d
		// 125779c9cc86beb3a3a4a3ca96fce4bfe0cdbc". Its first octet, 0x12,
		// is 0b000_10010: config rotation bits 0 and length 18, while the
		// row's cr_bits column says 3, which is 0x72 (0b011_10010).
		// Revision 17 printed this row's ID with 0x72; revision 21
		// regenerated its ciphertext (the four-pass algorithm's fix, the
		// change log's "Fixed error in encryption example" of revision
		// 20) and kept the bits of revision 15's row, which had cr_bits 0.
		// The ciphertext after the first octet is right: the row is
		// checked with cr_bits 0, as its ID has them, and below with 3.
		{name: "encrypted 3 (cr_bits as its ID has them)", cr: 0, sid: "ed793a51d49b8f5fab", nonce: "ee080dbf48c0d1e55d",
			cid: "125779c9cc86beb3a3a4a3ca96fce4bfe0cdbc", key: vectorKey, mode: FourPass},
		{name: "encrypted 3 (cr_bits 3, first octet 0x72)", cr: 3, sid: "ed793a51d49b8f5fab", nonce: "ee080dbf48c0d1e55d",
			cid: "725779c9cc86beb3a3a4a3ca96fce4bfe0cdbc", key: vectorKey, mode: FourPass},
		// B.1, row 2, as printed: "1 350d28b420 3487d970b
		// 20a350d28b4203487d970b". Its nonce has nine hexadecimal digits,
		// not a whole number of octets, and its ID's first octet, 0x20,
		// says config 1 and a length of 0, where every row encodes the
		// length (10: 0x2a). The one reading with whole octets, the
		// column's server ID and a length-encoding first octet is the
		// nonce 03487d970b (its leading zero dropped, as when a number is
		// printed) and the ID 2a350d28b42003487d970b; the printed ID, read
		// as octets, would carry the server ID a350d28b42 (checked in
		// TestDraftVectorMisprint).
		{name: "plaintext 1 (the consistent reading)", cr: 1, sid: "350d28b420", nonce: "03487d970b",
			cid: "2a350d28b42003487d970b", mode: Plaintext},
	} {
		checkVector(t, v)
	}
}

// TestDraftVectorMisprint shows that B.1's second row, as printed, is not
// the encoding of its own server ID: read as octets, its ID carries
// another server ID, and its first octet encodes no length.
func TestDraftVectorMisprint(t *testing.T) {
	printed := unhex(t, "20a350d28b4203487d970b")
	c := Config{ID: 1, ServerIDLen: 5, NonceLen: 5, EncodeLength: true}
	d, err := NewDecoder(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.Decode(printed)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != "a350d28b42" {
		t.Errorf("the printed ID decodes to %v, want a350d28b42", got)
	}
	if printed[0]&0x1f != 0 || len(printed)-1 != 10 {
		t.Errorf("the printed ID's first octet %#x, length %d", printed[0], len(printed))
	}
}

// TestDraftExample follows the worked example of section 5.5.2.4 step by
// step: every AES input and output it prints, and the halves after each
// pass. Two misprints are the example's own: step 2 of revision 21 names
// the half length "hash_len" (half_len, as the text calls it; fixed after
// revision 21), and step 10 prints the XOR as "0xd4a04850 ^ 0xb3e4357c =
// 0x67947d2c", where the truncated AES output of the line above is
// 0xb334357c, which gives the printed result (0xb3e4357c would give
// 0x67447d2c). The load balancer's side of section 5.6.2 has one more:
// its second pass says "if (plaintext_len_is_odd()) clear_first_bits(left_1,
// 4)" where it means right_1, which it has just computed (left_1's first
// bits are the server ID's); decrypt4 clears right_1's.
func TestDraftExample(t *testing.T) {
	key := unhex(t, "fdf726a9893ec05c0632d3956680baf0")
	b, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	const n = 7 // plaintext_len
	s := new(scratch)
	left, right := s.split(unhex(t, "31441a9c69c275"), n)
	step := func(name string, got []byte, want string) {
		t.Helper()
		if hex.EncodeToString(got) != want {
			t.Fatalf("%s: %x, want %s", name, got, want)
		}
	}
	step("left_0", left, "31441a90")
	step("right_0", right, "0c69c275")
	pass := func(p int, src, dst []byte, in, out string) {
		t.Helper()
		s.round(b, n, p, src, dst)
		step("aes_input", s.in[:], in)
		step("aes_output", s.out[:], out)
	}
	pass(1, left, right, "31441a90000000000000000000000701", "a255dd8cdacf01948d3a848c3c7fee23")
	step("right_1", right, "ae3c1ff9")
	clearRight(right, n)
	step("right_1, bits cleared", right, "0e3c1ff9")
	pass(2, right, left, "0e3c1ff9000000000000000000000702", "e5e452cb9e1bedb0b2bf830506bf4c4e")
	step("left_1", left, "d4a0485b")
	clearLeft(left, n)
	step("left_1, bits cleared", left, "d4a04850")
	pass(3, left, right, "d4a04850000000000000000000000703", "b7821ab3024fed0913b6a04d18e3216f")
	step("right_2", right, "b9be054a")
	clearRight(right, n)
	step("right_2, bits cleared", right, "09be054a")
	pass(4, right, left, "09be054a000000000000000000000704", "b334357cfdf81e3fafe180154eaf7378")
	step("left_2", left, "67947d2c")
	clearLeft(left, n)
	step("left_2, bits cleared", left, "67947d20")
	cid := make([]byte, 1+n)
	cid[0] = 0x07
	join(cid[1:], left, right, n)
	step("cid", cid, "0767947d29be054a")

	// The same through the API, both ways.
	checkVector(t, vector{name: "example", cr: 0, sid: "31441a", nonce: "9c69c275", cid: "0767947d29be054a",
		key: "fdf726a9893ec05c0632d3956680baf0", mode: FourPass})
}

// TestDecodeErrors checks each way a connection ID fails to decode.
func TestDecodeErrors(t *testing.T) {
	d, err := NewDecoder(Config{ID: 1, ServerIDLen: 3, NonceLen: 4}, Config{ID: 2, ServerIDLen: 8, NonceLen: 8, Key: unhex(t, vectorKey)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cid  string
		want error
	}{
		{"", ErrShort},
		{"e0112233445566", ErrUnroutable},    // 0b111
		{"ff112233445566", ErrUnroutable},    // 0b111, length bits set
		{"00112233445566", ErrUnknownConfig}, // codepoint 0: not given
		{"c0112233445566", ErrUnknownConfig}, // codepoint 6
		{"201122334455", ErrShort},           // codepoint 1: 6 octets of 8
		{"20", ErrShort},
		{"40" + "00112233445566778899aabbccddee", ErrShort}, // codepoint 2: 16 octets of 17
	} {
		_, err := d.Decode(unhex(t, c.cid))
		if !errors.Is(err, c.want) {
			t.Errorf("Decode(%s): %v, want %v", c.cid, err, c.want)
		}
	}
	// A long ID decodes by its configuration's octets alone.
	id, err := d.Decode(unhex(t, "20aabbcc00000000ffffffffffff"))
	if err != nil || id.String() != "aabbcc" {
		t.Errorf("a long ID: %v, %v", id, err)
	}
}
