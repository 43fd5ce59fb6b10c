//go:build !race

package envoymaglev

// raceEnabled reports whether the race detector is on. The ports' sweeps
// are single-goroutine and run 10 to 20 times slower under it, so they run
// fewer cases with it; it has nothing to find in them.
const raceEnabled = false
