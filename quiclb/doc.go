// Package quiclb encodes and decodes QUIC-LB connection IDs, the IETF's
// format for routable QUIC connection IDs (draft-ietf-quic-load-balancers,
// revision 21): a server writes its server ID into every connection ID it
// issues, plaintext or encrypted with AES-128, and a load balancer that
// shares the server's configuration reads the ID back from any packet's
// destination connection ID, so that a connection whose client changes
// address or port still reaches the server that holds it.
//
// A connection ID of a [Config] is its first octet (three config rotation
// bits, the [Config.ID], and five bits that are random or, with
// [Config.EncodeLength], the length of the rest), then the plaintext
// block of ServerIDLen + NonceLen octets: the server ID and a nonce. With
// a 16-octet key the block is encrypted: in one AES pass when it is 16
// octets, otherwise in the draft's four-pass Feistel network, whose round
// function is AES. The config rotation bits 0b111 ([Unroutable]) mark an
// ID that carries no server ID.
//
// The server side is an [Encoder] (a connection ID of a given nonce, for
// tests and other implementations) and a [Generator] (fresh connection
// IDs, with the nonce rules of the draft: random without a key, a counter
// from a random start with one). The load balancer's side is a [Decoder]
// of up to seven configurations at once, one per codepoint, so that a key
// rotates while the old configuration still decodes.
//
// # Costs
//
// [Decoder.Decode] does not allocate. Without a key it copies the server
// ID; with one it runs one AES decryption (single pass) or three or four
// AES encryptions (four passes: three when the nonce is at least as long
// as the server ID). Encoder.Append and Generator.Append allocate nothing
// but dst's growth.
//
// Every error is prefixed "quiclb: " and matches one of the package's
// Err values with errors.Is. Encoders, Generators and Decoders are safe
// for concurrent use by multiple goroutines.
//
// The package uses the standard library alone (crypto/aes).
package quiclb
