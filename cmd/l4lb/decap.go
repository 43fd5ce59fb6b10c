package main

import (
	"context"
	"flag"
	"io"

	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/dataplane"
)

// cmdDecap is l4lb decap: the backends' decapsulator.
var cmdDecap = &command{
	name:  "decap",
	usage: "-iface DEV -vip VIP[,VIP...] -decap-sources PREFIX[,PREFIX...] [flags]",
	short: "run the backends' decapsulator of forward ipip and gue",
	long: `Decap attaches the decapsulator of -forward ipip and gue to -iface, for
the -vip addresses, taking encapsulated packets only from the load
balancers' outer sources (-decap-sources; "any" must be said), until
SIGINT or SIGTERM; then it logs its counters, detaches and exits 0. It
serves its counters at /debug/maglev on -admin, and warns at start about a
VIP held on no interface and about strict rp_filter.`,
	flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
		vs := config.DecapFlags(fs)
		return func(ctx context.Context, args []string, _, stderr io.Writer) error {
			if err := noArgs(args); err != nil {
				return err
			}
			d, err := config.BuildDecap(vs, fs.Name())
			if err != nil {
				return err
			}
			log := newLogger(d.LogFormat, stderr)
			return logged(log, dataplane.RunDecap(ctx, d, log))
		}
	},
}
