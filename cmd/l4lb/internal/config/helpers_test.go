package config

import (
	"flag"
	"io"
	"strings"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
)

// parse parses args as l4lb run's flags, as main does, and builds them;
// help goes to out.
func parse(args []string, out io.Writer) (Run, error) {
	if out == nil {
		out = io.Discard
	}
	fs := flag.NewFlagSet("l4lb run", flag.ContinueOnError)
	fs.SetOutput(out)
	vs := RunFlags(fs)
	fs.Usage = func() { setting.PrintDefaults(out, fs) }
	if err := fs.Parse(args); err != nil {
		return Run{}, err
	}
	return BuildRun(vs)
}

// parseDecap is parse for l4lb decap, of the command line args.
func parseDecap(args string) (Decap, error) {
	fs := flag.NewFlagSet("l4lb decap", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	vs := DecapFlags(fs)
	if err := fs.Parse(strings.Fields(args)); err != nil {
		return Decap{}, err
	}
	return BuildDecap(vs, fs.Name())
}

// parseDetach is parse for l4lb detach, of the command line args.
func parseDetach(args string) (Detach, error) {
	fs := flag.NewFlagSet("l4lb detach", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	vs := DetachFlags(fs)
	if err := fs.Parse(strings.Fields(args)); err != nil {
		return Detach{}, err
	}
	return BuildDetach(vs, fs.Name())
}
