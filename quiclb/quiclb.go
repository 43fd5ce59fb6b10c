package quiclb

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// The draft's bounds (section 5.3): a server ID of at least one octet, a
// nonce of at least four, and at most 19 of the two together, so that a
// connection ID with its first octet fits QUIC version 1's 20.
const (
	MinServerIDLen = 1
	MaxServerIDLen = 15 // MaxBlockLen less MinNonceLen
	MinNonceLen    = 4
	MaxNonceLen    = 18 // MaxBlockLen less MinServerIDLen
	MaxBlockLen    = 19 // server ID and nonce together

	// KeyLen is the length of a configuration's key: AES-128.
	KeyLen = 16

	// Unroutable is the config rotation codepoint 0b111, which no
	// configuration may use: a connection ID with it carries no server
	// ID, and a load balancer routes its packets by its fallback (the
	// 4-tuple). Servers without a configuration issue such IDs.
	Unroutable = 7

	// MaxConnIDLen is the longest connection ID of QUIC versions 1 and 2.
	MaxConnIDLen = 20
)

// The errors of the package: every error it returns wraps one of these.
var (
	// ErrConfig means a Config is not valid: its message says which field.
	ErrConfig = errors.New("quiclb: invalid configuration")

	// ErrServerID means a server ID is empty, longer than
	// MaxServerIDLen, not hexadecimal, or not of the configuration's
	// ServerIDLen.
	ErrServerID = errors.New("quiclb: invalid server ID")

	// ErrNonce means a nonce is not of the configuration's NonceLen.
	ErrNonce = errors.New("quiclb: invalid nonce")

	// ErrNoncesExhausted means a Generator with a key has issued every
	// nonce of its configuration: the draft forbids reusing one under the
	// same key, so the server needs a new configuration (or issues
	// unroutable IDs, see AppendUnroutable).
	ErrNoncesExhausted = errors.New("quiclb: nonces exhausted")

	// ErrUnroutable means a connection ID's config rotation bits are
	// 0b111: it carries no server ID.
	ErrUnroutable = errors.New("quiclb: unroutable connection ID")

	// ErrUnknownConfig means a connection ID's config rotation bits name
	// no configuration of the Decoder.
	ErrUnknownConfig = errors.New("quiclb: unknown configuration")

	// ErrShort means a connection ID is shorter than its configuration's
	// connection IDs (Config.Len).
	ErrShort = errors.New("quiclb: connection ID too short")
)

// A Config is one QUIC-LB configuration, which a server and the load
// balancers in front of it share: the codepoint, the lengths, and the key
// if the server IDs are encrypted. The zero value is not valid: a server
// ID and a nonce have a length of at least 1 and 4.
type Config struct {
	// ID is the configuration's codepoint, the config rotation bits of
	// its connection IDs: 0 to 6.
	ID uint8

	// ServerIDLen is the length of a server ID in octets, 1 to 15.
	ServerIDLen int

	// NonceLen is the length of a nonce in octets, 4 to 18; ServerIDLen
	// and NonceLen sum to 19 at most.
	NonceLen int

	// Key is the AES-128 key of the server IDs' encryption, KeyLen
	// octets, or empty for plaintext server IDs, which anyone can read.
	Key []byte

	// EncodeLength makes the first octet's five low bits the length of
	// the rest of the connection ID (the draft's length self-description);
	// otherwise they are random.
	EncodeLength bool
}

// Len returns the length of the configuration's connection IDs: the first
// octet, the server ID and the nonce.
func (c Config) Len() int { return 1 + c.ServerIDLen + c.NonceLen }

// Check returns nil if c is a valid configuration, and an error wrapping
// ErrConfig that names the field otherwise.
func (c Config) Check() error {
	switch {
	case c.ID >= Unroutable:
		return fmt.Errorf("%w: ID %d: the codepoints are 0 to 6 (7 marks unroutable connection IDs)", ErrConfig, c.ID)
	case c.ServerIDLen < MinServerIDLen || c.ServerIDLen > MaxServerIDLen:
		return fmt.Errorf("%w: ServerIDLen %d: not in [%d, %d]", ErrConfig, c.ServerIDLen, MinServerIDLen, MaxServerIDLen)
	case c.NonceLen < MinNonceLen || c.NonceLen > MaxNonceLen:
		return fmt.Errorf("%w: NonceLen %d: not in [%d, %d]", ErrConfig, c.NonceLen, MinNonceLen, MaxNonceLen)
	case c.ServerIDLen+c.NonceLen > MaxBlockLen:
		return fmt.Errorf("%w: ServerIDLen %d + NonceLen %d: more than %d octets", ErrConfig, c.ServerIDLen, c.NonceLen, MaxBlockLen)
	case len(c.Key) != 0 && len(c.Key) != KeyLen:
		return fmt.Errorf("%w: Key of %d octets: AES-128 takes %d (or none, for plaintext)", ErrConfig, len(c.Key), KeyLen)
	}
	return nil
}

