package quiclb

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// randomConfig returns a valid configuration of rng's choosing: every
// pair of lengths within the bounds, with and without a key, with and
// without the length in the first octet.
func randomConfig(rng *rand.Rand) Config {
	sid := 1 + rng.IntN(MaxServerIDLen)
	nonce := MinNonceLen + rng.IntN(MaxBlockLen-sid-MinNonceLen+1)
	c := Config{ID: uint8(rng.IntN(Unroutable)), ServerIDLen: sid, NonceLen: nonce, EncodeLength: rng.IntN(2) == 0}
	if rng.IntN(4) != 0 {
		c.Key = make([]byte, KeyLen)
		for i := range c.Key {
			c.Key[i] = byte(rng.Uint32())
		}
	}
	return c
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// TestRoundTrip: for random configurations of every length and mode, an
// encoded ID decodes to its server ID, and its whole block to the server
// ID and the nonce; the first octet carries the codepoint and, where the
// configuration says so, the length; the encryption changes the block.
func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	modes := map[Mode]int{}
	for range 20000 {
		c := randomConfig(rng)
		modes[c.Mode()]++
		sid, nonce := randomBytes(rng, c.ServerIDLen), randomBytes(rng, c.NonceLen)
		id, err := MakeServerID(sid)
		if err != nil {
			t.Fatal(err)
		}
		e, err := NewEncoder(c, id)
		if err != nil {
			t.Fatal(err)
		}
		low := byte(rng.Uint32())
		cid, err := e.Append([]byte("prefix"), nonce, low)
		if err != nil {
			t.Fatal(err)
		}
		cid = cid[len("prefix"):]
		if len(cid) != c.Len() {
			t.Fatalf("%+v: %d octets, want %d", c, len(cid), c.Len())
		}
		wantFirst := c.ID<<5 | low&0x1f
		if c.EncodeLength {
			wantFirst = c.ID<<5 | byte(c.Len()-1)
		}
		if cid[0] != wantFirst {
			t.Fatalf("%+v: first octet %#x, want %#x", c, cid[0], wantFirst)
		}
		plain := append(bytes.Clone(sid), nonce...)
		if c.Mode() == Plaintext != bytes.Equal(cid[1:], plain) {
			t.Fatalf("%+v: block %x of plaintext %x", c, cid[1:], plain)
		}
		d, err := NewDecoder(c)
		if err != nil {
			t.Fatal(err)
		}
		// Octets after the ID (a short header's rest) change nothing.
		got, err := d.Decode(append(cid, randomBytes(rng, rng.IntN(4))...))
		if err != nil || got != id {
			t.Fatalf("%+v: decoded %v, %v; want %v", c, got, err, id)
		}
		if blk := plaintext(t, c, cid); !bytes.Equal(blk, plain) {
			t.Fatalf("%+v: decrypted %x, want %x", c, blk, plain)
		}
	}
	for _, m := range []Mode{Plaintext, SinglePass, FourPass} {
		if modes[m] < 100 {
			t.Errorf("only %d configurations of mode %v", modes[m], m)
		}
	}
}

// TestFourPassIsAPermutation: at n = 5 (the shortest block) every
// plaintext of a fixed server ID encrypts to a distinct ciphertext that
// decrypts back: the network is a bijection on the block, the odd
// length's split nibble included.
func TestFourPassIsAPermutation(t *testing.T) {
	if testing.Short() {
		t.Skip("2^24 encryptions")
	}
	c := Config{ServerIDLen: 1, NonceLen: 4, Key: bytes.Repeat([]byte{7}, KeyLen)}
	id, _ := MakeServerID([]byte{0x5a})
	e, err := NewEncoder(c, id)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := NewDecoder(c)
	seen := make(map[[5]byte]bool, 1<<20)
	nonce := make([]byte, 4)
	var cid []byte
	for i := range 1 << 20 { // a sample of the 2^32 nonces, spread over every octet
		nonce[0], nonce[1], nonce[2], nonce[3] = byte(i>>12), byte(i), byte(i>>4), byte(i>>16)
		cid, err = e.Append(cid[:0], nonce, 0)
		if err != nil {
			t.Fatal(err)
		}
		k := [5]byte(cid[1:])
		if seen[k] {
			t.Fatalf("nonce %x: ciphertext %x seen before", nonce, k)
		}
		seen[k] = true
		if got, err := d.Decode(cid); err != nil || got != id {
			t.Fatalf("nonce %x: decoded %v, %v", nonce, got, err)
		}
	}
}

