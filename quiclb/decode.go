package quiclb

import (
	"crypto/cipher"
	"fmt"
)

// A Decoder reads server IDs out of connection IDs: the load balancer's
// side, for up to seven configurations at once, one per codepoint, so
// that the servers can move to a new key while the connection IDs they
// issued under the old one still decode.
type Decoder struct {
	configs [Unroutable]decodeConfig // by codepoint
}

type decodeConfig struct {
	ok     bool
	mode   Mode
	sidLen int // ServerIDLen
	n      int // ServerIDLen + NonceLen
	block  cipher.Block
}

// NewDecoder returns a Decoder of the configurations cs, each valid and of
// its own codepoint, or an error wrapping ErrConfig. It keeps no
// reference to the configurations' keys.
func NewDecoder(cs ...Config) (*Decoder, error) {
	d := new(Decoder)
	for _, c := range cs {
		if err := c.Check(); err != nil {
			return nil, err
		}
		if d.configs[c.ID].ok {
			return nil, fmt.Errorf("%w: ID %d given twice", ErrConfig, c.ID)
		}
		block, err := cipherOf(c)
		if err != nil {
			return nil, err
		}
		d.configs[c.ID] = decodeConfig{ok: true, mode: c.Mode(), sidLen: c.ServerIDLen, n: c.ServerIDLen + c.NonceLen, block: block}
	}
	return d, nil
}

// Decode returns the server ID of the connection ID cid, which may run
// past its configuration's length (the rest of a short header, or octets
// a server appends: Decode reads Config.Len octets). It returns an error
// wrapping ErrUnroutable (the codepoint 0b111), ErrUnknownConfig (no
// configuration of the codepoint) or ErrShort (fewer octets than the
// configuration's IDs have): the packet goes by the load balancer's
// fallback then. A server ID that decodes is not checked against any
// list: one that names no server is the caller's to route by the
// fallback too. Decode does not allocate; it costs a copy, one AES
// decryption or three or four AES encryptions, by the configuration's
// Mode.
func (d *Decoder) Decode(cid []byte) (ServerID, error) {
	var id ServerID
	if len(cid) == 0 {
		return id, ErrShort
	}
	cp := cid[0] >> 5
	if cp == Unroutable {
		return id, ErrUnroutable
	}
	c := &d.configs[cp]
	switch {
	case !c.ok:
		return id, ErrUnknownConfig
	case len(cid) < 1+c.n:
		return id, ErrShort
	}
	id.n = uint8(c.sidLen)
	blk := cid[1 : 1+c.n]
	if c.mode == Plaintext {
		copy(id.b[:], blk[:c.sidLen])
		return id, nil
	}
	s := scratchPool.Get().(*scratch)
	if c.mode == SinglePass {
		c.block.Decrypt(s.out[:], blk)
		copy(id.b[:], s.out[:c.sidLen])
	} else {
		var out [MaxBlockLen]byte
		s.decrypt4(c.block, blk, out[:c.n], c.n, c.sidLen)
		copy(id.b[:], out[:c.sidLen])
	}
	scratchPool.Put(s)
	return id, nil
}
