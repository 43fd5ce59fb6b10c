//go:build race

package xdpmaglev

// raceEnabled: see norace_test.go.
const raceEnabled = true
