//go:build !race

package vectors

// raceEnabled reports whether the race detector is on. This package's
// tests are single-goroutine and run 20 to 40 times slower under it (80 s
// instead of 3), so the whole-file checks run only without it; the race
// detector has nothing to find in them.
const raceEnabled = false
