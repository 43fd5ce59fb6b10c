// Command failover shows what a failure costs a Maglev table, end to end:
// it builds the table of N backends, routes a million keys, then takes one
// backend out two ways, by rebuilding the table without it (what a
// membership change does) and by Table.Without (what a failure should
// do), and prints how many keys each moved, against the ideal 1/N.
//
//	go run ./examples/failover -n 1000
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/maglevlb/maglev"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	n := fs.Int("n", 1000, "the number of backends")
	keys := fs.Int("keys", 1000000, "the number of keys routed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 2 || *keys < 1 {
		return fmt.Errorf("-n must be at least 2 and -keys at least 1")
	}
	names := make([]string, *n)
	for i := range names {
		names[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":80"
	}
	m := maglev.SizeFor(*n)
	full, err := maglev.New(names, m, nil)
	if err != nil {
		return err
	}
	failed := names[len(names)-1]
	rebuilt, err := maglev.New(names[:len(names)-1], m, nil)
	if err != nil {
		return err
	}
	without, err := full.Without(failed)
	if err != nil {
		return err
	}
	movedRebuild, movedWithout := 0, 0
	for k := range *keys {
		key := "key-" + strconv.Itoa(k)
		owner := full.Lookup(key)
		if rebuilt.Lookup(key) != owner {
			movedRebuild++
		}
		if without.Lookup(key) != owner {
			movedWithout++
		}
	}
	pct := func(moved int) float64 { return 100 * float64(moved) / float64(*keys) }
	_, _ = fmt.Fprintf(out, "%d backends, M = %d, %d keys; %s fails\n", *n, m, *keys, failed)
	_, _ = fmt.Fprintf(out, "ideal (its own keys): %.2f%%\n", 100/float64(*n))
	_, _ = fmt.Fprintf(out, "rebuilt without it:   %.2f%% moved\n", pct(movedRebuild))
	_, _ = fmt.Fprintf(out, "Table.Without:        %.2f%% moved\n", pct(movedWithout))
	return nil
}