// Mode is how a configuration's server IDs are written.
type Mode uint8

// The modes, by the configuration's key and lengths.
const (
	// Plaintext: no key; the server ID follows the first octet as it is.
	Plaintext Mode = iota
	// SinglePass: a key, and ServerIDLen + NonceLen is 16: the block is
	// one AES-ECB block.
	SinglePass
	// FourPass: a key and any other length: a four-round Feistel network
	// whose round function is AES-ECB.
	FourPass
)

// String returns "plaintext", "single-pass" or "four-pass".
func (m Mode) String() string {
	switch m {
	case Plaintext:
		return "plaintext"
	case SinglePass:
		return "single-pass"
	case FourPass:
		return "four-pass"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Mode returns how c's server IDs are written.
func (c Config) Mode() Mode {
	switch {
	case len(c.Key) == 0:
		return Plaintext
	case c.ServerIDLen+c.NonceLen == aes.BlockSize:
		return SinglePass
	}
	return FourPass
}

// A ServerID is a server's ID in a configuration: 1 to MaxServerIDLen
// octets. It is a comparable value, usable as a map key; the zero value
// is no ID (Len 0).
type ServerID struct {
	n uint8
	b [MaxServerIDLen]byte
}

// MakeServerID returns the server ID of the octets b, 1 to MaxServerIDLen
// of them, or an error wrapping ErrServerID.
func MakeServerID(b []byte) (ServerID, error) {
	var s ServerID
	if len(b) < MinServerIDLen || len(b) > MaxServerIDLen {
		return s, fmt.Errorf("%w: %d octets, not in [%d, %d]", ErrServerID, len(b), MinServerIDLen, MaxServerIDLen)
	}
	s.n = uint8(copy(s.b[:], b))
	return s, nil
}

// ParseServerID returns the server ID written in hexadecimal by s
// ("0a0b0c"), or an error wrapping ErrServerID.
func ParseServerID(s string) (ServerID, error) {
	if len(s)%2 != 0 || len(s) > 2*MaxServerIDLen {
		return ServerID{}, fmt.Errorf("%w: %q: not 1 to %d octets of hexadecimal", ErrServerID, s, MaxServerIDLen)
	}
	var b [MaxServerIDLen]byte
	n, err := hex.Decode(b[:], []byte(s))
	if err != nil {
		return ServerID{}, fmt.Errorf("%w: %q: %v", ErrServerID, s, err)
	}
	return MakeServerID(b[:n])
}

// Len returns the server ID's length in octets; 0 for the zero ServerID.
func (s ServerID) Len() int { return int(s.n) }

// Append appends the server ID's octets to dst and returns the result.
func (s ServerID) Append(dst []byte) []byte { return append(dst, s.b[:s.n]...) }

// String returns the server ID in hexadecimal, as ParseServerID reads it.
func (s ServerID) String() string { return hex.EncodeToString(s.b[:s.n]) }

// ParseKey returns the key written in hexadecimal by s (32 digits, as a
// key file holds it; spaces and line ends around it are ignored), or an
// error wrapping ErrConfig.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	k, err := hex.DecodeString(s)
	if err != nil || len(k) != KeyLen {
		return nil, fmt.Errorf("%w: a key is %d octets in hexadecimal (%d digits), not %q", ErrConfig, KeyLen, 2*KeyLen, redact(s))
	}
	return k, nil
}

// redact shows the length and first digits of what may be a key.
func redact(s string) string {
	if len(s) <= 4 {
		return s
	}
	return fmt.Sprintf("%s... (%d characters)", s[:4], len(s))
}

// cipherOf returns the AES cipher of c's key, or nil for plaintext.
func cipherOf(c Config) (cipher.Block, error) {
	if len(c.Key) == 0 {
		return nil, nil
	}
	b, err := aes.NewCipher(c.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: Key: %v", ErrConfig, err)
	}
	return b, nil
}

// scratch is the AES input and output blocks of one encoding or
// decoding, from a pool: cipher.Block's methods take slices through an
// interface, so a block on the stack would escape to the heap on every
// call.
type scratch struct {
	in, out [aes.BlockSize]byte
	half    [2][(MaxBlockLen + 1) / 2]byte // left and right of the Feistel network
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// firstOctet returns the first octet of a connection ID of c: the config
// rotation bits, then the length of the rest or low's five low bits.
func firstOctet(c *Config, low byte) byte {
	if c.EncodeLength {
		low = byte(c.ServerIDLen + c.NonceLen)
	}
	return c.ID<<5 | low&0x1f
}
