//go:build race

package envoymaglev

// raceEnabled: see norace_test.go.
const raceEnabled = true
