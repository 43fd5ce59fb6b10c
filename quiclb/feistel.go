package quiclb

import "crypto/cipher"

// The four-pass encryption of the draft (section 5.5.2): the block of n
// octets (server ID and nonce, n not 16) is split into halves of
// ceil(n/2) octets, left and right; when n is odd the middle octet is
// split between them, its high nibble ending left (whose last four bits
// are kept clear) and its low nibble starting right (whose first four
// bits are kept clear). Each pass encrypts one half, expanded to an AES
// block, and XORs the result into the other half.

// round runs one pass: the AES encryption of expand(n, pass, src) XORed
// into dst, both halves of n's half length.
func (s *scratch) round(b cipher.Block, n, pass int, src, dst []byte) {
	s.in = [16]byte{} // expand: src's octets, zeros, n, pass
	copy(s.in[:], src)
	s.in[14] = byte(n)
	s.in[15] = byte(pass)
	b.Encrypt(s.out[:], s.in[:])
	for i := range dst {
		dst[i] ^= s.out[i]
	}
}

// split copies the n octets of blk into the scratch halves, the middle
// octet's nibbles apart when n is odd, and returns them.
func (s *scratch) split(blk []byte, n int) (left, right []byte) {
	h := (n + 1) / 2
	left, right = s.half[0][:h], s.half[1][:h]
	copy(left, blk[:h])
	copy(right, blk[n-h:n])
	if n%2 == 1 {
		left[h-1] &= 0xf0
		right[0] &= 0x0f
	}
	return left, right
}

// join writes the halves back into the n octets of blk, the middle
// octet's nibbles together when n is odd.
func join(blk, left, right []byte, n int) {
	h := len(left)
	copy(blk, left)
	if n%2 == 1 {
		blk[h-1] |= right[0]
		copy(blk[h:n], right[1:])
		return
	}
	copy(blk[h:n], right)
}

// clearLeft and clearRight keep the split nibbles of an odd n clear: the
// last four bits of a left half, the first four of a right one.
func clearLeft(left []byte, n int) {
	if n%2 == 1 {
		left[len(left)-1] &= 0xf0
	}
}

func clearRight(right []byte, n int) {
	if n%2 == 1 {
		right[0] &= 0x0f
	}
}

// encrypt4 encrypts the n-octet block blk in place, in four passes.
func (s *scratch) encrypt4(b cipher.Block, blk []byte, n int) {
	left, right := s.split(blk, n)
	s.round(b, n, 1, left, right)
	clearRight(right, n)
	s.round(b, n, 2, right, left)
	clearLeft(left, n)
	s.round(b, n, 3, left, right)
	clearRight(right, n)
	s.round(b, n, 4, right, left)
	clearLeft(left, n)
	join(blk, left, right, n)
}

// decrypt4 decrypts the n-octet block blk into out (n octets), running
// the passes backwards; with only the first sidLen octets wanted, it
// stops after three passes when they lie in left_0's whole octets (the
// nonce is at least as long as the server ID), and out's other octets
// are then not the plaintext's.
func (s *scratch) decrypt4(b cipher.Block, blk, out []byte, n, sidLen int) {
	left, right := s.split(blk, n)
	s.round(b, n, 4, right, left)
	clearLeft(left, n)
	s.round(b, n, 3, left, right)
	clearRight(right, n)
	s.round(b, n, 2, right, left)
	clearLeft(left, n)
	if sidLen <= n/2 {
		copy(out, left)
		return
	}
	s.round(b, n, 1, left, right)
	clearRight(right, n)
	join(out, left, right, n)
}
