package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/maglevlb/maglev"
)

// hasherFor returns the Hasher named by the -hash flag, seeded by -seed.
func hasherFor(name string, seed uint64) (maglev.Hasher, error) {
	switch name {
	case "xxh3":
		return maglev.XXH3Seed(seed), nil
	case "farm", "fnv1a":
		if seed != 0 {
			return nil, fmt.Errorf("-seed works only with -hash xxh3, not %s", name)
		}
		if name == "farm" {
			return maglev.Farm(), nil
		}
		return maglev.FNV1a(), nil
	}
	return nil, fmt.Errorf("-hash %q: want xxh3, farm or fnv1a", name)
}

// hasherName describes a -hash and -seed pair for output.
func hasherName(name string, seed uint64) string {
	if name == "xxh3" && seed != 0 {
		return fmt.Sprintf("xxh3 (seed %d)", seed)
	}
	return name
}

// parseFlags parses args with fs, which must not define -h. It returns the
// exit status to return at once, or -1 to go on: 0 after printing help to
// stdout for -h, 2 after a usage error (reported on stderr).
func parseFlags(fs *flag.FlagSet, args []string, help string, stdout, stderr io.Writer) int {
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case err == flag.ErrHelp:
		if _, err := io.WriteString(stdout, help+defaults(fs)); err != nil {
			return reportError(stderr, err)
		}
		return 0
	case err != nil:
		warnf(stderr, "run \"maglev %s -h\" for usage\n", fs.Name())
		return 2
	case fs.NArg() > 0:
		warnf(stderr, "maglev %s: unexpected argument %q\nrun \"maglev %s -h\" for usage\n",
			fs.Name(), fs.Arg(0), fs.Name())
		return 2
	}
	return -1
}

// defaults returns fs's flags as flag.PrintDefaults prints them, under a
// heading.
func defaults(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	return "\nFlags:\n" + b.String()
}

// reportError writes "error: " and err on a line to stderr and returns the
// exit status 1.
func reportError(stderr io.Writer, err error) int {
	warnf(stderr, "error: %v\n", err)
	return 1
}

// warnf writes a message to stderr. It ignores a failure to write, as
// there is nowhere left to report one.
func warnf(stderr io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(stderr, format, args...)
}
