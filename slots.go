package maglev

import (
	"fmt"
)

// NewFromSlots makes a Table from a slot array computed elsewhere: by
// another system whose tables this one must match (another load balancer's
// Maglev, say), or saved from AppendSlots. slots[s] is the owner of slot s
// as an index into backends as given, in any order; the Table sorts the
// backends by byte order, like New, and remaps the indices, so that
// [Table.Lookup], [Table.LookupHash] (a slot's owner) and [Table.Backends]
// answer by name whatever order backends came in. The table's size M is
// len(slots). Weights are kept as given, for [Table.Weights],
// [Table.Candidates] and a [github.com/maglevlb/maglev/bounded.Picker];
// they do not change which backend owns a slot. h is the hasher for keys
// (nil means XXH3): Lookup(key) returns the owner of slot h(key) mod M.
//
// If every slot is 0xFFFFFFFF, the "no backend" of [Table.AppendSlots], the
// table has no slots owned: Lookup returns "" for every key, as for
// New(nil, M, h) or a NewWeighted table whose backends are all drained;
// backends may then be empty. Otherwise every slot must name a backend
// with a non-zero weight, and a backend may own no slot.
//
// NewFromSlots returns an error wrapping ErrSize if
// len(slots) is not a supported table size, ErrTooManyBackends if there are
// more backends than slots, ErrEmptyName or ErrDuplicateName for bad
// names, and ErrSlotOwner for a slot that names no backend or a drained
// one, or that is 0xFFFFFFFF in a table with owners. It does not keep
// backends or slots.
//
// NewFromSlots takes O(M + n log n) time and allocates O(M + n): 2 bytes a
// slot for up to 65,535 backends, 4 bytes beyond.
func NewFromSlots(backends []Backend, slots []uint32, h Hasher) (*Table, error) {
	m := len(slots)
	if err := checkCounts(len(backends), m); err != nil {
		return nil, err
	}
	n := len(backends)
	order, names, weights, err := sortBackends(backends)
	if err != nil {
		return nil, err
	}
	// rank[j] is the table index of backends[j]; noBackend marks a drained
	// backend, which may own no slot.
	rank := make([]uint32, n)
	for i, j := range order {
		rank[j] = uint32(i)
		if weights[i] == 0 {
			rank[j] = noBackend
		}
	}
	t := newTable(names, weights, m, h)
	if slots[0] == noBackend {
		for s, j := range slots {
			if j != noBackend {
				return nil, fmt.Errorf("%w: slot %d is owned by backend %d, slot 0 by none", ErrSlotOwner, s, j)
			}
		}
		return t, nil
	}
	if n <= maxSmall {
		t.slots16, err = remapSlots[uint16](slots, rank)
	} else {
		t.slots32, err = remapSlots[uint32](slots, rank)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// remapSlots returns the table's slot array for slots, whose owners are
// indices into the caller's backend list: slot s is owned by table index
// rank[slots[s]]. rank is noBackend for a drained backend, which may own no
// slot.
func remapSlots[S Slot](slots, rank []uint32) ([]S, error) {
	out := make([]S, len(slots))
	for s, j := range slots {
		if j >= uint32(len(rank)) {
			if j == noBackend {
				return nil, fmt.Errorf("%w: slot %d is owned by none, slot 0 by backend %d", ErrSlotOwner, s, slots[0])
			}
			return nil, fmt.Errorf("%w: slot %d is owned by backend %d of %d", ErrSlotOwner, s, j, len(rank))
		}
		i := rank[j]
		if i == noBackend {
			return nil, fmt.Errorf("%w: slot %d is owned by backend %d, whose weight is 0", ErrSlotOwner, s, j)
		}
		out[s] = S(i)
	}
	return out, nil
}
