// Command maglev simulates Maglev tables and compares Maglev consistent
// hashing with a consistent-hash ring.
//
// Usage:
//
//	maglev sim [flags] < script
//	maglev compare [flags]
//
// The sim subcommand reads membership commands (ADD_NODE, REMOVE_NODE,
// SET_WEIGHT, LOOKUP, CHURN, TABLE, COUNTS) from standard input and answers
// them from a table rebuilt after every change. The compare subcommand
// builds Maglev tables and rings for the same backends and keys and prints
// their build cost, lookup speed, load balance and disruption side by side.
//
// Run "maglev <subcommand> -h" for each subcommand's flags.
package main

import (
	"io"
	"os"
)

const usage = `maglev simulates Maglev tables and compares Maglev with a consistent-hash ring.

Usage:

	maglev <subcommand> [flags]

Subcommands:

	sim       read membership commands from standard input and answer them
	compare   print build cost, lookup speed, load balance and disruption
	          of Maglev and ring side by side

Run "maglev <subcommand> -h" for a subcommand's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs the command line args (without the program name) and returns the
// exit status: 0 on success, 1 if something failed, 2 for a usage error.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		warnf(stderr, "%s", usage)
		return 2
	}
	switch args[0] {
	case "sim":
		return runSim(args[1:], stdin, stdout, stderr)
	case "compare":
		return runCompare(args[1:], stdin, stdout, stderr)
	case "-h", "-help", "--help", "help":
		if _, err := io.WriteString(stdout, usage); err != nil {
			return reportError(stderr, err)
		}
		return 0
	}
	warnf(stderr, "maglev: unknown subcommand %q\n\n%s", args[0], usage)
	return 2
}
