package maglev

import (
	"errors"
	"fmt"
)

const (
	// DefaultSize is the table size the Maglev paper uses: a prime, big
	// enough for about 650 backends at the paper's recommended M > 100·N.
	DefaultSize = 65537

	// MaxSize is the largest supported table size: the smallest prime above
	// 2^24 (16,777,259). A table of MaxSize slots takes 32 MiB with up to
	// 65,535 backends and 64 MiB with more.
	MaxSize = 1<<24 + 43

	// maxSmall is the most backends a table with 2-byte slots can hold: one
	// value of uint16 is reserved to mark empty slots while filling.
	maxSmall = 1<<16 - 1
)

// The errors New, NewWeighted, NewFromSlots, NewGenerator, Fill,
// CheckSize and Table.Without return wrap one of these, so that
// callers can match them with errors.Is.
var (
	// ErrSize means the table size is not supported: not a prime (sizes
	// below 2 included), or larger than MaxSize. A composite size would let
	// some backends' preference sequences miss slots. The error's message
	// says which.
	ErrSize = errors.New("maglev: unsupported table size")

	// ErrTooManyBackends means there are more backends than a table can
	// hold: more than its slots, or, for Fill, more than its slot type can
	// name (see Slot). The error's message says which.
	ErrTooManyBackends = errors.New("maglev: too many backends")

	// ErrEmptyName means a backend's name is the empty string.
	ErrEmptyName = errors.New("maglev: empty backend name")

	// ErrDuplicateName means two backends have the same name, or that
	// Table.Without was given a name twice or one already out of service.
	ErrDuplicateName = errors.New("maglev: duplicate backend name")

	// ErrUnknownBackend means a name passed to Table.Without is not one of
	// the table's backends.
	ErrUnknownBackend = errors.New("maglev: unknown backend")

	// ErrPermutation means a Permutation passed to Fill is out of range for
	// the table: an Offset not below M or a Skip outside 1..M-1.
	ErrPermutation = errors.New("maglev: permutation out of range")

	// ErrShortBuffer means a scratch buffer passed to Fill is shorter than
	// the list of permutations.
	ErrShortBuffer = errors.New("maglev: buffer too short")

	// ErrNoBackends means Fill was given no permutations: there is no
	// backend to fill the table with. (New and NewWeighted accept an empty
	// list and return an empty table.)
	ErrNoBackends = errors.New("maglev: no backends to fill the table with")

	// ErrSlotOwner means a slot passed to NewFromSlots names no backend of
	// the list (an index out of range), names a drained backend (weight 0,
	// which owns no slots), or is 0xFFFFFFFF (no backend, see Table.AppendSlots) while other slots
	// have owners.
	ErrSlotOwner = errors.New("maglev: invalid slot owner")
)

// checkCounts reports whether n backends fit a table of a supported size m.
func checkCounts(n, m int) error {
	if err := CheckSize(m); err != nil {
		return err
	}
	if n > m {
		return fmt.Errorf("%w: %d backends, %d slots", ErrTooManyBackends, n, m)
	}
	return nil
}

// CheckSize returns nil if m is a supported table size, a prime no larger
// than MaxSize, and otherwise the error New returns for it: one wrapping
// ErrSize. It is O(√m) (at most about 1,400 divisions)
// and does not allocate when m is supported.
func CheckSize(m int) error {
	if m > MaxSize {
		return fmt.Errorf("%w: %d is larger than MaxSize (%d)", ErrSize, m, MaxSize)
	}
	if !isPrime(m) {
		return fmt.Errorf("%w: %d is not a prime", ErrSize, m)
	}
	return nil
}

// checkNames reports whether sorted names are non-empty and distinct.
func checkNames(sorted []string) error {
	if len(sorted) > 0 && sorted[0] == "" {
		return ErrEmptyName
	}
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return fmt.Errorf("%w: %q", ErrDuplicateName, sorted[i])
		}
	}
	return nil
}

// isPrime reports whether n is prime, by trial division with 6k±1 steps.
// It is O(√n): at most about 1,400 divisions for n ≤ MaxSize.
func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	if n%2 == 0 || n%3 == 0 {
		return n == 2 || n == 3
	}
	for d := 5; d <= n/d; d += 6 {
		if n%d == 0 || n%(d+2) == 0 {
			return false
		}
	}
	return true
}
