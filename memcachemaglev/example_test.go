package memcachemaglev_test

import (
	"errors"
	"fmt"
	"log"
	"net"

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

	err = sel.SetServers("10.0.0.1:11211", "")
	fmt.Println("empty name:", errors.Is(err, maglev.ErrEmptyName))
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
	// empty name: true
	// no port: true
	// servers kept: true
	// none: true
}

// gomemcache's own convention: a server listed twice weighs 2. Each
// distinct string is one server, weighing the number of times it is
// listed (Weigh shows the weights a list stands for), so 10.0.0.1 gets
// half of the keys, and Each visits it once.
func ExampleSelector_SetServers_repeats() {
	list := []string{"10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.1:11211", "10.0.0.3:11211"}
	fmt.Println("weights:", memcachemaglev.Weigh(list...))

	var sel memcachemaglev.Selector
	if err := sel.SetServers(list...); err != nil {
		log.Fatal(err)
	}
	t := sel.Table()
	for i, name := range t.Backends() {
		fmt.Printf("%s: weight %d, %d of %d slots\n", name, t.Weights()[i], t.Counts()[i], t.Size())
	}
	n := 0
	_ = sel.Each(func(net.Addr) error { n++; return nil })
	fmt.Println("Each visits:", n)
	// Output:
	// weights: [{10.0.0.1:11211 2} {10.0.0.2:11211 1} {10.0.0.3:11211 1}]
	// 10.0.0.1:11211: weight 2, 32768 of 65537 slots
	// 10.0.0.2:11211: weight 1, 16385 of 65537 slots
	// 10.0.0.3:11211: weight 1, 16384 of 65537 slots
	// Each visits: 3
}

// Explicit weights, with a drained server, a table of 10,007 slots and a
// fleet's seed. Every client with the same servers, weights and Options
// computes this table, in any order of the list. Later SetServers and
// SetWeighted calls keep the Options.
func ExampleNewWeighted() {
	servers := []memcachemaglev.Server{
		{Addr: "10.0.0.1:11211", Weight: 1},
		{Addr: "10.0.0.2:11211", Weight: 3},
		{Addr: "10.0.0.3:11211", Weight: 0}, // drained: known, but owns no slots
	}
	sel, err := memcachemaglev.NewWeighted(servers, memcachemaglev.Options{TableSize: 10007, Seed: 0x5eed})
	if err != nil {
		log.Fatal(err)
	}
	t := sel.Table()
	fmt.Println("size:   ", t.Size())
	fmt.Println("weights:", t.Weights())
	fmt.Println("counts: ", t.Counts())
	addr, _ := sel.PickServer("user:1")
	fmt.Println("user:1 is on", addr)

	_, err = memcachemaglev.NewWeighted(servers, memcachemaglev.Options{TableSize: 10000})
	fmt.Println("size 10000:", errors.Is(err, memcachemaglev.ErrInvalidConfig), errors.Is(err, maglev.ErrSize))
	fmt.Println(err)
	err = sel.SetWeighted([]memcachemaglev.Server{{Addr: "10.0.0.1:11211", Weight: 0}})
	fmt.Println("all drained:", errors.Is(err, maglev.ErrNoBackends))
	fmt.Println(err)
	// Output:
	// size:    10007
	// weights: [1 3 0]
	// counts:  [2502 7505 0]
	// user:1 is on 10.0.0.2:11211
	// size 10000: true true
	// memcachemaglev: invalid config: TableSize: unsupported table size: 10000 is not a prime
	// all drained: true
	// memcachemaglev: every server's weight is 0: maglev: no backends to fill the table with
}
