package bounded_test

import (
	"fmt"
	"strings"

	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/bounded"
)

// A Picker spills a hot key past its backend's capacity to the key's next
// candidates; Release ends each request. With factor 1.25 and 4 backends,
// a backend's capacity is ceil(1.25 × L / 4) for L requests in flight, so
// the hot key's backend a takes the 1st request (capacity 1), its second
// choice d the 2nd, its third c the 3rd (capacity 1 while L < 4), a the
// 4th (capacity 2), and so on.
func ExamplePicker() {
	t, err := maglev.New([]string{"a", "b", "c", "d"}, maglev.DefaultSize, nil)
	if err != nil {
		panic(err)
	}
	b, err := bounded.New(t, 1.25)
	if err != nil {
		panic(err)
	}
	var leases []bounded.Lease
	var picks []string
	for range 8 { // 8 requests for one hot key, all in flight at once
		l := b.Acquire("celebrity")
		if l.Spilled {
			picks = append(picks, l.Backend()+"*")
		} else {
			picks = append(picks, l.Backend())
		}
		leases = append(leases, l)
	}
	fmt.Println("picks (* spilled):", strings.Join(picks, " "))
	var order []string
	for i := range t.Candidates("celebrity") {
		order = append(order, t.Backend(i))
	}
	fmt.Println("candidates:", order)
	fmt.Printf("%+v\n", b.Stats())
	for _, l := range leases {
		l.Release()
	}
	fmt.Println("in flight after release:", b.Stats().InFlight)

	_, err = bounded.New(t, 0.8)
	fmt.Println(err)
	// Output:
	// picks (* spilled): a d* c* a d* c* a d*
	// candidates: [a d c b]
	// {InFlight:8 Spilled:5 Forced:0}
	// in flight after release: 0
	// bounded: balance factor must be 0 (off) or a finite number ≥ 1: 0.8
}
