package maglev_test

import (
	"fmt"
	"strings"

	"github.com/maglevlb/maglev"
)

// A sharded store keeps each key on its first three candidates: the
// primary is the key's Lookup backend, and the replicas are its next two
// choices. Every node computes the same replica set with no coordination.
func ExampleTable_Candidates_replicas() {
	t, err := maglev.New([]string{"store-a", "store-b", "store-c", "store-d", "store-e"}, maglev.DefaultSize, nil)
	if err != nil {
		panic(err)
	}
	for _, key := range []string{"user:1", "user:2", "user:3"} {
		var replicas []string
		for i := range t.Candidates(key) {
			replicas = append(replicas, t.Backend(i))
			if len(replicas) == 3 {
				break
			}
		}
		fmt.Println(key, replicas, "primary is Lookup:", replicas[0] == t.Lookup(key))
	}
	// Output:
	// user:1 [store-a store-d store-b] primary is Lookup: true
	// user:2 [store-c store-a store-e] primary is Lookup: true
	// user:3 [store-d store-e store-c] primary is Lookup: true
}

// A key whose backend is unhealthy goes to its first healthy candidate,
// without rebuilding the table: keys of healthy backends do not move, and
// the failed backend's keys spread over the others by their shares.
func ExampleTable_Candidates_fallback() {
	t, err := maglev.New([]string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"}, maglev.DefaultSize, nil)
	if err != nil {
		panic(err)
	}
	down := map[string]bool{"10.0.0.4:80": true}
	route := func(key string) string {
		for i := range t.Candidates(key) {
			if name := t.Backend(i); !down[name] {
				return name
			}
		}
		return "" // every backend down
	}
	for _, key := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"} {
		fmt.Printf("%s: Lookup %s, routed to %s\n", key, t.Lookup(key), route(key))
	}
	// Output:
	// 192.0.2.1: Lookup 10.0.0.2:80, routed to 10.0.0.2:80
	// 192.0.2.2: Lookup 10.0.0.4:80, routed to 10.0.0.2:80
	// 192.0.2.3: Lookup 10.0.0.4:80, routed to 10.0.0.3:80
	// 192.0.2.4: Lookup 10.0.0.1:80, routed to 10.0.0.1:80
}

// A Bounded spills a hot key past its backend's capacity to the key's next
// candidates; Release ends each request. With factor 1.25 and 4 backends,
// a backend's capacity is ceil(1.25 × L / 4) for L requests in flight, so
// the hot key's backend a takes the 1st request (capacity 1), its second
// choice d the 2nd, its third c the 3rd (capacity 1 while L < 4), a the
// 4th (capacity 2), and so on.
func ExampleBounded() {
	t, err := maglev.New([]string{"a", "b", "c", "d"}, maglev.DefaultSize, nil)
	if err != nil {
		panic(err)
	}
	b, err := maglev.NewBounded(t, 1.25)
	if err != nil {
		panic(err)
	}
	var leases []maglev.Lease
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

	_, err = maglev.NewBounded(t, 0.8)
	fmt.Println(err)
	// Output:
	// picks (* spilled): a d* c* a d* c* a d*
	// candidates: [a d c b]
	// {InFlight:8 Spilled:5 Forced:0}
	// in flight after release: 0
	// maglev: balance factor must be 0 (off) or a finite number ≥ 1: 0.8
}
