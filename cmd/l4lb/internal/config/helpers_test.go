package config

import (
	"flag"
	"fmt"
	"io"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
)

// parsed is a command line of any form, parsed: l4lb run's (Run), or
// decap's, detach's or version's.
type parsed struct {
	Run
	decap    Decap
	isDecap  bool
	detach   Detach
	isDetach bool
	version  bool
}

// parse parses args as main does a command line of the form before
// subcommands (Legacy), then as the command it means; help goes to out.
func parse(args []string, out io.Writer) (parsed, error) {
	if out == nil {
		out = io.Discard
	}
	fs := flag.NewFlagSet("l4lb", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		run := flag.NewFlagSet("l4lb run", flag.ContinueOnError)
		RunFlags(run)
		setting.PrintDefaults(out, run)
	}
	cmd, rest, err := Legacy(args, fs)
	if err != nil {
		return parsed{}, err
	}
	return parseCommand(cmd, rest, "-"+cmd)
}

// parseCommand parses args as the command cmd's flags; its errors name
// the command as name.
func parseCommand(cmd string, args []string, name string) (parsed, error) {
	fs := flag.NewFlagSet("l4lb "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var p parsed
	switch cmd {
	case "version":
		p.version = true
	case "run":
		vs := RunFlags(fs)
		if err := fs.Parse(args); err != nil {
			return p, err
		}
		r, err := BuildRun(vs)
		p.Run = r
		return p, err
	case "decap":
		vs := DecapFlags(fs)
		if err := fs.Parse(args); err != nil {
			return p, err
		}
		d, err := BuildDecap(vs, name)
		p.decap, p.isDecap = d, true
		return p, err
	case "detach":
		vs := DetachFlags(fs)
		if err := fs.Parse(args); err != nil {
			return p, err
		}
		d, err := BuildDetach(vs, name)
		p.detach, p.isDetach = d, true
		return p, err
	default:
		return p, fmt.Errorf("no command %q", cmd)
	}
	return p, nil
}
