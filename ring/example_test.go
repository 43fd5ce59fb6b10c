package ring_test

import (
	"errors"
	"fmt"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/ring"
)

func ExampleNew() {
	backends := []string{"10.0.0.3:80", "10.0.0.1:80", "10.0.0.2:80"}
	r, err := ring.New(backends, ring.DefaultVnodes, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("backends:", r.Backends())
	fmt.Println("points:", r.NumPoints())
	for i, s := range r.Shares() {
		fmt.Printf("share of %s: %.3f\n", r.Backends()[i], s)
	}
	fmt.Println("client 192.0.2.7 goes to", r.Lookup("192.0.2.7"))
	// Any process that knows the same names, in any order, agrees.
	other, _ := ring.New([]string{"10.0.0.2:80", "10.0.0.3:80", "10.0.0.1:80"}, ring.DefaultVnodes, nil)
	fmt.Println("another process agrees:", other.Lookup("192.0.2.7") == r.Lookup("192.0.2.7"))
	// Output:
	// backends: [10.0.0.1:80 10.0.0.2:80 10.0.0.3:80]
	// points: 768
	// share of 10.0.0.1:80: 0.327
	// share of 10.0.0.2:80: 0.353
	// share of 10.0.0.3:80: 0.320
	// client 192.0.2.7 goes to 10.0.0.1:80
	// another process agrees: true
}

// The seed's hand-placed ring: A at 100, B at 200, C at 300. A hash goes to
// the first point at or after it, wrapping past the end.
func ExampleNewWithPositions() {
	r, err := ring.NewWithPositions(map[string][]uint64{"A": {100}, "B": {200}, "C": {300}}, nil)
	if err != nil {
		panic(err)
	}
	for _, h := range []uint64{0, 100, 120, 200, 220, 300, 320} {
		fmt.Printf("%d → %s\n", h, r.LookupHash(h))
	}
	// Output:
	// 0 → A
	// 100 → A
	// 120 → B
	// 200 → B
	// 220 → C
	// 300 → C
	// 320 → A
}

// Adding a backend moves keys only to the newcomer: the fraction of the
// hash space that changes owner is exactly the newcomer's share.
func ExampleRing_Diff() {
	five, _ := ring.New([]string{"a", "b", "c", "d", "e"}, ring.DefaultVnodes, nil)
	six, _ := ring.New([]string{"a", "b", "c", "d", "e", "f"}, ring.DefaultVnodes, nil)
	fmt.Printf("moved: %.4f\n", five.Diff(six))
	fmt.Printf("f's share: %.4f\n", six.Shares()[5])
	fmt.Println("exactly equal:", five.Diff(six) == six.Shares()[5])
	// Output:
	// moved: 0.1658
	// f's share: 0.1658
	// exactly equal: true
}

// Name errors wrap the maglev package's sentinels, so one errors.Is check
// serves both packages.
func ExampleNew_errors() {
	_, err := ring.New([]string{"a", "b", "a"}, ring.DefaultVnodes, nil)
	fmt.Println(err)
	fmt.Println(errors.Is(err, maglev.ErrDuplicateName))
	_, err = ring.New([]string{"a"}, 0, nil)
	fmt.Println(err)
	fmt.Println(errors.Is(err, ring.ErrVnodes))
	// Output:
	// ring: duplicate backend name: "a"
	// true
	// ring: vnodes out of range: 0, want 1..16777216
	// true
}

// Replicas on a ring are the classic way: a key lives on the first three
// distinct backends clockwise from its position.
func ExampleRing_Candidates() {
	r, err := ring.New([]string{"store-a", "store-b", "store-c", "store-d", "store-e"}, ring.DefaultVnodes, nil)
	if err != nil {
		panic(err)
	}
	backends := r.Backends()
	for _, key := range []string{"user:1", "user:2"} {
		var replicas []string
		for i := range r.Candidates(key) {
			replicas = append(replicas, backends[i])
			if len(replicas) == 3 {
				break
			}
		}
		fmt.Println(key, replicas, "primary is Lookup:", replicas[0] == r.Lookup(key))
	}
	// Output:
	// user:1 [store-d store-a store-e] primary is Lookup: true
	// user:2 [store-c store-d store-a] primary is Lookup: true
}
