package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/maglevlb/maglev/cmd/internal/ops/setting"
	"github.com/maglevlb/maglev/cmd/l4lb/internal/config"
)

// A command is one of l4lb's commands, as cmd/go's are: its name, usage
// line, short and long help, its flags and what runs it. main only
// dispatches (run).
type command struct {
	name  string
	usage string // its arguments, after "l4lb NAME"
	short string // one line, for l4lb help
	long  string // l4lb help NAME, after the usage line
	// plain commands are an operator's: their errors are printed as
	// they are ("l4lb: ..."), not logged.
	plain bool
	// flags defines the command's flags on fs, and returns what runs
	// it, with the arguments left after the flags. fs's name is the
	// command as its errors name it: "l4lb decap".
	flags func(fs *flag.FlagSet) func(ctx context.Context, args []string, out, errOut io.Writer) error
}

// commands are l4lb's commands, in the order l4lb help lists them.
// (Set in init: l4lb help lists them, and is one of them.)
var commands []*command

func init() {
	commands = []*command{cmdRun, cmdDecap, cmdDetach, cmdCheck, cmdStatus, cmdDrain, cmdReload, cmdVersion, cmdHelp}
}

// lookup returns the command named name, or nil.
func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// errUsage is a command line l4lb cannot read, after its usage was
// printed: main exits 2.
var errUsage = errors.New("usage")

// errArgs is a command's error for arguments it cannot take: run prints
// its usage, and returns errUsage.
var errArgs = errors.New("wrong arguments")

// A plainError is an error of a plain command: main prints it as it is.
type plainError struct{ error }

func (e plainError) Unwrap() error { return e.error }

// run is l4lb with the command line args: a command and its flags.
// Standard output is for what a command prints; records and errors go to
// standard error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printCommands(stderr)
		return errUsage
	}
	name, rest := args[0], args[1:]
	if strings.HasPrefix(name, "-") {
		return flagFirst(args, stderr)
	}
	c := lookup(name)
	if c == nil {
		_, _ = fmt.Fprintf(stderr, "l4lb: unknown command %q\n", name)
		printCommands(stderr)
		return errUsage
	}
	fs := flag.NewFlagSet("l4lb "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printUsage(stderr, c, false) }
	runCmd := c.flags(fs)
	if err := fs.Parse(rest); err != nil {
		return err
	}
	err := runCmd(ctx, fs.Args(), stdout, stderr)
	if errors.Is(err, errArgs) {
		printUsage(stderr, c, false)
		return errUsage
	}
	if err != nil && c.plain && !errors.Is(err, errUsage) {
		return plainError{err}
	}
	return err
}

// errFlagFirst is the error of a command line whose first argument is a
// flag (l4lb -config FILE): l4lb takes a command first.
var errFlagFirst = errors.New("a command comes first, then its flags")

// flagFirst refuses a command line whose first argument is a flag: it
// prints the command line meant (config.Meant) and returns errFlagFirst,
// with errUsage (main exits 2). -h and -help print the commands, as l4lb
// alone does.
func flagFirst(args []string, stderr io.Writer) error {
	switch args[0] {
	case "-h", "-help", "--help":
		printCommands(stderr)
		return errUsage
	}
	err := fmt.Errorf("%w: %s", errFlagFirst, config.Meant(args))
	_, _ = fmt.Fprintf(stderr, "l4lb: %v\nRun 'l4lb help' for the commands.\n", err)
	return fmt.Errorf("%w (%w)", err, errUsage)
}

// printCommands prints l4lb's usage: its commands.
func printCommands(w io.Writer) {
	_, _ = fmt.Fprint(w, "l4lb is a layer-4 load balancer over xdpmaglev (docs/l4lb.md).\n\nUsage:\n\n\tl4lb <command> [arguments]\n\nThe commands are:\n\n")
	for _, c := range commands {
		_, _ = fmt.Fprintf(w, "\t%-8s %s\n", c.name, c.short)
	}
	_, _ = fmt.Fprint(w, "\nUse \"l4lb help <command>\" for more about a command.\n")
}

// printUsage prints c's usage line and flags; long adds its long help,
// else a line says where it is.
func printUsage(w io.Writer, c *command, long bool) {
	_, _ = fmt.Fprintf(w, "usage: l4lb %s %s\n", c.name, c.usage)
	if long {
		_, _ = fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.long))
	} else {
		_, _ = fmt.Fprintf(w, "Run 'l4lb help %s' for details.\n", c.name)
	}
	fs := flag.NewFlagSet("l4lb "+c.name, flag.ContinueOnError)
	c.flags(fs)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		_, _ = fmt.Fprint(w, "\nFlags:\n")
		setting.PrintDefaults(w, fs)
	}
}

// cmdHelp is l4lb help.
var cmdHelp = &command{
	name:  "help",
	usage: "[command]",
	short: "list the commands, or show a command's help",
	long: `Help lists l4lb's commands, or, given one, prints its usage, its help
and its flags.`,
	plain: true,
	flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
		return func(_ context.Context, args []string, out, _ io.Writer) error {
			switch {
			case len(args) == 0:
				printCommands(out)
				return nil
			case len(args) > 1:
				return fmt.Errorf("help takes one command, not %q", args)
			}
			c := lookup(args[0])
			if c == nil {
				return fmt.Errorf("unknown command %q: l4lb help lists them", args[0])
			}
			printUsage(out, c, true)
			return nil
		}
	},
}

// noArgs returns an error unless args is empty.
func noArgs(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q", args)
	}
	return nil
}
