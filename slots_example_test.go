package maglev_test

import (
	"fmt"

	"github.com/maglevlb/maglev"
)

// A table computed elsewhere, here a saved slot array of M = 7 slots whose
// owners are indices into the backend list as given. The Table sorts the
// backends and answers by name.
func ExampleNewFromSlots() {
	backends := []maglev.Backend{
		{Name: "10.0.0.2:80", Weight: 1},
		{Name: "10.0.0.1:80", Weight: 2},
	}
	slots := []uint32{1, 0, 1, 1, 0, 1, 1}
	t, err := maglev.NewFromSlots(backends, slots, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("backends:", t.Backends())
	fmt.Println("weights:", t.Weights())
	fmt.Println("counts:", t.Counts())
	fmt.Println("slot 1:", t.LookupHash(uint64(1)))
	fmt.Println("saved again:", t.AppendSlots(nil))

	// A table round-trips through its slot array.
	orig, _ := maglev.New([]string{"a", "b", "c"}, 13, nil)
	copied, _ := maglev.NewFromSlots([]maglev.Backend{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}, {Name: "c", Weight: 1}},
		orig.AppendSlots(nil), orig.Hasher())
	fmt.Println("slots that differ:", orig.Diff(copied))
	// Output:
	// backends: [10.0.0.1:80 10.0.0.2:80]
	// weights: [2 1]
	// counts: [5 2]
	// slot 1: 10.0.0.2:80
	// saved again: [0 1 0 0 1 0 0]
	// slots that differ: 0
}
