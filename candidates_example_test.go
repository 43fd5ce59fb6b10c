package maglev_test

import (
	"fmt"

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
