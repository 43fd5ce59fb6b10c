//go:build race

package maglev

// raceEnabled: see norace_test.go.
const raceEnabled = true
