package maglev_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/maglevlb/maglev"
)

// The worked example from the Maglev write-up: M = 7 and backends x
// (offset 2, skip 3), y (5, 2) and z (0, 1), filled round-robin.
func ExampleFill() {
	names := []string{"x", "y", "z"}
	perms := []maglev.Permutation{
		{Offset: 2, Skip: 3}, // x: 2 5 1 4 0 3 6
		{Offset: 5, Skip: 2}, // y: 5 0 2 4 6 1 3
		{Offset: 0, Skip: 1}, // z: 0 1 2 3 4 5 6
	}
	table := make([]uint16, 7)
	cursors := make([]uint32, len(perms))
	if err := maglev.Fill(table, perms, cursors); err != nil {
		panic(err)
	}
	owners := make([]string, len(table))
	for slot, i := range table {
		owners[slot] = names[i]
	}
	fmt.Println(strings.Join(owners, " "))
	// Output: z x x z y y x
}

func ExampleNew() {
	backends := []string{"10.0.0.3:80", "10.0.0.1:80", "10.0.0.2:80"}
	t, err := maglev.New(backends, maglev.DefaultSize, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("size:", t.Size())
	fmt.Println("backends:", t.Backends())
	fmt.Println("counts:", t.Counts())
	fmt.Println("client 192.0.2.7 goes to", t.Lookup("192.0.2.7"))
	fmt.Println("as its index:", t.LookupIndex("192.0.2.7"))
	// Output:
	// size: 65537
	// backends: [10.0.0.1:80 10.0.0.2:80 10.0.0.3:80]
	// counts: [21846 21846 21845]
	// client 192.0.2.7 goes to 10.0.0.1:80
	// as its index: 0
}

func ExampleNew_errors() {
	_, err := maglev.New([]string{"a", "b"}, 65536, nil)
	fmt.Println(err)
	fmt.Println(errors.Is(err, maglev.ErrSize))
	_, err = maglev.New([]string{"a", "b", "a"}, 7, nil)
	fmt.Println(err)
	fmt.Println(errors.Is(err, maglev.ErrDuplicateName))
	// Output:
	// maglev: unsupported table size: 65536 is not a prime
	// true
	// maglev: duplicate backend name: "a"
	// true
}

// A membership change moves few slots: going from five backends to six,
// about 1/6 of the table changes owner.
func ExampleTable_Diff() {
	five, _ := maglev.New([]string{"a", "b", "c", "d", "e"}, maglev.DefaultSize, nil)
	six, _ := maglev.New([]string{"a", "b", "c", "d", "e", "f"}, maglev.DefaultSize, nil)
	moved := five.Diff(six)
	fmt.Printf("moved %d of %d slots (%.1f%%)\n", moved, six.Size(), 100*float64(moved)/float64(six.Size()))
	// Output:
	// moved 10986 of 65537 slots (16.8%)
}

// A control plane pushes only the slots that changed to a data plane that
// holds the slot array, such as an eBPF array map.
func ExampleTable_Changes() {
	old, _ := maglev.New([]string{"a", "b", "c"}, 13, nil)
	next, _ := maglev.New([]string{"a", "b", "c", "d"}, 13, nil)
	dataplane := old.AppendSlots(nil) // what the data plane holds now
	// Backend indices shift when "d" joins, so the data plane's name list
	// is replaced too; Changes reports slots whose owner name differs.
	for slot, owner := range old.Changes(next) {
		dataplane[slot] = uint32(owner)
	}
	fmt.Println("old: ", old.AppendSlots(nil))
	fmt.Println("next:", next.AppendSlots(nil))
	fmt.Println("pushed:", old.Diff(next), "slots")
	fmt.Println("data plane matches:", slices.Equal(dataplane, next.AppendSlots(nil)))
	// Output:
	// old:  [2 0 2 2 0 1 0 0 2 1 0 1 1]
	// next: [3 0 2 2 0 1 3 3 2 1 0 1 0]
	// pushed: 4 slots
	// data plane matches: true
}

func ExampleSizeFor() {
	fmt.Println(maglev.SizeFor(100))
	fmt.Println(maglev.SizeFor(1000))
	fmt.Println(maglev.SizeFor(10000))
	// Output:
	// 65537
	// 100003
	// 1000003
}

// A fleet that shares a secret seed computes the same table everywhere,
// while outsiders who know only the backend names cannot predict it.
func ExampleXXH3Seed() {
	backends := []string{"a", "b", "c", "d"}
	public, _ := maglev.New(backends, maglev.DefaultSize, nil)
	secret, _ := maglev.New(backends, maglev.DefaultSize, maglev.XXH3Seed(0x5eed))
	again, _ := maglev.New(backends, maglev.DefaultSize, maglev.XXH3Seed(0x5eed))
	fmt.Println("same seed, same table:", secret.Diff(again) == 0)
	fmt.Println("slots that differ from the unseeded table:", public.Diff(secret) > public.Size()/2)
	// Output:
	// same seed, same table: true
	// slots that differ from the unseeded table: true
}

func ExampleGenerator() {
	g, err := maglev.NewGenerator(7, nil)
	if err != nil {
		panic(err)
	}
	p := g.Permutation("backend-1")
	fmt.Printf("offset %d, skip %d\n", p.Offset, p.Skip)
	for s, j := p.Offset, 0; j < 7; s, j = p.Next(s, 7), j+1 {
		fmt.Print(s, " ")
	}
	fmt.Println()
	// Output:
	// offset 1, skip 3
	// 1 4 0 3 6 2 5
}

// Weights split the table in proportion; weight 0 drains a backend before
// maintenance without forgetting it.
func ExampleNewWeighted() {
	t, err := maglev.NewWeighted([]maglev.Backend{
		{Name: "small", Weight: 1},
		{Name: "large", Weight: 2},
		{Name: "drained", Weight: 0},
	}, maglev.DefaultSize, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("backends:", t.Backends())
	fmt.Println("weights: ", t.Weights())
	fmt.Println("counts:  ", t.Counts())
	// Output:
	// backends: [drained large small]
	// weights:  [0 2 1]
	// counts:   [0 43691 21846]
}

// The intended service pattern: lookups read the current table through an
// atomic.Pointer while a control loop rebuilds on membership changes and
// swaps the pointer. Readers never see a half-built table and never lock.
func Example_atomicSwap() {
	var current atomic.Pointer[maglev.Table]
	t, _ := maglev.New([]string{"a", "b", "c"}, maglev.DefaultSize, nil)
	current.Store(t)

	route := func(key string) string { return current.Load().Lookup(key) }

	// Membership change: build off the request path, then publish.
	next, err := maglev.New([]string{"a", "b", "c", "d"}, maglev.DefaultSize, nil)
	if err != nil {
		panic(err) // keep serving the old table
	}
	old := current.Swap(next)
	fmt.Printf("moved %.1f%% of slots\n", 100*float64(old.Diff(next))/float64(next.Size()))
	fmt.Println("routes somewhere:", route("198.51.100.7") != "")
	// Output:
	// moved 25.0% of slots
	// routes somewhere: true
}

// A backend fails: Without routes around it, moving only its own slots,
// where a rebuild for the others moves more. Restoring it is Without on
// the full table with fewer names: here none, which is the table itself.
func ExampleTable_Without() {
	backends := make([]string, 100)
	for i := range backends {
		backends[i] = fmt.Sprintf("10.0.0.%d:80", i+1)
	}
	full, _ := maglev.New(backends, maglev.DefaultSize, nil)
	down, err := full.Without("10.0.0.7:80")
	if err != nil {
		panic(err)
	}
	rebuilt, _ := maglev.New(slices.Delete(slices.Clone(backends), 6, 7), maglev.DefaultSize, nil)
	fmt.Println("failed backend's slots:", full.Counts()[full.Index("10.0.0.7:80")])
	fmt.Println("slots moved by Without:", full.Diff(down))
	fmt.Println("slots moved by a rebuild:", full.Diff(rebuilt))
	fmt.Println("backends, still:", down.NumBackends(), "owning slots:", down.Counts()[down.Index("10.0.0.7:80")])
	up, _ := full.Without()
	fmt.Println("restored:", up.Diff(full) == 0)
	_, err = down.Without("10.0.0.7:80")
	fmt.Println("removing it again:", errors.Is(err, maglev.ErrDuplicateName))
	_, err = full.Without("10.9.9.9:80")
	fmt.Println("an unknown name:", errors.Is(err, maglev.ErrUnknownBackend))
	// Output:
	// failed backend's slots: 655
	// slots moved by Without: 655
	// slots moved by a rebuild: 1035
	// backends, still: 100 owning slots: 0
	// restored: true
	// removing it again: true
	// an unknown name: true
}
