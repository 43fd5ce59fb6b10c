package envoymaglev_test

import (
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/maglevlb/maglev/envoymaglev"
)

// The table of Envoy's Basic test (maglev_lb_test.cc): six hosts, M = 7.
// A request whose hash policy header holds v goes where Lookup(v) says.
func ExampleNew() {
	hosts := []envoymaglev.Host{
		{Key: "127.0.0.1:90", Weight: 1},
		{Key: "127.0.0.1:91", Weight: 1},
		{Key: "127.0.0.1:92", Weight: 1},
		{Key: "127.0.0.1:93", Weight: 1},
		{Key: "127.0.0.1:94", Weight: 1},
		{Key: "127.0.0.1:95", Weight: 1},
	}
	t, err := envoymaglev.New(hosts, 7)
	if err != nil {
		panic(err)
	}
	for s := range t.Size() {
		fmt.Printf("slot %d: %s\n", s, t.LookupHash(uint64(s)))
	}
	v := "user-42"
	fmt.Println("x-user", v, "goes to", t.Lookup(v))
	fmt.Println("which is slot XXH64(v) mod 7:", t.LookupHash(uint64(int(xxhash.Sum64String(v)%7))))
	// Output:
	// slot 0: 127.0.0.1:92
	// slot 1: 127.0.0.1:94
	// slot 2: 127.0.0.1:90
	// slot 3: 127.0.0.1:91
	// slot 4: 127.0.0.1:95
	// slot 5: 127.0.0.1:90
	// slot 6: 127.0.0.1:93
	// x-user user-42 goes to 127.0.0.1:90
	// which is slot XXH64(v) mod 7: 127.0.0.1:90
}
