package memcachemaglev_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/maglevlb/maglev"
	"github.com/maglevlb/maglev/memcachemaglev"
)

// A client that stores each key on its server in the Maglev table of
// three servers. Building it connects to nothing; the client dials a server
// on its first operation there.
func Example() {
	sel, err := memcachemaglev.New("10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211")
	if err != nil {
		log.Fatal(err)
	}
	mc := memcache.NewFromSelector(sel)
	_ = mc // mc.Set, mc.Get, ... as with memcache.New

	for _, key := range []string{"user:1", "user:2", "user:3", "user:4", "user:5"} {
		addr, err := sel.PickServer(key)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(key, "is on", addr)
	}
	// Output:
	// user:1 is on 10.0.0.3:11211
	// user:2 is on 10.0.0.2:11211
	// user:3 is on 10.0.0.2:11211
	// user:4 is on 10.0.0.3:11211
	// user:5 is on 10.0.0.1:11211
}

// Adding a fourth server moves a quarter of the keys, those the new server
// takes. A failed SetServers changes nothing.
func ExampleSelector_SetServers() {
	sel, err := memcachemaglev.New("10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211")
	if err != nil {
		log.Fatal(err)
	}
	before := sel.Table()
	if err := sel.SetServers("10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211", "10.0.0.4:11211"); err != nil {
		log.Fatal(err)
	}
	after := sel.Table()
	fmt.Printf("moved: %.1f%% of the slots\n", 100*float64(before.Diff(after))/float64(after.Size()))

	err = sel.SetServers("10.0.0.1:11211", "10.0.0.1:11211")
	fmt.Println("duplicate:", errors.Is(err, maglev.ErrDuplicateName))
	err = sel.SetServers("10.0.0.1")
	fmt.Println("no port:", errors.Is(err, memcachemaglev.ErrResolve))
	fmt.Println("servers kept:", sel.Table() == after)

	if err := sel.SetServers(); err != nil {
		log.Fatal(err)
	}
	_, err = sel.PickServer("user:1")
	fmt.Println("none:", err == memcache.ErrNoServers)
	// Output:
	// moved: 25.0% of the slots
	// duplicate: true
	// no port: true
	// servers kept: true
	// none: true
}
