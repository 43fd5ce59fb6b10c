package main

import (
	"fmt"
	"io"
)

func runCompare(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "maglev compare: not implemented yet")
	return 1
}
