package ops

import "fmt"

// Count returns "1 thing" or "n things": a count in what a command
// prints or a log record says.
func Count[N ~int | ~uint64](n N, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
