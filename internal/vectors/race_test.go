//go:build race

package vectors

// raceEnabled: see norace_test.go.
const raceEnabled = true
