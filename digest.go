package maglev

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// digestVersion opens the bytes Digest hashes; a new definition would take
// a new version, and keep this one.
const digestVersion = "maglev table digest v1\n"

// Digest returns a SHA-256 digest of what the table routes: the backends
// that own slots and which one owns each slot. Machines that compute the
// same table from the same backend set (a fleet of load balancers, say)
// get the same digest, on every platform and in every release, so an
// operator can compare one short value across the fleet instead of M slots.
//
// The digest is SHA-256 over these bytes, every integer a 4-byte
// big-endian unsigned one:
//
//	"maglev table digest v1\n"         (23 bytes of ASCII)
//	M
//	K                                   the number of backends of weight > 0
//	for each of those K, in table order (by name, byte order):
//	    len(name), name, weight
//	for each slot 0 .. M-1:
//	    the index of its owner among those K (0 for the first), or
//	    0xFFFFFFFF if the table has no backend of weight > 0
//
// A backend of weight 0 (drained) owns no slot and is left out, so a table
// and the same table with drained backends added have one digest: they
// send every new key to the same place. A table built by New lists every
// backend with weight 1. The hasher enters only through the slots: two
// tables with equal slots but different hashers have one digest, and send
// a given key to different places.
//
// Digest is O(M + the names' total length); it allocates O(n) for n
// backends, never per slot. TestDigestGolden pins its
// values: changing them is a breaking change.
func (t *Table) Digest() [sha256.Size]byte {
	w := digestWriter{h: sha256.New()}
	w.b = w.buf[:0]
	w.write(digestVersion)
	m := uint32(t.Size())
	w.uint32(m)
	weights := t.Weights()
	names := t.names()
	remap := make([]uint32, len(names))
	k := uint32(0)
	for i, wt := range weights {
		remap[i] = k
		if wt > 0 {
			k++
		}
	}
	w.uint32(k)
	for i, name := range names {
		if weights[i] == 0 {
			continue
		}
		w.uint32(uint32(len(name)))
		w.write(name)
		w.uint32(weights[i])
	}
	for s := range m {
		v := uint32(noBackend)
		if o := t.owner(s); o >= 0 {
			v = remap[o]
		}
		w.uint32(v)
	}
	w.h.Write(w.b) // a hash.Hash never fails
	var d [sha256.Size]byte
	w.h.Sum(d[:0])
	return d
}

// digestWriter buffers Digest's bytes on their way to the hash.
type digestWriter struct {
	h   hash.Hash
	b   []byte // the bytes not yet hashed, in buf
	buf [4096]byte
}

func (w *digestWriter) uint32(v uint32) {
	if len(w.b)+4 > len(w.buf) {
		w.h.Write(w.b)
		w.b = w.buf[:0]
	}
	w.b = binary.BigEndian.AppendUint32(w.b, v)
}

func (w *digestWriter) write(p string) {
	for len(p) > 0 {
		if len(w.b) == len(w.buf) {
			w.h.Write(w.b)
			w.b = w.buf[:0]
		}
		n := min(len(p), len(w.buf)-len(w.b))
		w.b = append(w.b, p[:n]...)
		p = p[n:]
	}
}
