package main

import (
	"context"
	"flag"
	"io"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/dataplane"
)

// cmdDetach is l4lb detach: the data plane removed for good.
var cmdDetach = &command{
	name:  "detach",
	usage: "-iface DEV [-pin-dir DIR]",
	short: "remove the program and the pins an l4lb left on an interface",
	plain: true,
	long: `Detach removes the program l4lb left attached to -iface and what it
pinned for it in -pin-dir (the one l4lb ran with), prints each pin removed
on standard output, and exits; it is refused while an l4lb runs on -iface.`,
	flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
		vs := config.DetachFlags(fs)
		return func(_ context.Context, args []string, stdout, _ io.Writer) error {
			if err := noArgs(args); err != nil {
				return err
			}
			d, err := config.BuildDetach(vs, fs.Name())
			if err != nil {
				return err
			}
			return dataplane.DetachPins(d, stdout)
		}
	},
}
