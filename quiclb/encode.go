package quiclb

import (
	"bytes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	"slices"
	"sync/atomic"
)

// An Encoder writes the connection IDs of one server ID under one
// configuration: the server side's encoding, given the nonce. A server
// issues IDs with a Generator, which chooses the nonces as the draft
// requires; an Encoder is for tests, vectors and other implementations.
type Encoder struct {
	c     Config
	id    ServerID
	block cipher.Block // nil for plaintext
	mode  Mode
}

// NewEncoder returns the Encoder of server ID id under configuration c,
// or an error wrapping ErrConfig (c is not valid) or ErrServerID (id is
// not c.ServerIDLen octets). It keeps a copy of c's key.
func NewEncoder(c Config, id ServerID) (*Encoder, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if id.Len() != c.ServerIDLen {
		return nil, fmt.Errorf("%w: %v is %d octets, and the configuration's server IDs %d", ErrServerID, id, id.Len(), c.ServerIDLen)
	}
	c.Key = bytes.Clone(c.Key)
	block, err := cipherOf(c)
	if err != nil {
		return nil, err
	}
	return &Encoder{c: c, id: id, block: block, mode: c.Mode()}, nil
}

// Config returns the Encoder's configuration (its key a copy).
func (e *Encoder) Config() Config {
	c := e.c
	c.Key = bytes.Clone(c.Key)
	return c
}

// ServerID returns the Encoder's server ID.
func (e *Encoder) ServerID() ServerID { return e.id }

// Append appends to dst the connection ID of the Encoder's server ID and
// nonce (Config.NonceLen octets; an error wrapping ErrNonce otherwise),
// Config.Len octets, and returns the result. The first octet's five low
// bits are low's, unless the configuration encodes the length there. It
// allocates nothing but dst's growth.
func (e *Encoder) Append(dst, nonce []byte, low byte) ([]byte, error) {
	if len(nonce) != e.c.NonceLen {
		return dst, fmt.Errorf("%w: %d octets, and the configuration's nonces %d", ErrNonce, len(nonce), e.c.NonceLen)
	}
	n := e.c.ServerIDLen + e.c.NonceLen
	dst = slices.Grow(dst, 1+n)
	start := len(dst) + 1
	dst = append(dst, firstOctet(&e.c, low))
	dst = e.id.Append(dst)
	dst = append(dst, nonce...)
	blk := dst[start:]
	switch e.mode {
	case SinglePass:
		e.block.Encrypt(blk, blk) // in place, as cipher.Block allows
	case FourPass:
		s := scratchPool.Get().(*scratch)
		s.encrypt4(e.block, blk, n)
		scratchPool.Put(s)
	}
	return dst, nil
}

// A Generator issues the connection IDs of one server: the Encoder's,
// each with a new nonce and random first-octet bits (unless the
// configuration encodes the length), by the draft's rules (section
// 7.5): without a key, every nonce is random, so that no two of the
// server's IDs are linked by anything but the server ID anyone can read;
// with a key, the nonces count up from a random start and none is used
// twice, so that no two IDs encrypt alike. A Generator with a key whose
// nonces are shorter than 8 octets runs out after 2^(8·NonceLen) IDs
// (ErrNoncesExhausted); one with longer nonces cannot in practice.
type Generator struct {
	enc   *Encoder
	start [MaxNonceLen]byte // the first nonce, with a key
	next  atomic.Uint64     // nonces issued, with a key
	limit uint64            // 2^(8·NonceLen), or 0 for none within a uint64
}

// NewGenerator returns a Generator of server ID id under configuration
// c, or NewEncoder's errors.
func NewGenerator(c Config, id ServerID) (*Generator, error) {
	enc, err := NewEncoder(c, id)
	if err != nil {
		return nil, err
	}
	g := &Generator{enc: enc}
	_, _ = rand.Read(g.start[:]) // crypto/rand.Read never fails
	if c.NonceLen < 8 {
		g.limit = 1 << (8 * c.NonceLen)
	}
	return g, nil
}

// Config returns the Generator's configuration (its key a copy).
func (g *Generator) Config() Config { return g.enc.Config() }

// ServerID returns the Generator's server ID.
func (g *Generator) ServerID() ServerID { return g.enc.id }

// Len returns the length of the Generator's connection IDs.
func (g *Generator) Len() int { return g.enc.c.Len() }

// Append appends a new connection ID to dst and returns the result, or
// dst and an error wrapping ErrNoncesExhausted. It costs one read of
// crypto/rand and, with a key, one or four AES encryptions.
func (g *Generator) Append(dst []byte) ([]byte, error) {
	var buf [1 + MaxNonceLen]byte // the first octet's random bits, then the nonce
	nonce := buf[1 : 1+g.enc.c.NonceLen]
	if g.enc.mode == Plaintext {
		_, _ = rand.Read(buf[:1+len(nonce)])
	} else {
		i := g.next.Add(1) - 1
		if g.limit != 0 && i >= g.limit {
			return dst, fmt.Errorf("%w: %d IDs of %d-octet nonces issued under configuration %d", ErrNoncesExhausted, g.limit, len(nonce), g.enc.c.ID)
		}
		_, _ = rand.Read(buf[:1])
		addBE(nonce, g.start[:len(nonce)], i)
	}
	return g.enc.Append(dst, nonce, buf[0])
}

// addBE writes base + i, big-endian numbers of len(base) octets, into
// dst, wrapping around.
func addBE(dst, base []byte, i uint64) {
	carry := uint(0)
	for k := len(base) - 1; k >= 0; k-- {
		sum := uint(base[k]) + uint(i&0xff) + carry
		dst[k] = byte(sum)
		carry = sum >> 8
		i >>= 8
	}
}

// AppendUnroutable appends to dst an unroutable connection ID of n octets
// (1 to MaxConnIDLen; at least 8, the draft says, for 7 octets of
// entropy): the codepoint 0b111, the length of the rest in the first
// octet's low bits (which the draft requires of these IDs), and random
// octets. A server with no configuration issues them, and a load
// balancer routes their packets by the 4-tuple. It returns dst and an
// error wrapping ErrConfig for another n.
func AppendUnroutable(dst []byte, n int) ([]byte, error) {
	if n < 1 || n > MaxConnIDLen {
		return dst, fmt.Errorf("%w: unroutable connection IDs of %d octets: not in [1, %d]", ErrConfig, n, MaxConnIDLen)
	}
	dst = slices.Grow(dst, n)
	start := len(dst)
	dst = dst[:start+n]
	_, _ = rand.Read(dst[start+1:])
	dst[start] = Unroutable<<5 | byte(n-1)
	return dst, nil
}
