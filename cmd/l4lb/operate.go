package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"

	"github.com/maglevlb/maglev/cmd/internal/ops"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/admin"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
)

// The commands an operator runs beside a running l4lb: check a file,
// and, through its admin API, status, drain and reload; and version.

// adminFlag defines -admin on fs, with run's default.
func adminFlag(fs *flag.FlagSet) *string {
	return fs.String("admin", config.DefaultAdmin, "the admin `address` of the running l4lb")
}

// cmdCheck is l4lb check.
var cmdCheck = &command{
	name:  "check",
	usage: "FILE",
	short: "check a configuration file, as a reload would",
	long: `Check reads the configuration file FILE as l4lb run -config and a reload
read it, by the same code: it prints a line saying what the file holds
and exits 0, or prints the error a reload would give (the file, the line,
the service and the setting) and exits 1. It runs nothing, and needs no
privilege: what only a running l4lb knows (a source that answers, a
change of the load balancer's own settings) it cannot check.`,
	plain: true,
	flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
		return func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			if len(args) != 1 {
				return errArgs
			}
			g, svcs, err := config.Load(args[0])
			if err != nil {
				return err
			}
			for _, w := range g.Warnings {
				_, _ = fmt.Fprintf(stderr, "l4lb: warning: %s\n", w)
			}
			_, err = fmt.Fprintf(stdout, "%s: ok: %s\n", args[0], config.Summary(g, svcs))
			return err
		}
	},
}

// cmdStatus is l4lb status.
var cmdStatus = &command{
	name:  "status",
	usage: "[-admin ADDR] [-json]",
	short: "show the services and backends of a running l4lb",
	long: `Status asks the admin API of a running l4lb (-admin) and prints its
services, each with its backends: their state (live, draining, down,
unresolved, drained), weight, slots in the table in use, health (the
check's verdict, and the probes passed and failed in a row) and the
packets forwarded to each since it joined the service (the data plane
tracks flows, not connections: packets are what it counts); then BGP's
peers and routes. With -json it prints the same as one JSON object, for
scripts.`,
	plain: true,
	flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
		addr := adminFlag(fs)
		asJSON := fs.Bool("json", false, "print JSON, for scripts")
		return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
			if err := noArgs(args); err != nil {
				return err
			}
			r, err := (&admin.Client{Addr: *addr}).Report(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			return admin.WriteTable(stdout, r)
		}
	},
}

// cmdDrain is l4lb drain.
var cmdDrain = &command{
	name:  "drain",
	usage: "ADDR [-service NAME] [-undo] [-admin ADDR]",
	short: "drain a backend of a running l4lb, or take it back",
	long: `Drain drains the backend at ADDR in the service NAME, or in every service
that has it (POST /drain on the admin API): it takes no new flow, and the
flows it has go on for the drain timeout. With -undo it takes it back
(POST /undrain). It prints the backend's state in each service that has
it; an address that is no backend of the services looked in (not a
member, nor draining) is refused with the API's message, exit status 1.`,
	plain: true,
	flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
		addr := adminFlag(fs)
		service := fs.String("service", "", "the `name` of the service (default: every service that has the backend)")
		undo := fs.Bool("undo", false, "take the backend back")
		return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
			// The flags may follow ADDR, as the usage line writes them.
			if len(args) > 0 {
				if err := fs.Parse(args[1:]); err != nil {
					return errUsage
				}
				args = append(args[:1], fs.Args()...)
			}
			if len(args) != 1 {
				return errArgs
			}
			got, err := (&admin.Client{Addr: *addr}).Drain(ctx, args[0], *service, !*undo)
			if err != nil {
				return err
			}
			want, _ := netip.ParseAddr(args[0]) // the API parsed it
			for _, st := range got {
				for _, b := range st.Backends {
					if a, _ := netip.ParseAddr(b.Addr); a == want.Unmap() {
						left := ""
						if b.DrainLeft != "" {
							left = ", " + b.DrainLeft + " left"
						}
						_, _ = fmt.Fprintf(stdout, "l4lb: service %q: %s %s (weight %d%s)\n", st.Name, b.Addr, b.State, b.Weight, left)
					}
				}
			}
			return nil
		}
	},
}

// cmdReload is l4lb reload.
var cmdReload = &command{
	name:  "reload",
	usage: "[-admin ADDR]",
	short: "have a running l4lb read its configuration file again",
	long: `Reload has the running l4lb read its configuration file again and apply
it, service by service (POST /reload, as SIGHUP does), and prints what it
did; a bad file is refused whole, the running configuration staying, and
its error printed, exit status 1.`,
	plain: true,
	flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
		addr := adminFlag(fs)
		return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
			if err := noArgs(args); err != nil {
				return err
			}
			did, err := (&admin.Client{Addr: *addr}).Reload(ctx)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(stdout, "l4lb: reloaded: %s\n", did)
			return err
		}
	},
}

// cmdVersion is l4lb version.
var cmdVersion = &command{
	name:  "version",
	short: "print l4lb's version",
	long: `Version prints l4lb's version on standard output: the release it is
(v0.1.0), or devel for a build between releases; the commit it was built
from, whether that tree was modified and the commit's time, when the build
recorded them; and the Go version that built it. /metrics has the same as
l4lb_build_info's labels.`,
	plain: true,
	flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
		return func(_ context.Context, _ []string, stdout, _ io.Writer) error {
			_, err := fmt.Fprintln(stdout, ops.ReadBuild().Line("l4lb"))
			return err
		}
	},
}