// TestConfigErrors checks each bound of a configuration.
func TestConfigErrors(t *testing.T) {
	key := make([]byte, KeyLen)
	for _, c := range []struct {
		c    Config
		want string
	}{
		{Config{ID: 7, ServerIDLen: 1, NonceLen: 4}, "ID 7"},
		{Config{ID: 200, ServerIDLen: 1, NonceLen: 4}, "ID 200"},
		{Config{ServerIDLen: 0, NonceLen: 4}, "ServerIDLen 0"},
		{Config{ServerIDLen: 16, NonceLen: 4}, "ServerIDLen 16"},
		{Config{ServerIDLen: 1, NonceLen: 3}, "NonceLen 3"},
		{Config{ServerIDLen: 1, NonceLen: 19}, "NonceLen 19"},
		{Config{ServerIDLen: 15, NonceLen: 5}, "ServerIDLen 15 + NonceLen 5"},
		{Config{ServerIDLen: 1, NonceLen: 4, Key: key[:15]}, "Key of 15 octets"},
		{Config{ServerIDLen: 1, NonceLen: 4, Key: append(key, 0)}, "Key of 17 octets"},
	} {
		err := c.c.Check()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "quiclb: ") {
			t.Errorf("%+v: %v, want ErrConfig naming %q", c.c, err, c.want)
		}
		if _, err := NewDecoder(c.c); !errors.Is(err, ErrConfig) {
			t.Errorf("NewDecoder(%+v): %v", c.c, err)
		}
		if _, err := NewGenerator(c.c, ServerID{}); !errors.Is(err, ErrConfig) {
			t.Errorf("NewGenerator(%+v): %v", c.c, err)
		}
	}
	for _, c := range []Config{
		{ID: 6, ServerIDLen: 15, NonceLen: 4, Key: key},
		{ServerIDLen: 1, NonceLen: 18},
		{ServerIDLen: 8, NonceLen: 8, Key: key, EncodeLength: true},
	} {
		if err := c.Check(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if _, err := NewDecoder(Config{ID: 3, ServerIDLen: 1, NonceLen: 4}, Config{ID: 3, ServerIDLen: 2, NonceLen: 4}); !errors.Is(err, ErrConfig) {
		t.Errorf("two configurations of one codepoint: %v", err)
	}
}

func TestServerID(t *testing.T) {
	for _, s := range []string{"", "0", "zz", "0a0", strings.Repeat("00", 16)} {
		if _, err := ParseServerID(s); !errors.Is(err, ErrServerID) {
			t.Errorf("ParseServerID(%q): %v", s, err)
		}
	}
	id, err := ParseServerID("0A0b0c")
	if err != nil || id.String() != "0a0b0c" || id.Len() != 3 || !bytes.Equal(id.Append(nil), []byte{10, 11, 12}) {
		t.Errorf("ParseServerID(0A0b0c): %v (%d), %v", id, id.Len(), err)
	}
	other, _ := MakeServerID([]byte{10, 11, 12})
	if other != id {
		t.Error("equal IDs compare unequal")
	}
	if long, _ := MakeServerID([]byte{10, 11, 12, 0}); long == id {
		t.Error("IDs of different lengths compare equal")
	}
	if _, err := MakeServerID(make([]byte, 16)); !errors.Is(err, ErrServerID) {
		t.Errorf("16 octets: %v", err)
	}
	c := Config{ServerIDLen: 4, NonceLen: 4}
	if _, err := NewEncoder(c, id); !errors.Is(err, ErrServerID) {
		t.Errorf("a 3-octet ID for 4-octet server IDs: %v", err)
	}
	e, _ := NewEncoder(Config{ServerIDLen: 3, NonceLen: 4}, id)
	if _, err := e.Append(nil, make([]byte, 5), 0); !errors.Is(err, ErrNonce) {
		t.Errorf("a 5-octet nonce for 4-octet nonces: %v", err)
	}
}

// TestGenerator: a Generator's IDs decode to its server ID; with a key
// they never repeat a nonce (the nonces count up from a random start, so
// two Generators start apart), under concurrent use too; without a key
// the nonces are random; with the length encoded, the first octet is the
// same for every ID, and without, its low bits vary.
func TestGenerator(t *testing.T) {
	key := bytes.Repeat([]byte{1}, KeyLen)
	for _, c := range []Config{
		{ID: 2, ServerIDLen: 2, NonceLen: 6, Key: key},
		{ID: 3, ServerIDLen: 8, NonceLen: 8, Key: key, EncodeLength: true},
		{ID: 4, ServerIDLen: 3, NonceLen: 4},
	} {
		id, _ := MakeServerID(bytes.Repeat([]byte{0xab}, c.ServerIDLen))
		g, err := NewGenerator(c, id)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := NewDecoder(c)
		const n = 4000
		var mu sync.Mutex
		nonces := map[string]bool{}
		lows := map[byte]bool{}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range n / 4 {
					cid, err := g.Append(nil)
					if err != nil || len(cid) != g.Len() {
						t.Error(cid, err)
						return
					}
					if got, err := d.Decode(cid); err != nil || got != id {
						t.Errorf("decoded %v, %v", got, err)
					}
					nonce := plaintext(t, c, cid)[c.ServerIDLen:]
					mu.Lock()
					nonces[string(nonce)] = true
					lows[cid[0]&0x1f] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(nonces) != n {
			t.Errorf("%+v: %d distinct nonces of %d", c, len(nonces), n)
		}
		if c.EncodeLength != (len(lows) == 1) {
			t.Errorf("%+v: %d distinct first-octet low bits", c, len(lows))
		}
	}
}

// TestGeneratorExhausted: with a key and 4-octet nonces, a Generator
// issues 2^32 IDs and then refuses (counted here by moving its counter).
func TestGeneratorExhausted(t *testing.T) {
	c := Config{ServerIDLen: 1, NonceLen: 4, Key: make([]byte, KeyLen)}
	id, _ := MakeServerID([]byte{1})
	g, err := NewGenerator(c, id)
	if err != nil {
		t.Fatal(err)
	}
	g.next.Store(1<<32 - 1)
	if _, err := g.Append(nil); err != nil {
		t.Fatalf("the last nonce: %v", err)
	}
	if cid, err := g.Append([]byte{9}); !errors.Is(err, ErrNoncesExhausted) || !bytes.Equal(cid, []byte{9}) {
		t.Fatalf("past the last nonce: %x, %v", cid, err)
	}
	// The last nonce is the one before the first.
	g.next.Store(0)
	first, _ := g.Append(nil)
	g.next.Store(1<<32 - 1)
	last, _ := g.Append(nil)
	f, l := plaintext(t, c, first)[1:], plaintext(t, c, last)[1:]
	if fv, lv := uint32(f[0])<<24|uint32(f[1])<<16|uint32(f[2])<<8|uint32(f[3]), uint32(l[0])<<24|uint32(l[1])<<16|uint32(l[2])<<8|uint32(l[3]); lv != fv-1 {
		t.Errorf("first nonce %x, last %x", f, l)
	}
}

func TestAppendUnroutable(t *testing.T) {
	d, _ := NewDecoder(Config{ServerIDLen: 1, NonceLen: 4})
	for _, n := range []int{1, 8, 20} {
		cid, err := AppendUnroutable(nil, n)
		if err != nil || len(cid) != n || cid[0] != 0xe0|byte(n-1) {
			t.Errorf("AppendUnroutable(%d): %x, %v", n, cid, err)
		}
		if _, err := d.Decode(cid); !errors.Is(err, ErrUnroutable) {
			t.Errorf("decoding an unroutable ID: %v", err)
		}
	}
	for _, n := range []int{0, 21} {
		if _, err := AppendUnroutable(nil, n); !errors.Is(err, ErrConfig) {
			t.Errorf("AppendUnroutable(%d): %v", n, err)
		}
	}
}

// TestDecodeAllocs: Decode allocates nothing, in every mode.
func TestDecodeAllocs(t *testing.T) {
	key := bytes.Repeat([]byte{3}, KeyLen)
	for _, c := range []Config{
		{ID: 0, ServerIDLen: 3, NonceLen: 6},
		{ID: 1, ServerIDLen: 8, NonceLen: 8, Key: key},
		{ID: 2, ServerIDLen: 3, NonceLen: 6, Key: key},
		{ID: 3, ServerIDLen: 10, NonceLen: 5, Key: key},
	} {
		id, _ := MakeServerID(make([]byte, c.ServerIDLen))
		g, _ := NewGenerator(c, id)
		cid, _ := g.Append(nil)
		d, _ := NewDecoder(c)
		var sink ServerID
		if n := testing.AllocsPerRun(1000, func() { sink, _ = d.Decode(cid) }); n != 0 {
			t.Errorf("%v, %d and %d octets: %v allocations a Decode", c.Mode(), c.ServerIDLen, c.NonceLen, n)
		}
		if sink != id {
			t.Errorf("decoded %v", sink)
		}
	}
}

// TestDecoderRotation: a Decoder of two configurations (a key rotation:
// the old codepoint and key, the new ones) decodes the IDs of both, each
// by its own key; a configuration it lacks is unknown.
func TestDecoderRotation(t *testing.T) {
	old := Config{ID: 0, ServerIDLen: 2, NonceLen: 6, Key: bytes.Repeat([]byte{1}, KeyLen)}
	cur := Config{ID: 1, ServerIDLen: 2, NonceLen: 6, Key: bytes.Repeat([]byte{2}, KeyLen)}
	id, _ := MakeServerID([]byte{0x12, 0x34})
	gOld, _ := NewGenerator(old, id)
	gCur, _ := NewGenerator(cur, id)
	both, err := NewDecoder(cur, old)
	if err != nil {
		t.Fatal(err)
	}
	onlyCur, _ := NewDecoder(cur)
	for range 100 {
		a, _ := gOld.Append(nil)
		b, _ := gCur.Append(nil)
		if got, err := both.Decode(a); err != nil || got != id {
			t.Fatalf("old ID: %v, %v", got, err)
		}
		if got, err := both.Decode(b); err != nil || got != id {
			t.Fatalf("new ID: %v, %v", got, err)
		}
		if _, err := onlyCur.Decode(a); !errors.Is(err, ErrUnknownConfig) {
			t.Fatalf("old ID without its configuration: %v", err)
		}
	}
	// Old blocks read with the new key give other IDs: the keys matter.
	// (Any one gives the server ID with probability 2^-16.)
	same := 0
	for range 100 {
		a, _ := gOld.Append(nil)
		a[0] = a[0]&0x1f | cur.ID<<5
		if got, err := both.Decode(a); err != nil || got == id {
			same++
		}
	}
	if same > 1 {
		t.Errorf("%d of 100 old blocks read with the new key gave the server ID", same)
	}
}

func TestParseKey(t *testing.T) {
	k, err := ParseKey(" 8f95f09245765f80256934e50c66207F\n")
	if err != nil || hex.EncodeToString(k) != vectorKey {
		t.Fatalf("ParseKey: %x, %v", k, err)
	}
	for _, s := range []string{"", "8f95", vectorKey + "00", "zz" + vectorKey[2:]} {
		if _, err := ParseKey(s); !errors.Is(err, ErrConfig) || strings.Contains(err.Error(), vectorKey[4:]) {
			t.Errorf("ParseKey(%q): %v", s, err)
		}
	}
}
